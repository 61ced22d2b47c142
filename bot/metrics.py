"""Prometheus metrics, served as GET /metrics by the web process.

Two sources, one exposition:
  * this process's registry (prometheus_client's default `REGISTRY`): what the web process
    counts itself, e.g. carry_webhook_deliveries_total{outcome} (bot.web.webhooks), plus the
    client library's process_* and python_* metrics;
  * Redis, read at scrape time: what worker processes count (events, rebase durations, GitHub
    rate limit) is kept there, because workers run in other processes or containers than the
    one Prometheus scrapes; and what is a fact of the store (jobs by state, CI queue depth) is
    computed from it on each scrape.

The counters in Redis and their writers (`count_event`, `observe_rebase`, `record_rate_limit`)
are bot/store/metrics.py's.

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

import logging
from collections import Counter
from collections.abc import Iterable, Iterator

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
from bot.store.metrics import (
    HW_QUEUE_PREFIX,
    REBASE_BUCKETS,
    event_counts,
    listed_queues,
    queue_depths,
    rate_limit_seen,
    rebase_histogram,
)
from bot.store.series import all_series

log = logging.getLogger("carry.metrics")

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
        for kind, count in sorted(event_counts(self.client).items()):
            family.add_metric([kind], float(count))
        return family

    def _rebase_seconds(self) -> Metric:
        raw = rebase_histogram(self.client)
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
        queues = _hw_queues(self.config, listed_queues(self.client, HW_QUEUE_PREFIX))
        depths = queue_depths(self.client, queues)
        family = GaugeMetricFamily(
            "carry_ci_queue_depth",
            "Hardware jobs waiting in the runner kind's queue (not yet taken by a runner)",
            labels=["kind"],
        )
        for kind, depth in sorted(depths.items()):
            family.add_metric([kind], float(depth))
        return family

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


def _le(bound: float) -> str:
    return repr(float(bound))


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
