"""The dashboard app as the dashboard's tests serve it (the whole carry app over real HTTP on a
real Redis) and the state they seed it with: three series, their history, a runner and a run log."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import redis

from bot.config import CarryConfig, Settings
from bot.core.state import CiState, PatchState, PrInfo, SeriesState
from bot.store.deliveries import NewDelivery, record_delivery
from bot.store.runners import append_runlog, heartbeat
from bot.store.series import append_history, save_series
from bot.web.access import Access
from bot.web.app import create_app
from tests.support.asgi import serve
from tests.support.paths import REPO_ROOT

PATCH = "0001-seed-decode-input-ids-before-async-scatter.patch"
MAIN = "async-inputs-main"
RELEASE = "async-inputs-v0.26.0"
PLE = "ple-offload-pr53899"
MAIN_HEAD = "5f0c1d2e3a4b5c6d7e8f90112233445566778899"
RELEASE_HEAD = "b059f9c95d6a07f19eb00aa06d1ec8b87b296437"
FAILED_RUN = "run-gaudi-0007"
PASSED_RUN = "run-gaudi-0006"
TOKEN_ENV = "CARRY_DASHBOARD_TOKEN"
WEBHOOK_SECRET = "whsec-dashboard-test-4b1f9e"
GITHUB_TOKEN = "ghp_dashboardTestToken0123456789abcdefABCD"
DASHBOARD_TOKEN = "dash-token-test-77c1a0e2"
GATE = Access(None)

CONFIG = CarryConfig.model_validate(
    {
        "downstream": {"repo": "example-org/carry", "patches_dir": "patches"},
        "upstreams": {
            "vllm-gaudi": {
                "url": "https://github.com/vllm-project/vllm-gaudi.git",
                "repo": "vllm-project/vllm-gaudi",
            },
            "vllm": {
                "url": "https://github.com/vllm-project/vllm.git",
                "repo": "vllm-project/vllm",
            },
        },
        "series": [
            {
                "id": RELEASE,
                "upstream": "vllm-gaudi",
                "base": {"tag": "v0.26.0"},
                "patches": RELEASE,
            },
            {"id": MAIN, "upstream": "vllm-gaudi", "base": {"branch": "main"}, "patches": MAIN},
            {"id": PLE, "upstream": "vllm", "base": {"pull": 53899}, "patches": PLE},
        ],
        "runners": {
            "gaudi": {"queue": "hw.gaudi", "workdir": "/var/lib/carry/runner"},
            "gb10": {"queue": "hw.gb10", "workdir": "/var/lib/carry/runner"},
        },
    }
)


# --------------------------------------------------------------------------- harness


def secret_settings() -> Settings:
    # The repository itself is the downstream checkout the fix pages are read from.
    return Settings(
        webhook_secret=WEBHOOK_SECRET,
        github_token=GITHUB_TOKEN,
        max_body_bytes=None,
        downstream_dir=REPO_ROOT,
    )


def ago(**delta: float) -> str:
    moment = datetime.now(UTC) - timedelta(**delta)
    return moment.isoformat(timespec="seconds").replace("+00:00", "Z")


@contextlib.contextmanager
def dashboard(
    client: redis.Redis, config: CarryConfig | None = CONFIG, *, token: str | None = None
) -> Iterator[str]:
    """The whole carry app (create_app), its downstream checkout the repository root."""
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO_ROOT)
        if token is None:
            patch.delenv(TOKEN_ENV, raising=False)
        else:
            patch.setenv(TOKEN_ENV, token)
        app = create_app(config, secret_settings(), client)
    with serve(app) as url:
        yield url


# --------------------------------------------------------------------------- seeded state


def main_series() -> SeriesState:
    conflict = PatchState(
        name=PATCH,
        subject="Seed decode input ids before the async scatter",
        status="conflict",
        decision="review",
        reason="hunk 2 of hpu_model_runner.py does not apply on the new head",
        evidence=[
            {"signal": "apply --3way", "result": "conflict", "file": "hpu_model_runner.py"},
            {"signal": "patch-id", "result": "no match in 091bbad..5f0c1d2"},
        ],
        conflict={"files": ["vllm_gaudi/v1/worker/hpu_model_runner.py"], "hunks": [2]},
    )
    return SeriesState(
        id=MAIN,
        upstream_repo="vllm-project/vllm-gaudi",
        base="branch main",
        head_sha=MAIN_HEAD,
        head_ref="refs/heads/main",
        head_seen_at=ago(hours=2),
        head_actor="upstream-dev",
        phase="idle",
        outcome="conflict",
        patches=[conflict],
        ci={"gaudi": CiState(runner="gaudi", state="failure", run_id=FAILED_RUN, detail="exit 1")},
        last_event="head moved to 5f0c1d2",
    )


def release_series() -> SeriesState:
    applies = PatchState(
        name=PATCH,
        subject="Seed decode input ids before the async scatter",
        status="applies",
        decision="keep",
        reason="applies cleanly",
        upstream_prs=[{"ref": "vllm-project/vllm-gaudi#1919", "state": "open"}],
    )
    return SeriesState(
        id=RELEASE,
        upstream_repo="vllm-project/vllm-gaudi",
        base="tag v0.26.0",
        head_sha=RELEASE_HEAD,
        head_ref="refs/tags/v0.26.0",
        head_seen_at=ago(days=3),
        outcome="clean",
        patches=[applies],
        pr=PrInfo(number=12, url="https://github.com/example-org/carry/pull/12", branch="carry/r"),
        ci={"gaudi": CiState(runner="gaudi", state="success", run_id=PASSED_RUN)},
        last_event="checked v0.26.0",
    )


def ple_series() -> SeriesState:
    return SeriesState(
        id=PLE,
        upstream_repo="vllm-project/vllm",
        base="pull 53899",
        phase="awaiting-import",
        base_pr_state="open",
        last_event="waiting for carry import",
    )


DECISION = {
    "patch": PATCH,
    "head": MAIN_HEAD,
    "status": "conflict",
    "decision": "review",
    "reason": "hunk 2 fails",
    "evidence": [{"signal": "apply --3way", "result": "conflict"}],
}


def seed(client: redis.Redis) -> None:
    for state in (main_series(), release_series(), ple_series()):
        save_series(client, state)
    append_history(client, MAIN, "rebase", head=MAIN_HEAD, ref="refs/heads/main")
    append_history(client, MAIN, "decision", **DECISION)  # as workers/rebase.py writes it
    append_history(client, MAIN, "ci-check", run_id=FAILED_RUN, runner="gaudi", state="failure")
    append_history(
        client, RELEASE, "rebased", patches={PATCH: {"status": "applies", "decision": "keep"}}
    )
    heartbeat(client, "gaudi", "gaudi-host-1", {"queue": "hw.gaudi"})
    client.rpush("hw.gaudi", "job-1", "job-2")
    append_runlog(client, FAILED_RUN, "stdout", "serving model on 127.0.0.1:8000")
    append_runlog(client, FAILED_RUN, "stderr", "AssertionError: greedy outputs differ")
    delivery = NewDelivery(
        "delivery-0001",
        "push",
        b"{}",
        datetime.now(UTC),
        "accepted",
        json.dumps({"kind": "push", "ref": "refs/heads/main"}),
        event_key="push:vllm-project/vllm-gaudi:refs/heads/main",
    )
    record_delivery(client, delivery)
