"""The hardware CI contract the service and the runner hosts share: the job (spec: job, tree and
step specs, as JSON-safe values) and the run record (runs: `Run`, its effects, its end). The
service's side is workers/ci, a runner host's the top-level `runner` package."""
