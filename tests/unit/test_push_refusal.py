"""git push's output of a refusal by a GitHub setting, read into a typed refusal (table test,
pure). The outputs are GitHub's as its users recorded them, git's padding included."""

from __future__ import annotations

import pytest

from bot.core.push_refusal import Block, Source, classify, comment

PAD = "        "  # git pads each remote line it relays

RULESET_FORCE = f"""remote: error: GH013: Repository rule violations found for refs/heads/carry/s.{PAD}
remote: Review all repository rules at https://github.com/o/r/rules?ref=refs%2Fheads%2Fcarry%2Fs{PAD}
remote: {PAD}
remote: - Cannot force-push to this branch{PAD}
remote: {PAD}
To https://github.com/o/r.git
 ! [remote rejected] abc -> carry/s (push declined due to repository rule violations)
error: failed to push some refs to 'https://github.com/o/r.git'
"""
CLASSIC_TWO = """remote: error: GH006: Protected branch update failed for refs/heads/main.
remote:
remote: - Changes must be made through a pull request.
remote:
remote: - Cannot force-push to this branch
To https://github.com/o/r.git
 ! [remote rejected] HEAD -> main (protected branch hook declined)
"""
CLASSIC_OLD_CHECKS = """remote: Resolving deltas: 100% (3/3), completed with 3 local objects.
remote: error: GH006: Protected branch update failed for refs/heads/prod.
remote: error: Required status check "continuous-integration/travis-ci" is expected.
To github.com:DataBiosphere/azul.git
 ! [remote rejected]   prod -> prod (protected branch hook declined)
"""


@pytest.mark.parametrize(
    ("output", "source", "branch", "blocks", "append_helps"),
    [
        (RULESET_FORCE, Source.RULESET, "carry/s", (Block.FORCE_PUSH,), True),
        (
            CLASSIC_TWO,
            Source.BRANCH_PROTECTION,
            "main",
            (Block.PULL_REQUEST, Block.FORCE_PUSH),
            False,
        ),
        (CLASSIC_OLD_CHECKS, Source.BRANCH_PROTECTION, "prod", (Block.STATUS_CHECKS,), False),
    ],
)
def test_a_refusal_names_its_setting_and_branch(
    output: str, source: Source, branch: str, blocks: tuple[Block, ...], append_helps: bool
) -> None:
    refusal = classify(output)
    assert refusal is not None
    assert (refusal.source, refusal.branch, refusal.blocks) == (source, branch, blocks)
    assert refusal.append_helps is append_helps
    assert ("publish: {mode: append}" in refusal.fix) is append_helps
    assert refusal.branch in refusal.setting


def test_the_ruleset_refusal_keeps_githubs_words_and_the_rules_page() -> None:
    refusal = classify(RULESET_FORCE)
    assert refusal is not None
    assert refusal.code == "GH013"
    assert refusal.messages == ("Cannot force-push to this branch",)
    assert refusal.rules_url == "https://github.com/o/r/rules?ref=refs%2Fheads%2Fcarry%2Fs"
    assert '"Block force pushes"' in refusal.setting and "ruleset" in refusal.setting
    assert "bypass list" in refusal.fix
    text = comment(refusal, "a" * 40, attempts=2)
    assert text.startswith("<!-- carry:publish-refused -->")
    assert "> Cannot force-push to this branch" in text and "Refused 2 times" in text


@pytest.mark.parametrize(
    "output",
    [
        " ! [rejected]        HEAD -> carry/s (stale info)\nerror: failed to push some refs",
        "fatal: unable to access 'https://github.com/o/r.git/': The requested URL returned "
        "error: 502",
        "remote: Permission to o/r.git denied to someone.\nfatal: unable to access",
        "",
    ],
)
def test_other_failures_are_not_refusals(output: str) -> None:
    assert classify(output) is None
