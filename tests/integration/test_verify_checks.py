"""The Verify checks against the fake vLLM server: each catches its injected bug, passes on a
correct server, and reports an unreachable or failing server as "no verdict" (exit 2)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.fake_vllm_server import FakeConfig, FakeVllmServer
from tests.support.paths import REPO_ROOT
from vllm_checks import async_inputs, ple_offload
from vllm_checks.vllm_server import free_port

MODEL = "fake/model"
BUDGET = 64
FAKE_VLLM = f"{shlex.quote(sys.executable)} -m tests.support.fake_vllm_server"
ASYNC_ARGS = ["--budget", str(BUDGET), "--decoders", "3", "--long-prompts", "2", "--rounds", "1"]
ASYNC_ARGS += ["--decode-tokens", "48", "--long-tokens", "8", "--timeout", "30"]
PLE_ARGS = ["--requests", "6", "--prompt-words", "40", "--timeout", "30"]
SERVE_ARGS = ["--vllm-bin", FAKE_VLLM, "--startup-timeout", "30"]
SERVE_ARGS += ["--serve-env", f"PYTHONPATH={REPO_ROOT}"]

StartFake = Callable[..., FakeVllmServer]


@pytest.fixture
def fake_vllm(tmp_path: Path) -> Iterator[StartFake]:
    """Start fake vLLM servers on free ports: ``fake_vllm(bug="one-step-behind").url``. Each
    writes its scheduler-probe file, as real vLLM does with carry's plugin."""
    servers: list[FakeVllmServer] = []

    def start(**config: Any) -> FakeVllmServer:
        config.setdefault("budget", BUDGET)
        config.setdefault("probe_path", str(tmp_path / f"probe-{len(servers)}.jsonl"))
        server = FakeVllmServer(FakeConfig(model=MODEL, **config)).start()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.stop()


def run(main: Callable[[list[str]], int], argv: list[str], out: Path) -> tuple[int, dict[str, Any]]:
    code = main([*argv, "--json", str(out)])
    return code, json.loads(out.read_text())


def against(server: FakeVllmServer) -> list[str]:
    return ["--base-url", server.url, "--model", MODEL]


def probed(server: FakeVllmServer) -> list[str]:
    assert server.config.probe_path is not None
    return [*against(server), "--probe-file", server.config.probe_path]


# ----------------------------------------------------------------------------- async-inputs


def test_async_inputs_passes_on_a_correct_server_under_real_sit_outs(
    fake_vllm: StartFake, tmp_path: Path
) -> None:
    server = fake_vllm()
    code, report = run(async_inputs.main, [*probed(server), *ASYNC_ARGS], tmp_path / "r.json")
    assert (code, report["status"], report["mismatches"]) == (0, "passed", [])
    assert min(report["details"]["long_prompt_tokens"]) == 4 * BUDGET
    measured = report["details"]["probe"]
    assert measured["uncarried"] > 0 and measured["sat_out"] == server.stats.sat_out > 0


def test_async_inputs_without_a_probe_or_missed_steps_gives_no_verdict(
    fake_vllm: StartFake, tmp_path: Path
) -> None:
    server = fake_vllm()
    code, report = run(async_inputs.main, [*against(server), *ASYNC_ARGS], tmp_path / "a.json")
    assert (code, report["error_kind"]) == (77, "inconclusive")
    assert "no scheduler probe" in report["summary"]

    silent = fake_vllm(probe_path=None)  # a vLLM where carry's plugin is not installed
    argv = [*against(silent), "--probe-file", str(tmp_path / "never-written"), *ASYNC_ARGS]
    code, report = run(async_inputs.main, argv, tmp_path / "b.json")
    assert (code, report["error_kind"]) == (77, "inconclusive")
    assert "never started in vLLM" in report["summary"]


def test_async_inputs_catches_the_stale_decode_token(fake_vllm: StartFake, tmp_path: Path) -> None:
    server = fake_vllm(bug="stale-decode-token")
    code, report = run(async_inputs.main, [*probed(server), *ASYNC_ARGS], tmp_path / "r.json")
    assert (code, report["status"], report["exit_code"]) == (1, "failed", 1)
    decoders = [m for m in report["mismatches"] if "decoder" in m["subject"]]
    assert decoders and all(m["kind"] == "repeated-token" for m in decoders)
    assert all("repeated token" in m["description"] for m in decoders)
    assert server.stats.stale_reads > 0


@pytest.mark.parametrize(
    "config",
    [
        {"bug": "stale-decode-token", "async_scheduling": False},  # the bug needs async scheduling
        {"bug": "one-step-behind"},  # the other check's bug leaves greedy tokens alone
    ],
)
def test_async_inputs_passes_where_its_bug_cannot_show(
    fake_vllm: StartFake, tmp_path: Path, config: dict[str, Any]
) -> None:
    server = fake_vllm(**config)
    code, report = run(async_inputs.main, [*probed(server), *ASYNC_ARGS], tmp_path / "r.json")
    assert (code, report["status"]) == (0, "passed")


# ----------------------------------------------------------------------------- ple-offload


def test_ple_offload_passes_on_a_correct_server(fake_vllm: StartFake, tmp_path: Path) -> None:
    server, reference = fake_vllm(bug="stale-decode-token"), fake_vllm()
    argv = [*against(server), *PLE_ARGS, "--reference-url", reference.url]
    code, report = run(ple_offload.main, argv, tmp_path / "r.json")
    assert (code, report["status"]) == (0, "passed")
    [only] = report["details"]["classes"]
    assert (only["count"], only["matches_reference"]) == (6, True)


def test_ple_offload_catches_one_step_behind_rows(fake_vllm: StartFake, tmp_path: Path) -> None:
    server, reference = fake_vllm(bug="one-step-behind"), fake_vllm()
    argv = [*against(server), *PLE_ARGS, "--reference-url", reference.url]
    code, report = run(ple_offload.main, argv, tmp_path / "r.json")
    assert (code, report["status"]) == (1, "failed")
    classes = report["details"]["classes"]
    assert [(c["requests"], c["matches_reference"]) for c in classes] == [
        ([0], False),
        ([1, 2, 3, 4, 5], True),  # the warm class is the correct computation, as on GB10
    ]
    assert [m["kind"] for m in report["mismatches"]] == ["cold-first-request"]


def test_ple_offload_catches_chunked_prompts_that_never_match(
    fake_vllm: StartFake, tmp_path: Path
) -> None:
    server, reference = fake_vllm(bug="one-step-behind"), fake_vllm()
    argv = [*against(server), *PLE_ARGS, "--prompt-words", str(2 * BUDGET)]
    code, report = run(
        ple_offload.main, [*argv, "--reference-url", reference.url], tmp_path / "r.json"
    )
    assert code == 1
    assert [c["matches_reference"] for c in report["details"]["classes"]] == [False, False]


def test_ple_offload_is_unaffected_with_cudagraph_mode_none(
    fake_vllm: StartFake, tmp_path: Path
) -> None:
    server = fake_vllm(bug="one-step-behind", cudagraph_mode="NONE")
    code, report = run(ple_offload.main, [*against(server), *PLE_ARGS], tmp_path / "r.json")
    assert (code, report["details"]["reference"]) == (0, None)


def test_ple_offload_against_a_recorded_reference(fake_vllm: StartFake, tmp_path: Path) -> None:
    none_server, buggy = fake_vllm(cudagraph_mode="NONE"), fake_vllm(bug="one-step-behind")
    recorded = tmp_path / "none-reference.json"
    argv = [*against(none_server), *PLE_ARGS, "--record-reference", str(recorded)]
    assert run(ple_offload.main, argv, tmp_path / "a.json")[0] == 0

    with_ref = [*PLE_ARGS, "--reference-json", str(recorded)]
    code, report = run(ple_offload.main, [*against(buggy), *with_ref], tmp_path / "b.json")
    assert code == 1 and report["details"]["reference"]["source"] == str(recorded)

    other_prompt = [*with_ref, "--prompt-words", "41"]
    code, report = run(ple_offload.main, [*against(buggy), *other_prompt], tmp_path / "c.json")
    assert (code, report["error_kind"]) == (2, "usage")
    assert "recorded for another request" in report["summary"]


def test_ple_offload_rejects_an_inconsistent_reference_server(
    fake_vllm: StartFake, tmp_path: Path
) -> None:
    server, bad_reference = fake_vllm(), fake_vllm(bug="one-step-behind")
    argv = [*against(server), *PLE_ARGS, "--reference-url", bad_reference.url]
    code, report = run(ple_offload.main, argv, tmp_path / "r.json")
    assert (code, report["error_kind"]) == (77, "inconclusive")


# ----------------------------------------------------------------------------- no verdict


CHECK_MAINS = [(async_inputs.main, ASYNC_ARGS), (ple_offload.main, PLE_ARGS)]


@pytest.mark.parametrize(("main", "args"), CHECK_MAINS)
def test_a_server_that_is_down_gives_exit_2(
    main: Callable[[list[str]], int], args: list[str], tmp_path: Path
) -> None:
    argv = ["--base-url", f"http://127.0.0.1:{free_port()}", "--model", MODEL, *args]
    code, report = run(main, argv, tmp_path / "r.json")
    assert (code, report["status"], report["error_kind"]) == (2, "error", "infra")


@pytest.mark.parametrize(("main", "args"), CHECK_MAINS)
def test_a_wrong_model_name_gives_exit_2(
    main: Callable[[list[str]], int], args: list[str], fake_vllm: StartFake, tmp_path: Path
) -> None:
    argv = ["--base-url", fake_vllm().url, "--model", "not/served", *args]
    code, report = run(main, argv, tmp_path / "r.json")
    assert (code, report["error_kind"]) == (2, "infra")
    assert "HTTP 404" in report["summary"]


def test_the_module_entry_point_exits_2_when_the_server_is_down() -> None:
    argv = ["--base-url", f"http://127.0.0.1:{free_port()}", "--model", MODEL]
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_checks.ple_offload", *argv],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and proc.stdout.startswith("ERROR ple-offload: infra error")


# ----------------------------------------------------------------------------- --serve


def test_serve_runs_the_none_reference_then_the_default_server(tmp_path: Path) -> None:
    argv = ["--serve", MODEL, *SERVE_ARGS, "--serve-env", "FAKE_VLLM_BUG=one-step-behind"]
    argv += [*PLE_ARGS, "--serve-log-dir", str(tmp_path)]
    code, report = run(ple_offload.main, argv, tmp_path / "r.json")
    assert code == 1  # the fake ignores the bug under cudagraph_mode NONE, as vLLM does
    assert [c["matches_reference"] for c in report["details"]["classes"]] == [False, True]
    logs = {p.name for p in tmp_path.glob("vllm-*.log")}
    assert logs == {"vllm-ple-offload-reference.log", "vllm-ple-offload.log"}


def test_serve_requires_the_ple_offload_to_show_in_the_log(tmp_path: Path) -> None:
    argv = ["--serve", MODEL, *SERVE_ARGS, *PLE_ARGS, "--expect-ple-offload"]
    argv += ["--serve-log-dir", str(tmp_path)]
    code, report = run(
        ple_offload.main, [*argv, "--serve-env", "FAKE_VLLM_PLE_LAYERS=1"], tmp_path / "a.json"
    )
    assert (code, report["details"]["ple_offload"]) == (0, "active")

    code, report = run(ple_offload.main, argv, tmp_path / "b.json")  # a model without PLE layers
    assert (code, report["error_kind"]) == (77, "inconclusive")
    assert "PLE offload is not active on the server under test" in report["summary"]

    with pytest.raises(SystemExit) as refused:
        ple_offload.main(
            ["--base-url", "http://127.0.0.1:1", "--model", MODEL, "--expect-ple-offload"]
        )
    assert refused.value.code == 2


def test_serve_starts_vllm_with_async_scheduling(tmp_path: Path) -> None:
    argv = ["--serve", MODEL, *SERVE_ARGS, "--serve-env", "FAKE_VLLM_BUG=stale-decode-token"]
    code, report = run(async_inputs.main, [*argv, *ASYNC_ARGS], tmp_path / "r.json")
    assert code == 1 and "repeated-token" in report["summary"]


def test_serve_turns_the_scheduler_probe_on_and_reads_it(tmp_path: Path) -> None:
    argv = ["--serve", MODEL, *SERVE_ARGS, "--serve-log-dir", str(tmp_path)]
    code, report = run(async_inputs.main, [*argv, *ASYNC_ARGS], tmp_path / "r.json")
    assert (code, report["status"]) == (0, "passed")
    assert report["details"]["probe"]["uncarried"] > 0
    assert (tmp_path / "vllm-async-inputs.probe.jsonl").exists()


def test_the_fake_refuses_a_flag_real_vllm_would_not_know(tmp_path: Path) -> None:
    argv = ["--serve", MODEL, *SERVE_ARGS, "--serve-arg=--no-such-vllm-flag"]
    code, report = run(async_inputs.main, [*argv, *ASYNC_ARGS], tmp_path / "r.json")
    assert (code, report["error_kind"]) == (2, "infra")
    assert "unrecognized arguments: --no-such-vllm-flag" in report["summary"]


def test_serve_reports_a_vllm_that_dies_at_startup(tmp_path: Path) -> None:
    dying = f"{shlex.quote(sys.executable)} -c 'print(\"no accelerator found\"); exit(3)'"
    argv = ["--serve", MODEL, "--vllm-bin", dying, "--serve-log-dir", str(tmp_path)]
    code, report = run(async_inputs.main, argv, tmp_path / "r.json")
    assert (code, report["error_kind"]) == (2, "infra")
    assert "exited with code 3" in report["summary"]
    assert "no accelerator found" in report["summary"]
