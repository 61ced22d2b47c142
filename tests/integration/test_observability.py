"""/metrics for Prometheus, and JSON log lines whose correlation ids follow a delivery from the
web process into the worker's tasks."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families
from pydantic import SecretStr

from bot.config import CarryConfig, Settings, load_config
from bot.core.state import CiState, SeriesState
from bot.store import metrics as store_metrics
from bot.store import series as store
from bot.web.app import create_app
from bot.web.webhooks import sign
from harness.carry_env import BODY, CarryEnv
from tests.support.carry_services import json_lines
from tests.support.paths import REPO_ROOT

SECRET = "metrics-test-secret"
EXAMPLE_CONFIG = REPO_ROOT / "config" / "carry.example.yaml"


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """(sample name, labels) -> value, for every sample of an exposition."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(text: str, name: str, **labels: str) -> float | None:
    return samples(text).get((name, frozenset(labels.items())))


@pytest.fixture
def config() -> CarryConfig:
    return load_config(EXAMPLE_CONFIG, check_dirs=False)


@pytest.fixture
def client(redis_url: str) -> redis.Redis:
    return redis.Redis.from_url(redis_url)


@pytest.fixture
def web(client: redis.Redis, config: CarryConfig) -> Iterator[TestClient]:
    app = create_app(config, Settings(webhook_secret=SecretStr(SECRET)), client)
    with TestClient(app) as http:
        yield http


def scrape(web: TestClient) -> str:
    response = web.get("/metrics")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def test_events_rebase_durations_and_rate_limit_come_from_the_store(
    web: TestClient, client: redis.Redis
) -> None:
    for kind in ("head_moved", "head_moved", "comment_created"):
        store_metrics.count_event(client, kind)
    for seconds in (0.05, 0.3, 0.3, 700.0):
        store_metrics.observe_rebase(client, seconds)
    store_metrics.record_rate_limit(client, 4321, 5000)

    text = scrape(web)

    assert value(text, "carry_events_total", kind="head_moved") == 2
    assert value(text, "carry_events_total", kind="comment_created") == 1
    assert value(text, "carry_rebase_seconds_bucket", le="0.1") == 1
    assert value(text, "carry_rebase_seconds_bucket", le="0.5") == 3
    assert value(text, "carry_rebase_seconds_bucket", le="600.0") == 3
    assert value(text, "carry_rebase_seconds_bucket", le="+Inf") == 4
    assert value(text, "carry_rebase_seconds_count") == 4
    assert value(text, "carry_rebase_seconds_sum") == pytest.approx(700.65)
    assert value(text, "carry_github_rate_limit_remaining") == 4321
    assert value(text, "carry_store_up") == 1


def test_jobs_by_state_and_ci_queue_depth_are_computed_at_scrape_time(
    web: TestClient, client: redis.Redis
) -> None:
    store.save_series(client, SeriesState(id="a", phase="running"))
    store.save_series(
        client,
        SeriesState(
            id="b",
            phase="idle",
            ci={"gaudi": CiState(runner="gaudi", state="queued")},
        ),
    )
    store.save_series(
        client, SeriesState(id="c", phase="error", ci={"gb10": CiState("gb10", "failure")})
    )
    client.rpush("hw.gaudi", "job-1", "job-2")
    client.rpush("hw.gaudi\x06\x169", "urgent-job")  # kombu's key for a priority-9 message
    client.rpush("hw.spare", "job-3")  # a queue the config does not name still shows up

    text = scrape(web)

    assert value(text, "carry_jobs", job="rebase", state="running") == 1
    assert value(text, "carry_jobs", job="rebase", state="idle") == 1
    assert value(text, "carry_jobs", job="rebase", state="error") == 1
    assert value(text, "carry_jobs", job="rebase", state="queued") == 0
    assert value(text, "carry_jobs", job="ci", state="queued") == 1
    assert value(text, "carry_jobs", job="ci", state="failure") == 1
    assert value(text, "carry_ci_queue_depth", kind="gaudi") == 3
    assert value(text, "carry_ci_queue_depth", kind="gb10") == 0
    assert value(text, "carry_ci_queue_depth", kind="spare") == 1


def test_webhook_deliveries_are_counted_by_outcome(web: TestClient) -> None:
    before = value(scrape(web), "carry_webhook_deliveries_total", outcome="accepted") or 0
    body = json.dumps({"zen": "Keep it logically awesome.", "hook_id": 1}).encode()
    response = web.post(
        "/webhooks/github",
        content=body,
        headers={
            "X-GitHub-Event": "ping",
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(SECRET, body),
            "Content-Type": "application/json",
        },
    )
    assert response.status_code == 200
    after = value(scrape(web), "carry_webhook_deliveries_total", outcome="accepted")
    assert after == before + 1


def test_metrics_answer_when_redis_is_down(config: CarryConfig) -> None:
    dead = redis.Redis(port=1, socket_connect_timeout=0.2, socket_timeout=0.2)
    app = create_app(config, Settings(webhook_secret=SecretStr(SECRET)), dead)
    with TestClient(app) as http:
        text = scrape(http)
    assert value(text, "carry_store_up") == 0
    assert value(text, "carry_events_total", kind="head_moved") is None
    # The writers swallow the outage: a metric never fails the work it measures.
    store_metrics.count_event(dead, "head_moved")
    store_metrics.observe_rebase(dead, 1.0)
    store_metrics.record_rate_limit(dead, 10)


# --------------------------------------------------------------------------- logs


FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}


def test_worker_lines_are_json_and_carry_the_delivery_into_each_task(
    tmp_path: Path, redis_url: str
) -> None:
    env = CarryEnv(tmp_path, redis_url)
    env.carry_patches([FIX])
    env.write_config()
    try:
        url = env.start_web()
        worker_log = env.start_carry_worker()
        before = env.upstream.head()
        after = env.upstream.commit("upstream change", {"other.py": "x = 1\n"})
        delivery = f"delivery-{uuid.uuid4()}"
        response = env.deliver(url, "push", env.push_payload(after, before), delivery)
        assert response.status_code == 202
        env.wait_checked(after)
        scraped = samples(_get(f"{url}/metrics"))
    finally:
        env.stop()

    records = json_lines(worker_log)
    rebased = [r for r in records if r["logger"] == "carry.rebase" and "rebased" in r["msg"]]
    assert len(rebased) == 1
    line = rebased[0]
    assert line["delivery_id"] == delivery
    assert line["event_key"].startswith("head:")
    assert line["task"] == "carry.rebase" and line["task_id"]
    assert line["parent_task_id"] != line["task_id"]  # the ingest task that planned the rebase
    ingest = [r for r in records if r.get("task") == "carry.ingest"]
    assert ingest and {r["task_id"] for r in ingest} == {line["parent_task_id"]}
    # What the worker counted reaches the web process's /metrics through Redis.
    assert scraped[("carry_events_total", frozenset({("kind", "head_moved")}))] >= 1
    assert scraped[("carry_rebase_seconds_count", frozenset())] == 1


def _get(url: str) -> str:
    import httpx

    response = httpx.get(url, timeout=10)
    response.raise_for_status()
    return response.text


def test_metrics_need_the_dashboard_token_when_one_is_set(
    client: redis.Redis, config: CarryConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(config.web.dashboard_token_env, "metrics-dash-token")
    app = create_app(config, Settings(webhook_secret=SecretStr(SECRET)), client)
    with TestClient(app) as http:
        assert http.get("/metrics").status_code == 401
        answer = http.get("/metrics", headers={"Authorization": "Bearer metrics-dash-token"})
        assert answer.status_code == 200 and "carry_store_up" in answer.text
