"""No secret value ever appears in a log line, an API answer, a dashboard page or the store.

A real deployment: `carry web`, `carry worker` and `carry runner` processes, a Redis that requires a password,
the GitHub emulator holding the upstream and downstream repositories, and carry authenticated
as a GitHub App (with a token and a runner-style HF_TOKEN in its environment too) and signing
the jobs it hands to its runner with its own key (issue 33). The test
drives a webhook, a rebase, a publish that fails once and is retried, a rebase that fails, and
refused deliveries; then it reads every byte the processes logged, every page and API answer
(headers included) and every value in Redis, and looks for each secret in each.
"""

from __future__ import annotations

import base64
import json
import os
import secrets
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
import redis

from bot.emulator import GitHubEmulator, generate_app_key
from harness.carry_env import BODY, SECRET, SERIES, CarryEnv, wait_for
from harness.gitrepo import git
from harness.redis_server import PrivateRedis
from tests.support.carry_services import json_lines

UP_OWNER, UP_NAME = "upstream-org", "engine"
DOWN_OWNER, DOWN_NAME = "downstream-org", "carry"
APP_ID, INSTALLATION_ID = 4242, 77
# A refreshed patch (its context moved upstream) is what carry proposes as a PR.
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
MOVED = {"mod.py": "# header line\n" * 3 + BODY}


@dataclass
class Deployment:
    env: CarryEnv
    gh: GitHubEmulator
    url: str
    secrets: dict[str, str]
    dashboard_token: str
    worker_log: Path
    seen: dict[str, str] = field(default_factory=dict)  # where -> text, for the final sweep

    def push_upstream(self, files: dict[str, str], message: str) -> tuple[str, str]:
        up = self.env.upstream
        before = up.head()
        after = up.commit(message, files)
        self.gh.push(UP_OWNER, UP_NAME, up.path, "main", pusher=UP_OWNER)
        return before, after

    def deliver(self, event: str, payload: dict) -> httpx.Response:
        response = self.env.deliver(self.url, event, payload, f"d-{uuid.uuid4()}")
        self.record(f"POST /webhooks/github ({event})", response)
        return response

    def get(self, path: str, *, token: str | None = None) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        response = httpx.get(f"{self.url}{path}", headers=headers, timeout=10)
        self.record(f"GET {path}", response)
        return response

    def record(self, where: str, response: httpx.Response) -> None:
        headers = "\n".join(f"{k}: {v}" for k, v in response.headers.multi_items())
        self.seen[f"{where} -> {response.status_code}"] = f"{headers}\n\n{response.text}"


@pytest.fixture
def deployment(tmp_path: Path, private_redis: PrivateRedis) -> Iterator[Deployment]:
    password = "redis-" + secrets.token_urlsafe(18)
    redis.Redis(port=private_redis.port).config_set("requirepass", password)
    env = CarryEnv(tmp_path, f"redis://:{password}@127.0.0.1:{private_redis.port}/0")
    env.carry_patches([FIX])
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the fix")
    private_key, public_key = generate_app_key()
    job_key = Path(os.environ["CARRY_JOB_SIGNING_KEY_PATH"]).read_text()  # the service's
    values = {
        "job signing key": job_key,
        "webhook secret": SECRET,
        "GitHub token": "ghp_" + secrets.token_hex(18),
        "App private key": private_key,
        "Redis password": password,
        "dashboard token": "dash-" + secrets.token_urlsafe(18),
        "HF_TOKEN": "hf_" + secrets.token_hex(16),
    }
    with GitHubEmulator(tmp_path / "gh") as gh:
        gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
        gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream)
        gh.add_app(APP_ID, public_key, slug="carry", installation_id=INSTALLATION_ID)
        gh.add_installation(APP_ID, INSTALLATION_ID, DOWN_OWNER)
        gh.add_token(values["GitHub token"], "maint")
        # A runner kind, so that the service signs a job and a runner verifies and runs it.
        check = {"run": ["true"], "timeout_s": 60}
        runner = {"queue": "hw.gaudi", "workdir": str(tmp_path / "runner"), "checks": {"ok": check}}
        env.write_config(
            runner_kinds={"gaudi": runner},
            runners=["gaudi"],
            checks=["ok"],
        )
        env.config_path.write_text(
            env.config_path.read_text().replace(
                str(env.upstream.path), gh.git_url(UP_OWNER, UP_NAME)
            )
        )
        env.extra_env.update(
            {
                "GITHUB_APP_ID": str(APP_ID),
                "GITHUB_APP_PRIVATE_KEY": private_key,
                "GITHUB_INSTALLATION_ID": str(INSTALLATION_ID),
                "GITHUB_TOKEN": values["GitHub token"],
                "GITHUB_BASE_URL": gh.base_url,
                "CARRY_DOWNSTREAM_DIR": "",  # the series come from the emulated GitHub
                "CARRY_BOT_LOGIN": "carry[bot]",
                "CARRY_DASHBOARD_TOKEN": values["dashboard token"],
                "HF_TOKEN": values["HF_TOKEN"],
                "CARRY_CI_DEBOUNCE_S": "0",
            }
        )
        try:
            url = env.start_web()
            worker_log = env.start_carry_worker()
            env.start_runner("gaudi")
            yield Deployment(env, gh, url, values, values["dashboard token"], worker_log)
        finally:
            env.stop()


def drive_everything(d: Deployment) -> None:
    env = d.env
    # 1. A head that moves the patch's context: rebased, and proposed as a PR whose creation
    #    fails once (a 502 on POST, which is never retried blindly) and succeeds on the retry.
    d.gh.inject_fault("server_error", times=1, method="POST", path="/repos/*/pulls")
    before, after = d.push_upstream(MOVED, "upstream moves the context")
    assert d.deliver("push", env.push_payload(after, before)).status_code == 202
    wait_for(lambda: env.history("publish-failed"), 60, "the failed publish")
    wait_for(lambda: d.gh.pulls(DOWN_OWNER, DOWN_NAME), 60, "the PR, on the retry")
    #    Its exact tree runs on the runner: a job the service signed, which the runner verified.
    #    An operator approves the head for the hardware; its job, signed, runs on the runner.
    wait_for(lambda: env.history("ci-wait-approval"), 60, "the run waiting for an approval")
    approved = subprocess.run(
        [sys.executable, "-m", "bot.cli", "approve", "--series", SERIES, after, "--by", "maint"],
        env=env.env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    d.seen["carry approve"] = approved.stdout + approved.stderr
    wait_for(lambda: env.history("ci-success"), 120, "the signed job, run")
    # 2. A head the upstream does not have: the rebase fails and says so on the dashboard.
    missing = secrets.token_hex(20)
    assert d.deliver("push", env.push_payload(missing, after)).status_code == 202
    wait_for(lambda: env.history("rebase-failed"), 60, "the failed rebase")
    # 3. Refused deliveries: a forged signature and a signed but malformed payload.
    forged = httpx.post(
        f"{d.url}/webhooks/github",
        content=b"{}",
        headers={
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "forged",
            "X-Hub-Signature-256": "sha256=" + "0" * 64,
        },
    )
    d.record("POST /webhooks/github (forged)", forged)
    assert forged.status_code == 401
    assert d.deliver("push", {"ref": 12}).status_code == 422


def crawl(d: Deployment) -> None:
    """Every page and API answer: with the token, with a wrong one, with none."""
    openapi = d.get("/openapi.json", token=d.dashboard_token).json()
    patch = json.loads(d.get(f"/api/v1/series/{SERIES}", token=d.dashboard_token).text)
    names = {"series_id": SERIES, "name": patch["patches"][0]["name"], "run_id": "no-such-run"}
    for path, operations in openapi["paths"].items():
        if "get" in operations:
            d.get(path.format(**names), token=d.dashboard_token)
    pages = ["/", f"/series/{SERIES}", f"/series/{SERIES}/patches/{names['name']}", "/events"]
    pages += ["/runners", f"/badges/series/{SERIES}.svg", "/metrics", "/readyz", "/healthz"]
    for page in pages:
        assert d.get(page, token=d.dashboard_token).status_code == 200, page
    assert d.get("/api/v1/series", token="wrong-token-000").status_code == 401
    assert d.get("/api/v1/series").status_code == 401
    # The browser way in: ?token= once, redirected to the same page without it, with a
    # session cookie (an HMAC, never the token).
    entry = d.get(f"/?token={d.dashboard_token}")
    assert entry.status_code == 303 and "set-cookie" in entry.headers


def store_dump(d: Deployment) -> str:
    client = d.env.client
    parts = []
    for key in client.scan_iter(count=1000):
        kind = client.type(key).decode()
        if kind == "string":
            parts.append(repr(client.get(key)))
        elif kind == "hash":
            parts.append(repr(client.hgetall(key)))
        elif kind == "list":
            parts.append(repr(client.lrange(key, 0, -1)))
        elif kind == "set":
            parts.append(repr(client.smembers(key)))
        elif kind == "zset":
            parts.append(repr(client.zrange(key, 0, -1)))
        elif kind == "stream":
            parts.append(repr(client.xrange(key)))
        parts.append(repr(key))
    return "\n".join(parts)


def forms(value: str) -> list[str]:
    """The value and what it looks like inside JSON, a repr or an HTTP Basic header."""
    found = [value, json.dumps(value)[1:-1]]
    lines = [line for line in value.splitlines() if len(line) >= 16 and "-----" not in line]
    found += lines
    if value.startswith("ghp_"):
        found.append(base64.b64encode(f"x-access-token:{value}".encode()).decode())
    return found


def test_no_secret_in_logs_api_dashboard_or_store(deployment: Deployment) -> None:
    d = deployment
    drive_everything(d)
    crawl(d)
    installation_tokens = [t for t in d.gh.hub.tokens if t not in d.secrets.values()]
    assert installation_tokens, "carry authenticated as the App: it was given tokens"
    store = store_dump(d)
    d.env.stop()
    runner_log = d.env.root / "runner-gaudi.log"
    logs = {
        p.name: p.read_text(errors="replace")
        for p in (d.env.root / "web.log", d.worker_log, runner_log)
    }
    json_lines(d.worker_log)  # every worker line is a JSON log line

    haystacks = {**d.seen, **{f"log {name}": text for name, text in logs.items()}}
    haystacks["Redis"] = store
    needles = {name: forms(value) for name, value in d.secrets.items()}
    needles.update({f"installation token {n}": [t] for n, t in enumerate(installation_tokens)})
    leaks = [
        f"{name} in {where}"
        for name, values in needles.items()
        for where, text in haystacks.items()
        if any(v in text for v in values)
    ]
    assert leaks == []
    # The sweep looked at real material: the failures, the PR and the pages are in it.
    assert "publish failed" in logs["worker.log"] or "publish-failed" in store
    assert any("rebase-failed" in text or "rebase on" in text for text in haystacks.values())
    assert len(d.seen) >= 20
    # A job was signed, handed over and verified: the signature travelled, the key did not.
    assert d.env.history("ci-success") and not d.env.history("ci-refused")
