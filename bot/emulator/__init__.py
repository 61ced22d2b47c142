"""A local, stateful GitHub for tests, the demo and the benchmarks: REST (the subset PyGithub uses), git over HTTP,
GitHub App auth, signed webhooks, fault injection and a request log.

Quick start::

    from bot.emulator import GitHubEmulator, WebhookSink

    with GitHubEmulator(tmp_path / "gh") as gh, WebhookSink() as sink:
        gh.create_repo("acme", "widget", from_path=upstream.path)   # bare repo, returns its path
        gh.add_token("t0ken", "alice")                              # Authorization: token t0ken
        gh.add_webhook(sink.url, secret="s3cret")
        github = Github(base_url=gh.base_url, auth=Auth.Token("t0ken"),
                        seconds_between_requests=None, seconds_between_writes=None)
        ...
        gh.wait_for_deliveries()

Server: ``GitHubEmulator(root, *, host="127.0.0.1", port=0, manual_webhooks=False,
rate_limit=5000, token_warmup_s=0.0)`` (a new installation token answers REST calls with 401
for ``token_warmup_s`` seconds, as GitHub may); ``start()``/``stop()`` or a ``with`` block;
``base_url``, ``port``; ``python -m bot.emulator --port P --root DIR`` runs it standalone.

Setup and inspection (all names are keyword-friendly; owner/name identify a repository):

* ``create_repo(owner, name, *, from_path=None, default_branch="main", private=False,
  description=None, plan="free") -> Path`` (bare repo under root/owner/name.git; ``plan`` is the
  owner's free/pro/team/enterprise plan: private free/pro repositories refuse drafts); ``repo_path(owner, name)``;
  ``git_url(owner, name, *, token=None)``; ``ref(owner, name, ref) -> sha | None``;
  ``push(owner, name, work_tree, *refspecs, pusher, force=False)`` (a push by path, credited to
  ``pusher`` whatever else is running); ``sync(owner, name, *, pusher=None)`` (notice pushes made
  straight into the bare repo; every REST call and every HTTP push syncs on its own, crediting
  the owner).
* ``add_user(login, *, type="User", name=None, email=None)``; ``add_token(token, login)``;
  ``set_permission(owner, name, user, permission)`` (admin/maintain/write/triage/read/none;
  the owner is admin, other known users read on public repos, unknown logins 404).
* ``protect_branch(owner, name, branch, *, allow_force_pushes=False, required_checks=(),
  enforce_admins=False)`` (a classic branch protection); ``add_ruleset(owner, name=None, *,
  include=("~DEFAULT_BRANCH",), rules=("non_fast_forward",), required_checks=(),
  bypass_apps=(), title="protect") -> id`` (a repository's ruleset, or the organization
  ``owner``'s when name is None); ``remove_ruleset(id)``. HTTP pushes they cover are refused
  with GitHub's GH006 / GH013 texts (bot/emulator/protection.py).
* ``add_app(app_id, public_key_pem, *, slug=None, name=None, owner="app-owner",
  installation_id=None, account=None, repos=None, permissions=None, events=...)``;
  ``add_installation(app_id, installation_id, account, *, repos=None)``;
  ``installation_token(installation_id) -> str``; ``generate_app_key() -> (private, public)``.
* ``open_pull(owner, name, *, head, base=None, title=..., body=None, user=None, draft=False)
  -> number``; ``merge_pull(owner, name, number, *, method="merge", user=None) -> sha``;
  ``close_pull``/``reopen_pull(owner, name, number, *, user=None)``;
  ``edit_pull(owner, name, number, *, user=None, title=/body=/base=)``;
  ``open_issue(owner, name, *, title, body=None, user=None, labels=()) -> number`` (sends
  issues.opened; labels stick only for users with push access);
  ``edit_issue(owner, name, number, *, body=None, title=None, state=None, user)`` (as
  ``user`` in the web UI: its author or triage access or more, else PermissionError; sends
  issues.edited with ``changes`` for what changed, issues.closed / reopened, or the
  pull_request events on a PR); ``add_comment(owner, name, number, body, *, user) -> comment
  id``.
* ``pull(owner, name, number)``, ``pulls(owner, name, *, state="all")``, ``issue(owner, name,
  number)``, ``issues(owner, name, *, state="open")`` (issues only, no PRs),
  ``comments(...)``, ``labels(...)``, ``check_runs(owner, name, *, sha=None)``,
  ``statuses(owner, name, sha)``: REST-shaped dicts; ``rerequest_check_run(owner, name,
  run_id, *, user=None)`` sends check_run.rerequested.
* Webhooks: ``add_webhook(url, secret=None, *, events=("*",), owner=None, repo=None,
  app_id=None, content_type="json", ping=False) -> hook id``; ``deliveries`` (list of
  ``Delivery``: guid, event, action, payload, body, headers, status_code, error, redelivery);
  ``wait_for_deliveries(timeout=10)``; ``deliver_pending(*, newest_first=False)``
  (manual_webhooks=True; GitHub promises no order, newest_first sends the newest first);
  ``redeliver(delivery_or_guid)``. ``signature_256(secret, body)`` computes the header value.
  Over REST, as GitHub documents them: ``GET /repos/{o}/{r}/hooks/{hook_id}/deliveries`` and
  ``POST .../deliveries/{delivery_id}/attempts`` (admin access, or an App's
  ``repository_hooks``), ``GET /app/hook/deliveries`` and ``POST
  /app/hook/deliveries/{delivery_id}/attempts`` (the App's JWT): each attempt newest first
  (``hook-delivery-item``: id, guid, delivered_at, redelivery, duration, status, status_code,
  event, action, installation_id, repository_id, throttled_at), paged with ``cursor``,
  ``status=success|failure`` keeping those answered 200-399 or not; a redelivery is a new
  attempt with the same guid (202), refused (422) for a delivery older than 3 days. Nothing
  is redelivered unless asked for, as on GitHub.
* Faults: ``inject_fault(kind, *, times=1, method=None, path=None (glob), status=None,
  retry_after=None, reset_in=60, scope="api", after=False) -> Fault`` with kinds server_error,
  too_many_requests, primary_rate_limit, secondary_rate_limit, disconnect. A faulted request
  is answered before authentication, rate counting or any state change; with ``after=True``
  (server_error or disconnect only) it takes effect first (a push over smart HTTP moves the
  ref, a REST write creates or changes its object and sends its webhooks) and then answers
  the fault (``RecordedRequest.effect_status`` keeps the answer it had). ``clear_faults()``.
  ``secondary_limit(*, next_n_writes=1, retry_after_s=None, status=403, path=None) -> Fault``:
  GitHub's secondary limit on the next writes (any method but GET/HEAD), ``Retry-After`` only
  when given.
* Log and limits: ``requests`` / ``api_requests(method=None, path=None)`` (``RecordedRequest``:
  method, path, query, headers, body, json, status, operation, fault, response_json,
  response_headers); ``clear_requests()``; ``rate_limit(...)``/``set_rate_limit(*, token=None,
  installation_id=None, remaining=None, limit=None)``; ``advance_time(seconds)``;
  ``set_content_limits(*, per_minute=80, per_hour=500)`` and ``content_writes(*, token=None,
  installation_id=None)``: GitHub's secondary limit on content creation, always on: a user's or
  installation's REST write over it gets 403 with GitHub's secondary-limit message and
  ``Retry-After`` (seconds until its oldest counted write leaves the window).

``WebhookSink`` records deliveries. The validators of its output against GitHub's published
schemas (``RestSchemas``, ``WebhookSchemas``) are test helpers: tests/support/github_schema.py.

GitHub rules worth knowing: anonymous REST reads and git fetches work on public repos;
REST writes need a token; an issue is opened by anyone who can read the repository (an
installation needs its App's ``issues: write``: 403 otherwise), edited only by its author or
someone with triage access or more (403 "Must have admin rights to Repository."), and its
labels and assignees are set only with push access (dropped silently otherwise; unknown labels
are created); titles hold 256 characters; ``git push`` over HTTP needs a token whose user
has write access (``set_permission(..., "write")``) or an installation token; ``GET
/pulls?head=branch`` without the ``owner:`` part ignores the filter, as GitHub does;
check-run writes need an App installation token (403 for personal tokens); PR and issue
bodies and comments are limited to 65,536 characters, check-run summaries and texts to
65,535 bytes (422); GET answers carry weak ETags and a matching ``If-None-Match`` gets a 304
that costs an authorized caller no rate limit; an annotated tag's push has the tag object in
``after``, its commit in ``head_commit``; pushing a PR's head commits into its base marks it
merged, deleting its head branch closes it.

Known gaps: forks / cross-repository PRs, reviews, branch protection, GraphQL, search and
endpoints outside rest/index.json (plus GET /users/{username}) answer 404; REST writes are
not checked against the caller's repository permission, except issue creates and edits;
check_run.created and issues.labeled / assigned are not sent (no octokit schema for them in
tests/data); issues have no milestones, locks or deletion.
"""

from .emulator import GitHubEmulator
from .faults import FAULT_KINDS, Fault
from .keys import generate_app_key
from .receiver import Received, WebhookSink
from .server import RecordedRequest
from .webhooks import Delivery, signature_256

__all__ = [
    "FAULT_KINDS",
    "Delivery",
    "Fault",
    "GitHubEmulator",
    "Received",
    "RecordedRequest",
    "WebhookSink",
    "generate_app_key",
    "signature_256",
]
