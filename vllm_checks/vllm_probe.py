"""A scheduler probe for the async-inputs check, loaded into vLLM as a general plugin.

vLLM loads every ``vllm.general_plugins`` entry point in each of its processes; carry's
(``carry-probe`` in pyproject.toml) does nothing unless ``CARRY_VLLM_PROBE`` names a file. Then it
wraps the V1 scheduler's ``schedule()``, writes ``{"loaded": PID}``, then one JSON line for each
step in which something the async-inputs bug needs happened:

    {"step": 812, "sat_out": 3, "uncarried": 1, "preempted": 0, "resumed": 0,
     "resumed_decode": 0, "resumed_cached": 0, "resumed_tokens": 0}

``uncarried`` counts decode rows (one token, the prompt already computed) of running requests
that sampled no token in the previous step (absent from it, or only a non-final prompt chunk
there), so their input id cannot come from that step's sampled tokens: the rows the bug leaves
stale. ``sat_out`` counts decoding requests left out of a step (the usual cause), ``preempted``
requests the scheduler preempted. ``resumed`` counts preempted requests scheduled again, and
``resumed_decode`` those among them whose first row after preemption is a decode row (the other
way a row misses the step before its own); ``resumed_cached`` is the tokens the prefix cache gave
those requests back and ``resumed_tokens`` the tokens their first rows back computed (what the
cache no longer held is prefilled again, in chunks of at most the budget). The check reads
the file to say how often it happened. What a step counts is decided by ``count_step``, from
plain facts the wrapper reads off the scheduler. This module imports nothing from carry and
nothing from vLLM until the plugin is enabled.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ENV = "CARRY_VLLM_PROBE"
COUNTS = (
    "sat_out",
    "uncarried",
    "preempted",
    "resumed",
    "resumed_decode",
    "resumed_cached",
    "resumed_tokens",
)
_lock = threading.Lock()


@dataclass(frozen=True)
class Row:
    """One request's row in a step: ``tokens`` scheduled from position ``start``."""

    tokens: int
    start: int
    prompt_tokens: int
    chunk: bool = False  # a non-final prompt chunk: it samples no token

    @property
    def decode(self) -> bool:
        return self.tokens == 1 and self.start >= self.prompt_tokens


@dataclass(frozen=True)
class Step:
    """What the scheduler did in one ``schedule()`` call, as plain facts.

    ``decoding``: the requests running before the call that were past their prompt with tokens
    still to produce; ``running_before`` / ``running_after``: the running requests before and
    after the call; ``rows``: the scheduled rows; ``preempted``: the requests preempted in it;
    ``resumed``: the rows the scheduler says resume a preempted request (None where it does not
    say: then a row of a request preempted earlier and not scheduled since is one)."""

    running_before: frozenset[str]
    decoding: frozenset[str]
    rows: Mapping[str, Row]
    running_after: frozenset[str]
    preempted: frozenset[str] = frozenset()
    resumed: frozenset[str] | None = None


@dataclass(frozen=True)
class Memory:
    """What the probe keeps between steps."""

    sampled: frozenset[str] = frozenset()  # rows of the previous step that sampled a token
    awaiting_resume: frozenset[str] = frozenset()  # preempted, not scheduled since


@dataclass(frozen=True)
class Counts:
    sat_out: int = 0
    uncarried: int = 0
    preempted: int = 0
    resumed: int = 0
    resumed_decode: int = 0
    resumed_cached: int = 0
    resumed_tokens: int = 0

    def __bool__(self) -> bool:
        return any(self.as_dict().values())

    def as_dict(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in COUNTS}


def count_step(step: Step, memory: Memory) -> tuple[Counts, Memory]:
    """The counts of one step, and what the next step needs to know of this one."""
    sat_out = sum(1 for rid in step.decoding if rid not in step.rows and rid in step.running_after)
    uncarried = sum(
        1
        for rid, row in step.rows.items()
        if row.decode and rid in step.running_before and rid not in memory.sampled
    )
    resuming = memory.awaiting_resume if step.resumed is None else step.resumed
    resumed = {rid: row for rid, row in step.rows.items() if rid in resuming}
    counts = Counts(
        sat_out=sat_out,
        uncarried=uncarried,
        preempted=len(step.preempted),
        resumed=len(resumed),
        resumed_decode=sum(1 for row in resumed.values() if row.decode),
        resumed_cached=sum(row.start for row in resumed.values()),
        resumed_tokens=sum(row.tokens for row in resumed.values()),
    )
    after = Memory(
        sampled=frozenset(rid for rid, row in step.rows.items() if not row.chunk),
        awaiting_resume=(memory.awaiting_resume - step.rows.keys()) | step.preempted,
    )
    return counts, after


def register() -> None:
    """The entry point vLLM calls; safe to call more than once."""
    path = os.environ.get(ENV)
    if not path:
        return
    from vllm.v1.core.sched.scheduler import Scheduler

    if getattr(Scheduler.schedule, "_carry_probe", False):
        return
    Scheduler.schedule = _probed(Scheduler.schedule, Path(path))
    _append(Path(path), {"loaded": os.getpid()})


@dataclass
class _State:
    steps: int = 0
    memory: Memory = field(default_factory=Memory)


def _probed(schedule: Callable[..., Any], path: Path) -> Callable[..., Any]:
    state = _State()

    def probed_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        running = list(self.running)
        decoding = frozenset(r.request_id for r in running if _decoding(r))
        output = schedule(self, *args, **kwargs)
        state.steps += 1
        step = Step(
            running_before=frozenset(r.request_id for r in running),
            decoding=decoding,
            rows=_rows(self, output.num_scheduled_tokens),
            running_after=frozenset(r.request_id for r in self.running),
            preempted=frozenset(output.preempted_req_ids or ()),
            resumed=_resumed(output),
        )
        counts, state.memory = count_step(step, state.memory)
        if counts:
            _append(path, {"step": state.steps, **counts.as_dict()})
        return output

    probed_schedule._carry_probe = True  # type: ignore[attr-defined]
    return probed_schedule


def _rows(scheduler: Any, scheduled: Mapping[str, int]) -> dict[str, Row]:
    """vLLM has already advanced ``num_computed_tokens`` past the rows it scheduled."""
    rows = {}
    for rid, tokens in scheduled.items():
        request = scheduler.requests[rid]
        rows[rid] = Row(
            tokens=tokens,
            start=request.num_computed_tokens - tokens,
            prompt_tokens=request.num_prompt_tokens,
            chunk=bool(getattr(request, "is_prefill_chunk", False)),
        )
    return rows


def _resumed(output: Any) -> frozenset[str] | None:
    """The requests vLLM says it resumed (``resumed_req_ids``, as in 0.32); None without it."""
    ids = getattr(getattr(output, "scheduled_cached_reqs", None), "resumed_req_ids", None)
    return None if ids is None else frozenset(ids)


def _decoding(request: Any) -> bool:
    """Past its prompt, and with tokens still to produce beyond those already in flight."""
    if request.is_finished() or request.num_computed_tokens < request.num_prompt_tokens:
        return False
    in_flight = getattr(request, "num_output_placeholders", 0)
    return bool(request.num_output_tokens + in_flight < request.max_tokens)


def _append(path: Path, row: dict[str, int]) -> None:
    with _lock, path.open("a", encoding="utf-8") as out:
        out.write(json.dumps(row) + "\n")


def read(path: Path) -> dict[str, int]:
    """Totals over a probe file; "loaded" counts the processes the probe started in."""
    try:
        lines: Iterable[str] = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    return totals(json.loads(line) for line in lines)


def totals(rows: Iterable[Mapping[str, int]]) -> dict[str, int]:
    """Totals over probe lines; a line of an older probe lacks the resumed counts (0)."""
    out = {"loaded": 0, "event_steps": 0, **dict.fromkeys(COUNTS, 0)}
    for row in rows:
        if "loaded" in row:
            out["loaded"] += 1
            continue
        out["event_steps"] += 1
        for key in COUNTS:
            out[key] += int(row.get(key, 0))
    return out


def since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What happened between two reads; "loaded" stays the total (the probe loads at start-up)."""
    return {
        key: value if key == "loaded" else value - before.get(key, 0)
        for key, value in after.items()
    }
