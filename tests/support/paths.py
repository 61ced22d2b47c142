"""Where the tests find the project and the shared contract data (../shared beside the checkout)."""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED = Path(os.environ.get("CARRY_SHARED_DIR", REPO_ROOT.parent / "shared")).resolve()
GITHUB_CONTRACT = SHARED / "github"
WEBHOOK_EXAMPLES = GITHUB_CONTRACT / "webhooks"
REST_SCHEMAS = GITHUB_CONTRACT / "rest"
SEEDS = SHARED / "seeds"
