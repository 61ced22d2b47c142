"""Each task of a worker runs under a memory limit: CARRY_TASK_MEMORY_MB, set on the worker's
pool processes when they start (Celery's worker_process_init, workers/tasks.py) as their
RLIMIT_AS and RLIMIT_DATA. Every git a task starts inherits it. A task past it gets MemoryError
(Python) or GitOutOfMemory (git) and fails on its series, instead of growing until the kernel
kills a process of the machine; the runners, whose checks need what they need, are not limited
here."""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("carry.memory")

MIB = 1024 * 1024
LIMITS = (resource.RLIMIT_AS, resource.RLIMIT_DATA)


def limit_task_memory(megabytes: int) -> int:
    """Sets this process's address-space and data limits (soft and hard: a task cannot lift
    them) to `megabytes` MiB, or keeps a lower hard limit already set; returns the limit in
    bytes."""
    wanted = megabytes * MIB
    for which in LIMITS:
        _soft, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY and hard < wanted:
            wanted = hard
    for which in LIMITS:
        resource.setrlimit(which, (wanted, wanted))
    log.info("tasks of this process may use %d MiB (CARRY_TASK_MEMORY_MB)", wanted // MIB)
    return wanted


def task_memory_limit() -> int | None:
    """This process's address-space limit in bytes, None when there is none."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft == resource.RLIM_INFINITY else soft
