"""The schema of config/carry.yaml: what carry carries, from where, and where it tests it."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    model_validator,
)

from bot.core.versions import version_key
from bot.core.weblink import is_web_link

DEFAULT_CONFIG_PATH = Path("config/carry.yaml")
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# GitHub does not deliver payloads over 25 MB, so a larger limit is meaningless.
GITHUB_MAX_PAYLOAD_BYTES = 25 * 1024 * 1024


# --------------------------------------------------------------------------- field types

NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_PR_REF_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100})#([1-9][0-9]*)$")
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _name(value: str) -> str:
    if not NAME_RE.match(value):
        raise ValueError(f"{value!r} is not a valid name (expected [a-z0-9][a-z0-9._-]*)")
    return value


def _repo(value: str) -> str:
    if not _REPO_RE.match(value):
        raise ValueError(f"expected owner/name, got {value!r}")
    return value


def _pr_ref(value: str) -> str:
    if not _PR_REF_RE.match(value):
        raise ValueError(f"expected an upstream PR reference owner/repo#N, got {value!r}")
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.match(value):
        raise ValueError(f"expected an environment variable name like CARRY_X, got {value!r}")
    return value


def _relative_dir(value: str) -> str:
    parts = Path(value).parts
    if not value or Path(value).is_absolute() or ".." in parts:
        raise ValueError(f"expected a relative directory without '..', got {value!r}")
    return value


def _web_url(value: str) -> str:
    # carry writes it into links on GitHub (`[text](URL)`) and pages: no query, fragment,
    # space, quote, bracket or parenthesis that would end or change such a link
    shape = re.match(r"^https?://[^/\s?#]+(/[^\s?#]*)?$", value)
    if not shape or not is_web_link(value) or set(value) & set("\"'<>()[]`\\"):
        raise ValueError(
            f"expected an http(s) URL such as https://carry.example.com, got {value!r}"
        )
    return value.rstrip("/")


def _argv(value: list[str]) -> list[str]:
    if not value or not value[0]:
        raise ValueError("expected a non-empty command list, e.g. [python, -m, module]")
    return value


Name = Annotated[str, AfterValidator(_name)]
RepoName = Annotated[str, AfterValidator(_repo)]
PrRefStr = Annotated[str, AfterValidator(_pr_ref)]
EnvName = Annotated[str, AfterValidator(_env_name)]
RelativeDir = Annotated[str, AfterValidator(_relative_dir)]
Argv = Annotated[list[str], AfterValidator(_argv)]
PositiveInt = Annotated[int, Field(gt=0)]


def parse_pr_ref(ref: str) -> tuple[str, int]:
    """'owner/repo#12' -> ('owner/repo', 12)."""
    match = _PR_REF_RE.match(ref)
    if match is None:
        raise ValueError(f"expected owner/repo#N, got {ref!r}")
    return match.group(1), int(match.group(2))


# --------------------------------------------------------------------------- YAML models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Downstream(_Model):
    repo: RepoName
    branch: str = "main"
    patches_dir: RelativeDir = "patches"
    # one issue on the repository that carry keeps up to date with every series' state, with a
    # checkbox per action. Unset: on whenever carry's credentials can write issues (decided at
    # start; credentials that cannot leave it off, said in one log line); false: off
    dashboard_issue: bool | None = None


def _no_credentials(url: str) -> str:
    if re.match(r"^[a-z][a-z0-9+.-]*://[^/@]+@", url) and not url.startswith("ssh://"):
        raise ValueError(
            "the URL carries credentials; remove them and set GITHUB_TOKEN or a GitHub App "
            "in the environment (secrets never go in the config file)"
        )
    return url


def _not_an_option(url: str) -> str:
    # git would read "-u..." or "--upload-pack=..." as an option, not a repository.
    if url.lstrip().startswith("-"):
        raise ValueError(f"expected a repository URL or path, got {url!r} (starts with '-')")
    return url


class Upstream(_Model):
    url: Annotated[
        str, Field(min_length=1), AfterValidator(_not_an_option), AfterValidator(_no_credentials)
    ]
    repo: RepoName

    @property
    def web_host(self) -> str:
        """The web root the repository's pages live under (`https://github.com`, a GHE host,
        with any path before OWNER/NAME); "" for a local path or file:// URL, which has none."""
        scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(?!//).*", self.url)
        if scp:
            return f"https://{scp[1]}"
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https", "ssh", "git") or not parts.hostname:
            return ""
        web = parts.scheme in ("http", "https")
        # ssh:// and git:// name git's user and port; the pages are on https at the host.
        scheme, host = (parts.scheme, parts.netloc) if web else ("https", parts.hostname)
        prefix = "/".join(parts.path.strip("/").split("/")[:-2])
        return f"{scheme}://{host}" + (f"/{prefix}" if prefix else "")


BaseKind = Literal["branch", "tag", "tag_pattern", "pull"]
_BASE_KINDS: tuple[BaseKind, ...] = ("branch", "tag", "tag_pattern", "pull")


class BaseSpec(_Model):
    """Where a series sits upstream: exactly one of branch, tag, tag_pattern, pull."""

    branch: Annotated[str, Field(min_length=1)] | None = None
    tag: Annotated[str, Field(min_length=1)] | None = None
    tag_pattern: Annotated[str, Field(min_length=1)] | None = None
    pull: PositiveInt | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> BaseSpec:
        given = [kind for kind in _BASE_KINDS if getattr(self, kind) is not None]
        if len(given) != 1:
            got = join_and(given) if given else "none"
            raise ValueError(f"expected exactly one of branch, tag, tag_pattern, pull (got {got})")
        return self

    @property
    def kind(self) -> BaseKind:
        return next(kind for kind in _BASE_KINDS if getattr(self, kind) is not None)

    @property
    def ref(self) -> str | None:
        """The full upstream ref to watch; None for tag_pattern (resolved from the tag list)."""
        if self.branch is not None:
            return f"refs/heads/{self.branch}"
        if self.tag is not None:
            return f"refs/tags/{self.tag}"
        if self.pull is not None:
            return f"refs/pull/{self.pull}/head"
        return None

    def newest_tag(self, tags: Iterable[str]) -> str | None:
        """The newest tag matching tag_pattern, by version order (v0.10.0 > v0.9.1)."""
        if self.tag_pattern is None:
            raise ValueError("newest_tag() needs a tag_pattern base")
        matching = [tag for tag in tags if fnmatchcase(tag, self.tag_pattern)]
        return max(matching, key=version_key, default=None)


class Policy(_Model):
    paused: bool = False
    auto_drop: bool = True
    # a patch whose declared upstream PR (its fix page's, or drop_when) merged into the head,
    # with upstream's version of every hunk there, is dropped without asking; false: reviewed
    drop_when_merged: bool = False


class DropWhen(_Model):
    """The condition under which a patch is no longer needed: an upstream PR merges."""

    merged: PrRefStr


class CiPolicy(_Model):
    # every-head: the exact tree of each new upstream head is tested on the series' runners,
    # whether or not carry proposes anything; proposed: only trees carry proposes in a PR
    on: Literal["every-head", "proposed"] = "every-head"
    # a check that ran but could not observe its condition (INCONCLUSIVE, exit 77) is shown
    # amber; true: it also keeps the head from being the last known good one
    inconclusive_blocks: bool = False
    # pacing of every-head runs, per runner kind: a new head's run starts no sooner than
    # min_interval_s after the series' last one, and at most daily_budget start in 24 h. A run
    # held back waits and is replaced by a newer head's; /carry retest is not paced.
    min_interval_s: Annotated[int, Field(ge=0)] = 0
    daily_budget: PositiveInt | None = None

    @model_validator(mode="before")
    @classmethod
    def _yaml_11_on(cls, data: Any) -> Any:
        """A YAML 1.1 reader (PyYAML's safe_load, a script's) turns the key `on` into True."""
        if isinstance(data, dict) and True in data and "on" not in data:
            data = {("on" if key is True else key): value for key, value in data.items()}
        return data


class Publish(_Model):
    # force: carry's branch is the series on the downstream branch, one commit, force-pushed
    # over the last one; append: a new commit on top of carry's branch whose tree is the
    # refreshed series (no history rewrite), for a branch a ruleset or a branch protection
    # keeps from force pushes
    mode: Literal["force", "append"] = "force"


class Series(_Model):
    id: Name
    upstream: Name
    base: BaseSpec
    patches: RelativeDir
    links: dict[str, list[PrRefStr]] = Field(default_factory=dict)
    drop_when: dict[str, DropWhen] = Field(default_factory=dict)  # patch file -> condition
    runners: list[Name] = Field(default_factory=list)
    checks: list[Name] = Field(default_factory=list)
    trusted_authors: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    policy: Policy = Field(default_factory=Policy)
    ci: CiPolicy = Field(default_factory=CiPolicy)
    publish: Publish | None = None  # None: the configuration's `publish`
    version_scheme: Literal["date"] = "date"

    def linked_prs(self, patch_file: str) -> list[tuple[str, int]]:
        return [parse_pr_ref(ref) for ref in self.links.get(patch_file, [])]

    def drop_when_prs(self) -> dict[str, tuple[str, int]]:
        """Patch file -> the (repo, number) of the PR whose merge makes it unnecessary."""
        return {patch: parse_pr_ref(when.merged) for patch, when in self.drop_when.items()}


class Budget(_Model):
    queued: Annotated[int, Field(ge=0)] = 2
    running: PositiveInt = 1


class Command(_Model):
    run: Argv
    timeout_s: PositiveInt = 3600
    env: dict[EnvName, str] = Field(default_factory=dict)
    # The host's network for this step (say, one that downloads a model or packages). Without it
    # a sandboxed step has only its own loopback: no route to the broker or anywhere else.
    network: bool = False


class SetupStep(Command):
    name: Name


class SandboxSetting(_Model):
    """`runners.<kind>.sandbox`: a mode (`sandbox: bwrap` is short for `{mode: bwrap}`) and
    what the runner's owner accepts (runner/sandbox.py resolve)."""

    # auto uses namespaces where the host gives them, namespaces insists on them, bwrap adds a
    # read-only view of the host's files (bubblewrap), none runs steps bare.
    mode: Literal["auto", "namespaces", "bwrap", "none"] = "auto"
    # No sandbox (none, or auto on a host without namespaces) cannot keep a job from later
    # jobs: the runner refuses to start unless this names that risk, word for word.
    accept_risk: Literal["jobs can touch later jobs"] | None = None
    # A step with network: true gets a network of its own (slirp4netns) with no route to the
    # broker or the runner host (`own`), or the host's network, broker included (`host`: the
    # runner warns in every run log).
    step_network: Literal["own", "host"] = "own"

    @model_validator(mode="before")
    @classmethod
    def _short(cls, value: Any) -> Any:
        return {"mode": value} if isinstance(value, str) else value


class Runner(_Model):
    # A Redis list name that the runner's ACL rules name exactly (no glob characters).
    queue: Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$")]
    budget: Budget = Field(default_factory=Budget)
    workdir: Annotated[str, Field(min_length=1)]
    setup: list[SetupStep] = Field(default_factory=list)
    checks: dict[Name, Command] = Field(default_factory=dict)
    # How steps are isolated from the runner and the host (runner/sandbox.py, SandboxSetting).
    sandbox: SandboxSetting = Field(default_factory=SandboxSetting)
    # The user setup and check commands run as, with the job's tree handed to it: a step then
    # cannot write the runner's own code, its Python or anything else the runner's user owns,
    # nor read root's files. A name or a uid (needs a runner started as root); `auto`: nobody
    # on a root runner where the host lets it run steps, else the runner's own user, saying
    # why (runner/sandbox.py choose_user); `runner`: the runner's own user, root too.
    step_user: Annotated[str, Field(min_length=1)] = "auto"
    # The memory (address space, RLIMIT_AS) of each process of a step, in MiB: a step past it
    # fails its allocation. Unset: CARRY_TASK_MEMORY_MB where the runner host sets it, else
    # none. Accelerator drivers map much address space: leave room for them.
    step_memory_mb: Annotated[int, Field(ge=64)] | None = None

    def networked(self) -> frozenset[tuple[str, str]]:
        """(step kind, name) of the steps that get the host's network."""
        setup = {("setup", step.name) for step in self.setup if step.network}
        return frozenset(setup | {("check", n) for n, c in self.checks.items() if c.network})


class Polling(_Model):
    refs_every_s: PositiveInt = 60
    pr_state_every_s: PositiveInt = 300
    dashboard_issue_every_s: PositiveInt = 60  # how often the dashboard issue is brought up to date
    # how often carry asks GitHub to redeliver the webhook deliveries that failed (GitHub
    # never redelivers on its own): the repository hook `web.hook_id`, or the App's hook
    redeliver_every_s: PositiveInt = 300


class Web(_Model):
    max_body_bytes: Annotated[int, Field(gt=0, le=GITHUB_MAX_PAYLOAD_BYTES)] = (
        DEFAULT_MAX_BODY_BYTES
    )
    dashboard_token_env: EnvName = "CARRY_DASHBOARD_TOKEN"
    # where people reach carry's dashboard (`https://carry.example.com`): the links carry posts
    # on GitHub point there; none are posted without it
    public_url: Annotated[str, AfterValidator(_web_url)] | None = None
    # the id of the repository webhook that delivers to carry (its settings page's URL ends
    # with it): carry lists its failed deliveries and asks for them again. A GitHub App's
    # hook needs none (carry asks as the App).
    hook_id: PositiveInt | None = None


def _hook_url(value: str) -> str:
    if not re.match(r"^https?://[^/\s?#]+", value) or not is_web_link(value):
        raise ValueError(f"expected an http(s) URL, got {value!r}")
    return value


class Webhook(_Model):
    """Where carry tells people that a series went red or green again."""

    url: Annotated[str, AfterValidator(_hook_url)]
    # json: carry's own payload, signed (X-Carry-Signature-256: sha256=HMAC of the body with
    # the secret in secret_env); slack: a Slack-compatible {"text": ...} for an incoming
    # webhook (its URL is its secret), also signed when secret_env is given
    format: Literal["json", "slack"] = "json"
    secret_env: EnvName | None = None

    @model_validator(mode="after")
    def _signed(self) -> Webhook:
        if self.format == "json" and self.secret_env is None:
            raise ValueError(
                "a json webhook needs secret_env: the environment variable holding the secret "
                "its payloads are signed with (X-Carry-Signature-256)"
            )
        return self


class Notify(_Model):
    webhooks: list[Webhook] = Field(default_factory=list)
    # a series waiting for a human (a conflict, a review) this many checked heads or hours is
    # told once as stuck; null turns that limit off
    stuck_heads: PositiveInt | None = 10
    stuck_hours: Annotated[float, Field(gt=0)] | None = 72.0
    # after this many red heads in a row, the owners the failing fix's page names (its Owners
    # field) are mentioned, once per streak, on the dashboard issue and to the webhooks; null:
    # never (2 at least: the first red head is the went-red message)
    red_streak_mention: Annotated[int, Field(ge=2)] | None = 3


class CarryConfig(_Model):
    downstream: Downstream
    upstreams: dict[Name, Upstream]
    series: list[Series]
    runners: dict[Name, Runner] = Field(default_factory=dict)
    polling: Polling = Field(default_factory=Polling)
    web: Web = Field(default_factory=Web)
    notify: Notify = Field(default_factory=Notify)
    publish: Publish = Field(default_factory=Publish)

    def series_by_id(self, series_id: str) -> Series:
        for series in self.series:
            if series.id == series_id:
                return series
        raise KeyError(series_id)

    def publish_of(self, series_id: str) -> Publish:
        """How a series is published: its own `publish`, else the configuration's."""
        return self.series_by_id(series_id).publish or self.publish


def join_and(items: Sequence[str]) -> str:
    """Names joined as in a sentence: "a", "a and b", "a, b and c"."""
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"
