"""Bugs injected into real vLLM through its own plugin hook, one at a time, by CARRY_VLLM_BUG.

* ``stale-decode-input`` (the async-inputs class): the model runner keeps a persistent
  "device" copy of the input ids that, as in the unfixed vllm-gaudi runner, is written only at
  the rows of requests that sampled a token in the previous step. Every decode row of a request
  that did not (it sat out a step, or was resumed) is fed whatever that copy held at its
  position. vLLM's CPU runner keeps one buffer for host and device and takes every input id from
  the host, so the plugin keeps the "device" copy and its own record of the previous step.
* ``cold-first-request`` (the PLE-offload class): the first request the server computes gets
  its logits nudged, as when the first forward consumes state warm-up left behind; every later
  request is exact. The ple-offload check must see two classes.

With CARRY_VLLM_BUG unset the plugin changes nothing.
"""

from __future__ import annotations

import os
from typing import Any

ENV = "CARRY_VLLM_BUG"
BUGS = ("stale-decode-input", "cold-first-request")


def register() -> None:
    bug = os.environ.get(ENV)
    if not bug:
        return
    if bug not in BUGS:
        raise ValueError(f"{ENV}={bug!r}: known bugs are {', '.join(BUGS)}")
    if bug == "stale-decode-input":
        _stale_decode_input()
    else:
        _cold_first_request()


def _stale_decode_input() -> None:
    import torch
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    original = GPUModelRunner._prepare_input_ids
    if getattr(original, "_carry_bug", False):
        return

    def prepare_input_ids(
        self: Any, scheduler_output: Any, num_reqs: int, total: int, cu_num_tokens: Any
    ) -> None:
        original(self, scheduler_output, num_reqs, total, cu_num_tokens)
        ids = self.input_ids.gpu
        device = getattr(self, "_carry_device_ids", None)
        if device is None or device.shape != ids.shape:
            device = self._carry_device_ids = torch.zeros_like(ids)
        carried = getattr(self, "_carry_sampled_last_step", set())
        batch, sampled = self.input_batch, set()
        for row in range(num_reqs):
            req_id = batch.req_ids[row]
            end = int(cu_num_tokens[row])
            count = end - (int(cu_num_tokens[row - 1]) if row else 0)
            computed, prompt = batch.num_computed_tokens_cpu[row], batch.num_prompt_tokens[row]
            if req_id in carried:
                device[end - 1] = ids[end - 1]  # the scatter of last step's samples
            elif count == 1 and computed >= prompt:
                ids[end - 1] = device[end - 1]  # a decode row nobody seeded: stale
            if computed + count >= prompt:
                sampled.add(req_id)  # this step samples a real token for it
        self._carry_sampled_last_step = sampled

    prepare_input_ids._carry_bug = True  # type: ignore[attr-defined]
    GPUModelRunner._prepare_input_ids = prepare_input_ids  # type: ignore[method-assign]


def _cold_first_request() -> None:
    from vllm.model_executor.layers.logits_processor import LogitsProcessor
    from vllm.v1.worker.gpu_model_runner import GPUModelRunner

    execute, forward = GPUModelRunner.execute_model, LogitsProcessor.forward
    if getattr(forward, "_carry_bug", False):
        return
    steps = {"seen": 0}  # warm-up and profiling runs never go through execute_model

    def execute_model(self: Any, *args: Any, **kwargs: Any) -> Any:
        steps["seen"] += 1  # the first real step lasts until the second one starts
        return execute(self, *args, **kwargs)

    def perturbed(self: Any, *args: Any, **kwargs: Any) -> Any:
        logits = forward(self, *args, **kwargs)
        if logits is not None and steps["seen"] == 1:
            logits = logits.clone()  # token 0 nudged: no argmax moves, but no logprob is equal
            logits[..., 0] += 1e-3
        return logits

    perturbed._carry_bug = True  # type: ignore[attr-defined]
    GPUModelRunner.execute_model = execute_model  # type: ignore[method-assign]
    LogitsProcessor.forward = perturbed  # type: ignore[method-assign]
