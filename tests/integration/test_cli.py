"""The `carry` command line: the check contract other parts depend on, and start-up errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.carry_cli import FIX_PAGE, carry
from tests.support.engine import BODY, FUNC
from tests.support.paths import REPO_ROOT

SNAPSHOT = Path(__file__).parent / "snapshots" / "refreshed-0001.patch"


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


# The service's stack, and the parsers of what a check does not read (fix pages' Markdown; the
# email package, which a plain format-patch header does not need: issue 35).
HEAVY_MODULES = (
    *("redis", "celery", "fastapi", "git", "pydantic", "pydantic_settings", "workers.service"),
    *("bot.config", "bot.core.fixpage", "markdown_it", "email"),
)
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


def fixes_lines(text: str, series: str) -> list[str]:
    """The first patch line under `series` in `carry fixes` output (none: an empty list)."""
    lines = text.splitlines()
    start = lines.index(f"  {series}") + 1
    return [line for line in lines[start:] if line.startswith("    ")][:1]


def test_fixes_show_each_patchs_status_and_decision_in_100_columns(redis_url, tmp_path):
    """Before: one 243-column row per page with only the decision: a conflict read `keep`."""
    import redis

    from bot.core.state import PatchState, SeriesState
    from bot.store import series as store

    patches_dir = REPO_ROOT / "patches"
    name = "0001-seed-decode-input-ids-before-async-scatter.patch"
    client = redis.Redis.from_url(redis_url)
    for series_id, status, decision in [
        ("async-inputs-main", "contained", "drop"),
        ("async-inputs-v0.26.0", "conflict", "keep"),
    ]:
        state = SeriesState(id=series_id)
        state.patches = [PatchState(name=name, status=status, decision=decision)]
        store.save_series(client, state)
    env = {"REDIS_URL": redis_url}
    result = carry("fixes", "--patches-dir", str(patches_dir), env=env)
    assert result.returncode == 0, result.stderr
    assert max(len(line) for line in result.stdout.splitlines()) <= 100, result.stdout
    header = result.stdout.splitlines()[0]
    assert header.split() == ["FIX", "/", "SERIES", "/", "PATCH", "STATUS", "DECISION"]
    (main,) = fixes_lines(result.stdout, "async-inputs-main")
    (release,) = fixes_lines(result.stdout, "async-inputs-v0.26.0")
    (unchecked,) = fixes_lines(result.stdout, "async-inputs-v0.30.0")
    assert main.split() == [name, "contained", "drop"]
    assert release.split() == [name, "conflict", "keep"]
    assert unchecked.split() == [name, "not", "checked", "none", "yet"]
    assert main.index("contained") == release.index("conflict") == header.index("STATUS")
    assert "async-inputs: upstream vllm-project/vllm-gaudi#1919 (open)" in result.stdout

    away = carry(
        "fixes", "--patches-dir", str(patches_dir), env={"REDIS_URL": "redis://127.0.0.1:1/0"}
    )
    assert away.returncode == 0 and "latest decisions unknown" in away.stderr
    assert "none yet" not in away.stdout
    assert fixes_lines(away.stdout, "async-inputs-main")[0].split() == [name, "unknown", "unknown"]


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
    assert "; releases v0.26.0, v0.30.0 (waiting)\n" in result.stdout
    notes = " ".join(result.stdout.split())  # the notes wrap at 100 columns
    assert (
        "async-inputs v0.30.0: waiting: upstream has not cut it yet "
        "(async-inputs-v0.30.0 waits for refs/tags/v0.30.0)"
    ) in notes
    # The PLE page lists 20260906.1 (a carry VERSION, not an upstream release): said, not hidden;
    # its series sits on an upstream PR, which names no release.
    assert (
        "ple-offload-semaphore 20260906.1: on a PR: ple-offload-pr53899 carries it on upstream "
        "PR #53899; a PR names no release"
    ) in notes

    env = {"REDIS_URL": redis_url, "CARRY_CONFIG": str(tmp_path / "missing.yaml")}
    bare = carry("fixes", "--patches-dir", patches_dir, env=env)
    assert bare.returncode == 0 and "release lines unknown" in bare.stderr
    assert "(waiting)" not in bare.stdout and "not carried" not in bare.stdout


# ---------------------------------------------------------------- no tracebacks, flags as written


@pytest.mark.parametrize(
    "args",
    [
        ["--log-level", "verbose", "fixes"],
        ["fixes", "--log-level", "verbose"],
        ["--log-level", "verbose", "demo"],
        ["demo", "--log-level", "verbose"],
    ],
)
def test_an_unknown_log_level_is_a_usage_error_naming_the_levels(args):
    result = carry(*args, "--patches-dir", str(REPO_ROOT / "patches"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1].endswith(
        "argument --log-level: unknown level 'verbose' "
        "(choose from debug, info, warning, error, critical)"
    )


def test_log_level_is_taken_after_the_command_and_has_help(series, tmp_path):
    up, patches = series
    args = check_args(up, patches, tmp_path, exit_code=False)
    said = "checked 2 patches on"  # the engine's INFO line
    after = carry(*args, "--log-level", "info")
    assert after.returncode == 0, after.stderr
    assert said in after.stderr  # the level given after the command's name is the one used
    before = carry("--log-level", "INFO", *args)
    assert said in before.stderr  # and one given before it is not undone by a default
    assert said not in carry(*args).stderr
    assert "level of carry's log lines on stderr: debug, info" in carry("--help").stdout
    assert "--log-level LEVEL" in carry("check", "--help").stdout


def test_demo_takes_log_level_after_it_and_has_help():
    """Failed on af85829: `carry demo --log-level debug` was 'unrecognized arguments', and
    `carry demo --help` named no --log-level."""
    shown = carry("demo", "--help")
    assert shown.returncode == 0, shown.stderr
    assert "--log-level LEVEL" in shown.stdout
    assert "level of the log lines of carry's processes" in " ".join(shown.stdout.split())
    assert "(default warning)" in shown.stdout
    before = carry("--log-level", "INFO", "demo", "--help")  # carry's own, before `demo`
    assert "(default info)" in before.stdout
    given = carry("demo", "--log-level", "debug", "--no-such-option")  # parsed, then refused
    assert given.returncode == 2 and "unrecognized arguments: --no-such-option" in given.stderr


@pytest.mark.parametrize("json_output", [True, False])
def test_a_closed_pipe_ends_the_check_quietly(series, tmp_path, json_output):
    """`carry check ... --json | head -c 300`: the reader is gone before carry writes (the
    read end is closed before carry starts), and carry stops as `cat` would, killed by SIGPIPE,
    with nothing on stderr."""
    import signal

    up, patches = series
    args = check_args(up, patches, tmp_path, exit_code=False) + (["--json"] if json_output else [])
    read_end, write_end = os.pipe()
    os.close(read_end)
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", *args],
        stdout=write_end,
        stderr=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
    )
    os.close(write_end)
    _, stderr = proc.communicate(timeout=120)
    assert stderr == ""
    assert proc.returncode == -signal.SIGPIPE


def test_patch_takes_several_files_after_one_flag(series, tmp_path):
    up, patches = series
    base = ["check", "--repo", str(up.path), "--head", "main", "--cache-dir", str(tmp_path / "c")]
    together = carry(*base, "--json", "--patch", *map(str, patches))
    assert together.returncode == 0, together.stderr
    repeated = carry(*check_args(up, patches, tmp_path, exit_code=False), "--json")
    assert json.loads(together.stdout) == json.loads(repeated.stdout)
    assert [p["patch"] for p in json.loads(together.stdout)["patches"]] == list(map(str, patches))


def test_demo_help_names_carry_demo():
    assert carry("demo", "--help").stdout.startswith("usage: carry demo ")
    bad = carry("demo", "--no-such-option")
    assert "carry demo: error: unrecognized arguments: --no-such-option" in bad.stderr
    module = subprocess.run(
        [sys.executable, "-m", "bot.demo", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    assert module.returncode == 0 and module.stdout.startswith("usage: python -m bot.demo ")


@pytest.mark.parametrize("command", ["run", "web"])
def test_a_taken_port_is_one_line_before_anything_starts(command, redis_url, tmp_path):
    """Before: `carry run` printed the dashboard's URL, then uvicorn's bind error as JSON, then
    two poll warnings, and exited 1."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {"REDIS_URL": redis_url, "CARRY_WEBHOOK_SECRET": "s" * 32}
        result = carry(command, "--port", str(port), env=env)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (
        f"carry: error: cannot listen on 127.0.0.1:{port}: Address already in use "
        "(give another --port)\n"
    )
    assert result.stdout == ""


# ---------------------------------------------------------------- --write-refreshed


def series_dir(series, tmp_path: Path, name: str = "values") -> tuple[Path, str]:
    """The fixture's two patches (0001 applies on main with its context moved, 0002 conflicts)
    as a series verified on main's first commit, the `# base:` `--write-refreshed` makes stale."""
    up, patches = series
    directory = tmp_path / "patches" / name
    directory.mkdir(parents=True)
    for patch in patches:
        (directory / patch.name).write_bytes(patch.read_bytes())
    listed = "; ".join(f"{p.name}: mod.py" for p in patches)
    (directory / "value-fix.md").write_text(FIX_PAGE.replace("{patches}", listed))
    base = up.git("rev-parse", "main~1").strip()
    (directory / "series").write_text(f"# base: {base}\n" + "".join(f"{p.name}\n" for p in patches))
    return directory, base


def test_write_refreshed_says_what_it_rewrote_and_moves_the_series_base(series, tmp_path):
    """Before: the patch file was rewritten without a word, and `# base:` kept naming the
    commit the rewritten patch no longer fits."""
    up, patches = series
    directory, base = series_dir(series, tmp_path)
    first = directory / patches[0].name
    carried = first.read_bytes()
    result = carry(
        "check",
        *("--repo", str(up.path), "--head", "main", "--series", str(directory)),
        *("--write-refreshed", "--json", "--cache-dir", str(tmp_path / "c")),
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)  # what carry says goes to stderr: stdout stays JSON
    head = up.head("main")
    assert report["base"] == base and report["head"] == head
    assert first.read_bytes() != carried
    assert (directory / patches[1].name).read_bytes() == patches[1].read_bytes()  # conflict
    assert result.stderr.splitlines() == [
        f"carry: rewrote {first}: its context moved on {head[:12]}",
        f"carry: {directory / 'series'}: base is now {head[:12]} (was {base[:12]}): "
        "the series was checked on it",
    ]
    assert (directory / "series").read_text().splitlines()[0] == f"# base: {head}"
    again = carry(*check_args(up, [], tmp_path, exit_code=False), "--series", str(directory))
    assert " applies " in again.stdout.splitlines()[1], again.stdout  # as is, now


def test_write_refreshed_of_part_of_a_series_removes_its_base(series, tmp_path):
    up, patches = series
    directory, base = series_dir(series, tmp_path)
    first = directory / patches[0].name
    result = carry(
        *check_args(up, [first], tmp_path, exit_code=False), "--write-refreshed", "--json"
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"carry: rewrote {first}: its context moved on {up.head('main')[:12]}",
        f"carry: {directory / 'series'}: removed base {base[:12]}: {first.name} now fits the "
        "head, the series' other patches were not checked there (check it with --series DIR "
        "to record the head as its base)",
    ]
    assert (directory / "series").read_text() == "".join(f"{p.name}\n" for p in patches)


def test_json_base_is_the_base_given_or_null(series, tmp_path):
    """`base` is the base the check used (--base, else the series' `# base:`), never the head."""
    up, patches = series
    loose = carry(*check_args(up, patches, tmp_path, exit_code=False), "--json")
    report = json.loads(loose.stdout)
    assert report["base"] is None and report["head"] == up.head("main")
    directory, base = series_dir(series, tmp_path)
    args = ["--repo", str(up.path), "--head", "main", "--cache-dir", str(tmp_path / "c")]
    from_series = json.loads(carry("check", *args, "--series", str(directory), "--json").stdout)
    assert from_series["base"] == base != from_series["head"]
    given = up.git("rev-parse", "main~1").strip()
    assert (
        json.loads(
            carry("check", *args, "--patch", str(patches[0]), "--base", "main~1", "--json").stdout
        )["base"]
        == given
    )


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


def test_a_patch_upstream_took_in_another_form_names_its_commit_and_pr(make_repo, tmp_path):
    """Issue 35: text and --json name the upstream commit that brought upstream's version, its
    PR, and show upstream's text against the patch's."""
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    base = up.head()
    up.checkout("main", new_branch="down")
    up.commit("Add frobnicate", {"mod.py": BODY.replace("(10)\n", "(10)\n" + FUNC)})
    patches = up.format_patch("main..down", tmp_path / "patches")
    up.checkout("main")
    theirs = FUNC.replace("level * 2", "level * 3")
    landed = up.commit(
        "Add frobnicate, scaled by 3 (#123)", {"mod.py": BODY.replace("(10)\n", "(10)\n" + theirs)}
    )
    args = [*check_args(up, patches, tmp_path), "--base", base]
    text = carry(*args)
    assert text.returncode == 1, text.stderr
    assert f"upstream's version: {landed[:12]} Add frobnicate, scaled by 3 (#123) [content]" in (
        text.stdout
    )
    assert "+    scaled = checked.scale(level * 3)" in text.stdout
    report = json.loads(carry(*args, "--json").stdout)
    (patch,) = report["patches"]
    assert patch["status"] == "upstream-version"
    assert patch["upstream_commits"][0] == {
        "sha": landed,
        "subject": "Add frobnicate, scaled by 3 (#123)",
        "pr": 123,
        "how": "content",
    }
    (hunk,) = patch["conflict"]["hunks"]
    assert "-    scaled = checked.scale(level * 2)" in hunk["upstream_diff"].splitlines()


@pytest.mark.parametrize("with_base", [True, False])
def test_a_conflict_lists_the_upstream_commits_that_touched_its_hunk(
    make_repo, tmp_path, with_base
):
    """Issue 35: `"upstream_commits": []` in --json, with or without --base, for a patch made
    in a downstream repository on a release line whose own commits moved the file's lines."""
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    fork = up.head()
    down = make_repo("downstream")
    down.git("fetch", "-q", str(up.path), "main")
    down.git("checkout", "-q", "-b", "release", "FETCH_HEAD")
    pins = "".join(f"release_{i} = pinned({i})\n" for i in range(10))
    down.commit("Pin release values", {"mod.py": pins + BODY})
    release = down.head()
    down.commit(
        "Fix value 25", {"mod.py": pins + BODY.replace("compute(25)", "compute(25, mine=True)")}
    )
    patches = down.format_patch("HEAD~1..HEAD", tmp_path / "patches")
    rework = up.commit(
        "Rework value 25 (#42)", {"mod.py": BODY.replace("compute(25)", "other(25)")}
    )
    up.commit("Touch the end", {"mod.py": BODY.replace("compute(25)", "other(25)") + "tail = 1\n"})
    args = check_args(up, patches, tmp_path, exit_code=False)
    if with_base:  # the release line's base, which upstream has: its fork point
        args += ["--base", fork]
    assert release != fork
    result = carry(*args, "--json")
    assert result.returncode == 0, result.stderr
    (patch,) = json.loads(result.stdout)["patches"]
    assert patch["status"] == "conflict"
    (hunk,) = patch["conflict"]["hunks"]
    assert [c["sha"] for c in hunk["upstream_commits"]] == [rework]
    text = carry(*args).stdout
    assert f"touched by {rework[:12]} Rework value 25 (#42)" in text


def test_ctrl_c_ends_a_command_without_a_traceback(make_repo, tmp_path):
    """Ctrl-C while a command works (here: `carry check` reading a patch from a pipe that has
    a writer and no data yet) ends it with status 130 and no traceback. Failed on af85829:
    'Traceback ... KeyboardInterrupt' on stderr (as `carry run`'s worker printed when Ctrl-C
    came while it was still starting)."""
    import signal
    import time

    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    fifo = tmp_path / "0001-x.patch"
    os.mkfifo(fifo)
    argv = ["check", "--repo", str(up.path), "--head", "main", "--patch", str(fifo)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "bot.cli", *argv, "--cache-dir", str(tmp_path / "c")],
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C as a terminal delivers it, whatever started the tests: a background job of a
        # shell without job control (`sh -c '... &'`) inherits SIGINT ignored, and Python then
        # keeps it ignored (the check read on for good and the test timed out)
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    deadline = time.monotonic() + 60
    while True:  # a writer's non-blocking open succeeds once carry has the pipe open to read
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
            break
        except OSError:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
    try:
        time.sleep(0.3)  # into the read
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(writer)
    assert proc.returncode == 130 and "Traceback" not in err, err
