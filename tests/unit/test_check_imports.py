"""`carry check` is a short process: it imports what the check needs and nothing of the
service (settings, Redis, Celery, the web, GitHub clients) nor the parsers of things it does
not read (fix pages' Markdown, the email package for a plain format-patch header). A real
check runs in a child process on a repository built in tmp_path; its modules are listed at
exit."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from bot import cli
from harness.gitrepo import RepoBuilder

NOT_ON_THE_CHECK_PATH = (
    "pydantic",
    "pydantic_settings",
    "bot.config",
    "redis",
    "celery",
    "fastapi",
    "github",
    "git",  # GitPython
    "markdown_it",
    "bot.core.fixpage",
    "email",
)

CHILD = """
import json, sys
from bot.cli import main
code = main(sys.argv[2:])
with open(sys.argv[1], "w") as out:
    json.dump({"code": code, "modules": sorted(sys.modules)}, out)
"""


def test_carry_check_imports_no_settings_markdown_or_email(make_repo, tmp_path: Path):
    up: RepoBuilder = make_repo("upstream")
    body = "".join(f"value_{i} = compute({i})\n" for i in range(1, 21))
    up.commit("base", {"mod.py": body})
    up.checkout("main", new_branch="downstream")
    up.commit("Make value 4 safe", {"mod.py": body.replace("compute(4)", "compute(4, safe=1)")})
    (patch,) = up.format_patch("main..downstream", tmp_path / "patches")
    up.checkout("main")
    up.commit("upstream moves on", {"other.py": "x = 1\n"})
    listed = tmp_path / "modules.json"
    argv = ["check", "--repo", str(up.path), "--head", "main", "--patch", str(patch)]
    argv += ["--json", "--cache-dir", str(tmp_path / "cache")]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(listed), *argv], capture_output=True, check=False
    )
    assert proc.returncode == 0, proc.stderr.decode()
    assert json.loads(proc.stdout)["patches"][0]["status"] == "applies"
    found = json.loads(listed.read_text())
    assert found["code"] == 0
    modules = set(found["modules"])
    assert "bot.git.engine" in modules  # the check did run in this process
    imported = sorted(
        name
        for name in modules
        for unwanted in NOT_ON_THE_CHECK_PATH
        if name == unwanted or name.startswith(unwanted + ".")
    )
    assert imported == []


def test_the_check_parser_lists_every_sub_command_in_its_usage():
    """`carry check` builds the `check` sub-command alone; its usage line is the full one's."""
    full = cli.build_parser()
    (commands,) = [a for a in full._actions if a.dest == "command"]
    assert tuple(commands.choices) == cli.COMMANDS  # type: ignore[arg-type]
    alone = cli.build_parser(only_check=True)
    assert alone.format_usage() == full.format_usage()
    (checks,) = [a for a in alone._actions if a.dest == "command"]
    assert checks.choices["check"].format_help() == commands.choices["check"].format_help()  # type: ignore[index]
    only = cli.build_parser(only_check=True).parse_args(["check", "--head", "a", "--json"])
    assert only.func is cli.cmd_check and only.head == ["a"] and only.json
