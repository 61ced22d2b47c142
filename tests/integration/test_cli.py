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
        "--cache-dir",
        str(tmp_path / "c"),
    ]
    for p in patches:
        args += ["--patch", str(p)]
    result = carry(*args)
    assert result.returncode == 0, result.stderr  # conflicts are a classification, not an error
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
