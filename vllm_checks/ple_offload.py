"""Verify check for the PLE-offload semaphore fix: identical requests must be bit-identical.

With CUDA graphs on, the unfixed offload semaphore runs one step ahead, so every forward consumes
the previous step's per-layer embeddings: N identical sequential requests fall into two classes
(the cold first one, then the rest). The check sends N identical requests with prompt_logprobs,
hashes each request's full per-position vectors and groups the hashes into classes.

The rule that decides is the one the bug breaks, within one server and one mode: exactly one
class passes, more than one fails. The class is also compared with a cudagraph_mode=NONE
reference (another server, a JSON file recorded earlier with --record-reference, or, with
--serve, a NONE server it starts first), but only as information: on real GPUs the modes differ
in numerics for correct code (on an H200, 59 of 278 positions), so the comparison reports where
they differ and the largest logprob difference, and never fails a run.

    python -m vllm_checks.ple_offload --base-url URL --model M \
        [--reference-url URL | --reference-json FILE] [--json OUT]
    python -m vllm_checks.ple_offload --serve M     # NONE reference, then the default

With ``--expect-ple-offload`` (``--serve`` only) both servers get ``VLLM_PLE_CPU_OFFLOAD=1`` and the
server under test must show the offload running: its log has to report a ``PleOffloadLayer``
(PR #53899 logs ``Worker ready - N PleOffloadLayer(s)``). A server that never does ran without
offload, so its single class would prove nothing: the check says so (exit 2), never PASS.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_checks.openai_client import (
    Completion,
    CompletionRequest,
    OpenAIClient,
    PositionLogprobs,
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
    UsageError,
    conclude,
    failed,
    passed,
)
from vllm_checks.vllm_server import (
    ServeSpec,
    VllmServer,
    add_serve_arguments,
    ple_offload_command,
    spec_from_args,
    with_env,
)

NAME = "ple-offload"
REFERENCE_FORMAT = 2  # 2 adds each position's logprobs; format 1 (hashes only) is still read
READABLE_FORMATS = (1, 2)
OFFLOAD_ENV = "VLLM_PLE_CPU_OFFLOAD"
OFFLOAD_ACTIVE = "PleOffloadLayer"  # what the offload worker's ready line names


@dataclass(frozen=True)
class Plan:
    requests: int = 16
    prompt_words: int = 256
    prompt_logprobs: int = 5
    concurrency: int = 1
    reference_requests: int = 2
    seed: int = 0

    def request(self) -> CompletionRequest:
        prompt = filler_prompt(self.prompt_words, seed=f"{NAME}:{self.seed}")
        return CompletionRequest(
            prompt=prompt, max_tokens=1, logprobs=1, prompt_logprobs=self.prompt_logprobs
        )

    def fingerprint(self, model: str) -> dict[str, Any]:
        """What a recorded reference must have been recorded for, to be comparable."""
        request = self.request()
        return {
            "model": model,
            "prompt_sha256": hashlib.sha256(request.prompt.encode()).hexdigest(),
            "prompt_logprobs": request.prompt_logprobs,
            "max_tokens": request.max_tokens,
        }


def position_digest(position: PositionLogprobs | None) -> str:
    """Exact hash of one position: every (token id, logprob) pair, bit for bit."""
    return position_digest_of(position_values(position))


def vector_digest(positions: Sequence[str]) -> str:
    return hashlib.sha256("\n".join(positions).encode()).hexdigest()


# One position's (token id, logprob) pairs, sorted by token id; None where the server sent null.
PositionValues = tuple[tuple[int, float], ...] | None


def position_values(position: PositionLogprobs | None) -> PositionValues:
    if position is None:
        return None
    return tuple((tid, position[tid].logprob) for tid in sorted(position))


def position_digest_of(values: PositionValues) -> str:
    """position_digest of a position kept as values (what a reference file holds)."""
    canonical = "null" if values is None else json.dumps([[tid, lp] for tid, lp in values])
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class CrossMode:
    """How one class compares with the reference: information, never a verdict."""

    differing_positions: int
    positions: int
    first_position: int | None
    largest_logprob_difference: float | None  # None: no values to compare (a format-1 file)
    top_tokens_differ: int  # positions whose sets of returned token ids differ

    def to_dict(self) -> dict[str, Any]:
        return {
            "differing_positions": self.differing_positions,
            "positions": self.positions,
            "first_position": self.first_position,
            "largest_logprob_difference": self.largest_logprob_difference,
            "top_tokens_differ": self.top_tokens_differ,
        }

    def sentence(self) -> str:
        if self.differing_positions == 0:
            return "equal to the cudagraph_mode=NONE reference"
        largest = (
            "largest logprob difference unknown: the reference has no values"
            if self.largest_logprob_difference is None
            else f"largest logprob difference {self.largest_logprob_difference:.3g}"
        )
        return (
            f"differs from the cudagraph_mode=NONE reference at {self.differing_positions} of "
            f"{self.positions} positions, first at {self.first_position} ({largest}; "
            f"{self.top_tokens_differ} positions return other top tokens); information only, "
            "modes may differ in numerics"
        )


def cross_mode(
    positions: Sequence[str],
    values: Sequence[PositionValues],
    reference_positions: Sequence[str],
    reference_values: Sequence[PositionValues],
) -> CrossMode:
    diff = differing_positions(reference_positions, positions)
    comparable = bool(values) and len(values) == len(positions) and bool(reference_values)
    largest: float | None = 0.0 if comparable else None
    top_differ = 0
    if comparable:
        for index in diff:
            ours = dict(values[index] or ()) if index < len(values) else {}
            theirs = dict(reference_values[index] or ()) if index < len(reference_values) else {}
            if set(ours) != set(theirs):
                top_differ += 1
            for tid in set(ours) & set(theirs):
                largest = max(largest or 0.0, abs(ours[tid] - theirs[tid]))
    return CrossMode(
        len(diff),
        max(len(positions), len(reference_positions)),
        diff[0] if diff else None,
        largest,
        top_differ,
    )


@dataclass(frozen=True)
class Sample:
    index: int
    positions: tuple[str, ...]
    first_token: str | None = None
    first_token_logprob: float | None = None
    values: tuple[PositionValues, ...] = ()

    @property
    def digest(self) -> str:
        return vector_digest(self.positions)


def sample_from(index: int, completion: Completion) -> Sample:
    if completion.prompt_logprobs is None:
        raise InfraError("the reply has no prompt_logprobs; does the server support them?")
    return Sample(
        index=index,
        positions=tuple(position_digest(p) for p in completion.prompt_logprobs),
        first_token=completion.tokens[0] if completion.tokens else None,
        first_token_logprob=completion.token_logprobs[0] if completion.token_logprobs else None,
        values=tuple(position_values(p) for p in completion.prompt_logprobs),
    )


@dataclass
class RequestClass:
    digest: str
    positions: tuple[str, ...]
    members: list[int] = field(default_factory=list)
    first_token: str | None = None
    first_token_logprob: float | None = None
    values: tuple[PositionValues, ...] = ()


def classify(samples: Sequence[Sample]) -> list[RequestClass]:
    """Group samples by digest, classes in the order their first member was sent."""
    classes: dict[str, RequestClass] = {}
    for s in sorted(samples, key=lambda s: s.index):
        cls = classes.get(s.digest)
        if cls is None:
            cls = classes[s.digest] = RequestClass(
                s.digest,
                s.positions,
                first_token=s.first_token,
                first_token_logprob=s.first_token_logprob,
                values=s.values,
            )
        cls.members.append(s.index)
    return list(classes.values())


def differing_positions(a: Sequence[str], b: Sequence[str]) -> list[int]:
    longest = max(len(a), len(b))
    return [i for i in range(longest) if i >= len(a) or i >= len(b) or a[i] != b[i]]


@dataclass(frozen=True)
class Reference:
    digest: str
    positions: tuple[str, ...]
    source: str
    fingerprint: Mapping[str, Any]
    values: tuple[PositionValues, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": REFERENCE_FORMAT,
            "check": NAME,
            "source": self.source,
            "fingerprint": dict(self.fingerprint),
            "class_hash": self.digest,
            "position_hashes": list(self.positions),
            "position_logprobs": [
                None if v is None else [[tid, lp] for tid, lp in v] for v in self.values
            ],
        }


def reference_from_classes(
    classes: Sequence[RequestClass], source: str, fingerprint: Mapping[str, Any]
) -> Reference:
    if len(classes) != 1:
        sizes = ", ".join(str(len(c.members)) for c in classes)
        raise Inconclusive(
            f"the reference run at {source} is not self-consistent: {len(classes)} classes "
            f"(sizes {sizes})"
        )
    only = classes[0]
    return Reference(only.digest, only.positions, source, dict(fingerprint), only.values)


def load_reference(path: Path, fingerprint: Mapping[str, Any]) -> Reference:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        positions = tuple(str(p) for p in data["position_hashes"])
        recorded = data["fingerprint"]
        digest = str(data["class_hash"])
        values = tuple(
            None if v is None else tuple((int(tid), float(lp)) for tid, lp in v)
            for v in data.get("position_logprobs") or ()
        )
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"cannot read reference {path}: {exc!r}") from exc
    if data.get("check") != NAME or data.get("format") not in READABLE_FORMATS:
        formats = " or ".join(f"format-{n}" for n in READABLE_FORMATS)
        raise UsageError(f"{path} is not a {formats} {NAME} reference")
    if values and (
        len(values) != len(positions) or tuple(map(position_digest_of, values)) != positions
    ):
        raise UsageError(f"{path}: position_logprobs do not match its position_hashes")
    if recorded != dict(fingerprint):
        keys = sorted(k for k in {*recorded, *fingerprint} if recorded.get(k) != fingerprint.get(k))
        raise UsageError(f"{path} was recorded for another request (differs in {', '.join(keys)})")
    if vector_digest(positions) != digest:
        raise UsageError(f"{path}: class_hash does not match its position_hashes")
    return Reference(digest, positions, str(path), recorded, values)


def _class_row(cls: RequestClass, reference: Reference | None) -> dict[str, Any]:
    return {
        "hash": cls.digest,
        "count": len(cls.members),
        "requests": cls.members,
        "first_token": cls.first_token,
        "first_token_logprob": cls.first_token_logprob,
        "matches_reference": None if reference is None else cls.digest == reference.digest,
    }


def _class_mismatch(
    number: int, cls: RequestClass, baseline: Sequence[str], baseline_name: str, total: int
) -> Mismatch:
    diff = differing_positions(baseline, cls.positions)
    first = diff[0] if diff else None
    who = "the first (cold) request" if cls.members == [0] else f"requests {cls.members}"
    kind = "cold-first-request" if cls.members == [0] else "extra-class"
    verb = "differs" if len(cls.members) == 1 else "differ"
    return Mismatch(
        subject=f"class {number}",
        kind=kind,
        description=(
            f"class {number}: {who} ({len(cls.members)} of {total}) {verb} from {baseline_name} "
            f"first at prompt position {first} ({len(diff)} of {len(baseline)} positions differ)"
        ),
        position=first,
        expected=baseline[first] if first is not None and first < len(baseline) else None,
        actual=cls.positions[first] if first is not None and first < len(cls.positions) else None,
    )


def verdict(
    classes: Sequence[RequestClass], reference: Reference | None, details: dict[str, Any]
) -> CheckResult:
    """One class passes, more than one fails: the rule the bug breaks, in one server and one
    mode. The reference only informs (details["cross_mode"]); it never decides."""
    total = sum(len(c.members) for c in classes)
    info = {
        **details,
        "classes": [_class_row(c, reference) for c in classes],
        "reference": None
        if reference is None
        else {"source": reference.source, "hash": reference.digest},
    }
    if len(classes) > 1:
        largest = max(classes, key=lambda c: len(c.members))
        mismatches = [
            _class_mismatch(n, c, largest.positions, f"class {classes.index(largest) + 1}", total)
            for n, c in enumerate(classes, start=1)
            if c is not largest
        ]
        sizes = ", ".join(str(len(c.members)) for c in classes)
        matching = [
            n for n, c in enumerate(classes, 1) if reference and c.digest == reference.digest
        ]
        tail = f"; class {matching[0]} equals the cudagraph_mode=NONE reference" if matching else ""
        summary = (
            f"{total} identical requests fell into {len(classes)} classes (sizes {sizes}){tail}"
        )
        return failed(NAME, summary, info, mismatches)
    [only] = classes
    if reference is None:
        return passed(NAME, f"{total} identical requests, 1 class (no reference given)", info)
    comparison = cross_mode(only.positions, only.values, reference.positions, reference.values)
    info["cross_mode"] = comparison.to_dict()
    return passed(NAME, f"{total} identical requests, 1 class; {comparison.sentence()}", info)


def collect(client: OpenAIClient, plan: Plan, count: int, concurrency: int) -> list[Sample]:
    request = plan.request()
    if concurrency <= 1:
        completions = [client.complete(request) for _ in range(count)]
    else:
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            completions = list(pool.map(lambda _: client.complete(request), range(count)))
    return [sample_from(i, c) for i, c in enumerate(completions)]


def reference_run(base_url: str, model: str, plan: Plan, timeout: float) -> Reference:
    with OpenAIClient(base_url, model, timeout) as client:
        samples = collect(client, plan, plan.reference_requests, 1)
    return reference_from_classes(classify(samples), base_url, plan.fingerprint(model))


def measure(
    base_url: str, model: str, plan: Plan, timeout: float
) -> tuple[list[RequestClass], dict[str, Any]]:
    with OpenAIClient(base_url, model, timeout) as client:
        samples = collect(client, plan, plan.requests, plan.concurrency)
    details = {
        "base_url": base_url,
        "model": model,
        "requests": plan.requests,
        "concurrency": plan.concurrency,
        "prompt_positions": len(samples[0].positions),
        "prompt_logprobs": plan.prompt_logprobs,
        "fingerprint": plan.fingerprint(model),
    }
    return classify(samples), details


def record_reference(
    path: Path, classes: Sequence[RequestClass], source: str, fingerprint: Mapping[str, Any]
) -> None:
    reference = reference_from_classes(classes, source, fingerprint)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(reference.to_dict(), indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot write reference {path}: {exc}") from exc


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__spec__.name if __spec__ else 'ple_offload'}",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
        epilog="exit codes: 0 passed, 1 bug detected, 2 no verdict (infra/usage/inconclusive)",
    )
    add_connection_arguments(parser)
    parser.add_argument("--requests", type=positive_int, default=Plan.requests)
    parser.add_argument("--prompt-words", type=positive_int, default=Plan.prompt_words)
    parser.add_argument("--prompt-logprobs", type=positive_int, default=Plan.prompt_logprobs)
    parser.add_argument(
        "--concurrency",
        type=positive_int,
        default=Plan.concurrency,
        help="requests in flight at once (default 1: sequential, as in the test plan)",
    )
    parser.add_argument("--seed", type=int, default=Plan.seed)
    ref = parser.add_mutually_exclusive_group()
    ref.add_argument("--reference-url", help="a running cudagraph_mode=NONE server")
    ref.add_argument("--reference-json", type=Path, help="reference recorded by --record-reference")
    ref.add_argument(
        "--no-reference", action="store_true", help="with --serve: skip the NONE reference run"
    )
    parser.add_argument(
        "--reference-requests",
        type=positive_int,
        default=Plan.reference_requests,
        help="identical requests sent to the reference server (default %(default)s)",
    )
    parser.add_argument(
        "--expect-ple-offload",
        action="store_true",
        help=f"with --serve: set {OFFLOAD_ENV}=1 and require the server log to show the offload",
    )
    parser.add_argument(
        "--record-reference",
        type=Path,
        metavar="FILE",
        help="write this run's class as a reference file (when it is a single class)",
    )
    add_serve_arguments(parser)
    return parser


def resolve_reference(
    args: argparse.Namespace, plan: Plan, model: str, spec: ServeSpec | None
) -> Reference | None:
    if args.reference_json is not None:
        return load_reference(args.reference_json, plan.fingerprint(model))
    if args.reference_url:
        return reference_run(args.reference_url, model, plan, args.timeout)
    if spec is None or args.no_reference:
        return None
    command = ple_offload_command(spec, reference=True)
    with VllmServer(command, spec, label=f"{NAME}-reference") as server:
        return reference_run(server.base_url, model, plan, args.timeout)


def require_offload(server: VllmServer) -> None:
    if OFFLOAD_ACTIVE not in server.run_log():
        raise Inconclusive(
            f"PLE offload is not active on the server under test: {OFFLOAD_ENV}=1 was set, but "
            f"its log {server.log_path} never reports a {OFFLOAD_ACTIVE}, so the offload path "
            "this check verifies did not run (the model must have PLE layers; at TP=1 pass "
            "--serve-arg=--distributed-executor-backend=mp)"
        )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    model = target_model(parser, args)
    plan = Plan(
        requests=args.requests,
        prompt_words=args.prompt_words,
        prompt_logprobs=args.prompt_logprobs,
        concurrency=args.concurrency,
        reference_requests=args.reference_requests,
        seed=args.seed,
    )

    if args.expect_ple_offload and not args.serve:
        parser.error("--expect-ple-offload needs --serve: the check reads the server's own log")

    def body() -> CheckResult:
        spec = spec_from_args(args) if args.serve else None
        if spec is not None and args.expect_ple_offload:
            spec = with_env(spec, {OFFLOAD_ENV: "1"})
        reference = resolve_reference(args, plan, model, spec)
        if spec is not None:
            command = ple_offload_command(spec, reference=False)
            with VllmServer(command, spec, label=NAME) as server:
                classes, details = measure(server.base_url, model, plan, args.timeout)
                if args.expect_ple_offload:
                    require_offload(server)
                    details["ple_offload"] = "active"
        else:
            classes, details = measure(args.base_url, model, plan, args.timeout)
        if args.record_reference is not None and len(classes) == 1:
            record_reference(
                args.record_reference, classes, details["base_url"], details["fingerprint"]
            )
            details["recorded_reference"] = str(args.record_reference)
        return verdict(classes, reference, details)

    return conclude(NAME, body, args.json)


if __name__ == "__main__":
    sys.exit(main())
