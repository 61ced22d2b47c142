"""`/carry ...` comment commands: parsing and the help text. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass

from bot.core.markdown import prose_lines

WRITE_PERMISSIONS = frozenset({"admin", "maintain", "write"})
_SHA = re.compile(r"^[0-9a-f]{7,40}$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
# `/carry retarget`: a PR (#N or OWNER/REPO#N) or a branch (git's ref-name rules, simplified)
_PULL = re.compile(r"^(?:(?P<repo>[\w.-]+/[\w.-]+))?#(?P<number>[1-9][0-9]*)$")
_BRANCH = re.compile(r"^(?!.*\.\.)(?!.*//)[A-Za-z0-9][A-Za-z0-9._/-]*(?<![/.])$")

HELP = """\
carry understands these commands in a comment on its pull requests (write access needed):

| command | what it does |
|---|---|
| `/carry rebase` | re-check the series on the current upstream head now |
| `/carry retest [runner]` | run hardware CI again (all runners, or one kind such as `gb10`) |
| `/carry drop NAME` | propose dropping patch NAME even without content evidence |
| `/carry keep NAME` | pin patch NAME: it is never dropped automatically |
| `/carry approve [sha]` | let an untrusted upstream head (default: the current one) reach the hardware |
| `/carry pause` / `/carry resume` | stop or restart automatic work on this series |
| `/carry retarget BRANCH` / `/carry retarget #N` | move the series onto an upstream branch or PR (its base PR closed) |
| `/carry reopen` | open a new PR in place of carry's PR that a person closed (or whose branch they deleted) |
| `/carry help` | show this text |
"""


@dataclass(frozen=True)
class Command:
    verb: (
        # rebase | retest | drop | keep | approve | pause | resume | retarget | reopen | help
        # | unknown
        str
    )
    arg: str | None = None
    raw: str = ""
    problem: str | None = None  # why the line could not be understood (verb "unknown")


def parse_commands(body: str) -> list[Command]:
    """Every `/carry ...` line of a comment's prose, in order, each command once. Text in
    code (fenced, indented, spans), HTML comments, `<pre>`, `<code>` and `<details>`, and
    quoted, listed or tabled text is something someone showed, not a command anyone gave
    (the comment is read by a CommonMark parser, see bot.core.markdown); a command repeated
    in one comment is one request."""
    if "/carry" not in body:  # most comments: no need to parse them
        return []
    commands: list[Command] = []
    seen: set[tuple[str, str | None, str | None]] = set()
    for text in prose_lines(body):
        if not text.startswith("/carry"):
            continue
        command = parse_line(text)
        key = (command.verb, command.arg, command.problem)
        if key not in seen:
            seen.add(key)
            commands.append(command)
    return commands


def parse_line(text: str) -> Command:
    words = text.split()
    if words[0] != "/carry":
        return Command("unknown", raw=text, problem=f"'{words[0]}' is not a carry command")
    if len(words) == 1:
        return Command("help", raw=text)
    verb, args = words[1].lower(), words[2:]
    if verb in ("rebase", "pause", "resume", "reopen", "help"):
        return _no_args(verb, args, text)
    if verb == "retest":
        return _optional_name(verb, args, text, "runner")
    if verb in ("drop", "keep"):
        if len(args) != 1 or not _NAME.match(args[0]):
            return Command("unknown", raw=text, problem=f"`/carry {verb}` needs one patch name")
        return Command(verb, args[0], text)
    if verb == "retarget":
        if len(args) != 1 or not (_PULL.match(args[0]) or _BRANCH.match(args[0])):
            problem = "`/carry retarget` needs one upstream branch or PR (`main`, `#54371`)"
            return Command("unknown", raw=text, problem=problem)
        return Command(verb, args[0], text)
    if verb == "approve":
        if len(args) > 1 or (args and not _SHA.match(args[0].lower())):
            return Command("unknown", raw=text, problem="`/carry approve` takes an optional SHA")
        return Command(verb, args[0].lower() if args else None, text)
    return Command("unknown", raw=text, problem=f"unknown command `{verb}`")


def _no_args(verb: str, args: list[str], text: str) -> Command:
    if args:
        return Command("unknown", raw=text, problem=f"`/carry {verb}` takes no arguments")
    return Command(verb, None, text)


def _optional_name(verb: str, args: list[str], text: str, what: str) -> Command:
    if len(args) > 1 or (args and not _NAME.match(args[0])):
        return Command("unknown", raw=text, problem=f"`/carry {verb}` takes an optional {what}")
    return Command(verb, args[0] if args else None, text)


def may_command(permission: str | None) -> bool:
    return (permission or "none") in WRITE_PERMISSIONS


def retarget_base(arg: str, repo: str) -> tuple[dict[str, str | int] | None, str]:
    """The base `/carry retarget ARG` names for a series on `repo`: ({"pull": N} or
    {"branch": B}, how the config writes it), or (None, why not)."""
    pull = _PULL.match(arg)
    if pull is None:
        return {"branch": arg}, f"branch {arg}"
    if pull["repo"] and pull["repo"].lower() != repo.lower():
        return None, f"{arg} is not a PR of {repo}, the series' upstream"
    return {"pull": int(pull["number"])}, f"pull {pull['number']}"
