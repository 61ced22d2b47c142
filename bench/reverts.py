"""Measure what carry decides for a patch that upstream took and then reverted.

Usage: python bench/reverts.py PATH_TO_UPSTREAM_CLONE [--branch main] [--verbose]

Every revert on the branch whose target can be named (a `This reverts commit` line, or a
`Revert "<title>"` subject whose title, PR numbers and tags stripped, starts the title of an
older commit) gives two probes of the target's own patch, with the target's parent as base:
- "landed": checked on the revert's parent, where upstream holds the change (label contained);
- "reverted": checked on the revert itself, where upstream no longer does (label not contained).
The labels come from the revert pairs alone, not from carry's rules. Next to carry, the
commit-graph test (is the target's commit in the head's history?) answers the same probes: it
calls both contained. Nothing of the upstream repository is copied; it is only read.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.realhistory import _env, git, share_objects, title_key
from bot.core.classify import Decision
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror

_TRAILER = re.compile(r"This reverts commit ([0-9a-f]{7,40})")
_QUOTED = re.compile(r'^Revert:?\s+"?(.+?)"?(\s*\(#\d+\))?\s*$')


def revert_pairs(repo: Path, branch: str) -> list[tuple[str, str, str]]:
    """(target, revert, revert subject), oldest revert first."""
    log = git(repo, "log", "--no-merges", "--format=%H\x1f%s\x1f%b\x1e", branch)
    commits = [r.strip("\n ").split("\x1f") for r in log.split("\x1e") if r.strip()]
    pairs = []
    for index, (sha, subject, body) in enumerate(c for c in commits if len(c) == 3):
        target = None
        named = _TRAILER.findall(body)
        if named:
            target = git(repo, "rev-parse", "--verify", "--quiet", named[0]).strip() or None
        elif (quoted := _QUOTED.match(subject.replace("…", ""))) is not None:
            wanted = title_key(quoted.group(1))
            older = (c for c in commits[index + 1 :] if len(c) == 3)
            if len(wanted) >= 12:
                target = next((c[0] for c in older if title_key(c[1]).startswith(wanted)), None)
        if target and target != sha:
            pairs.append((target, sha, subject))
    return pairs[::-1]


def is_ancestor(repo: Path, ancestor: str, descendant: str) -> bool:
    import subprocess

    args = ["git", "-C", str(repo), "merge-base", "--is-ancestor", ancestor, descendant]
    return subprocess.run(args, capture_output=True, env=_env()).returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", type=Path)
    parser.add_argument("--branch", default="main")
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    cache = Path(tempfile.mkdtemp(prefix="carry-reverts-"))
    mirror = Mirror(str(args.repo), cache)
    share_objects(mirror, args.repo)
    engine = Engine(mirror)
    table: Counter[tuple[str, str]] = Counter()
    graph: Counter[str] = Counter()
    wrong: list[str] = []
    started = time.perf_counter()
    pairs = revert_pairs(args.repo, args.branch)
    for target, revert, subject in pairs:
        if git(repo := args.repo, "rev-list", "--parents", "-n1", target).count(" ") != 1:
            continue  # a root or merge commit has no single parent to be a base
        patch = git_bytes(repo, "format-patch", "-1", "--stdout", target)
        probes = [("not-contained", revert)]
        if is_ancestor(repo, target, f"{revert}~1"):
            probes.append(("contained", f"{revert}~1"))
        for label, head in probes:
            item = PatchInput(f"{target[:10]}.patch", patch)
            result = engine.check(head, [item], base=f"{target}~1").patches[0]
            table[(label, result.decision.value)] += 1
            graph[label] += is_ancestor(repo, target, head)
            if label == "not-contained" and result.decision == Decision.DROP:
                wrong.append(f"{target[:10]} on {head[:10]} ({subject[:60]}): {result.reason}")
            if args.verbose:
                print(
                    f"{label:13} {result.status.value:16} {result.decision.value:6} "
                    f"{target[:10]} {subject[:60]}\n{'':14}{result.reason[:150]}"
                )
    elapsed = time.perf_counter() - started
    pos = sum(v for (lab, _), v in table.items() if lab == "contained")
    neg = sum(v for (lab, _), v in table.items() if lab == "not-contained")
    print(f"\nrevert pairs: {len(pairs)}; probes: {pos + neg} ({pos} landed, {neg} reverted)")
    print(f"checked in {elapsed:.1f} s")
    print(f"{'label':15}{'drop':>7}{'review':>8}{'keep':>7}")
    for label in ("contained", "not-contained"):
        row = [table[(label, d.value)] for d in (Decision.DROP, Decision.REVIEW, Decision.KEEP)]
        print(f"{label:15}{row[0]:>7}{row[1]:>8}{row[2]:>7}")
    caught = table[("contained", "drop")] + table[("contained", "review")]
    print(f"\ncarry catches of landed (drop + review): {caught}/{pos} = {caught / max(pos, 1):.0%}")
    print(f"carry reviews on reverted: {table[('not-contained', 'review')]}/{neg}")
    print(f"carry wrong drops: {len(wrong)}")
    print(
        f"commit in the head's history: landed {graph['contained']}/{pos}, "
        f"reverted {graph['not-contained']}/{neg} (each of the latter would be a wrong drop)"
    )
    for line in wrong:
        print("  WRONG DROP:", line)
    return 0


def git_bytes(repo: Path, *args: str) -> bytes:
    import subprocess

    return subprocess.run(
        ["git", "-C", str(repo), *args], capture_output=True, env=_env(), check=True
    ).stdout


if __name__ == "__main__":
    sys.exit(main())
