"""The `carry` command line: the check contract other parts depend on, and start-up errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.paths import REPO_ROOT

BODY = "".join(f"value_{i} = compute({i})\n" for i in range(1, 41))
SNAPSHOT = Path(__file__).parent / "snapshots" / "refreshed-0001.patch"


def carry(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "bot.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd or REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        timeout=120,
    )


@pytest.fixture
def series(make_repo, tmp_path):
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    up.checkout("main", new_branch="carried")
    up.commit("Make value 7 safe", {"mod.py": BODY.replace("compute(7)", "compute(7, safe=True)")})
    up.commit(
        "Conflicting change",
        {
            "mod.py": BODY.replace("compute(7)", "compute(7, safe=True)").replace(
                "compute(30)", "compute(30, x=1)"
            )
        },
    )
    patches = up.format_patch("main..carried", tmp_path / "patches")
    up.checkout("main")
    up.commit(
        "upstream moves", {"mod.py": "import os\n" + BODY.replace("compute(30)", "other(30)")}
    )
    return up, patches


def test_check_json_contract(series, tmp_path):
    up, patches = series
    args = [
        "check",
        "--repo",
        str(up.path),
        "--head",
        "main",
        "--json",
        "--exit-code",
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    for p in patches:
        args += ["--patch", str(p)]
    result = carry(*args)
    # A conflict is a classification, not an error (that is 2), but it needs a human: 1.
    assert result.returncode == 1, result.stderr
    report = json.loads(result.stdout)
    assert report["head"] == up.head("main") and len(report["head"]) == 40
    assert [p["patch"] for p in report["patches"]] == [str(p) for p in patches]
    assert [(p["status"], p["decision"]) for p in report["patches"]] == [
        ("applies-moved", "keep"),
        ("conflict", "keep"),
    ]
    assert all(p["evidence"] for p in report["patches"])


def test_refreshed_patch_bytes_match_the_snapshot(series, tmp_path):
    """The refreshed file is a pure function of content: pinned repos give fixed bytes."""
    up, patches = series
    copy = tmp_path / "0001.patch"
    copy.write_bytes(patches[0].read_bytes())
    result = carry(
        "check",
        "--repo",
        str(up.path),
        "--head",
        "main",
        "--patch",
        str(copy),
        "--write-refreshed",
        "--cache-dir",
        str(tmp_path / "c"),
    )
    assert result.returncode == 0, result.stderr
    if not SNAPSHOT.exists():
        SNAPSHOT.parent.mkdir(parents=True, exist_ok=True)
        SNAPSHOT.write_bytes(copy.read_bytes())
    assert copy.read_bytes() == SNAPSHOT.read_bytes()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--repo", "/nonexistent/repo", "--head", "main", "--patch", "x.patch"], "does not exist"),
        (["--repo", "{repo}", "--head", "no-such-branch", "--patch", "{patch}"], "not found"),
        (
            ["--repo", "{repo}", "--head", "main", "--patch", "/nonexistent.patch"],
            "cannot read patch",
        ),
        (["--repo", "{tmp}", "--head", "main", "--patch", "{patch}"], "not a git repository"),
        (
            ["--repo", "{repo}", "--head", "main", "--patch", "{patch}", "--base", "no-such-rev"],
            "base 'no-such-rev' does not name a commit",
        ),
    ],
)
def test_bad_input_is_one_line_on_stderr(series, tmp_path, args, message):
    up, patches = series
    plain = tmp_path / "plain"
    plain.mkdir()
    filled = [a.format(repo=up.path, patch=patches[0], tmp=plain) for a in args]
    result = carry("check", *filled, "--cache-dir", str(tmp_path / "c"))
    assert result.returncode == 2
    assert result.stdout == "" and len(result.stderr.strip().splitlines()) == 1
    assert message in result.stderr


def test_bad_config_stops_the_service_with_a_precise_message(tmp_path):
    config = tmp_path / "carry.yaml"
    config.write_text(
        "downstream: {repo: a/b}\nupstreams: {u: {url: x, repo: o/r}}\n"
        "series:\n  - {id: s, upstream: nope, base: {branch: main, tag: v1}, patches: s}\n"
    )
    result = carry(
        "worker", env={"CARRY_CONFIG": str(config), "CARRY_DOWNSTREAM_DIR": str(tmp_path)}
    )
    assert result.returncode == 2
    assert (
        "carry.yaml: series[0].base: expected exactly one of branch, tag, tag_pattern, pull"
        in result.stderr
    )


HEAVY_MODULES = ("redis", "celery", "fastapi", "git", "pydantic_settings", "bot.service")
IMPORTED_BY_CHECK = """
import sys
from bot.cli import main
code = main(sys.argv[1:])
heavy = [m for m in {heavy!r} if m in sys.modules]
print("HEAVY", " ".join(heavy) or "-", "CODE", code, file=sys.stderr)
"""


def test_check_imports_none_of_the_service_stack(series, tmp_path):
    up, patches = series
    script = IMPORTED_BY_CHECK.format(heavy=HEAVY_MODULES)
    args = ["--repo", str(up.path), "--head", "main", "--cache-dir", str(tmp_path / "c")]
    result = subprocess.run(
        [sys.executable, "-c", script, "check", *args, "--patch", str(patches[0])],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert "HEAVY - CODE 0" in result.stderr, result.stderr
    assert "applies-moved" in result.stdout


def test_version_lists_carry_and_its_key_dependencies():
    from importlib import metadata

    result = carry("--version")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == f"carry {metadata.version('carry')}"
    assert f"fastapi {metadata.version('fastapi')}" in lines
    assert {line.split()[0] for line in lines[1:]} >= {
        "fastapi",
        "celery",
        "redis",
        "PyGithub",
        "GitPython",
        "pydantic",
    }


def test_demo_gets_every_argument_after_it():
    result = carry("--log-level", "INFO", "demo", "--help")
    assert result.returncode == 0, result.stderr
    assert "--no-wait" in result.stdout  # the demo's own help, not carry's
    bad = carry("demo", "--no-such-option")
    assert bad.returncode == 2 and "--no-such-option" in bad.stderr
    assert "demo" in carry("--help").stdout


def check_args(up, patches, tmp_path, head="main", *, exit_code=True):
    args = ["check", "--repo", str(up.path), "--head", head, "--cache-dir", str(tmp_path / "c")]
    args += ["--exit-code"] if exit_code else []
    for p in patches:
        args += ["--patch", str(p)]
    return args


def test_exit_status_gates_a_ci_job(series, tmp_path):
    up, patches = series
    assert carry(*check_args(up, patches[:1], tmp_path)).returncode == 0  # applies-moved
    result = carry(*check_args(up, patches, tmp_path))
    assert result.returncode == 1 and "conflict" in result.stdout  # the second one conflicts
    # Like `git diff`: without --exit-code a check that ran exits 0, whatever it found.
    plain = carry(*check_args(up, patches, tmp_path, exit_code=False))
    assert plain.returncode == 0 and plain.stdout == result.stdout


def test_text_output_names_the_hunk_its_upstream_commits_and_reproduces(series, tmp_path):
    up, patches = series
    relative = [Path(os.path.relpath(p, tmp_path)) for p in patches]
    result = carry(*check_args(up, relative, tmp_path), cwd=tmp_path)
    lines = result.stdout.splitlines()
    conflict = next(i for i, line in enumerate(lines) if " conflict " in line)
    hunk = lines[conflict + 1]
    assert hunk.strip().startswith("mod.py @@ -"), result.stdout
    commits = [line.split() for line in lines[conflict + 2 :] if line.startswith("        ")]
    # "upstream moves", the newest commit on main, touched those lines.
    assert ["touched", "by", up.head("main")[:12], "upstream", "moves"] in commits, result.stdout
    reproduce = next(line for line in lines if "reproduce:" in line)
    assert all(str(p.resolve()) in reproduce for p in patches)  # usable after `cd carry-repro`


def test_head_of_a_local_repository_is_its_head(series, tmp_path):
    up, patches = series
    up.git("checkout", "-q", "main")
    result = carry(*check_args(up, patches[:1], tmp_path, head="HEAD"), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["head"] == up.head("main")
    result = carry(*check_args(up, patches[:1], tmp_path, head="HEAD~1"), "--json")
    assert json.loads(result.stdout)["head"] == up.git("rev-parse", "main~1").strip()


@pytest.mark.parametrize(
    ("path", "problem"),
    [("../../outside.txt", "leaves the repository"), (".git/hooks/post-checkout", "inside .git")],
)
def test_a_patch_with_a_path_outside_the_tree_is_invalid_not_a_traceback(
    series, tmp_path, path, problem
):
    up, _ = series
    bad = tmp_path / "bad.patch"
    bad.write_text(
        f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
        "@@ -0,0 +1 @@\n+boom\n"
    )
    result = carry(*check_args(up, [bad], tmp_path))
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "invalid" in result.stdout and problem in result.stdout


def test_fixes_show_the_services_latest_decisions(redis_url, tmp_path):
    import redis

    from bot.core.state import PatchState, SeriesState
    from bot.store import series as store

    patches_dir = REPO_ROOT / "patches"
    name = "0001-seed-decode-input-ids-before-async-scatter.patch"
    client = redis.Redis.from_url(redis_url)
    state = SeriesState(id="async-inputs-main")
    state.patches = [PatchState(name=name, status="contained", decision="drop")]
    store.save_series(client, state)
    env = {"REDIS_URL": redis_url}
    result = carry("fixes", "--patches-dir", str(patches_dir), env=env)
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "async-inputs-main" in line)
    assert row.rstrip().endswith("drop")
    other = next(line for line in result.stdout.splitlines() if "async-inputs-v0.26.0" in line)
    assert other.rstrip().endswith("none yet")

    away = carry(
        "fixes", "--patches-dir", str(patches_dir), env={"REDIS_URL": "redis://127.0.0.1:1/0"}
    )
    assert away.returncode == 0 and "latest decisions unknown" in away.stderr
    assert "none yet" not in away.stdout and "unknown" in away.stdout


def test_text_output_of_a_partial_says_which_hunk_upstream_lacks(make_repo, tmp_path):
    up = make_repo("partial-up")
    lines = "".join(f"{i}\n" for i in range(1, 31))
    up.commit("base", {"a.txt": lines, "b.txt": lines})
    up.checkout("main", new_branch="fix")
    fixed = lines.replace("\n5\n", "\nFIVE\n")
    up.commit("Fix both", {"a.txt": fixed, "b.txt": fixed})
    (patch,) = up.format_patch("main..fix", tmp_path / "patches")
    up.checkout("main")
    up.commit("Upstream takes only a.txt", {"a.txt": fixed})
    result = carry(*check_args(up, [patch], tmp_path))
    assert result.returncode == 1 and " partial " in result.stdout, result.stdout
    assert "      in the head: a.txt @@ -2,7 +2,7 @@ (applied" in result.stdout
    assert "      not in the head: b.txt @@ -2,7 +2,7 @@ (pending" in result.stdout


def test_fixes_say_which_listed_releases_no_series_carries(redis_url, tmp_path):
    """The async-inputs page lists v0.30.0, which upstream has not cut: its series waits for the
    tag, and `carry fixes` says so. A release no configured series sits on is named with why;
    without a config the releases are listed as they are, and stderr says why."""
    import redis

    from bot.core.state import SeriesState
    from bot.store import series as store

    client = redis.Redis.from_url(redis_url)
    store.save_series(
        client, SeriesState(id="async-inputs-v0.30.0", waiting_for_ref="refs/tags/v0.30.0")
    )
    patches_dir = str(REPO_ROOT / "patches")
    result = carry("fixes", "--patches-dir", patches_dir, env={"REDIS_URL": redis_url})
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if "async-inputs-main" in line)
    assert "v0.26.0, v0.30.0 (waiting)" in row
    assert (
        "async-inputs v0.30.0: waiting: upstream has not cut it yet "
        "(async-inputs-v0.30.0 waits for refs/tags/v0.30.0)"
    ) in result.stdout
    # The PLE page lists 20260906.1 (a carry VERSION, not an upstream release): said, not hidden.
    assert "ple-offload-semaphore 20260906.1: not carried" in result.stdout

    env = {"REDIS_URL": redis_url, "CARRY_CONFIG": str(tmp_path / "missing.yaml")}
    bare = carry("fixes", "--patches-dir", patches_dir, env=env)
    assert bare.returncode == 0 and "release lines unknown" in bare.stderr
    assert "(waiting)" not in bare.stdout and "not carried" not in bare.stdout


def test_check_without_a_cache_dir_reads_no_settings(series, tmp_path):
    """CARRY_CACHE_DIR is read as the settings read it, without importing their machinery
    (issue 35: pydantic-settings cost a `carry check` 0.44 s)."""
    up, patches = series
    script = IMPORTED_BY_CHECK.format(heavy=[*HEAVY_MODULES, "pydantic", "bot.config"])
    args = ["--repo", str(up.path), "--head", "main", "--patch", str(patches[0])]
    result = subprocess.run(
        [sys.executable, "-c", script, "check", *args],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        timeout=120,
        env={**os.environ, "CARRY_CACHE_DIR": str(tmp_path / "env-cache")},
    )
    assert "HEAVY - CODE 0" in result.stderr, result.stderr
    assert list((tmp_path / "env-cache" / "mirrors").glob("*.git"))


def test_cache_dir_default_agrees_with_the_settings(monkeypatch, tmp_path):
    from bot.config import load_settings
    from bot.git.mirror import default_cache_dir

    for value in (str(tmp_path / "x"), "~/elsewhere", ""):
        monkeypatch.setenv("CARRY_CACHE_DIR", value)
        assert default_cache_dir() == load_settings().cache_dir
    monkeypatch.delenv("CARRY_CACHE_DIR")
    assert default_cache_dir() == load_settings().cache_dir
