"""Where the tests find the project and the contract data they check it against (tests/data)."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
TEST_DATA = REPO_ROOT / "tests" / "data"
GITHUB_CONTRACT = TEST_DATA / "github"
WEBHOOK_EXAMPLES = GITHUB_CONTRACT / "webhooks"
REST_SCHEMAS = GITHUB_CONTRACT / "rest"
STORED_STATES = TEST_DATA / "state"
# carry's top-level packages: the shared library, the service, the runner host, the vLLM checks.
PACKAGES = ("bot", "workers", "runner", "vllm_checks")
