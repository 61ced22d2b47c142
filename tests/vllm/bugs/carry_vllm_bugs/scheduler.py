"""A prefill-first scheduler for real vLLM, loaded with ``--scheduler-cls``.

vLLM's V1 scheduler hands the token budget out in the order requests started running and admits
new ones only with what is left, so a running decode is never left out of a step (a probe
counted 0 over thousands of steps). Schedulers that serve prompt chunks first do leave decodes
out behind long prompts, which is the condition the async-inputs bug needs. This subclass only
reorders the running list before each step (prompt chunks first, then the rest in their order);
the engine, the model runner and the budget accounting stay vLLM's own.
"""

from __future__ import annotations

from typing import Any

from vllm.v1.core.sched.async_scheduler import AsyncScheduler


class PrefillFirstAsyncScheduler(AsyncScheduler):
    def schedule(self, *args: Any, **kwargs: Any) -> Any:
        prefilling = [r for r in self.running if r.num_computed_tokens < r.num_prompt_tokens]
        if prefilling:
            rest = [r for r in self.running if r.num_computed_tokens >= r.num_prompt_tokens]
            self.running[:] = prefilling + rest
        return super().schedule(*args, **kwargs)
