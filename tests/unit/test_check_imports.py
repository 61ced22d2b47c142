"""`carry check` builds the parser of its own sub-command alone (bot.cli.build_parser's
`only_check`): it must read and show what the whole command line does. What the check imports
is tested by running it: tests/integration/test_cli.py's test_check_imports_none_of_the_service_stack."""

from __future__ import annotations

from bot import cli


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
