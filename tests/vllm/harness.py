"""Both Verify checks against real vLLM on the CPU, each clean and with its bug injected.

Builds the tiny chain model, then runs each check in ``--serve`` mode against real ``vllm serve``
(from the environment ``make vllm-env`` builds) and prints one line per variant:

    RESULT <check> <variant> <PASS|FAIL|INCONCLUSIVE|ERROR> <measured condition>

The variants and what each must give (``--strict`` exits 1 when one does not):

* async-inputs ``stock-scheduler``: vLLM's own scheduler never leaves a running decode out of a
  step, so the probe sees no decode row that missed one: INCONCLUSIVE, not a hollow PASS.
* async-inputs ``clean`` / ``bug-injected``: a prefill-first scheduler (``--scheduler-cls``)
  leaves decodes out behind long prompts: PASS without the bug, FAIL with it.
* async-inputs ``stock-preempt``: vLLM's stock scheduler with a KV cache too small for the load
  (``--num-gpu-blocks-override``, the CPU's way to a tiny cache) and prefix caching on: running
  requests are preempted and resumed. A resumed request comes back through the prefix cache, and
  only when every full block of it is still cached is its first row a decode row (the bug's
  condition); mostly its blocks were evicted and it is prefilled again. So the verdict follows
  the probe: INCONCLUSIVE when no resumed decode row was seen, else PASS.
* ple-offload ``clean``: 1 class: PASS (the cudagraph_mode=NONE reference is compared and
  reported, with the largest logprob difference; it never decides).
* ple-offload ``bug-injected``: the first request is computed differently: 2 classes, FAIL.

    python -m tests.vllm.harness --vllm-env .venv-vllm --work /tmp/carry-vllm [--strict]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:  # `python tests/vllm/harness.py` as well as `-m`
    sys.path.insert(0, str(REPO))

from runner import sandbox  # noqa: E402

PREFILL_FIRST = "carry_vllm_bugs.scheduler.PrefillFirstAsyncScheduler"
BUDGET = 64
STATUS = {"passed": "PASS", "failed": "FAIL"}


@dataclass(frozen=True)
class Variant:
    check: str
    name: str
    expect: str
    args: tuple[str, ...]


def variants() -> list[Variant]:
    async_load = ("--budget", str(BUDGET), "--decoders", "4", "--long-prompts", "2")
    async_load += ("--rounds", "1", "--decode-tokens", "64", "--long-prompt-factor", "3")
    eager = ("--serve-arg=--enforce-eager",)  # this check does not test compilation
    prefill_first = (*async_load, *eager, f"--serve-arg=--scheduler-cls={PREFILL_FIRST}")
    ple = ("--requests", "6", "--prompt-words", "48")
    return [
        Variant("async-inputs", "stock-scheduler", "INCONCLUSIVE", (*async_load, *eager)),
        Variant("async-inputs", "clean", "PASS", prefill_first),
        Variant(
            "async-inputs",
            "bug-injected",
            "FAIL",
            (*prefill_first, "--serve-env", "CARRY_VLLM_BUG=stale-decode-input"),
        ),
        Variant("ple-offload", "clean", "PASS", ple),
        Variant(
            "ple-offload",
            "bug-injected",
            "FAIL",
            (*ple, "--no-reference", "--serve-env", "CARRY_VLLM_BUG=cold-first-request"),
        ),
    ]


def stock_preempt() -> Variant:
    """4 decoders of 320 tokens and one ~1150-token prompt in 40 blocks of 32 tokens."""
    load = ("--budget", str(BUDGET), "--decoders", "4", "--long-prompts", "1", "--rounds", "1")
    load += ("--decode-tokens", "320", "--long-prompt-factor", "3", "--serve-arg=--enforce-eager")
    cache = ("--serve-arg=--enable-prefix-caching", "--serve-arg=--num-gpu-blocks-override=40")
    cache += ("--serve-arg=--block-size=32", "--serve-arg=--max-model-len=1216")
    return Variant("async-inputs", "stock-preempt", "INCONCLUSIVE", (*load, *cache))


def expected_word(variant: Variant, report: dict[str, Any]) -> str:
    """The verdict a variant must give; stock-preempt's follows what the probe saw."""
    if variant.name != "stock-preempt":
        return variant.expect
    probe = (report.get("details") or {}).get("probe") or {}
    missed = probe.get("uncarried", 0) + probe.get("resumed_decode", 0)
    return "PASS" if missed else "INCONCLUSIVE"


def build_model(vllm_python: Path, work: Path) -> Path:
    model = work / "tiny-chain-llama"
    if not (model / "model.safetensors").exists():
        command = [str(vllm_python), "-m", "tests.vllm.tiny_llama", str(model)]
        subprocess.run(command, cwd=REPO, check=True, capture_output=True, text=True)
    return model


def run_variant(variant: Variant, model: Path, vllm_env: Path, work: Path) -> dict[str, Any]:
    out = work / f"{variant.check}-{variant.name}"
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.json"
    report.unlink(missing_ok=True)
    module = "async_inputs" if variant.check == "async-inputs" else "ple_offload"
    command = [sys.executable, "-m", f"vllm_checks.{module}", "--serve", str(model)]
    command += ["--vllm-bin", str(vllm_env / "bin" / "vllm"), "--serve-log-dir", str(out)]
    command += ["--serve-arg=--dtype=float32", "--serve-arg=--max-model-len=2048"]
    command += ["--serve-env", "VLLM_CPU_KVCACHE_SPACE=1", "--startup-timeout", "600"]
    command += ["--timeout", "300", *variant.args, "--json", str(report)]
    # As a runner runs a check by default: in the step sandbox, with no network but its own
    # loopback (where vllm serve listens), where this machine gives namespaces.
    box = sandbox.resolve("auto")
    command = box.wrap(command, network=False, writable=[work])  # work may be in the checkout
    home = work / "home"  # the step's own, as a runner gives each job (vLLM caches there)
    home.mkdir(exist_ok=True)
    started = time.monotonic()
    env = {**_env(), "HOME": str(home)}
    proc = subprocess.run(command, cwd=REPO, capture_output=True, text=True, env=env)
    seconds = time.monotonic() - started
    data = json.loads(report.read_text()) if report.exists() else {}
    data.setdefault("summary", (proc.stdout + proc.stderr).strip()[-2000:])
    data["seconds"] = round(seconds, 1)
    data["sandbox"] = box.describe(network=False)
    data["log_dir"] = str(out)
    return data


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("CARRY_VLLM_", "VLLM_"))}


def verdict_word(report: dict[str, Any]) -> str:
    status = report.get("status")
    if status in STATUS:
        return STATUS[status]
    return "INCONCLUSIVE" if report.get("error_kind") == "inconclusive" else "ERROR"


def measured(check: str, report: dict[str, Any]) -> str:
    details = report.get("details") or {}
    if check == "async-inputs":
        probe = details.get("probe") or {}
        return (
            f"uncarried-decode-rows={probe.get('uncarried')} sat-out={probe.get('sat_out')} "
            f"preempted={probe.get('preempted')} resumed={probe.get('resumed')} "
            f"resumed-as-decode-row={probe.get('resumed_decode')} "
            f"cached-on-resuming={probe.get('resumed_cached')} "
            f"first-rows-back={probe.get('resumed_tokens')}"
        )
    classes = details.get("classes") or []
    sizes = "+".join(str(c["count"]) for c in classes)
    return f"classes={len(classes)} sizes={sizes or '-'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--vllm-env", type=Path, required=True, help="venv with vllm-cpu")
    parser.add_argument("--work", type=Path, required=True, help="model, logs and reports")
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 unless every line is as expected"
    )
    args = parser.parse_args(argv)
    vllm_env = args.vllm_env.resolve()
    args.work.mkdir(parents=True, exist_ok=True)
    model = build_model(vllm_env / "bin" / "python", args.work)
    unexpected = 0
    for variant in [*variants(), stock_preempt()]:
        report = run_variant(variant, model, vllm_env, args.work)
        word, expect = verdict_word(report), expected_word(variant, report)
        print(
            f"RESULT {variant.check} {variant.name} {word} {measured(variant.check, report)} "
            f"({report['seconds']:.0f} s)",
            flush=True,
        )
        if word != expect:
            unexpected += 1
            print(f"  expected {expect}: {report.get('summary')}", flush=True)
            print(f"  logs: {report['log_dir']}", flush=True)
    return 1 if args.strict and unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
