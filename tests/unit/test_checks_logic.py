"""Engine-independent logic of the Verify checks: comparison, hashing, classes, CLI, commands."""

from __future__ import annotations

import argparse
import importlib
import io
import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from tests.support.paths import REPO_ROOT
from vllm_checks import async_inputs, ple_offload
from vllm_checks.async_inputs import (
    Observation,
    Plan,
    PlannedRequest,
    build_rounds,
    describe_divergence,
    overlapping_decoders,
)
from vllm_checks.openai_client import (
    Completion,
    CompletionRequest,
    Timing,
    TokenLogprob,
    normalize_base_url,
    parse_completion,
)
from vllm_checks.ple_offload import (
    Sample,
    classify,
    load_reference,
    position_digest,
    record_reference,
    reference_from_classes,
)
from vllm_checks.report import (
    CheckResult,
    Inconclusive,
    InfraError,
    Status,
    UsageError,
    conclude,
    passed,
)
from vllm_checks.vllm_server import (
    ServeSpec,
    VllmServer,
    add_serve_arguments,
    async_inputs_command,
    ple_offload_command,
    spec_from_args,
)

# ----------------------------------------------------------------------------- async-inputs


def test_a_repeated_token_is_named_and_located() -> None:
    found = describe_divergence(
        "r0-decoder-1", ["a", "b", "c", "d", "e"], ["a", "b", "b", "c", "d"]
    )
    assert found is not None
    assert (found.kind, found.position) == ("repeated-token", 2)
    assert "repeated token 'b' at output position 2 (expected 'c')" in found.description
    assert "one token late" in found.description
    assert found.subject == "r0-decoder-1"


def test_a_stale_earlier_token_and_a_derail_are_told_apart() -> None:
    stale = describe_divergence("x", ["a", "b", "c", "d"], ["a", "b", "c", "a"])
    derail = describe_divergence("x", ["a", "b", "c", "d"], ["a", "q", "r", "s"])
    assert stale is not None and derail is not None
    assert (stale.kind, stale.position) == ("stale-token", 3)
    assert "from output position 0" in stale.description
    assert (derail.kind, derail.position) == ("diverged", 1)


def test_length_differences_and_equal_outputs() -> None:
    short = describe_divergence("x", ["a", "b", "c"], ["a", "b"])
    assert short is not None and (short.kind, short.position) == ("length", 2)
    assert describe_divergence("x", ["a", "b"], ["a", "b"]) is None


def _obs(name: str, tokens: list[str], first: float, last: float, round_: int = 0) -> Observation:
    role: async_inputs.Role = "long" if "long" in name else "decoder"
    planned = PlannedRequest(name, role, round_, CompletionRequest("p", max_tokens=len(tokens)))
    completion = Completion(
        "".join(tokens), tuple(tokens), prompt_tokens=300 if role == "long" else 8
    )
    return Observation(planned, completion, Timing(first, last))


def _alone(*observations: Observation, **changed: list[str]) -> dict[str, Completion]:
    out = {o.name: o.completion for o in observations}
    for name, tokens in changed.items():
        out[name.replace("_", "-")] = Completion("", tuple(tokens))
    return out


def test_verdict_fails_on_any_mismatch_and_lists_only_changed_requests() -> None:
    dec0 = _obs("r0-decoder-0", ["a", "b", "b", "c"], 0.0, 5.0)
    dec1 = _obs("r0-decoder-1", ["x", "y", "z", "w"], 0.0, 5.0)
    long0 = _obs("r0-long-0", ["l", "m"], 2.0, 3.0)
    alone = _alone(dec0, dec1, long0, r0_decoder_0=["a", "b", "c", "d"])
    result = async_inputs.verdict(Plan(budget=128), [dec0, dec1, long0], alone, {}, None)
    assert result.status is Status.FAILED and result.exit_code == 1
    assert [m.subject for m in result.mismatches] == ["r0-decoder-0"]
    assert "repeated-token" in result.summary
    rows = {r["name"]: r["matches_alone"] for r in result.details["requests"]}
    assert rows == {"r0-decoder-0": False, "r0-decoder-1": True, "r0-long-0": True}


MISSED = {"loaded": 1, "event_steps": 3, "sat_out": 9, "uncarried": 4, "preempted": 0}


def test_verdict_passes_only_when_the_probe_saw_decode_rows_miss_a_step() -> None:
    dec = _obs("r0-decoder-0", ["a", "b"], 0.0, 5.0)
    long0 = _obs("r0-long-0", ["l"], 2.0, 3.0)
    both, alone = [dec, long0], _alone(dec, long0)
    ok = async_inputs.verdict(Plan(budget=128), both, alone, {}, MISSED)
    assert ok.status is Status.PASSED and "4 decode rows missed" in ok.summary
    assert ok.details["probe"] == MISSED

    kept = {**MISSED, "sat_out": 0, "uncarried": 0, "preempted": 3}
    never = async_inputs.verdict(Plan(budget=128), both, alone, {}, kept)
    assert (never.status, never.error_kind, never.exit_code) == (Status.ERROR, "inconclusive", 77)
    assert "no decode row missed a step" in never.summary and "3 preemptions" in never.summary

    unloaded = async_inputs.verdict(Plan(budget=128), both, alone, {}, {**MISSED, "loaded": 0})
    assert "never started" in unloaded.summary and unloaded.exit_code == 77
    unprobed = async_inputs.verdict(Plan(budget=128), both, alone, {}, None)
    assert "no scheduler probe" in unprobed.summary and unprobed.exit_code == 77


def test_a_preempted_request_resumed_as_a_decode_row_is_a_row_that_missed_a_step() -> None:
    dec = _obs("r0-decoder-0", ["a", "b"], 0.0, 5.0)
    long0 = _obs("r0-long-0", ["l"], 2.0, 3.0)
    both, alone = [dec, long0], _alone(dec, long0)
    preempted = {**MISSED, "sat_out": 0, "uncarried": 0, "preempted": 2, "resumed": 2}
    recomputed = {**preempted, "resumed_decode": 0, "resumed_cached": 352, "resumed_tokens": 63}
    never = async_inputs.verdict(Plan(budget=128), both, alone, {}, recomputed)
    assert (never.status, never.error_kind) == (Status.ERROR, "inconclusive")
    assert "2 preemptions, 2 resumed requests none of which came back" in never.summary
    assert "gave them back 352 tokens, their first rows computed 63" in never.summary
    resumed = {**recomputed, "resumed_decode": 1}
    ok = async_inputs.verdict(Plan(budget=128), both, alone, {}, resumed)
    assert ok.status is Status.PASSED
    assert "1 decode rows missed" in ok.summary and "1 resumed as decode rows" in ok.summary
    changed = _alone(dec, long0, r0_decoder_0=["a", "c"])
    assert async_inputs.verdict(Plan(budget=128), both, changed, {}, resumed).status is (
        Status.FAILED
    )


def test_verdict_is_inconclusive_when_long_prompts_fit_in_the_budget() -> None:
    dec = _obs("r0-decoder-0", ["a", "b"], 0.0, 5.0)
    long0 = _obs("r0-long-0", ["l"], 2.0, 3.0)  # 300 prompt tokens
    result = async_inputs.verdict(Plan(budget=512), [dec, long0], _alone(dec, long0), {}, MISSED)
    assert (result.status, result.error_kind) == (Status.ERROR, "inconclusive")
    assert "not more than the budget 512" in result.summary


def test_overlap_is_counted_per_round() -> None:
    observations = [
        _obs("r0-decoder-0", ["a"], 0.0, 9.0, 0),
        _obs("r0-long-0", ["l"], 5.0, 6.0, 0),
        _obs("r1-decoder-0", ["a"], 10.0, 11.0, 1),  # ended before round 1's prefill
        _obs("r1-long-0", ["l"], 12.0, 13.0, 1),
    ]
    assert overlapping_decoders(observations) == 1


def test_rounds_use_fresh_deterministic_prompts_longer_than_the_budget() -> None:
    plan = Plan(budget=32, decoders=2, long_prompts=2, rounds=2, long_prompt_factor=3.5)
    rounds = build_rounds(plan)
    assert build_rounds(plan) == rounds
    planned = [p for r in rounds for p in (*r.decoders, *r.longs)]
    assert len({p.request.prompt for p in planned}) == len(planned) == 8
    assert len({p.name for p in planned}) == 8
    assert all(len(p.request.prompt.split()) == 112 for r in rounds for p in r.longs)
    assert all(p.request.logprobs == 1 and p.request.temperature == 0 for p in planned)


# ----------------------------------------------------------------------------- ple-offload


def _position(values: dict[int, float]) -> dict[int, TokenLogprob]:
    return {tid: TokenLogprob(lp, rank, f"t{tid}") for rank, (tid, lp) in enumerate(values.items())}


def test_position_digest_is_exact_and_ignores_order_and_decoded_text() -> None:
    a = _position({1: -0.5, 2: -1.25})
    b = {2: TokenLogprob(-1.25, 9, "other"), 1: TokenLogprob(-0.5, 1, "x")}
    nudged = _position({1: math.nextafter(-0.5, 0.0), 2: -1.25})
    assert position_digest(a) == position_digest(b)
    assert position_digest(a) != position_digest(nudged)
    assert position_digest(None) != position_digest({})


def _sample(index: int, positions: tuple[str, ...]) -> Sample:
    return Sample(index, positions, first_token="token_id:7", first_token_logprob=-0.26)


WARM = ("null", "p1", "p2", "p3")
COLD = ("null", "c1", "c2", "p3")


def test_classify_groups_a_cold_first_request_apart_from_the_warm_rest() -> None:
    samples = [_sample(i, COLD if i == 0 else WARM) for i in (3, 0, 2, 1)]
    classes = classify(samples)
    assert [c.members for c in classes] == [[0], [1, 2, 3]]
    assert classes[0].digest != classes[1].digest
    assert len(classify([_sample(i, WARM) for i in range(5)])) == 1


def _reference(positions: tuple[str, ...]) -> ple_offload.Reference:
    return reference_from_classes(classify([_sample(0, positions)]), "ref", {"model": "m"})


def test_two_classes_fail_and_name_the_cold_request_and_the_reference_class() -> None:
    classes = classify([_sample(i, COLD if i == 0 else WARM) for i in range(4)])
    result = ple_offload.verdict(classes, _reference(WARM), {})
    assert result.status is Status.FAILED
    assert "fell into 2 classes (sizes 1, 3); class 2 equals" in result.summary
    [mismatch] = result.mismatches
    assert (mismatch.kind, mismatch.position) == ("cold-first-request", 1)
    assert "2 of 4 positions differ" in mismatch.description
    assert [c["matches_reference"] for c in result.details["classes"]] == [False, True]


def test_one_class_passes_and_the_reference_only_informs() -> None:
    """The rule the bug breaks decides (one class in one server and mode); a class that differs
    from the cudagraph_mode=NONE reference still passes: on an H200 correct code differs across
    modes at 59 of 278 positions, so that comparison is reported, never a failure."""
    classes = classify([_sample(i, COLD) for i in range(3)])
    differs = ple_offload.verdict(classes, _reference(WARM), {})
    assert differs.status is Status.PASSED and differs.mismatches == []
    assert "differs from the cudagraph_mode=NONE reference at 2 of 4 positions" in differs.summary
    assert "information only" in differs.summary
    assert differs.details["cross_mode"]["differing_positions"] == 2
    agrees = ple_offload.verdict(classes, _reference(COLD), {})
    assert agrees.status is Status.PASSED and "equal to the" in agrees.summary
    assert agrees.details["cross_mode"]["differing_positions"] == 0
    alone = ple_offload.verdict(classes, None, {})
    assert alone.status is Status.PASSED and alone.details["reference"] is None


def _valued(index: int, values: tuple[ple_offload.PositionValues, ...]) -> Sample:
    positions = tuple(ple_offload.position_digest_of(v) for v in values)
    return Sample(index, positions, values=values)


def test_the_cross_mode_comparison_measures_the_largest_logprob_difference() -> None:
    graphs = (None, ((5, -0.5), (9, -1.25)), ((3, -2.0), (4, -0.1)))
    eager = (None, ((5, -0.5), (9, -1.5)), ((3, -2.0), (8, -0.1)))
    reference = reference_from_classes(classify([_valued(0, eager)]), "none", {})
    result = ple_offload.verdict(classify([_valued(i, graphs) for i in range(4)]), reference, {})
    assert result.status is Status.PASSED
    assert result.details["cross_mode"] == {
        "differing_positions": 2,
        "positions": 3,
        "first_position": 1,
        "largest_logprob_difference": 0.25,
        "top_tokens_differ": 1,
    }
    assert "largest logprob difference 0.25" in result.summary
    # Two classes still fail, whatever the reference says.
    two = [_valued(0, eager), *(_valued(i, graphs) for i in range(1, 4))]
    assert ple_offload.verdict(classify(two), reference, {}).status is Status.FAILED


def test_a_reference_run_with_two_classes_gives_no_verdict() -> None:
    classes = classify([_sample(0, COLD), _sample(1, WARM)])
    with pytest.raises(Inconclusive, match="not self-consistent"):
        reference_from_classes(classes, "http://ref", {})


def test_reference_file_round_trip_and_fingerprint_guard(tmp_path: Path) -> None:
    plan = ple_offload.Plan(prompt_words=20)
    fingerprint = plan.fingerprint("m")
    path = tmp_path / "ref.json"
    record_reference(path, classify([_sample(0, WARM)]), "http://none", fingerprint)
    loaded = load_reference(path, fingerprint)
    assert loaded.positions == WARM and loaded.digest == classify([_sample(0, WARM)])[0].digest
    with pytest.raises(UsageError, match="differs in model, prompt_sha256"):
        load_reference(path, ple_offload.Plan(prompt_words=21).fingerprint("other"))
    data = json.loads(path.read_text())
    data["position_hashes"][1] = "tampered"
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="does not match"):
        load_reference(path, fingerprint)
    with pytest.raises(UsageError, match="cannot read"):
        load_reference(tmp_path / "missing.json", fingerprint)


def test_a_reference_file_keeps_the_values_and_format_1_is_still_read(tmp_path: Path) -> None:
    values = (None, ((5, -0.5), (9, -1.25)))
    path = tmp_path / "ref.json"
    record_reference(path, classify([_valued(0, values)]), "http://none", {"model": "m"})
    assert load_reference(path, {"model": "m"}).values == values
    data = json.loads(path.read_text())
    data["position_logprobs"][1][0][1] = -0.75
    path.write_text(json.dumps(data))
    with pytest.raises(UsageError, match="position_logprobs do not match"):
        load_reference(path, {"model": "m"})
    del data["position_logprobs"]
    data["format"] = 1
    path.write_text(json.dumps(data))
    old = load_reference(path, {"model": "m"})
    assert old.values == ()
    result = ple_offload.verdict(classify([_valued(0, (((1, -1.0),),) * 2)]), old, {})
    assert result.details["cross_mode"]["largest_logprob_difference"] is None
    assert "the reference has no values" in result.summary


def test_a_reply_without_prompt_logprobs_is_an_infra_error() -> None:
    with pytest.raises(InfraError, match="prompt_logprobs"):
        ple_offload.sample_from(0, Completion("x", ("t",)))


def test_ple_request_asks_for_one_token_and_prompt_logprobs() -> None:
    request = ple_offload.Plan(prompt_words=30, prompt_logprobs=5).request()
    payload = request.payload("m", stream=False)
    assert payload["prompt_logprobs"] == 5 and payload["max_tokens"] == 1
    assert payload["temperature"] == 0 and len(request.prompt.split()) == 30


# ----------------------------------------------------------------------------- client parsing


VLLM_REPLY = {
    "id": "cmpl-1",
    "object": "text_completion",
    "choices": [
        {
            "index": 0,
            "text": " hello",
            "logprobs": {
                "tokens": ["token_id:42"],
                "token_logprobs": [-0.2638],
                "top_logprobs": [{"token_id:42": -0.2638}],
                "text_offset": [0],
            },
            "finish_reason": "length",
            "prompt_logprobs": [
                None,
                {"12": {"logprob": -1.5, "rank": 3, "decoded_token": " a"}, "7": -0.1},
            ],
        }
    ],
    "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3},
}


def test_parse_completion_reads_vllm_prompt_logprobs() -> None:
    completion = parse_completion(VLLM_REPLY)
    assert completion.tokens == ("token_id:42",) and completion.token_logprobs == (-0.2638,)
    assert completion.prompt_tokens == 2 and completion.finish_reason == "length"
    assert completion.prompt_logprobs is not None
    first, second = completion.prompt_logprobs
    assert first is None and second is not None
    assert second[12] == TokenLogprob(-1.5, 3, " a") and second[7].logprob == -0.1


@pytest.mark.parametrize(
    "body",
    [
        {"error": {"message": "boom"}},
        {"object": "text_completion"},
        {"choices": [{"text": "x", "prompt_logprobs": "nope"}]},
        {"choices": [{"text": "x", "logprobs": {"tokens": ["a"], "token_logprobs": [1, 2]}}]},
    ],
)
def test_malformed_replies_are_infra_errors(body: dict[str, object]) -> None:
    with pytest.raises(InfraError):
        parse_completion(body)


def test_payload_carries_vllm_extensions_only_when_asked() -> None:
    request = CompletionRequest("p", max_tokens=3, logprobs=1)
    streamed = request.payload("m", stream=True)
    plain = request.payload("m", stream=False)
    assert streamed["stream_options"] == {"include_usage": True} and "stream_options" not in plain
    assert plain["return_tokens_as_token_ids"] is True and plain["ignore_eos"] is True
    assert "prompt_logprobs" not in plain
    assert normalize_base_url("http://h:8000/v1/") == "http://h:8000"


# ----------------------------------------------------------------------------- report & CLI


def test_result_json_shape_and_exit_codes() -> None:
    result = passed("x", "fine", {"n": 1})
    data = json.loads(result.to_json())
    assert set(data) == {
        "schema_version",
        "check",
        "status",
        "exit_code",
        "error_kind",
        "summary",
        "details",
        "mismatches",
    }
    assert (data["status"], data["exit_code"], data["error_kind"]) == ("passed", 0, None)
    codes = {status: CheckResult("x", status, "").exit_code for status in Status}
    assert codes == {Status.PASSED: 0, Status.FAILED: 1, Status.ERROR: 2}


@pytest.mark.parametrize(
    ("raised", "code", "kind"),
    [
        (InfraError("unreachable"), 2, "infra"),
        (UsageError("bad file"), 2, "usage"),
        (Inconclusive("no overlap"), 77, "inconclusive"),
        (RuntimeError("check crashed"), 2, "internal"),
    ],
)
def test_every_exception_is_a_no_verdict_exit_2_or_77(
    tmp_path: Path, raised: Exception, code: int, kind: str
) -> None:
    def body() -> CheckResult:
        raise raised

    out = io.StringIO()
    assert conclude("x", body, tmp_path / "r.json", out) == code
    data = json.loads((tmp_path / "r.json").read_text())
    assert (data["status"], data["error_kind"]) == ("error", kind)
    label = "INCONCLUSIVE" if kind == "inconclusive" else "ERROR"
    assert out.getvalue().startswith(f"{label} x:")
    assert ("traceback" in data["details"]) == (kind == "internal")


@pytest.mark.parametrize("main", [async_inputs.main, ple_offload.main])
@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["--base-url", "http://h:1"],
        ["--base-url", "http://h:1", "--serve", "m", "--model", "m"],
        ["--serve", "m", "--serve-env", "NOEQUALS"],
        ["--serve", "m", "--timeout", "soon"],
    ],
)
def test_bad_arguments_exit_2(main: Callable[[list[str]], int], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize(
    "argv",
    [
        ["--serve", "m", "--budget", "0"],
        ["--serve", "m", "--decode-tokens", "4", "--warm-tokens", "4"],
        ["--serve", "m", "--long-prompt-factor", "1"],
    ],
)
def test_async_inputs_rejects_plans_that_cannot_exercise_the_bug(argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        async_inputs.main(argv)
    assert exc.value.code == 2


def test_ple_reference_sources_are_exclusive() -> None:
    argv = ["--serve", "m", "--reference-url", "http://a", "--reference-json", "r.json"]
    with pytest.raises(SystemExit) as exc:
        ple_offload.main(argv)
    assert exc.value.code == 2


@pytest.mark.parametrize("config", ["carry.yaml", "carry.example.yaml"])
def test_every_configured_vllm_check_is_a_module_with_a_main(config: str) -> None:
    """The configuration is the one list of checks: each `python -m vllm_checks.<module>`
    it runs names a module of the package that has a main."""
    data = yaml.safe_load((REPO_ROOT / "config" / config).read_text())
    modules = {
        run[run.index("-m") + 1]
        for runner in data["runners"].values()
        for check in runner["checks"].values()
        if "-m" in (run := check["run"]) and run[run.index("-m") + 1].startswith("vllm_checks")
    }
    assert modules == {"vllm_checks.async_inputs", "vllm_checks.ple_offload"}
    for name in modules:
        assert callable(importlib.import_module(name).main), name


# ----------------------------------------------------------------------------- vllm serve


SPEC = ServeSpec(model="org/m", port=8123, extra_args=("--max-model-len", "4096"))


def test_async_inputs_serve_command() -> None:
    command = async_inputs_command(SPEC, budget=96)
    assert command[:3] == ["vllm", "serve", "org/m"]
    assert command[command.index("--port") + 1] == "8123"
    assert "--async-scheduling" in command and "--no-enable-prefix-caching" in command
    assert command[command.index("--max-num-batched-tokens") + 1] == "96"
    assert command[-2:] == ["--max-model-len", "4096"]


def test_ple_offload_reference_turns_cuda_graphs_off_and_the_run_under_test_does_not() -> None:
    reference = ple_offload_command(SPEC, reference=True)
    under_test = ple_offload_command(SPEC, reference=False)
    config = reference[reference.index("--compilation-config") + 1]
    assert json.loads(config) == {"cudagraph_mode": "NONE"}
    assert "--compilation-config" not in under_test and "--async-scheduling" not in under_test
    assert [a for a in reference if a not in ("--compilation-config", config)] == under_test


def test_serve_arguments_build_a_spec() -> None:
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(
        [
            "--serve",
            "org/m",
            "--vllm-bin",
            "/opt/py -m vllm.entrypoints.cli.main",
            "--serve-arg=--max-model-len=4096",
            "--serve-env",
            "VLLM_PLE_CPU_OFFLOAD=1",
            "--port",
            "9000",
        ]
    )
    spec = spec_from_args(args)
    assert spec.env == (("VLLM_PLE_CPU_OFFLOAD", "1"),) and spec.port == 9000
    command = ple_offload_command(spec, reference=False)
    assert command[:5] == ["/opt/py", "-m", "vllm.entrypoints.cli.main", "serve", "org/m"]
    assert command[-1] == "--max-model-len=4096"
    assert spec_from_args(parser.parse_args(["--serve", "m"])).port > 0


def test_a_missing_vllm_binary_is_an_infra_error(tmp_path: Path) -> None:
    spec = ServeSpec(model="m", port=1, vllm_bin=str(tmp_path / "no-vllm"), log_dir=tmp_path)
    with pytest.raises(InfraError, match=r"carry\[runner\]"):
        VllmServer(async_inputs_command(spec, 8), spec, label="t").start()
