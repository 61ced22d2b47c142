"""GitHub refused carry's push because of a setting: which one, on which branch, what to do.

git's output of a refused push (`remote:` lines) is read into a typed refusal. GitHub's texts,
as its users recorded them (search: "GH013: Repository rule violations found", "GH006:
Protected branch update failed"):

    remote: error: GH013: Repository rule violations found for refs/heads/carry/x.
    remote: Review all repository rules at https://github.com/o/r/rules?ref=refs%2Fheads%2Fcarry%2Fx
    remote:
    remote: - Cannot force-push to this branch
     ! [remote rejected] carry/x -> carry/x (push declined due to repository rule violations)

    remote: error: GH006: Protected branch update failed for refs/heads/carry/x.
    remote: error: Required status check "ci" is expected.      (older form: `error: ` lines)
     ! [remote rejected] carry/x -> carry/x (protected branch hook declined)

Such a refusal is not a fault to retry: the same push is refused until someone changes the
setting (or carry publishes without a force push). Pure: no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum

MARKER = "<!-- carry:publish-refused -->"


class Source(StrEnum):
    RULESET = "ruleset"  # GH013: a repository or organization ruleset
    BRANCH_PROTECTION = "branch-protection"  # GH006: a classic branch protection rule


class Block(StrEnum):
    FORCE_PUSH = "force-push"
    STATUS_CHECKS = "required-status-checks"
    PULL_REQUEST = "pull-request"
    DELETION = "deletion"
    OTHER = "other"


CODES = {"GH013": Source.RULESET, "GH006": Source.BRANCH_PROTECTION}
_HEADER = re.compile(
    r"^error: (?P<code>GH013|GH006): "
    r"(?:Repository rule violations found|Protected branch update failed) for (?P<ref>\S+?)\.$"
)
_REVIEW = re.compile(r"^Review all repository rules at (?P<url>\S+)$")
_REMOTE = re.compile(r"^remote: ?")


@dataclass(frozen=True)
class PushRefusal:
    source: Source
    branch: str  # without refs/heads/
    blocks: tuple[Block, ...]
    messages: tuple[str, ...]  # GitHub's own words for each violation
    code: str  # GH013 / GH006
    rules_url: str | None = None

    @property
    def setting(self) -> str:
        """The setting that blocks carry, in the words of GitHub's settings pages."""
        where = (
            "a ruleset (Settings > Rules > Rulesets)"
            if self.source is Source.RULESET
            else "a branch protection rule (Settings > Branches)"
        )
        names = {
            Block.FORCE_PUSH: (
                '"Block force pushes"'
                if self.source is Source.RULESET
                else '"Allow force pushes" turned off'
            ),
            Block.STATUS_CHECKS: '"Require status checks to pass"',
            Block.PULL_REQUEST: '"Require a pull request before merging"',
            Block.DELETION: (
                '"Restrict deletions"' if self.source is Source.RULESET else "deletions not allowed"
            ),
        }
        said = [names[b] for b in self.blocks if b in names] or ["a rule carry cannot name"]
        return f"{', '.join(said)} in {where} on `{self.branch}`"

    @property
    def append_helps(self) -> bool:
        """Whether publish mode `append` (no force push) gets through: only when forcing is
        all that is blocked."""
        return set(self.blocks) == {Block.FORCE_PUSH}

    @property
    def fix(self) -> str:
        bypass = (
            "add carry's GitHub App (or its bot user) to the ruleset's bypass list, or exclude "
            f"`{self.branch}` from the ruleset's target branches"
            if self.source is Source.RULESET
            else 'let carry\'s App or bot user force-push to it ("Allow force pushes" > '
            f'"Specify who can force push"), or make the rule not match `{self.branch}`'
        )
        if self.append_helps:
            return (
                f"{bypass}; or set `publish: {{mode: append}}` for this series in carry's "
                "configuration: carry then adds a commit on top of its branch instead of "
                "rewriting it, which needs no force push"
            )
        return f"{bypass} (carry's branch takes no review or status checks before a push)"

    @property
    def words(self) -> str:
        """One line for the dashboard's "needs attention"."""
        return f"GitHub refused carry's push ({self.code}): {self.setting}"

    def fields(self) -> dict[str, object]:
        """The refusal as history fields."""
        return {
            "code": self.code,
            "source": self.source.value,
            "branch": self.branch,
            "blocks": [b.value for b in self.blocks],
            "messages": list(self.messages),
            "setting": self.setting,
            "fix": self.fix,
        }


def _block(message: str) -> Block:
    text = message.lower()
    if "force-push" in text or "force push" in text:
        return Block.FORCE_PUSH
    if "status check" in text:
        return Block.STATUS_CHECKS
    if "pull request" in text:
        return Block.PULL_REQUEST
    if "delete" in text:
        return Block.DELETION
    return Block.OTHER


def classify(output: str) -> PushRefusal | None:
    """The first setting-caused refusal in git push's output, or None (another failure)."""
    lines = [_REMOTE.sub("", line, count=1).strip() for line in output.splitlines()]
    for index, line in enumerate(lines):
        header = _HEADER.match(line)
        if header is None:
            continue
        rules_url, messages = None, []
        for following in lines[index + 1 :]:
            if _HEADER.match(following) or following.startswith(("To ", "!", "error: failed")):
                break
            review = _REVIEW.match(following)
            if review is not None:
                rules_url = review["url"]
            elif following.startswith("- "):
                messages.append(following[2:].strip())
            elif following.startswith("error: "):  # GitHub's older form
                messages.append(following.removeprefix("error: ").strip())
        blocks = tuple(dict.fromkeys(_block(m) for m in messages)) or (Block.OTHER,)
        return PushRefusal(
            source=CODES[header["code"]],
            branch=header["ref"].removeprefix("refs/heads/"),
            blocks=blocks,
            messages=tuple(messages),
            code=header["code"],
            rules_url=rules_url,
        )
    return None


def comment(refusal: PushRefusal, head: str | None, attempts: int) -> str:
    """carry's one PR comment about it (edited, not repeated, on later refusals)."""
    said = "\n".join(f"> {m}" for m in refusal.messages) or "> (GitHub gave no reason)"
    lines = [
        MARKER,
        "## carry: GitHub refuses to update this branch",
        "",
        f"carry could not push its refresh on `{str(head)[:12]}` to `{refusal.branch}`: "
        f"{refusal.setting} blocks it. GitHub said ({refusal.code}):",
        "",
        said,
        "",
        f"**To fix:** {refusal.fix}.",
        "",
        "carry does not retry a refused push; it tries again at the next upstream head or "
        "`/carry rebase`.",
    ]
    if refusal.rules_url:
        lines += ["", f"The rules on this branch: {refusal.rules_url}"]
    if attempts > 1:
        lines += ["", f"_Refused {attempts} times so far._"]
    return "\n".join(lines)


def recovered_comment(head: str | None) -> str:
    return (
        f"{MARKER}\n## carry: GitHub takes carry's pushes again\n\n"
        f"carry's branch holds the series as checked on `{str(head)[:12]}`; the earlier "
        "refusal is resolved."
    )
