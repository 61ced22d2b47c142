"""`/carry` comment commands: what counts as a command someone gave."""

from __future__ import annotations

import pytest

from bot.core.commands import Command, parse_commands, retarget_base


def verbs(body: str) -> list[tuple[str, str | None]]:
    return [(c.verb, c.arg) for c in parse_commands(body)]


def test_commands_in_prose_in_order() -> None:
    body = "Thanks!\n/carry keep 0002-x.patch\n\n  /carry rebase\n"
    assert verbs(body) == [("keep", "0002-x.patch"), ("rebase", None)]


@pytest.mark.parametrize(
    "body",
    [
        "To pause it, write:\n```\n/carry pause\n```\n",
        "~~~~text\n/carry pause\n~~~~\n",
        "```` md\n```\n/carry pause\n```\n````\n",  # a shorter fence does not close a longer one
        "Like this:\n\n    /carry pause\n",
        "\t/carry pause\n",
        "> /carry pause\n",
    ],
)
def test_commands_shown_in_code_or_quotes_are_not_commands(body: str) -> None:
    assert parse_commands(body) == []


@pytest.mark.parametrize(
    "body",
    [
        "<!-- /carry pause -->\n",
        "<!--\nnotes for later:\n\n/carry pause\n\n-->\n",
        "See <!--\n/carry pause\n--> below\n",
        "<pre>\n/carry pause\n\n/carry pause\n</pre>\n",
        "<details>\n<summary>log</summary>\n\n/carry pause\n\n</details>\n",
        "<details><summary>a</summary>\n<details>\n\n</details>\n\n/carry pause\n\n</details>\n",
        "Try `/carry pause`\n",
        "`/carry pause`\n",
        "<code>/carry pause</code>\n",
        "~~/carry pause~~\n",
        "- /carry pause\n",
        "# /carry pause\n",
        "| a |\n|---|\n| /carry pause |\n",
    ],
)
def test_commands_hidden_or_shown_as_html_or_code_are_not_commands(body: str) -> None:
    # GitHub hides comments and folds <details>; <pre> and code spans show text, not orders.
    command = Command("rebase", None, "/carry rebase")
    assert parse_commands(body + "\n/carry rebase\n") == [command]


def test_prose_after_a_closed_details_or_comment_counts_again() -> None:
    body = "<details>\n\n/carry pause\n\n</details>\n\n<!-- x -->\n/carry resume\n"
    assert verbs(body) == [("resume", None)]


def test_a_command_may_name_its_argument_in_a_code_span() -> None:
    # and emphasis markup reads as written: `__init__` here is not bold to a patch name
    assert verbs("/carry keep `0002-x.patch`\n/carry keep 0003-__init__.patch") == [
        ("keep", "0002-x.patch"),
        ("keep", "0003-__init__.patch"),
    ]


def test_prose_after_a_closed_fence_counts_again() -> None:
    body = "```\n/carry pause\n```\n/carry resume\n"
    assert verbs(body) == [("resume", None)]


def test_an_indented_line_inside_a_paragraph_is_prose() -> None:
    # CommonMark: an indented code block cannot interrupt a paragraph.
    assert verbs("please\n    /carry rebase\n") == [("rebase", None)]


def test_a_repeated_command_is_one_request() -> None:
    body = "/carry help\n" * 300 + "/carry rebase\n/carry rebase\n/carry keep a.patch\n"
    assert verbs(body) == [("help", None), ("rebase", None), ("keep", "a.patch")]


def test_bad_commands_keep_their_problem() -> None:
    (command,) = parse_commands("/carry keep\n/carry keep\n")
    assert command == Command(
        "unknown", raw="/carry keep", problem="`/carry keep` needs one patch name"
    )


@pytest.mark.parametrize(
    ("line", "verb", "arg"),
    [
        ("/carry retarget main", "retarget", "main"),
        ("/carry retarget releases/v0.30", "retarget", "releases/v0.30"),
        ("/carry retarget #54371", "retarget", "#54371"),
        ("/carry retarget vllm-project/vllm#54371", "retarget", "vllm-project/vllm#54371"),
        ("/carry retarget", "unknown", None),
        ("/carry retarget main extra", "unknown", None),
        ("/carry retarget a..b", "unknown", None),
        ("/carry retarget -main", "unknown", None),
        ("/carry retarget #0", "unknown", None),
    ],
)
def test_retarget_names_one_branch_or_pr(line: str, verb: str, arg: str | None) -> None:
    assert verbs(line) == [(verb, arg)]


@pytest.mark.parametrize(
    ("arg", "base", "words"),
    [
        ("main", {"branch": "main"}, "branch main"),
        ("#54371", {"pull": 54371}, "pull 54371"),
        ("Vllm-Project/vllm#54371", {"pull": 54371}, "pull 54371"),
        (
            "other/vllm#5",
            None,
            "other/vllm#5 is not a PR of vllm-project/vllm, the series' upstream",
        ),
    ],
)
def test_retarget_base(arg: str, base: dict | None, words: str) -> None:
    assert retarget_base(arg, "vllm-project/vllm") == (base, words)
