"""Webhook payloads shaped like octokit/webhooks' examples (tests/data/github/webhooks) and
the octokit schemas (which forbid unknown keys in most objects, so each object here is built
explicitly)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .gitops import EMPTY_TREE, ZERO_SHA
from .state import CheckRun, Comment, Issue, Repo
from .util import iso, legacy_node_id, node_id

if TYPE_CHECKING:
    from .hub import Hub

# Keys octokit's common/app.schema.json allows in `permissions`.
_APP_PERMISSION_KEYS = frozenset(
    [
        "actions",
        "administration",
        "checks",
        "contents",
        "deployments",
        "discussions",
        "issues",
        "metadata",
        "packages",
        "pages",
        "pull_requests",
        "repository_hooks",
        "statuses",
        "workflows",
    ]
)
_SUITE_CONCLUSION_ORDER = (
    "action_required",
    "cancelled",
    "timed_out",
    "failure",
    "neutral",
    "stale",
    "success",
)


class HookPayloads:
    def __init__(self, hub: Hub) -> None:
        self.hub = hub
        self.views = hub.views

    # -- shared pieces -----------------------------------------------------------------------

    def repository(self, repo: Repo, *, epoch_dates: bool = False) -> dict[str, Any]:
        """octokit common/repository: push payloads use integer epochs for two dates."""
        data = self.views.repository_core(repo)
        data["custom_properties"] = {}
        if epoch_dates:
            data["created_at"] = int(repo.created_at)
            data["pushed_at"] = int(repo.pushed_at)
            owner = self.hub.user(repo.owner)
            data["owner"] = {"name": owner.login, "email": owner.email, **data["owner"]}
            data["stargazers"] = 0
            data["master_branch"] = repo.default_branch
        else:
            data["created_at"] = iso(repo.created_at)
            data["pushed_at"] = iso(repo.pushed_at)
        data["updated_at"] = iso(repo.pushed_at)
        return data

    def sender(self, login: str) -> dict[str, Any]:
        return self.views.owned_user(login)

    def app(self, app_id: int) -> dict[str, Any]:
        data = self.views.app(self.hub.apps[app_id])
        data.pop("client_id")
        data["permissions"] = {
            k: v
            for k, v in data["permissions"].items()
            if k in _APP_PERMISSION_KEYS and v in ("read", "write")
        }
        return data

    def _envelope(self, repo: Repo, sender: str, **fields: Any) -> dict[str, Any]:
        return {**fields, "repository": self.repository(repo), "sender": self.sender(sender)}

    def repository_event(
        self, action: str, repo: Repo, sender: str, changes: dict[str, Any]
    ) -> dict[str, Any]:
        """octokit webhooks: repository-renamed (changes.repository.name.from) and
        repository-transferred (changes.owner.from.user or .organization)."""
        return self._envelope(repo, sender, action=action, changes=changes)

    # -- push --------------------------------------------------------------------------------

    def push(
        self, repo: Repo, ref: str, old: str, new: str, pusher: str, before_refs: dict[str, str]
    ) -> dict[str, Any]:
        git = repo.git
        html = self.views.repo_html(repo)
        # An annotated tag's ref names a tag object: `after` keeps it, as GitHub's does, while
        # commits and head_commit describe the commit it points to.
        old_commit, new_commit = self._peeled(repo, old), self._peeled(repo, new)
        if new == ZERO_SHA:
            shas: list[str] = []
        elif old == ZERO_SHA:
            others = [sha for name, sha in before_refs.items() if name.startswith("refs/heads/")]
            shas = git.rev_list(new_commit, others, limit=20)
        else:
            shas = git.rev_list(new_commit, [old_commit], limit=20)
        commits = [self._push_commit(repo, sha) for sha in shas]
        head = None
        if new != ZERO_SHA:
            head = (
                commits[-1]
                if commits and commits[-1]["id"] == new_commit
                else self._push_commit(repo, new_commit)
            )
        forced = old != ZERO_SHA and new != ZERO_SHA and not git.is_ancestor(old_commit, new_commit)
        person = self.hub.person(pusher, 0)
        return {
            "ref": ref,
            "before": old,
            "after": new,
            "created": old == ZERO_SHA,
            "deleted": new == ZERO_SHA,
            "forced": forced,
            "base_ref": None,
            "compare": f"{html}/compare/{old[:12]}...{new[:12]}",
            "commits": commits,
            "head_commit": head,
            "repository": self.repository(repo, epoch_dates=True),
            "pusher": {"name": pusher, "email": person.email},
            "sender": self.sender(pusher),
        }

    @staticmethod
    def _peeled(repo: Repo, sha: str) -> str:
        """The commit behind a tag object (a commit stays itself; the zero SHA too)."""
        if sha == ZERO_SHA:
            return sha
        return repo.git.resolve(sha) or sha

    def _push_commit(self, repo: Repo, sha: str) -> dict[str, Any]:
        info = repo.git.commit_info(sha)
        parent = info.parents[0] if info.parents else EMPTY_TREE
        files = repo.git.changes(parent, sha, with_patch=False)

        def who(person: Any) -> dict[str, Any]:
            data = {"name": person.name, "email": person.email}
            login = self.hub.login_for_email(person.email)
            if login:
                data["username"] = login
            return data

        return {
            "id": sha,
            "tree_id": info.tree,
            "distinct": True,
            "message": info.message,
            "timestamp": iso(info.committer.epoch),
            "url": f"{self.views.repo_html(repo)}/commit/{sha}",
            "author": who(info.author),
            "committer": who(info.committer),
            "added": [f.filename for f in files if f.status in ("added", "copied")],
            "removed": [f.filename for f in files if f.status == "removed"],
            "modified": [
                f.filename for f in files if f.status in ("modified", "renamed", "changed")
            ],
        }

    # -- pull requests and comments ------------------------------------------------------------

    def pull_request_object(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        data = self.views.pull(repo, issue)
        for side in ("head", "base"):
            data[side]["repo"] = self.repository(repo)
        return data

    def pull_request(
        self,
        action: str,
        repo: Repo,
        issue: Issue,
        sender: str,
        *,
        before: str | None = None,
        after: str | None = None,
        changes: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        fields: dict[str, Any] = {"action": action, "number": issue.number}
        if changes is not None:
            fields["changes"] = changes
        if before is not None and after is not None:
            fields["before"], fields["after"] = before, after
        fields["pull_request"] = self.pull_request_object(repo, issue)
        return self._envelope(repo, sender, **fields)

    def issue_object(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        """octokit common/issue: the REST issue, with the App in webhook form."""
        data = self.views.issue(repo, issue)
        if issue.via_app is not None:
            data["performed_via_github_app"] = self.app(issue.via_app)
        return data

    def issue_comment(
        self, action: str, repo: Repo, issue: Issue, comment: Comment, sender: str
    ) -> dict[str, Any]:
        return self._envelope(
            repo,
            sender,
            action=action,
            issue=self.issue_object(repo, issue),
            comment=self.views.comment(repo, comment),
        )

    def issues(
        self,
        action: str,
        repo: Repo,
        issue: Issue,
        sender: str,
        *,
        changes: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        """issues.opened / edited / closed / reopened; `changes` (edited only) names the old
        title and body of what changed."""
        fields: dict[str, Any] = {"action": action, "issue": self.issue_object(repo, issue)}
        if changes is not None:
            fields["changes"] = changes
        return self._envelope(repo, sender, **fields)

    # -- checks -----------------------------------------------------------------------------------

    def check_run(self, action: str, repo: Repo, run: CheckRun, sender: str) -> dict[str, Any]:
        rest = self.views.check_run(repo, run)
        output = dict(rest["output"])
        data: dict[str, Any] = {
            "id": run.id,
            "node_id": rest["node_id"],
            "head_sha": run.head_sha,
            "external_id": run.external_id or "",
            "url": rest["url"],
            "html_url": rest["html_url"],
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": rest["started_at"],
            "completed_at": rest["completed_at"],
            "output": output,
            "name": run.name,
            "check_suite": self._check_suite(repo, run),
            "app": self.app(run.app_id),
            "pull_requests": rest["pull_requests"],
        }
        if run.details_url:
            data["details_url"] = run.details_url
        return self._envelope(repo, sender, action=action, check_run=data)

    def _check_suite(self, repo: Repo, run: CheckRun) -> dict[str, Any]:
        runs = [r for r in self.hub.check_runs.values() if r.check_suite_id == run.check_suite_id]
        done = all(r.status == "completed" for r in runs)
        conclusion = None
        if done:
            found = {("neutral" if r.conclusion == "skipped" else r.conclusion) for r in runs}
            conclusion = next((c for c in _SUITE_CONCLUSION_ORDER if c in found), "success")
        branch = next(
            (
                ref.removeprefix("refs/heads/")
                for ref, sha in repo.ref_snapshot.items()
                if sha == run.head_sha and ref.startswith("refs/heads/")
            ),
            None,
        )
        created = min((r.started_at or 0.0) for r in runs)
        return {
            "id": run.check_suite_id,
            "node_id": node_id("CS", run.check_suite_id),
            "head_branch": branch,
            "head_sha": run.head_sha,
            "status": "completed" if done else "in_progress",
            "conclusion": conclusion,
            "url": f"{self.views.repo_api(repo)}/check-suites/{run.check_suite_id}",
            "before": None,
            "after": run.head_sha,
            "pull_requests": self.views.check_run(repo, run)["pull_requests"],
            "app": self.app(run.app_id),
            "created_at": iso(created),
            "updated_at": iso(self.hub.clock.now()),
        }

    # -- hooks and installations -----------------------------------------------------------------

    def installation_lite(self, installation_id: int) -> dict[str, Any]:
        return {
            "id": installation_id,
            "node_id": legacy_node_id("Installation", installation_id),
        }

    def ping(
        self,
        hook_id: int,
        hook_type: str,
        events: list[str],
        target: str,
        hook_url: str,
        app_id: int | None,
    ) -> dict[str, Any]:
        now = iso(self.hub.clock.now())
        hook: dict[str, Any] = {
            "type": hook_type,
            "id": hook_id,
            "name": "web",
            "active": True,
            "events": events,
            "config": {"content_type": "json", "insecure_ssl": "0", "url": target},
            "updated_at": now,
            "created_at": now,
            "url": hook_url,
            "test_url": hook_url + "/test",
            "ping_url": hook_url + "/pings",
            "deliveries_url": hook_url + "/deliveries",
        }
        if app_id is not None:
            hook["app_id"] = app_id
        return {"zen": "Keep it logically awesome.", "hook_id": hook_id, "hook": hook}
