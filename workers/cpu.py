"""Each pool process of a service worker runs at a lower CPU priority than the web process:
CARRY_WORKER_NICE (10), set when the process starts (Celery's worker_process_init,
workers/tasks.py). Every git a task starts inherits it. A rebase is batch work; the web
process answers GitHub's deliveries and the dashboard, and where they share CPUs a busy
worker must not take their turn. A CPU nobody else wants is still the worker's."""

from __future__ import annotations

import logging
import os

log = logging.getLogger("carry.cpu")


def yield_cpu(nice: int) -> int:
    """Lowers this process's CPU priority to the nice value `nice`, or keeps a lower priority
    it already has (an unprivileged process cannot raise its priority again, and one started
    nicer by its supervisor stays so); returns the nice value it now runs at."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current < nice:
        os.setpriority(os.PRIO_PROCESS, 0, nice)
    now = os.getpriority(os.PRIO_PROCESS, 0)
    log.info("tasks of this process run at nice %d (CARRY_WORKER_NICE)", now)
    return now
