"""The same scenarios on two backends of ForgePort: the real `Forge` (PyGithub over HTTP)
against the GitHub emulator, and `InMemoryForge`. Each asserts one expected outcome, so both
backends give the same return values and raise the same exceptions."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import pytest

from bot.config import Settings
from bot.core import successor
from bot.core.render import fit_for_github
from bot.emulator import GitHubEmulator, generate_app_key
from bot.github.fake import InMemoryForge
from bot.github.forge import (
    DraftsNotSupported,
    Forge,
    ForgeCaches,
    ForgeError,
    PermissionUnknown,
    PullInfo,
    PullState,
    RateLimited,
)
from bot.github.port import ForgePort
from harness.gitrepo import RepoBuilder
from tests.support.github_settings import NO_GITHUB

REPO, UPSTREAM = "acme/widget", "upstream-org/engine"
CARRY = "carry[bot]"
APP_ID, INSTALLATION_ID = 4711, 815
BIG = 65_536


class World(Protocol):
    """GitHub's side of a scenario: what people (and GitHub) do, and what a test reads back.
    InMemoryForge has these calls itself; EmulatedWorld makes them on the emulator."""

    def add_repo(self, full_name: str) -> str: ...
    def add_user(self, login: str) -> None: ...
    def set_permission(self, login: str, role: str) -> None: ...
    def push(self, branch: str, *, on: str | None = None, repo: str | None = None) -> str: ...
    def open_pull(self, branch: str, *, title: str = ..., repo: str | None = None) -> int: ...
    def open_issue(self, title: str, *, user: str, labels: tuple[str, ...] = ()) -> int: ...
    def add_comment(self, number: int, body: str, *, user: str, repo: str | None = None) -> int: ...
    def merge(self, number: int, *, repo: str | None = None) -> str: ...
    def close(self, number: int, *, repo: str | None = None) -> None: ...
    def rename(self, new_name: str, *, repo: str | None = None) -> None: ...
    def limit_writes(self, times: int, retry_after_s: float) -> None: ...
    def pull(self, number: int) -> PullInfo: ...
    def issue_body(self, number: int) -> str: ...
    def comments(self, number: int) -> list[tuple[str, str]]: ...
    def labels(self, number: int) -> list[str]: ...
    def check_runs(self, sha: str) -> list[dict[str, Any]]: ...
    def statuses(self, sha: str) -> list[dict[str, Any]]: ...


class EmulatedWorld:
    """World on bot.emulator: real bare repositories, changed by git pushes from work trees."""

    def __init__(self, gh: GitHubEmulator, root: Path) -> None:
        self.gh, self.root = gh, root
        self.work: dict[str, RepoBuilder] = {}
        self.names: dict[str, str] = {}  # a repository's name as created -> its name now
        self._count = itertools.count(1)

    def _where(self, repo: str | None) -> tuple[str, str]:
        owner, name = self.names[(repo or REPO).lower()].split("/")
        return owner, name

    def add_repo(self, full_name: str, *, private: bool = False, plan: str = "free") -> str:
        work = RepoBuilder(self.root / full_name.replace("/", "-"))
        sha = work.commit("root", {"README": "hello\n"})
        owner, name = full_name.split("/")
        self.gh.create_repo(owner, name, from_path=work.path, private=private, plan=plan)
        self.work[full_name.lower()], self.names[full_name.lower()] = work, full_name
        return sha

    def add_user(self, login: str) -> None:
        self.gh.add_user(login)

    def set_permission(self, login: str, role: str) -> None:
        self.gh.set_permission(*self._where(None), login, role)

    def push(self, branch: str, *, on: str | None = None, repo: str | None = None) -> str:
        owner, name = self._where(repo)
        work = self.work[(repo or REPO).lower()]
        work.git("fetch", "-q", str(self.gh.repo_path(owner, name)), "+refs/heads/*:refs/gh/*")
        known = self.gh.ref(owner, name, f"refs/heads/{branch}") is not None
        work.git("checkout", "-q", "--detach", f"refs/gh/{on or (branch if known else 'main')}")
        n = next(self._count)
        sha = work.commit(f"change {n}", {f"{branch.replace('/', '-')}.txt": f"{n}\n"})
        self.gh.push(owner, name, work.path, f"HEAD:refs/heads/{branch}", pusher=owner, force=True)
        return sha

    def open_pull(
        self, branch: str, *, title: str = "Pull request", repo: str | None = None
    ) -> int:
        return self.gh.open_pull(*self._where(repo), head=branch, base="main", title=title)

    def open_issue(self, title: str, *, user: str, labels: tuple[str, ...] = ()) -> int:
        return self.gh.open_issue(*self._where(None), title=title, user=user, labels=labels)

    def add_comment(self, number: int, body: str, *, user: str, repo: str | None = None) -> int:
        return self.gh.add_comment(*self._where(repo), number, body, user=user)

    def merge(self, number: int, *, repo: str | None = None) -> str:
        return self.gh.merge_pull(*self._where(repo), number)

    def close(self, number: int, *, repo: str | None = None) -> None:
        self.gh.close_pull(*self._where(repo), number)

    def rename(self, new_name: str, *, repo: str | None = None) -> None:
        owner, name = self._where(repo)
        self.gh.rename_repo(owner, name, new_name)
        self.names[(repo or REPO).lower()] = f"{owner}/{new_name}"

    def limit_writes(self, times: int, retry_after_s: float) -> None:
        self.gh.secondary_limit(next_n_writes=times, retry_after_s=int(retry_after_s))

    def pull(self, number: int) -> PullInfo:
        data = self.gh.pull(*self._where(None), number)
        return PullInfo(
            data["number"],
            data["html_url"],
            data["head"]["sha"],
            data["state"],
            data["draft"],
            data["merged"],
            data["title"],
            data["body"] or "",
            tuple(label["name"] for label in data["labels"]),
        )

    def issue_body(self, number: int) -> str:
        return str(self.gh.issue(*self._where(None), number)["body"] or "")

    def comments(self, number: int) -> list[tuple[str, str]]:
        found = self.gh.comments(*self._where(None), number)
        return [(c["user"]["login"], c["body"]) for c in sorted(found, key=lambda c: c["id"])]

    def labels(self, number: int) -> list[str]:
        return self.gh.labels(*self._where(None), number)

    def check_runs(self, sha: str) -> list[dict[str, Any]]:
        return self.gh.check_runs(*self._where(None), sha=sha)

    def statuses(self, sha: str) -> list[dict[str, Any]]:
        return self.gh.statuses(*self._where(None), sha)


@dataclass
class Side:
    forge: ForgePort
    world: World
    main: str  # the first commit of carry's repository's main
    backend: str


Start = Callable[..., Side]


def _real_forge(gh: GitHubEmulator, auth: str, caches: ForgeCaches) -> Forge:
    settings: dict[str, Any] = {"github_base_url": gh.base_url, "github_write_pause_s": 0}
    settings |= NO_GITHUB
    if auth == "app":
        private_key, public_key = generate_app_key()
        gh.add_app(APP_ID, public_key, slug="carry")
        gh.add_installation(APP_ID, INSTALLATION_ID, REPO.split("/")[0])
        settings |= {
            "github_app_id": APP_ID,
            "github_app_private_key": private_key,
            "github_installation_id": INSTALLATION_ID,
        }
    else:
        gh.add_user(CARRY, type="Bot")
        gh.add_token("carry-token", CARRY)
        owner, name = REPO.split("/")
        gh.set_permission(owner, name, CARRY, "write")
        settings["github_token"] = "carry-token"
    return Forge.connect(Settings(**settings), REPO, caches=caches)


@pytest.fixture
def forge_caches() -> ForgeCaches:
    """What the test's Forges share (a test may record their waits); new for each test, since
    a later emulator may get the port of an earlier one."""
    return ForgeCaches()


@pytest.fixture(params=["emulator", "fake"])
def start(
    request: pytest.FixtureRequest, tmp_path: Path, forge_caches: ForgeCaches
) -> Iterator[Start]:
    """start(auth="token"|"app", private=False, plan="free") -> Side on this backend."""
    with contextlib.ExitStack() as running:
        emulators: list[GitHubEmulator] = []

        def on_emulator(auth: str, private: bool, plan: str) -> Side:
            gh = running.enter_context(GitHubEmulator(tmp_path / "gh"))
            emulators.append(gh)
            world = EmulatedWorld(gh, tmp_path / "work")
            main = world.add_repo(REPO, private=private, plan=plan)
            return Side(_real_forge(gh, auth, forge_caches), world, main, "emulator")

        def on_fake(auth: str, private: bool, plan: str) -> Side:
            fake = InMemoryForge(
                REPO, login=CARRY, auth=auth, private=private, plan=plan, caches=forge_caches
            )
            main = fake.head("main")
            assert main is not None
            return Side(fake, fake, main, "fake")

        def begin(*, auth: str = "token", private: bool = False, plan: str = "free") -> Side:
            make = on_emulator if request.param == "emulator" else on_fake
            return make(auth, private, plan)

        yield begin
        assert [gh.errors for gh in emulators] == [[] for _ in emulators]


@contextlib.contextmanager
def refused(status: int) -> Iterator[None]:
    """GitHub refused the call with `status`: a plain ForgeError that says so."""
    with pytest.raises(ForgeError) as caught:
        yield
    assert type(caught.value) is ForgeError
    assert f"failed ({status})" in str(caught.value), str(caught.value)


def without_url(info: PullInfo | None, number: int) -> PullInfo:
    assert info is not None and info.url.endswith(f"/{REPO}/pull/{number}"), info
    return replace(info, url="")


def opened(side: Side, branch: str = "carry/calc", **changes: Any) -> PullInfo:
    side.world.push(branch)
    wanted: dict[str, Any] = {"title": "Rebase calc", "body": "the series", "draft": False}
    wanted |= changes
    return side.forge.create_pull("main", branch, **wanted)


# -- pull requests ---------------------------------------------------------------------------


def test_a_pull_is_opened_found_and_edited_only_when_its_text_changes(start: Start) -> None:
    side = start()
    head = side.world.push("carry/calc")
    pull = side.forge.create_pull("main", "carry/calc", "Rebase calc", "the series", False)
    expected = PullInfo(1, "", head, "open", False, False, "Rebase calc", "the series")
    assert without_url(pull, 1) == expected
    assert side.forge.find_open_pull("carry/calc") == pull
    assert side.forge.find_open_pull("carry/other") is None
    assert side.forge.update_pull(1, "Rebase calc", "the series", current=pull) is False
    assert side.forge.update_pull(1, "Rebase calc (2)", "new text", current=pull) is True
    assert side.forge.update_pull(1, "Rebase calc (3)", "newer text") is True
    found = side.forge.find_open_pull("carry/calc")
    assert found is not None and (found.title, found.body) == ("Rebase calc (3)", "newer text")
    moved = side.world.push("carry/calc")
    assert side.forge.find_open_pull("carry/calc").head_sha == moved  # type: ignore[union-attr]


def test_a_pull_github_refuses(start: Start) -> None:
    side = start()
    with refused(422):  # no such branch
        side.forge.create_pull("main", "carry/none", "Rebase", "body", False)
    side.world.push("carry/calc")
    side.forge.create_pull("main", "carry/calc", "Rebase", "body", False)
    with refused(422):  # one open PR per head and base
        side.forge.create_pull("main", "carry/calc", "Again", "body", False)
    side.world.push("carry/empty", on="main")
    side.world.push("main", on="carry/empty")  # carry/empty is now part of main
    with refused(422):  # no commits between main and carry/empty
        side.forge.create_pull("main", "carry/empty", "Empty", "body", False)
    with refused(404):
        side.forge.update_pull(99, "Title", "body")


def test_a_pull_body_is_cut_to_githubs_limit(start: Start) -> None:
    side = start()
    text = "a line of the report\n" * 4000  # 84,000 characters
    pull = opened(side, body=text, series="calc")
    assert pull.body == fit_for_github(text, "calc") and len(pull.body) <= BIG
    side.forge.update_pull(pull.number, "Rebase calc", text + "more", series="calc")
    assert side.world.pull(pull.number).body == fit_for_github(text + "more", "calc")


@pytest.mark.parametrize(("private", "plan"), [(True, "free"), (True, "pro")])
def test_drafts_are_refused_in_private_free_and_pro_repositories(
    start: Start, private: bool, plan: str
) -> None:
    side = start(private=private, plan=plan)
    side.world.push("carry/calc")
    with pytest.raises(DraftsNotSupported):
        side.forge.create_pull("main", "carry/calc", "Rebase", "body", True)
    assert side.forge.create_pull("main", "carry/calc", "Rebase", "body", False).draft is False


@pytest.mark.parametrize(("private", "plan"), [(False, "free"), (True, "team")])
def test_drafts_elsewhere(start: Start, private: bool, plan: str) -> None:
    side = start(private=private, plan=plan)
    assert opened(side, draft=True).draft is True


# -- labels ------------------------------------------------------------------------------------


def test_labels_are_added_once_and_removed(start: Start) -> None:
    side = start()
    pull = opened(side)
    side.forge.add_labels(pull.number, ["carry", "Conflict"], current=pull)
    now = side.forge.find_open_pull("carry/calc")
    assert now is not None and now.labels == ("carry", "Conflict")
    before = len(side.world.labels(pull.number))
    side.forge.add_labels(pull.number, ["carry"], current=now)  # has it: nothing sent
    assert len(side.world.labels(pull.number)) == before
    side.forge.remove_label(pull.number, "Conflict")
    assert side.world.labels(pull.number) == ["carry"]
    with refused(404):  # GitHub: "Label does not exist"
        side.forge.remove_label(pull.number, "Conflict")
    with refused(404):
        side.forge.add_labels(99, ["carry"])
    with refused(422):
        side.forge.add_labels(pull.number, [""])


# -- comments ---------------------------------------------------------------------------------


def test_one_report_comment_is_kept_up_to_date(start: Start) -> None:
    side = start()
    pull = opened(side)
    side.world.add_user("alice")
    side.world.add_comment(pull.number, "looks fine", user="alice")
    assert side.forge.upsert_comment(pull.number, "<!-- m -->", "x", only_existing=True) is None
    first = side.forge.upsert_comment(pull.number, "<!-- m -->", "<!-- m --> report 1")
    again = side.forge.upsert_comment(pull.number, "<!-- m -->", "<!-- m --> report 2")
    assert isinstance(first, int) and again == first
    said = side.forge.comment(pull.number, "a note")
    assert isinstance(said, int) and said != first
    assert side.world.comments(pull.number) == [
        ("alice", "looks fine"),
        (CARRY, "<!-- m --> report 2"),
        (CARRY, "a note"),
    ]


def test_comments_github_refuses_or_carry_cuts(start: Start) -> None:
    side = start()
    pull = opened(side)
    with refused(404):
        side.forge.comment(99, "hello")
    with refused(404):
        side.forge.upsert_comment(99, "<!-- m -->", "<!-- m --> hello")
    with refused(422):  # an empty comment
        side.forge.comment(pull.number, "")
    text = "x" * (BIG + 10)
    side.forge.comment(pull.number, text, series="calc")
    ((_, body),) = side.world.comments(pull.number)
    assert body == fit_for_github(text, "calc") and len(body) <= BIG


# -- issues -----------------------------------------------------------------------------------


def test_carrys_issue_is_opened_found_by_label_and_author_and_edited(start: Start) -> None:
    side = start()
    side.world.add_user("alice")
    side.world.set_permission("alice", "write")
    theirs = side.world.open_issue("mine", user="alice", labels=("carry-dashboard",))
    assert side.forge.find_issue("carry-dashboard", CARRY) is None
    ours = side.forge.create_issue("carry's dashboard", "body", ["carry-dashboard"])
    assert ours == theirs + 1
    assert side.world.labels(ours) == ["carry-dashboard"]
    assert side.forge.find_issue("Carry-Dashboard", CARRY.upper()) == ours
    assert side.forge.edit_issue(ours, "new body") is True
    assert side.world.issue_body(ours) == "new body"
    assert side.forge.edit_issue(99, "gone") is False
    text = "y" * (BIG + 1)
    assert side.forge.edit_issue(ours, text) is True
    assert side.world.issue_body(ours) == fit_for_github(text)


def test_issues_github_refuses(start: Start) -> None:
    side = start()
    with refused(422):
        side.forge.create_issue("", "body", [])
    with refused(422):  # titles hold 256 characters
        side.forge.create_issue("t" * 257, "body", [])
    side.world.add_user("alice")
    theirs = side.world.open_issue("mine", user="alice")
    side.world.set_permission(CARRY, "read")
    with refused(403):  # neither its author nor a triager
        side.forge.edit_issue(theirs, "taken over")
    ours = side.forge.create_issue("read-only", "body", ["carry-dashboard"])
    assert side.world.labels(ours) == []  # dropped without a word: no push access


def test_the_app_opens_and_edits_any_issue(start: Start) -> None:
    side = start(auth="app")
    side.world.add_user("alice")
    theirs = side.world.open_issue("mine", user="alice")
    assert side.forge.edit_issue(theirs, "edited by the app") is True
    ours = side.forge.create_issue("dashboard", "body", ["carry-dashboard"])
    assert side.forge.find_issue("carry-dashboard", CARRY) == ours


# -- permissions ------------------------------------------------------------------------------


def test_roles_of_people(start: Start) -> None:
    side = start()
    side.world.add_user("alice")
    side.world.add_user("bob")
    side.world.set_permission("alice", "write")
    assert side.forge.permission("acme") == "admin"  # the owner
    assert side.forge.permission("ALICE") == "write"
    assert side.forge.permission("bob") == "read"  # anyone may read a public repository
    assert side.forge.permission("nobody-known") == "none"


@pytest.mark.parametrize("role", ["maintain", "triage"])
def test_roles_beyond_the_legacy_four(start: Start, role: str) -> None:
    side = start()
    side.world.add_user("alice")
    side.world.set_permission("alice", role)
    assert side.forge.permission("alice") == role


@pytest.mark.parametrize("auth", ["token", "app"])
def test_carrys_own_role(start: Start, auth: str) -> None:
    side = start(auth=auth)
    assert side.forge.permission(CARRY) == "write"


def test_roles_need_push_access(start: Start) -> None:
    side = start()
    side.world.add_user("alice")
    side.world.set_permission(CARRY, "read")
    with pytest.raises(PermissionUnknown):
        side.forge.permission("alice")


# -- checks and statuses ----------------------------------------------------------------------


def _runs(side: Side, sha: str) -> list[tuple[Any, ...]]:
    return [
        (r["name"], r["status"], r["conclusion"], r["output"]["title"], r["output"]["summary"])
        for r in side.world.check_runs(sha)
    ]


def test_check_runs_need_a_github_app(start: Start) -> None:
    side = start(auth="token")
    with refused(403):  # "You must authenticate via a GitHub App."
        side.forge.create_check_run(side.main, "carry/x", "in_progress", None, "t", "s")
    assert side.world.check_runs(side.main) == []


def test_check_runs_as_an_app(start: Start) -> None:
    side = start(auth="app")
    made = side.forge.create_check_run(side.main, "carry/x", "in_progress", None, "t", "s")
    done = side.forge.create_check_run(side.main, "carry/y", "completed", "success", "t", "ok")
    assert isinstance(made, int) and done != made
    long = "é" * 40_000  # 80,000 bytes
    side.forge.create_check_run(side.main, "carry/z", "completed", "failure", "t", long)
    cut = fit_for_github(long, limit=65_535, in_bytes=True)
    assert sorted(_runs(side, side.main)) == [
        ("carry/x", "in_progress", None, "t", "s"),
        ("carry/y", "completed", "success", "t", "ok"),
        ("carry/z", "completed", "failure", "t", cut),
    ]


def test_a_check_run_is_found_by_its_run_and_updated_in_place(start: Start) -> None:
    side = start(auth="app")
    assert side.forge.find_check_run(side.main, "carry/x", "r1") is None
    made = side.forge.create_check_run(
        side.main, "carry/x", "queued", None, "t", "s", external_id="r1"
    )
    side.forge.create_check_run(side.main, "carry/x", "queued", None, "t", "s", external_id="r2")
    assert side.forge.find_check_run(side.main, "carry/x", "r1") == made
    assert side.forge.find_check_run(side.main, "carry/y", "r1") is None
    side.forge.update_check_run(made, "in_progress", None, "t", "running")
    with refused(422):  # completed needs a conclusion
        side.forge.update_check_run(made, "completed", None, "t", "s")
    side.forge.update_check_run(made, "completed", "success", "t", "passed")
    assert sorted(_runs(side, side.main)) == [
        ("carry/x", "completed", "success", "t", "passed"),
        ("carry/x", "queued", None, "t", "s"),
    ]


@pytest.mark.parametrize(
    ("sha", "status", "conclusion"),
    [
        ("0" * 40, "queued", None),  # no such commit
        ("not-a-sha", "queued", None),
        (None, "finished", None),  # no such status
        (None, "completed", None),  # completed needs a conclusion
        (None, "completed", "won"),
    ],
)
def test_check_runs_github_refuses(
    start: Start, sha: str | None, status: str, conclusion: str | None
) -> None:
    side = start(auth="app")
    with refused(422):
        side.forge.create_check_run(sha or side.main, "carry/x", status, conclusion, "t", "s")


def test_commit_statuses(start: Start) -> None:
    side = start()
    side.forge.create_status(side.main, "carry/x", "success", "d" * 200, "https://ci/1")
    side.forge.create_status(side.main, "carry/y", "pending", "waiting")
    shown = [
        (s["context"], s["state"], s["description"], s["target_url"])
        for s in side.world.statuses(side.main)
    ]
    assert shown == [
        ("carry/x", "success", "d" * 139 + "\u2026", "https://ci/1"),
        ("carry/y", "pending", "waiting", None),
    ]
    with refused(422):
        side.forge.create_status(side.main, "carry/x", "done", "d")
    with refused(422):
        side.forge.create_status("0" * 40, "carry/x", "success", "d")


# -- pull states ------------------------------------------------------------------------------


def test_a_pull_state_is_read_again_only_when_it_changed(start: Start) -> None:
    side = start()
    pull = opened(side)
    state, etag = side.forge.pull_state(REPO, pull.number, None)
    assert state == PullState("open", pull.head_sha, "main", None, None)
    assert etag is not None and etag.startswith('W/"')
    assert side.forge.pull_state(REPO, pull.number, etag) == (None, etag)
    side.forge.update_pull(pull.number, "Renamed", "body")
    changed, newer = side.forge.pull_state(REPO, pull.number, etag)
    assert changed == state and newer not in (None, etag)


def test_pull_states_of_another_repository(start: Start) -> None:
    side = start()
    side.world.add_repo(UPSTREAM)
    side.world.push("feature", repo=UPSTREAM)
    merged = side.world.open_pull("feature", repo=UPSTREAM)
    side.world.push("other", repo=UPSTREAM, on="main")
    closed = side.world.open_pull("other", repo=UPSTREAM)
    merge_commit = side.world.merge(merged, repo=UPSTREAM)
    side.world.close(closed, repo=UPSTREAM)
    state, _ = side.forge.pull_state(UPSTREAM, merged, None)
    assert state is not None and (state.state, state.merge_commit) == ("merged", merge_commit)
    assert state.merged_by == "upstream-org"
    state, _ = side.forge.pull_state(UPSTREAM, closed, None)
    assert state is not None and (state.state, state.merge_commit) == ("closed_unmerged", None)
    with refused(404):
        side.forge.pull_state(UPSTREAM, 99, None)
    with refused(404):
        side.forge.pull_state("nobody/nothing", 1, None)


# -- timelines --------------------------------------------------------------------------------


def test_a_timeline_has_comments_and_cross_references(start: Start) -> None:
    side = start()
    side.world.add_repo(UPSTREAM)
    side.world.add_user("maintainer")
    side.world.push("old", repo=UPSTREAM)
    old = side.world.open_pull("old", repo=UPSTREAM)
    side.world.push("new", repo=UPSTREAM, on="main")
    new = side.world.open_pull("new", title=f"Carries on #{old}", repo=UPSTREAM)
    side.world.add_comment(new, f"this replaces #{old}", user="maintainer", repo=UPSTREAM)
    side.world.add_comment(old, f"closing in favor of #{new}", user="maintainer", repo=UPSTREAM)
    events = side.forge.timeline(UPSTREAM, old)
    shown = [
        (e["event"], e["actor"]["login"], e.get("body"), e.get("source", {}).get("issue", {}))
        for e in events
    ]
    assert [(kind, who, body) for kind, who, body, _ in shown] == [
        ("cross-referenced", "maintainer", None),
        ("commented", "maintainer", f"closing in favor of #{new}"),
    ]
    source = shown[0][3]
    assert (source["number"], "pull_request" in source) == (new, True)
    assert [c.number for c in successor.candidates(UPSTREAM, old, events)] == [new]
    with refused(404):
        side.forge.timeline(UPSTREAM, 99)


# -- renamed repositories --------------------------------------------------------------------


def test_a_rename_of_carrys_repository_is_followed(start: Start) -> None:
    side = start()
    pull = opened(side)
    side.world.rename("gadget")
    found = side.forge.find_open_pull("carry/calc")
    assert found is not None and found.number == pull.number
    assert (side.forge.renamed_from, side.forge.repo_name) == (REPO, "acme/gadget")
    assert side.forge.comment(pull.number, "still here") > 0


@pytest.mark.parametrize(
    "ask",
    [
        pytest.param(lambda forge, number: forge.pull_state(UPSTREAM, number, None), id="pull"),
        pytest.param(lambda forge, number: forge.timeline(UPSTREAM, number), id="timeline"),
    ],
)
def test_a_renamed_upstream_is_named_in_the_error_and_carrys_repository_left_alone(
    start: Start, ask: Callable[[Any, int], Any]
) -> None:
    side = start()
    side.world.add_repo(UPSTREAM)
    side.world.push("feature", repo=UPSTREAM)
    number = side.world.open_pull("feature", repo=UPSTREAM)
    side.world.rename("motor", repo=UPSTREAM)
    with pytest.raises(ForgeError, match="upstream-org/motor"):
        ask(side.forge, number)
    assert (side.forge.renamed_from, side.forge.repo_name) == (None, REPO)


# -- rate limits and the token ---------------------------------------------------------------


def test_a_long_rate_limit_refusal_is_rate_limited(start: Start) -> None:
    side = start()
    pull = opened(side)
    side.world.limit_writes(1, 3600)
    with pytest.raises(RateLimited) as caught:
        side.forge.comment(pull.number, "hello")
    assert caught.value.retry_after_s == 3600
    assert side.world.comments(pull.number) == []


def test_a_short_rate_limit_refusal_is_waited_out(start: Start, forge_caches: ForgeCaches) -> None:
    waits: list[float] = []
    forge_caches.sleep = waits.append
    side = start()
    pull = opened(side)
    side.world.limit_writes(2, 5)
    side.forge.comment(pull.number, "hello")
    assert waits == [5.0, 5.0]
    assert side.world.comments(pull.number) == [(CARRY, "hello")]
    side.world.limit_writes(3, 5)
    with pytest.raises(RateLimited):  # WRITE_RETRIES used up
        side.forge.comment(pull.number, "again")


@pytest.mark.parametrize("auth", ["token", "app"])
def test_a_token_for_git(start: Start, auth: str) -> None:
    side = start(auth=auth)
    assert isinstance(side.forge.token, str) and side.forge.token
