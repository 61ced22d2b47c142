"""`carry web` moves its start-up objects out of the garbage collector's reach (gc.freeze)
before it serves: a full collection otherwise walks every module, model and route of the app
(some 120,000 objects, tens of milliseconds on a loaded machine) while the event loop, and every
webhook delivery in flight, waits: a cause of the intake's p99 tail (bench/webhook.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

# The web service's start-up as `carry web` runs it (workers.service.web), in its own process;
# uvicorn.run, the outside server it hands the app to, reports what the collector tracks then.
PROBE = textwrap.dedent(
    """
    import gc, json, uvicorn
    def report(app, **options):
        print(json.dumps({"frozen": gc.get_freeze_count(), "tracked": len(gc.get_objects()),
                          "app": type(app).__name__, "port": options["port"]}))
    uvicorn.run = report
    from workers import service
    service.web("127.0.0.1", 8765)
    """
)


def test_carry_web_freezes_its_start_up_objects_before_serving(
    tmp_path: Path, redis_url: str
) -> None:
    (tmp_path / "patches").mkdir()
    config = tmp_path / "carry.yaml"
    config.write_text(
        json.dumps(
            {
                "downstream": {"repo": "acme/carry", "patches_dir": "patches"},
                "upstreams": {"up": {"url": "/dev/null", "repo": "acme/upstream"}},
                "series": [],
            }
        )
    )
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "CARRY_CONFIG": str(config),
        "CARRY_DOWNSTREAM_DIR": str(tmp_path),
        "CARRY_CACHE_DIR": str(tmp_path / "cache"),
        "CARRY_WEBHOOK_SECRET": "s3cret",
    }
    ran = subprocess.run(
        [sys.executable, "-c", PROBE],
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ran.returncode == 0, ran.stderr
    seen = json.loads(ran.stdout.strip().splitlines()[-1])
    assert (seen["app"], seen["port"]) == ("FastAPI", 8765)
    # fails on the old code: nothing frozen, a full collection walked all of it
    assert seen["frozen"] > 50_000, seen
    assert seen["tracked"] < seen["frozen"] / 5, seen
