"""Prometheus metrics, served as GET /metrics by the web process.

Two sources, one exposition:
  * this process's registry (prometheus_client's default `REGISTRY`): what the web process
    counts itself, e.g. carry_webhook_deliveries_total{outcome} (bot.web.webhooks), plus the
    client library's process_* and python_* metrics;
  * Redis, read at scrape time: what worker processes count (events, rebase durations, GitHub
    rate limit) is kept there, because workers run in other processes or containers than the
    one Prometheus scrapes; and what is a fact of the store (jobs by state, CI queue depth) is
    computed from it on each scrape.

Writers (`count_event`, `observe_rebase`, `record_rate_limit`) never raise: a metric must not
fail the work it measures.

Metrics read from Redis:
  carry_events_total{kind}                      events planned, by event kind, and failures by
                                                kind (poll_failed, rebase_failed, publish_failed,
                                                rebase_timed_out, task_timed_out, ...)
  carry_rebase_seconds                          histogram: duration of completed rebases
  carry_jobs{job,state}                         series (job="rebase", state=phase) and their
                                                CI rows (job="ci", state=CI state), now
  carry_ci_queue_depth{kind}                    hardware jobs waiting in hw.<kind>, now
  carry_github_rate_limit_remaining             REST requests left, as last seen by a worker
  carry_github_rate_limit_updated_timestamp_seconds   when that was seen
  carry_store_up                                1 when Redis answered this scrape
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Final

import redis
from fastapi import APIRouter, params
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from bot.config import CarryConfig
from bot.core.state import CI_STATES, PHASES
from bot.store.series import PREFIX, all_series

log = logging.getLogger("carry.metrics")

EVENTS_KEY: Final = f"{PREFIX}metrics:events"
REBASE_KEY: Final = f"{PREFIX}metrics:rebase_seconds"
GITHUB_KEY: Final = f"{PREFIX}metrics:github"
# Upper bounds in seconds; a rebase of a vLLM-sized head takes a fraction of a second warm,
# minutes when the mirror is cloned first.
REBASE_BUCKETS: Final = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
# kombu's Redis transport keeps messages of priority p > 0 in "<queue>\x06\x16<p>".
_PRIORITY_SEP: Final = "\x06\x16"
_PRIORITY_STEPS: Final = (3, 6, 9)
HW_QUEUE_PREFIX: Final = "hw."


# --------------------------------------------------------------------------- writers


def count_event(client: redis.Redis, kind: str) -> None:
    """One more event of `kind` planned (carry_events_total)."""
    try:
        client.hincrby(EVENTS_KEY, kind, 1)
    except redis.RedisError as err:
        log.debug("event not counted: %s", err)


def observe_rebase(client: redis.Redis, seconds: float) -> None:
    """One completed rebase that took `seconds` (carry_rebase_seconds)."""
    bucket = bisect.bisect_left(REBASE_BUCKETS, seconds)  # len(REBASE_BUCKETS) means +Inf
    try:
        pipe = client.pipeline()
        pipe.hincrby(REBASE_KEY, f"b{bucket}", 1)
        pipe.hincrbyfloat(REBASE_KEY, "sum", seconds)
        pipe.hincrby(REBASE_KEY, "count", 1)
        pipe.execute()
    except redis.RedisError as err:
        log.debug("rebase duration not recorded: %s", err)


def record_rate_limit(client: redis.Redis, remaining: int | None, limit: int | None = None) -> None:
    """What GitHub's last answer said about the REST rate limit (x-ratelimit-remaining); the
    GitHub layer calls it through the callback a worker's Runtime gives it."""
    if remaining is None or remaining < 0:
        return
    values = {"remaining": remaining, "updated_at": time.time()}
    if limit is not None and limit >= 0:
        values["limit"] = limit
    try:
        client.hset(GITHUB_KEY, mapping=values)  # type: ignore[arg-type]
    except redis.RedisError as err:
        log.debug("rate limit not recorded: %s", err)


@dataclass(frozen=True)
class RateLimitSeen:
    remaining: int
    limit: int | None
    seen_at: float  # Unix time


def rate_limit_seen(client: redis.Redis) -> RateLimitSeen | None:
    """The REST rate limit as a worker last saw it; None before any GitHub call."""
    raw = _text_map(client.hgetall(GITHUB_KEY))
    if "remaining" not in raw:
        return None
    limit = raw.get("limit")
    return RateLimitSeen(
        int(float(raw["remaining"])),
        int(float(limit)) if limit else None,
        float(raw.get("updated_at", 0)),
    )


# --------------------------------------------------------------------------- scrape


class StoreCollector(Collector):
    """The metrics that live in Redis, read on each scrape."""

    def __init__(self, client: redis.Redis, config: CarryConfig | None) -> None:
        self.client = client
        self.config = config

    def collect(self) -> Iterator[Metric]:
        try:
            metrics = [
                self._events(),
                self._rebase_seconds(),
                self._jobs(),
                self._queue_depth(),
                *self._rate_limit(),
            ]
        except redis.RedisError as err:
            log.warning("metrics from the store unavailable: %s", err)
            yield _store_up(False)
            return
        yield from metrics
        yield _store_up(True)

    def _events(self) -> Metric:
        family = CounterMetricFamily(
            "carry_events", "Events planned, by event kind", labels=["kind"]
        )
        for kind, count in sorted(_text_map(self.client.hgetall(EVENTS_KEY)).items()):
            family.add_metric([kind], float(count))
        return family

    def _rebase_seconds(self) -> Metric:
        raw = _text_map(self.client.hgetall(REBASE_KEY))
        bounds = [*(_le(bound) for bound in REBASE_BUCKETS), "+Inf"]
        cumulative, buckets = 0.0, []
        for index, bound in enumerate(bounds):
            cumulative += float(raw.get(f"b{index}", 0))
            buckets.append((bound, cumulative))
        return HistogramMetricFamily(
            "carry_rebase_seconds",
            "Duration of completed rebases (apply and classify one series on one head)",
            buckets=buckets,
            sum_value=float(raw.get("sum", 0)),
        )

    def _jobs(self) -> Metric:
        phases: Counter[str] = Counter({phase: 0 for phase in PHASES})
        ci: Counter[str] = Counter({state: 0 for state in CI_STATES})
        for state in all_series(self.client):
            phases[state.phase] += 1
            ci.update(row.state for row in state.ci.values())
        family = GaugeMetricFamily(
            "carry_jobs",
            "Jobs by state now: series rebases (job=rebase, state=phase) and CI runs (job=ci)",
            labels=["job", "state"],
        )
        for job, counts in (("rebase", phases), ("ci", ci)):
            for state_name, count in sorted(counts.items()):
                family.add_metric([job, state_name], float(count))
        return family

    def _queue_depth(self) -> Metric:
        queues = _hw_queues(self.config, self._listed_hw_queues())
        pipe = self.client.pipeline()
        for queue in queues.values():
            for key in _priority_keys(queue):
                pipe.llen(key)
        lengths = iter(pipe.execute())
        family = GaugeMetricFamily(
            "carry_ci_queue_depth",
            "Hardware jobs waiting in the runner kind's queue (not yet taken by a runner)",
            labels=["kind"],
        )
        for kind, queue in sorted(queues.items()):
            depth = sum(next(lengths) for _ in _priority_keys(queue))
            family.add_metric([kind], float(depth))
        return family

    def _listed_hw_queues(self) -> set[str]:
        names = set()
        for key in self.client.scan_iter(match=f"{HW_QUEUE_PREFIX}*", count=500):
            names.add(_text(key).split(_PRIORITY_SEP, 1)[0])
        return names

    def _rate_limit(self) -> Iterator[Metric]:
        seen = rate_limit_seen(self.client)
        if seen is None:
            return
        yield GaugeMetricFamily(
            "carry_github_rate_limit_remaining",
            "GitHub REST requests left in the current window, as last answered to a worker",
            value=float(seen.remaining),
        )
        yield GaugeMetricFamily(
            "carry_github_rate_limit_updated_timestamp_seconds",
            "When carry_github_rate_limit_remaining was last reported (Unix time)",
            value=seen.seen_at,
        )


def _store_up(up: bool) -> Metric:
    return GaugeMetricFamily(
        "carry_store_up", "1 when Redis answered this scrape", value=1.0 if up else 0.0
    )


def _hw_queues(config: CarryConfig | None, listed: Iterable[str]) -> dict[str, str]:
    """Runner kind -> its queue: the configured runners, and any hw.<kind> list in Redis."""
    queues = {name: runner.queue for name, runner in (config.runners if config else {}).items()}
    known = set(queues.values())
    for queue in listed:
        if queue not in known:
            queues[queue.removeprefix(HW_QUEUE_PREFIX)] = queue
    return queues


def _priority_keys(queue: str) -> list[str]:
    return [queue, *(f"{queue}{_PRIORITY_SEP}{step}" for step in _PRIORITY_STEPS)]


def _le(bound: float) -> str:
    return repr(float(bound))


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _text_map(raw: dict[bytes | str, bytes | str]) -> dict[str, str]:
    return {_text(k): _text(v) for k, v in raw.items()}


# --------------------------------------------------------------------------- route


def render(client: redis.Redis, config: CarryConfig | None) -> bytes:
    """The Prometheus text exposition of both sources."""
    store = CollectorRegistry(auto_describe=False)
    store.register(StoreCollector(client, config))
    return generate_latest(REGISTRY) + generate_latest(store)


def metrics_router(
    client: redis.Redis, config: CarryConfig | None, guard: params.Depends
) -> APIRouter:
    """GET /metrics behind `guard`: the dashboard's token, when one is set."""
    router = APIRouter(dependencies=[guard])

    @router.get("/metrics", include_in_schema=False)
    def metrics() -> Response:  # sync: FastAPI runs it in a worker thread (Redis calls block)
        return Response(render(client, config), media_type=CONTENT_TYPE_LATEST)

    return router
