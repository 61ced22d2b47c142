"""Verdicts of the Verify checks, their JSON form and the exit-code contract.

Exit codes (the CI layer retries 2, and does not retry 1 or 77):

* 0 ``passed``: the check ran as designed and saw no bug.
* 1 ``failed``: the check ran as designed and saw the bug (a test failure).
* 2 ``error``: no verdict. ``error_kind`` says why: ``infra`` (server unreachable, timed out,
  HTTP error, malformed reply, vLLM did not start), ``usage`` (bad arguments, unusable reference
  file) or ``internal`` (a crash of the check itself). argparse's own usage errors also exit 2,
  before any JSON is written.
* 77 ``error`` with ``error_kind`` ``inconclusive``: the check ran, but the load did not exercise
  what it needs (or the reference run disagrees with itself), so a pass would mean nothing. CI
  shows it apart (amber, INCONCLUSIVE, with what was measured), never as a pass or a bug, and does
  not retry it: the same tree and load would measure the same. 77 is the test harnesses' "could
  not test" code (Automake, Meson), far from the small codes tools use for their own errors
  (pytest's 3 is an internal error: that must stay a failure).
"""

from __future__ import annotations

import json
import sys
import traceback
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any, TextIO

SCHEMA_VERSION = 1


class Status(StrEnum):
    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"


EXIT_CODES: dict[Status, int] = {Status.PASSED: 0, Status.FAILED: 1, Status.ERROR: 2}
EXIT_INCONCLUSIVE = 77


class NoVerdict(Exception):
    """The check could not decide whether the server has the bug (exit 2)."""

    kind = "infra"


class InfraError(NoVerdict):
    """The server or the machinery around it failed: unreachable, timeout, HTTP error, bad reply."""

    kind = "infra"


class UsageError(NoVerdict):
    """The arguments or inputs (e.g. a reference file) cannot be used."""

    kind = "usage"


class Inconclusive(NoVerdict):
    """The run did not exercise the condition the check needs, so a pass would mean nothing
    (exit 77, not 2: the CI layer shows it apart and does not retry it)."""

    kind = "inconclusive"


@dataclass(frozen=True)
class Mismatch:
    """One observed deviation: which request, what kind, where, and what was expected."""

    subject: str
    kind: str
    description: str
    position: int | None = None
    expected: Any = None
    actual: Any = None


@dataclass
class CheckResult:
    check: str
    status: Status
    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    mismatches: list[Mismatch] = field(default_factory=list)
    error_kind: str | None = None

    @property
    def exit_code(self) -> int:
        if self.error_kind == Inconclusive.kind:
            return EXIT_INCONCLUSIVE
        return EXIT_CODES[self.status]

    @property
    def passed(self) -> bool:
        return self.status is Status.PASSED

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "check": self.check,
            "status": self.status.value,
            "exit_code": self.exit_code,
            "error_kind": self.error_kind,
            "summary": self.summary,
            "details": self.details,
            "mismatches": [asdict(m) for m in self.mismatches],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)


def passed(check: str, summary: str, details: dict[str, Any]) -> CheckResult:
    return CheckResult(check, Status.PASSED, summary, details)


def failed(
    check: str, summary: str, details: dict[str, Any], mismatches: list[Mismatch]
) -> CheckResult:
    return CheckResult(check, Status.FAILED, summary, details, list(mismatches))


def error(check: str, exc: BaseException, details: dict[str, Any] | None = None) -> CheckResult:
    kind = exc.kind if isinstance(exc, NoVerdict) else "internal"
    info = dict(details or {})
    if kind == "internal":
        info["traceback"] = "".join(traceback.format_exception(exc))
    summary = f"{kind} error: {exc}" if str(exc) else f"{kind} error: {type(exc).__name__}"
    if kind == Inconclusive.kind:  # not an error of anything: the condition was not observed
        summary = str(exc) or "the load did not exercise what the check needs"
    return CheckResult(check, Status.ERROR, summary, info, error_kind=kind)


def render_text(result: CheckResult) -> str:
    label = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.ERROR: "ERROR"}[result.status]
    if result.error_kind == Inconclusive.kind:
        label = "INCONCLUSIVE"
    lines = [f"{label} {result.check}: {result.summary}"]
    lines += [f"  - [{m.kind}] {m.description}" for m in result.mismatches]
    return "\n".join(lines)


def write_json(result: CheckResult, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(result.to_json() + "\n", encoding="utf-8")


def conclude(
    check: str,
    body: Callable[[], CheckResult],
    json_path: Path | None,
    out: TextIO | None = None,
) -> int:
    """Run a check body, turn any exception into an ``error`` verdict, report it, return the code.

    An uncaught crash would exit 1 and read as a detected bug, so every exception maps to 2.
    """
    try:
        result = body()
    except Exception as exc:
        result = error(check, exc)
    stream = out if out is not None else sys.stdout
    print(render_text(result), file=stream)
    if json_path is not None:
        try:
            write_json(result, json_path)
        except OSError as exc:
            print(f"ERROR {check}: cannot write {json_path}: {exc}", file=sys.stderr)
            return EXIT_CODES[Status.ERROR]
    return result.exit_code
