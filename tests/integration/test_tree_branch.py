"""The tested tree is a branch people can build (issue 32): carry pushes `carry/tree/<series>`
to the downstream repository on the GitHub emulator, the upstream head plus one commit per
carried patch with the patch's message and author, the exact tree `git am` makes of them; the
same tree again pushes nothing; commits that do not make the tested tree are not pushed; and
`carry/good/<series>` points at the last good head's tree commit, shown in the API.

carry's functions run in this process, as a worker runs them, with a real Redis, real git
repositories and the emulator."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from bot.core.state import GoodHead, SeriesState
from bot.emulator import GitHubEmulator
from bot.store import series as store
from bot.web.app import create_app
from harness.carry_env import BODY, SERIES, CarryEnv, in_this_process
from harness.gitrepo import git
from tests.support.asgi import serve
from workers import runtime as runtime_module
from workers import tree_branch

UP_OWNER, UP_NAME = "upstream-org", "engine"
DOWN_OWNER, DOWN_NAME = "downstream-org", "carry"
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
SECOND = {"other.py": "print('second carried fix')\n"}


@dataclass
class Setup:
    env: CarryEnv
    gh: GitHubEmulator
    head: str

    def pushes(self) -> int:
        """carry's pushes to the downstream repository (git receive-pack POSTs)."""
        return sum(
            1
            for r in self.gh.requests
            if r.kind == "git"
            and r.method == "POST"
            and r.path == f"/{DOWN_OWNER}/{DOWN_NAME}.git/git-receive-pack"
        )

    def ref(self, branch: str) -> str | None:
        return self.gh.ref(DOWN_OWNER, DOWN_NAME, f"refs/heads/{branch}")

    def downstream_git(self, *args: str) -> str:
        path = self.gh.hub.repo(DOWN_OWNER, DOWN_NAME).git.path
        return git(Path(path), *args)

    def files(self) -> dict[str, bytes]:
        directory = self.env.downstream / "patches" / SERIES
        return {p.name: p.read_bytes() for p in directory.iterdir() if p.is_file()}

    def state(self) -> SeriesState:
        rt = runtime_module.runtime()
        state = store.ensure_series(rt.redis, SERIES)

        def on_head(fresh: SeriesState) -> bool:
            fresh.checked_head = self.head
            return True

        store.update_series(rt.redis, SERIES, on_head)
        state = store.load_series(rt.redis, SERIES)
        assert state is not None
        return state

    def history(self, kind: str) -> list[dict[str, Any]]:
        return [e["data"] for e in self.env.history(kind)]


@pytest.fixture
def setup(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Setup]:
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX, SECOND])
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the fixes")
    head = env.upstream.commit("upstream moves", {"upstream.py": "n = 1\n"})
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
        gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream)
        gh.add_user("carry[bot]", type="Bot")
        gh.add_token("carry-token", "carry[bot]")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "write")
        env.write_config()
        env.config_path.write_text(
            env.config_path.read_text().replace(
                str(env.upstream.path), gh.git_url(UP_OWNER, UP_NAME)
            )
        )
        with in_this_process(env, monkeypatch):
            monkeypatch.setenv("GITHUB_TOKEN", "carry-token")
            monkeypatch.setenv("GITHUB_BASE_URL", gh.base_url)
            monkeypatch.setenv("CARRY_DOWNSTREAM_DIR", str(env.downstream))
            runtime_module.reset()
            yield Setup(env, gh, head)


def _git_am(setup: Setup, tmp: Path) -> tuple[str, list[tuple[str, str]]]:
    """What `git am` makes of the series on the head, independently of carry: the tree, and
    each commit's (author, message)."""
    clone = tmp / "am"
    subprocess.run(["git", "clone", "-q", str(setup.env.upstream.path), str(clone)], check=True)
    git(clone, "checkout", "-q", setup.head)
    directory = setup.env.downstream / "patches" / SERIES
    names = (directory / "series").read_text().split()
    git(
        clone,
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@t",
        "am",
        "-q",
        *(str(directory / n) for n in names),
    )
    tree = git(clone, "rev-parse", "HEAD^{tree}")
    log = git(clone, "log", "--format=%an <%ae>%x00%B%x01", f"{setup.head}..HEAD", "--reverse")
    commits = [tuple(c.strip("\n").split("\0", 1)) for c in log.split("\1") if c.strip()]
    return tree, commits  # type: ignore[return-value]


def test_the_tree_branch_is_the_exact_tree_and_pushed_once(setup: Setup, tmp_path: Path) -> None:
    tree, commits = _git_am(setup, tmp_path)
    rt = runtime_module.runtime()
    before = setup.pushes()
    built = tree_branch.publish_tree(rt, setup.state(), tree, setup.files())
    assert built is not None and built.branch == f"carry/tree/{SERIES}"
    assert setup.ref(built.branch) == built.commit and setup.pushes() == before + 1
    # the upstream head plus one commit per patch, each with the patch's author and message
    assert setup.downstream_git("rev-parse", f"{built.commit}~2") == setup.head
    assert setup.downstream_git("rev-parse", f"{built.commit}^{{tree}}") == tree
    log = setup.downstream_git(
        "log", "--format=%an <%ae>%x00%B%x01", f"{setup.head}..{built.commit}", "--reverse"
    )
    found = [tuple(c.strip("\n").split("\0", 1)) for c in log.split("\1") if c.strip()]
    assert found == commits

    again = tree_branch.publish_tree(rt, setup.state(), tree, setup.files())
    assert again is not None and again.commit == built.commit
    assert setup.pushes() == before + 1  # the same tree: nothing pushed
    (entry,) = setup.history("tree-branch")  # nothing new to say either
    assert entry["pushed"] is True and entry["commit"] == built.commit
    state = store.load_series(rt.redis, SERIES)
    assert state is not None and state.tree_commits == {setup.head: built.commit}


def test_commits_that_do_not_make_the_tested_tree_are_not_pushed(setup: Setup) -> None:
    rt = runtime_module.runtime()
    wrong = "0" * 40
    assert tree_branch.publish_tree(rt, setup.state(), wrong, setup.files()) is None
    assert setup.ref(f"carry/tree/{SERIES}") is None
    (skipped,) = setup.history("tree-branch-skipped")
    assert "not the tested 000000000000" in skipped["reason"]


def test_the_good_ref_points_at_the_good_heads_tree_and_the_api_names_it(
    setup: Setup, tmp_path: Path
) -> None:
    tree, _ = _git_am(setup, tmp_path)
    rt = runtime_module.runtime()
    built = tree_branch.publish_tree(rt, setup.state(), tree, setup.files())
    assert built is not None
    assert tree_branch.push_good_ref(rt, SERIES) is None  # no good head yet: nothing

    def good(fresh: SeriesState) -> bool:
        fresh.last_good = GoodHead(head=setup.head, tree_key="k", at=store.now_iso())
        return True

    store.update_series(rt.redis, SERIES, good)
    assert tree_branch.push_good_ref(rt, SERIES) == built.commit
    assert setup.ref(f"carry/good/{SERIES}") == built.commit
    pushes = setup.pushes()
    assert tree_branch.push_good_ref(rt, SERIES) is None and setup.pushes() == pushes
    (entry,) = setup.history("good-ref")
    assert entry["ref"] == f"carry/good/{SERIES}" and entry["head"] == setup.head

    with serve(create_app(rt.config, rt.settings, rt.redis)) as url:
        shown = httpx.get(f"{url}/api/v1/series/{SERIES}", timeout=10).json()
    assert shown["last_good"]["ref"] == f"carry/good/{SERIES}"
    assert shown["last_good"]["commit"] == built.commit
    assert shown["tree_branch"]["commit"] == built.commit
