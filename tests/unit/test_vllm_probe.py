"""The scheduler probe's counting (vllm_checks.vllm_probe.count_step): what one schedule() call
did, from plain facts, and the totals the async-inputs check reads. No vLLM here: the wrapper
that reads these facts off vLLM's scheduler runs in tests/integration/test_real_vllm.py."""

from __future__ import annotations

import json
from pathlib import Path

from vllm_checks.vllm_probe import Counts, Memory, Row, Step, count_step, read, since, totals

PROMPT = 100


def _decode(start: int = 150) -> Row:
    return Row(tokens=1, start=start, prompt_tokens=PROMPT)


def _step(
    rows: dict[str, Row],
    *,
    before: set[str] | None = None,
    decoding: set[str] | None = None,
    after: set[str] | None = None,
    preempted: set[str] | None = None,
    resumed: set[str] | None = None,
) -> Step:
    running_before = frozenset(rows if before is None else before)
    return Step(
        running_before=running_before,
        decoding=frozenset(running_before if decoding is None else decoding),
        rows=rows,
        running_after=frozenset(rows if after is None else after),
        preempted=frozenset(preempted or ()),
        resumed=None if resumed is None else frozenset(resumed),
    )


def test_a_row_is_a_decode_row_only_with_one_token_past_the_prompt() -> None:
    assert _decode(PROMPT).decode and _decode(PROMPT + 40).decode
    assert not Row(tokens=1, start=PROMPT - 1, prompt_tokens=PROMPT).decode  # last prompt token
    assert not Row(tokens=33, start=PROMPT + 7, prompt_tokens=PROMPT).decode  # computed again


def test_carried_decodes_count_nothing() -> None:
    rows = {"a": _decode(), "b": _decode()}
    counts, memory = count_step(_step(rows), Memory(sampled=frozenset(rows)))
    assert counts == Counts() and not counts
    assert memory == Memory(sampled=frozenset({"a", "b"}))


def test_a_decode_left_out_sits_out_and_its_next_row_is_uncarried() -> None:
    first = _step({"a": _decode()}, before={"a", "b"}, after={"a", "b"})
    counts, memory = count_step(first, Memory(sampled=frozenset({"a", "b"})))
    assert counts == Counts(sat_out=1)
    assert memory.sampled == {"a"}
    second = _step({"a": _decode(), "b": _decode()})
    counts, _ = count_step(second, memory)
    assert counts == Counts(uncarried=1)


def test_a_decode_after_a_non_final_prompt_chunk_is_uncarried() -> None:
    chunk = Row(tokens=64, start=0, prompt_tokens=PROMPT, chunk=True)
    _, memory = count_step(_step({"a": chunk}), Memory())
    assert memory.sampled == frozenset()
    last = Row(tokens=36, start=64, prompt_tokens=PROMPT)  # the final chunk samples a token
    counts, memory = count_step(_step({"a": last}), memory)
    assert counts == Counts() and memory.sampled == {"a"}
    counts, _ = count_step(_step({"a": _decode(PROMPT)}), memory)
    assert counts == Counts()


def test_a_finished_or_preempted_request_does_not_sit_out() -> None:
    step = _step({"a": _decode()}, before={"a", "b", "c"}, after={"a"}, preempted={"c"})
    counts, _ = count_step(step, Memory(sampled=frozenset({"a", "b", "c"})))
    assert counts == Counts(preempted=1)


def test_resumed_rows_as_the_scheduler_names_them() -> None:
    preempt = _step({"a": _decode()}, before={"a", "b", "c"}, after={"a"}, preempted={"b", "c"})
    counts, memory = count_step(preempt, Memory(sampled=frozenset({"a", "b", "c"})))
    assert counts == Counts(preempted=2)
    # b: every block still cached, so only its last token is computed: a decode row;
    # c: its blocks were evicted, so it is prefilled again from the start.
    rows = {
        "a": _decode(),
        "b": Row(tokens=1, start=288, prompt_tokens=88),
        "c": Row(tokens=62, start=0, prompt_tokens=95, chunk=True),
    }
    resume = _step(rows, before={"a"}, resumed={"b", "c"})
    counts, memory = count_step(resume, memory)
    assert counts == Counts(resumed=2, resumed_decode=1, resumed_cached=288, resumed_tokens=63)
    assert counts.uncarried == 0  # b was waiting, not running: counted as resumed only
    assert memory.sampled == {"a", "b"}


def test_resumed_rows_are_tracked_where_the_scheduler_does_not_name_them() -> None:
    preempt = _step({"a": _decode()}, before={"a", "b"}, after={"a"}, preempted={"b"})
    _, memory = count_step(preempt, Memory(sampled=frozenset({"a", "b"})))
    assert memory.awaiting_resume == {"b"}
    counts, memory = count_step(_step({"a": _decode()}), memory)  # b still waiting
    assert counts == Counts() and memory.awaiting_resume == {"b"}
    resume = _step({"a": _decode(), "b": Row(tokens=57, start=352, prompt_tokens=95)})
    counts, memory = count_step(resume, memory)
    assert counts == Counts(resumed=1, resumed_cached=352, resumed_tokens=57)
    assert memory.awaiting_resume == frozenset()
    counts, _ = count_step(_step({"a": _decode(), "b": _decode(410)}), memory)
    assert counts == Counts()  # resumed once, not again on every later row


def test_the_scheduler_naming_no_resumed_row_wins_over_the_tracking() -> None:
    memory = Memory(sampled=frozenset({"a"}), awaiting_resume=frozenset({"b"}))
    rows = {"a": _decode(), "b": _decode()}
    counts, _ = count_step(_step(rows, before={"a"}, resumed=set()), memory)
    assert counts == Counts()


def test_totals_over_a_probe_file_and_since(tmp_path: Path) -> None:
    path = tmp_path / "probe.jsonl"
    assert read(path) == totals([])  # no file yet: all zeros
    lines = [
        {"loaded": 11},
        {"loaded": 12},
        {"step": 208, **Counts(preempted=1).as_dict()},
        {"step": 322, **Counts(resumed=2, resumed_decode=1, resumed_cached=288).as_dict()},
        {"step": 9, "sat_out": 3, "uncarried": 1, "preempted": 0},  # an older probe's line
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    got = read(path)
    assert got == {
        "loaded": 2,
        "event_steps": 3,
        "sat_out": 3,
        "uncarried": 1,
        "preempted": 1,
        "resumed": 2,
        "resumed_decode": 1,
        "resumed_cached": 288,
        "resumed_tokens": 0,
    }
    later = {**got, "event_steps": 4, "resumed": 3}
    assert since(got, later) == {
        **dict.fromkeys(got, 0),
        "loaded": 2,
        "event_steps": 1,
        "resumed": 1,
    }
