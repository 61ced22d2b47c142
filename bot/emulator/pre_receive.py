"""The emulator's pre-receive hook: refuses the ref updates a ruleset or a branch protection
forbids, with GitHub's rejection texts.

git receive-pack runs it (through `core.hooksPath`, only for pushes some rule covers) with the
pushed objects already readable, so whether an update is a fast-forward is git's own answer.
Everything else (which rules cover which ref after bypasses, which required checks the new
commit lacks) was decided by the emulator and comes in `EMULATOR_PROTECTION` as JSON:

    {"refs": {"refs/heads/x": {"ruleset": RULES, "classic": RULES}}, "rules_url": "..."}
    RULES = {"non_fast_forward": bool, "deletion": bool, "missing_checks": [context, ...]}

Standard library only: it runs as a script, outside carry's import path.

The texts are GitHub's as its users recorded them (search: "GH013: Repository rule violations
found", e.g. github.com/yshavit/mdq/pull/255 and TokTok/c-toxcore#2907; "GH006: Protected
branch update failed ... - Cannot force-push to this branch", in pushes of 2025 quoted on
ephemeraHQ/converse-app; 'Required status check "DCO" is expected.' and 'N of M required status
checks are expected.' in openwrt/packages#7624 and RFD-FHEM/RFFHEM#1144). git prefixes each
line with `remote: `.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

ZERO = "0" * 40


def _fast_forward(old: str, new: str) -> bool:
    proc = subprocess.run(
        ["git", "merge-base", "--is-ancestor", old, new], capture_output=True, check=False
    )
    return proc.returncode == 0


def _checks_line(missing: list[str], required: int) -> str:
    if len(missing) == 1:
        return f'Required status check "{missing[0]}" is expected.'
    return f"{len(missing)} of {required} required status checks are expected."


def violations(rules: dict[str, Any], old: str, new: str) -> list[str]:
    found = []
    if new == ZERO:
        if rules.get("deletion"):
            found.append("Cannot delete this branch")
        return found
    if rules.get("non_fast_forward") and old != ZERO and not _fast_forward(old, new):
        found.append("Cannot force-push to this branch")
    missing = list(rules.get("missing_checks") or [])
    if missing:
        found.append(_checks_line(missing, int(rules.get("required_checks") or len(missing))))
    return found


def report(ref: str, source: str, found: list[str], rules_url: str) -> list[str]:
    if source == "ruleset":
        lines = [f"error: GH013: Repository rule violations found for {ref}."]
        lines.append(f"Review all repository rules at {rules_url}?ref={ref.replace('/', '%2F')}")
    else:
        lines = [f"error: GH006: Protected branch update failed for {ref}."]
    for text in found:
        lines += ["", f"- {text}"]
    return [*lines, ""]


def main() -> int:
    policy = json.loads(os.environ.get("EMULATOR_PROTECTION") or "{}")
    refs: dict[str, Any] = policy.get("refs", {})
    out: list[str] = []
    for line in sys.stdin:
        parts = line.split()
        if len(parts) != 3 or parts[2] not in refs:
            continue
        old, new, ref = parts
        for source in ("ruleset", "classic"):  # a ruleset's refusal is the one reported
            rules = refs[ref].get(source)
            found = violations(rules, old, new) if rules else []
            if found:
                out += report(ref, source, found, policy.get("rules_url", ""))
                break
    if not out:
        return 0
    sys.stderr.write("\n".join(out) + "\n")
    return 1


if __name__ == "__main__":
    sys.exit(main())
