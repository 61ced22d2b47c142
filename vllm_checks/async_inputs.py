"""Verify check for fixes/async-inputs: greedy outputs must not change under chunked-prefill load.

With async scheduling, a decode request that sat out a step (for lack of token budget behind long
prompt chunks) used to decode from a stale device row and repeat a token. Each round starts
several greedy streams, waits until every one of them is decoding, then sends prompts a few times
longer than the token budget. Afterwards every request is sent again alone; any difference in the
greedy tokens is a mismatch. The concurrent pass runs first so a prefix cache cannot have the long
prompts already computed.

Whether any decode row did miss a step is measured, not assumed: carry's scheduler probe
(``vllm_checks.vllm_probe``, a vLLM plugin) counts the decode rows of running requests that were
not in the previous step, and the preempted requests whose first row when resumed is a decode row.
``--serve`` turns it on; with ``--base-url`` give the file the server's ``CARRY_VLLM_PROBE`` names
as ``--probe-file``. No such row, or no probe: INCONCLUSIVE.

    python -m vllm_checks.async_inputs --base-url http://127.0.0.1:8000 --model M \
        --budget 128 --probe-file /tmp/probe.jsonl [--json OUT]
    python -m vllm_checks.async_inputs --serve M --budget 128   # starts vLLM itself
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from vllm_checks import vllm_probe
from vllm_checks.openai_client import (
    Completion,
    CompletionRequest,
    OpenAIClient,
    Timing,
    add_connection_arguments,
    filler_prompt,
    positive_int,
    target_model,
)
from vllm_checks.report import (
    CheckResult,
    Inconclusive,
    InfraError,
    Mismatch,
    conclude,
    error,
    failed,
    passed,
)
from vllm_checks.vllm_server import (
    VllmServer,
    add_serve_arguments,
    async_inputs_command,
    spec_from_args,
    with_env,
    with_log_dir,
)

NAME = "async-inputs"
Role = Literal["decoder", "long"]
CONTEXT = 3  # tokens of context shown on each side of a divergence


@dataclass(frozen=True)
class Plan:
    budget: int = 128
    decoders: int = 4
    long_prompts: int = 4
    rounds: int = 2
    decode_tokens: int = 96
    warm_tokens: int = 4
    long_prompt_factor: float = 4.0
    long_tokens: int = 16
    decoder_prompt_words: int = 16
    seed: int = 0

    @property
    def long_prompt_words(self) -> int:
        return math.ceil(self.budget * self.long_prompt_factor)


@dataclass(frozen=True)
class PlannedRequest:
    name: str
    role: Role
    round: int
    request: CompletionRequest


@dataclass(frozen=True)
class Round:
    decoders: tuple[PlannedRequest, ...]
    longs: tuple[PlannedRequest, ...]


@dataclass(frozen=True)
class Observation:
    planned: PlannedRequest
    completion: Completion
    timing: Timing

    @property
    def name(self) -> str:
        return self.planned.name


def build_rounds(plan: Plan) -> list[Round]:
    """Every round gets its own prompts, so no request of a round is a cache hit of another."""
    rounds = []
    for r in range(plan.rounds):
        decoders = tuple(
            _planned(plan, r, "decoder", i, plan.decoder_prompt_words, plan.decode_tokens)
            for i in range(plan.decoders)
        )
        longs = tuple(
            _planned(plan, r, "long", i, plan.long_prompt_words, plan.long_tokens)
            for i in range(plan.long_prompts)
        )
        rounds.append(Round(decoders, longs))
    return rounds


def _planned(plan: Plan, r: int, role: Role, i: int, words: int, max_tokens: int) -> PlannedRequest:
    prompt = filler_prompt(words, seed=f"{NAME}:{plan.seed}:{r}:{role}:{i}")
    request = CompletionRequest(prompt=prompt, max_tokens=max_tokens, logprobs=1)
    return PlannedRequest(f"r{r}-{role}-{i}", role, r, request)


def first_divergence(expected: Sequence[str], actual: Sequence[str]) -> int | None:
    for i, (want, got) in enumerate(zip(expected, actual, strict=False)):
        if want != got:
            return i
    return None if len(expected) == len(actual) else min(len(expected), len(actual))


def describe_divergence(
    subject: str, expected: Sequence[str], actual: Sequence[str]
) -> Mismatch | None:
    """Name the first difference between the alone (expected) and concurrent (actual) tokens."""
    i = first_divergence(expected, actual)
    if i is None:
        return None
    window = slice(max(0, i - CONTEXT), i + CONTEXT + 1)
    exp_ctx, act_ctx = list(expected[window]), list(actual[window])
    where = f"alone ...{exp_ctx}... vs concurrent ...{act_ctx}..."
    if i >= len(expected) or i >= len(actual):
        kind = "length"
        text = f"{len(actual)} tokens concurrently but {len(expected)} alone"
    elif i > 0 and actual[i] == actual[i - 1]:
        kind = "repeated-token"
        text = f"repeated token {actual[i]!r} at output position {i} (expected {expected[i]!r})"
        if _one_token_late(expected, actual, i):
            text += "; the rest follows the alone output one token late"
    elif actual[i] in expected[:i]:
        kind = "stale-token"
        j = max(k for k in range(i) if expected[k] == actual[i])
        text = f"stale token {actual[i]!r} from output position {j} at position {i}"
        text += f" (expected {expected[i]!r})"
    else:
        kind = "diverged"
        text = f"output diverges at position {i}: {actual[i]!r} instead of {expected[i]!r}"
    return Mismatch(
        subject=subject,
        kind=kind,
        description=f"{subject}: {text}; {where}",
        position=i,
        expected=exp_ctx,
        actual=act_ctx,
    )


def _one_token_late(expected: Sequence[str], actual: Sequence[str], i: int) -> bool:
    rest = min(len(expected) - i, len(actual) - i - 1)
    return rest > 0 and list(actual[i + 1 : i + 1 + rest]) == list(expected[i : i + rest])


def compare(alone: Mapping[str, Completion], concurrent: Sequence[Observation]) -> list[Mismatch]:
    mismatches = []
    for obs in concurrent:
        found = describe_divergence(obs.name, alone[obs.name].tokens, obs.completion.tokens)
        if found is not None:
            mismatches.append(found)
    return mismatches


def overlapping_decoders(observations: Sequence[Observation]) -> int:
    """Decoders still streaming after a long prompt of their round finished its prefill."""
    count = 0
    for r in sorted({o.planned.round for o in observations}):
        in_round = [o for o in observations if o.planned.round == r]
        prefilled = [
            o.timing.first_token
            for o in in_round
            if o.planned.role == "long" and o.timing.first_token is not None
        ]
        if not prefilled:
            continue
        first_prefill = min(prefilled)
        count += sum(
            1
            for o in in_round
            if o.planned.role == "decoder"
            and o.timing.last_token is not None
            and o.timing.last_token > first_prefill
        )
    return count


def verdict(
    plan: Plan,
    concurrent: Sequence[Observation],
    alone: Mapping[str, Completion],
    details: dict[str, Any],
    measured: Mapping[str, int] | None,
) -> CheckResult:
    """A mismatch fails the check; a clean run passes only if the probe saw decode rows that
    missed a step (``measured``: the probe's counts over the concurrent pass; None: no probe)."""
    mismatches = compare(alone, concurrent)
    overlap = overlapping_decoders(concurrent)
    long_lengths = [
        o.completion.prompt_tokens
        for o in concurrent
        if o.planned.role == "long" and o.completion.prompt_tokens is not None
    ]
    info = {
        **details,
        "overlapping_decoders": overlap,
        "probe": None if measured is None else dict(measured),
        "long_prompt_tokens": sorted(set(long_lengths)),
        "requests": [_request_row(o, alone[o.name]) for o in concurrent],
    }
    if mismatches:
        kinds = sorted({m.kind for m in mismatches})
        summary = (
            f"{len(mismatches)} of {len(concurrent)} greedy outputs changed under load "
            f"({', '.join(kinds)})"
        )
        return failed(NAME, summary, info, mismatches)
    if long_lengths and min(long_lengths) <= plan.budget:
        reason = (
            f"long prompts have only {min(long_lengths)} tokens, not more than the budget "
            f"{plan.budget}; raise --long-prompt-factor"
        )
        return error(NAME, Inconclusive(reason), info)
    unmeasured = _unmeasured(measured)
    if unmeasured is not None:
        return error(NAME, Inconclusive(unmeasured), info)
    assert measured is not None
    summary = (
        f"{len(concurrent)} greedy outputs identical alone and under load "
        f"({missed_rows(measured)} decode rows missed the step before theirs, "
        f"{measured['sat_out']} sat-out decodes, "
        f"{measured.get('resumed_decode', 0)} resumed as decode rows; budget {plan.budget})"
    )
    return passed(NAME, summary, info)


def missed_rows(measured: Mapping[str, int]) -> int:
    """Decode rows whose request sampled nothing in the step before: running ones that sat out
    or followed a prompt chunk, and preempted ones resumed straight into a decode row."""
    return measured["uncarried"] + measured.get("resumed_decode", 0)


def _unmeasured(measured: Mapping[str, int] | None) -> str | None:
    """Why a clean run proves nothing, or None when decode rows did miss steps."""
    if measured is None:
        return (
            "no scheduler probe, so nothing shows that any decode row missed a step; "
            "run with --serve, or give --probe-file"
        )
    if measured["loaded"] == 0:
        return (
            "the scheduler probe never started in vLLM: install carry in vLLM's environment "
            f"(its vllm.general_plugins entry point) and set {vllm_probe.ENV}"
        )
    if missed_rows(measured) == 0:
        return (
            f"no decode row missed a step under this load ({measured['sat_out']} sat-out decodes, "
            f"{measured['preempted']} preemptions, {measured.get('resumed', 0)} resumed requests "
            f"none of which came back as a decode row: the prefix cache gave them back "
            f"{measured.get('resumed_cached', 0)} tokens, their first rows computed "
            f"{measured.get('resumed_tokens', 0)}): the scheduler kept every running decode in "
            "every step and prefilled every resumed request again, so the bug could not show"
        )
    return None


def _request_row(obs: Observation, alone: Completion) -> dict[str, Any]:
    return {
        "name": obs.name,
        "role": obs.planned.role,
        "prompt_tokens": obs.completion.prompt_tokens,
        "output_tokens": len(obs.completion.tokens),
        "matches_alone": obs.completion.tokens == alone.tokens,
    }


def _stream_and_signal(
    client: OpenAIClient, planned: PlannedRequest, decoding: threading.Event, warm_tokens: int
) -> Observation:
    """Stream a request; ``decoding`` is set once it has ``warm_tokens`` tokens (or ended)."""

    def on_tokens(count: int) -> None:
        if count >= warm_tokens:
            decoding.set()

    try:
        completion, timing = client.stream(planned.request, on_tokens=on_tokens)
    finally:
        decoding.set()
    return Observation(planned, _with_tokens(planned, completion), timing)


def _with_tokens(planned: PlannedRequest, completion: Completion) -> Completion:
    if not completion.tokens:
        raise InfraError(f"{planned.name}: the reply carries no logprobs tokens to compare")
    return completion


def run_round(
    client: OpenAIClient, rnd: Round, warm_tokens: int, timeout: float
) -> list[Observation]:
    """Start the decoders, wait until each one is decoding, then send the long prompts."""
    events = [threading.Event() for _ in rnd.decoders]
    with ThreadPoolExecutor(max_workers=len(rnd.decoders) + len(rnd.longs)) as pool:
        futures: list[Future[Observation]] = [
            pool.submit(_stream_and_signal, client, p, ev, warm_tokens)
            for p, ev in zip(rnd.decoders, events, strict=True)
        ]
        deadline = time.monotonic() + timeout
        for planned, event in zip(rnd.decoders, events, strict=True):
            if not event.wait(max(0.0, deadline - time.monotonic())):
                raise InfraError(
                    f"{planned.name} streamed fewer than {warm_tokens} tokens in {timeout:.0f} s"
                )
        futures += [
            pool.submit(_stream_and_signal, client, p, threading.Event(), 1) for p in rnd.longs
        ]
        return [f.result() for f in futures]


def run(client: OpenAIClient, plan: Plan, timeout: float, probe: Path | None = None) -> CheckResult:
    rounds = build_rounds(plan)
    before = vllm_probe.read(probe) if probe is not None else {}
    concurrent = [
        obs for rnd in rounds for obs in run_round(client, rnd, plan.warm_tokens, timeout)
    ]
    measured = None if probe is None else vllm_probe.since(before, vllm_probe.read(probe))
    alone = {
        obs.name: _with_tokens(obs.planned, client.complete(obs.planned.request))
        for obs in concurrent
    }
    details = {
        "base_url": client.base_url,
        "model": client.model,
        "budget": plan.budget,
        "rounds": plan.rounds,
        "decoders": plan.decoders,
        "long_prompts": plan.long_prompts,
        "decode_tokens": plan.decode_tokens,
        "warm_tokens": plan.warm_tokens,
        "long_prompt_words": plan.long_prompt_words,
    }
    return verdict(plan, concurrent, alone, details, measured)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__spec__.name if __spec__ else 'async_inputs'}",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="exit codes: 0 passed, 1 bug detected, 2 no verdict (infra/usage/inconclusive)",
    )
    add_connection_arguments(parser)
    parser.add_argument(
        "--budget",
        type=positive_int,
        default=Plan.budget,
        help="the server's --max-num-batched-tokens (default %(default)s)",
    )
    parser.add_argument("--decoders", type=positive_int, default=Plan.decoders)
    parser.add_argument("--long-prompts", type=positive_int, default=Plan.long_prompts)
    parser.add_argument("--rounds", type=positive_int, default=Plan.rounds)
    parser.add_argument(
        "--decode-tokens",
        type=positive_int,
        default=Plan.decode_tokens,
        help="greedy tokens per decoding request (default %(default)s)",
    )
    parser.add_argument(
        "--warm-tokens",
        type=positive_int,
        default=Plan.warm_tokens,
        help="tokens each decoder streams before the long prompts go out (default %(default)s)",
    )
    parser.add_argument(
        "--long-prompt-factor",
        type=float,
        default=Plan.long_prompt_factor,
        help="long prompt length in words, as a multiple of --budget (default %(default)s)",
    )
    parser.add_argument("--long-tokens", type=positive_int, default=Plan.long_tokens)
    parser.add_argument("--seed", type=int, default=Plan.seed)
    parser.add_argument(
        "--probe-file",
        type=Path,
        help=f"with --base-url: the file the server's {vllm_probe.ENV} names (the scheduler probe)",
    )
    add_serve_arguments(parser)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    model = target_model(parser, args)
    if args.warm_tokens >= args.decode_tokens:
        parser.error("--warm-tokens must be below --decode-tokens")
    if args.long_prompt_factor <= 1:
        parser.error("--long-prompt-factor must be above 1: prompts must be longer than the budget")
    plan = Plan(
        budget=args.budget,
        decoders=args.decoders,
        long_prompts=args.long_prompts,
        rounds=args.rounds,
        decode_tokens=args.decode_tokens,
        warm_tokens=args.warm_tokens,
        long_prompt_factor=args.long_prompt_factor,
        long_tokens=args.long_tokens,
        seed=args.seed,
    )

    if args.serve and args.probe_file:
        parser.error("--probe-file is for --base-url; --serve sets up the probe itself")

    def body() -> CheckResult:
        if args.serve:
            spec = with_log_dir(spec_from_args(args))
            assert spec.log_dir is not None
            probe = spec.log_dir / f"vllm-{NAME}.probe.jsonl"
            probe.unlink(missing_ok=True)
            spec = with_env(spec, {vllm_probe.ENV: str(probe)})
            with VllmServer(async_inputs_command(spec, plan.budget), spec, NAME) as server:
                return _run_against(server.base_url, model, plan, args.timeout, probe)
        return _run_against(args.base_url, model, plan, args.timeout, args.probe_file)

    return conclude(NAME, body, args.json)


def _run_against(
    base_url: str, model: str, plan: Plan, timeout: float, probe: Path | None
) -> CheckResult:
    with OpenAIClient(base_url, model, timeout) as client:
        return run(client, plan, timeout, probe)


if __name__ == "__main__":
    sys.exit(main())
