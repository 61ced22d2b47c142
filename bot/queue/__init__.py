"""The task queue every process shares: the one Celery app (celery_app), its Redis transport
that checks each delivery (broker_transport) and the logging hooks that carry correlation ids
across processes (logging_hooks). It names no task module: each process imports its own tasks
(the service's worker workers.tasks, a runner host runner.task)."""
