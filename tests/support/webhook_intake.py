"""What the webhook intake's tests send: the intake's secret, its config, and GitHub's example
payloads (tests/data/github/webhooks) as bodies."""

from __future__ import annotations

from bot.config import CarryConfig
from tests.support.paths import WEBHOOK_EXAMPLES

SECRET = "test-webhook-secret"
CONFIG = CarryConfig.model_validate(
    {
        "downstream": {"repo": "example-org/carry"},
        "upstreams": {
            "vllm": {"url": "https://github.com/vllm-project/vllm.git", "repo": "vllm-project/vllm"}
        },
        "series": [],
        "web": {"max_body_bytes": 64 * 1024},
    }
)


def example_body(name: str) -> bytes:
    return (WEBHOOK_EXAMPLES / name).read_bytes()
