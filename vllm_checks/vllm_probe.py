"""A scheduler probe for the async-inputs check, loaded into vLLM as a general plugin.

vLLM loads every ``vllm.general_plugins`` entry point in each of its processes; carry's
(``carry-probe`` in pyproject.toml) does nothing unless ``CARRY_VLLM_PROBE`` names a file. Then it
wraps the V1 scheduler's ``schedule()``, writes ``{"loaded": PID}``, then one JSON line for each
step in which something the async-inputs bug needs happened:

    {"step": 812, "sat_out": 3, "uncarried": 1, "preempted": 0}

``uncarried`` counts decode rows (one token, the prompt already computed) of requests that
sampled no token in the previous step (absent from it, or only a non-final prompt chunk there),
so their input id cannot come from that step's sampled tokens: the rows the bug leaves stale. ``sat_out`` counts decoding requests left out of a step (the usual
cause), ``preempted`` requests preempted. The check reads the file to say how often it happened.
This module imports nothing from carry and nothing from vLLM until the plugin is enabled.
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

ENV = "CARRY_VLLM_PROBE"
_lock = threading.Lock()


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


def _probed(schedule: Callable[..., Any], path: Path) -> Callable[..., Any]:
    steps = 0
    last_scheduled: set[str] = set()

    def probed_schedule(self: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal steps, last_scheduled
        before = {r.request_id: (r, r.num_computed_tokens) for r in self.running}
        output = schedule(self, *args, **kwargs)
        steps += 1
        scheduled = output.num_scheduled_tokens
        still_running = {r.request_id for r in self.running}
        sat_out = sum(
            1
            for rid, (r, computed) in before.items()
            if rid not in scheduled and rid in still_running and _decoding(r, computed)
        )
        uncarried = sum(
            1
            for rid, count in scheduled.items()
            if count == 1
            and rid in before
            and rid not in last_scheduled
            and before[rid][1] >= before[rid][0].num_prompt_tokens
        )
        preempted = len(output.preempted_req_ids or ())
        # a non-final prompt chunk samples nothing the next step could take its input from
        last_scheduled = {
            rid
            for rid in scheduled
            if not getattr(self.requests.get(rid), "is_prefill_chunk", False)
        }
        if sat_out or uncarried or preempted:
            row = {"step": steps, "sat_out": sat_out, "uncarried": uncarried}
            _append(path, {**row, "preempted": preempted})
        return output

    probed_schedule._carry_probe = True  # type: ignore[attr-defined]
    return probed_schedule


def _decoding(request: Any, computed: int) -> bool:
    """Past its prompt, and with tokens still to produce beyond those already in flight."""
    if request.is_finished() or computed < request.num_prompt_tokens:
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
    totals = {"loaded": 0, "event_steps": 0, "sat_out": 0, "uncarried": 0, "preempted": 0}
    for line in lines:
        row = json.loads(line)
        if "loaded" in row:
            totals["loaded"] += 1
            continue
        totals["event_steps"] += 1
        for key in ("sat_out", "uncarried", "preempted"):
            totals[key] += int(row.get(key, 0))
    return totals


def since(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """What happened between two reads; "loaded" stays the total (the probe loads at start-up)."""
    return {
        key: value if key == "loaded" else value - before.get(key, 0)
        for key, value in after.items()
    }
