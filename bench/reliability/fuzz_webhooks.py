"""7. fuzzed webhooks: mutated GitHub payloads and headers, and the API's GET operations."""

from __future__ import annotations

import contextlib
import copy
import json
import math
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
from hypothesis import given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from bench.reliability.common import (
    WEBHOOK_EXAMPLES,
    RedisServer,
    Row,
    Scale,
    _fuzz_settings,
    carry_env,
    push_body,
)
from bot.web.webhooks import sign
from harness.carry_env import SECRET

HANDLED_EVENTS = (
    "ping",
    "push",
    "pull_request",
    "issue_comment",
    "check_run",
    "check_suite",
    "workflow_run",
    "installation",
    "installation_repositories",
)
JSON_LEAVES = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.sampled_from(["", "0" * 40, "refs/heads/main", "2026-01-01T00:00:00Z", "owner/repo"])
)


def _json_containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner)


JSON_VALUES = st.recursive(JSON_LEAVES, _json_containers, max_leaves=12)


def webhook_seeds() -> list[tuple[str, Any]]:
    """Real payloads (octokit's examples in tests/data, when the checkout has them), else
    minimal ones of each shape carry reads."""
    manifest = WEBHOOK_EXAMPLES / "manifest.json"
    if manifest.is_file():
        files = json.loads(manifest.read_text())["files"]
        return [
            (meta["event"], json.loads((WEBHOOK_EXAMPLES / name).read_text()))
            for name, meta in sorted(files.items())
        ]
    sha = "a" * 40
    repo = {"full_name": "o/r", "name": "r", "owner": {"login": "o"}}
    pull = {"number": 1, "head": {"sha": sha}, "base": {"ref": "main"}, "merged": True}
    return [
        ("push", json.loads(push_body("o/r", sha))),
        ("pull_request", {"action": "closed", "pull_request": pull, "repository": repo}),
        ("ping", {"zen": "z", "hook_id": 1}),
    ]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(node, dict):
        for key, child in node.items():
            yield from _paths(child, (*prefix, key))
    elif isinstance(node, list):
        for index, child in enumerate(node[:5]):
            yield from _paths(child, (*prefix, index))


def _set(root: Any, path: tuple[Any, ...], value: Any, delete: bool) -> Any:
    if not path:
        return value
    parent = root
    for part in path[:-1]:
        parent = parent[part]
    if delete and isinstance(parent, dict):
        parent.pop(path[-1], None)
    else:
        parent[path[-1]] = value
    return root


@st.composite
def mutated_payloads(draw: st.DrawFn, seeds: list[tuple[str, Any]]) -> tuple[str, Any]:
    event, payload = draw(st.sampled_from(seeds))
    payload = copy.deepcopy(payload)
    paths = list(_paths(payload))
    for _ in range(draw(st.integers(0, 4))):
        path = draw(st.sampled_from(paths))
        with contextlib.suppress(KeyError, IndexError, TypeError):
            payload = _set(payload, path, draw(JSON_VALUES), draw(st.booleans()))
        paths = list(_paths(payload))
    name = draw(st.sampled_from([event, event, event, *HANDLED_EVENTS]) | st.text(max_size=20))
    return name, payload


HEADER_TEXT = st.text(st.characters(codec="latin-1", exclude_characters="\r\n\x00"), max_size=150)


@st.composite
def webhook_requests(draw: st.DrawFn, seeds: list[tuple[str, Any]]) -> tuple[dict[str, str], bytes]:
    event, payload = draw(mutated_payloads(seeds))
    kind = draw(st.sampled_from(["json", "json", "json", "form", "bytes", "text"]))
    if kind == "bytes":
        body = draw(st.binary(max_size=3000))
    elif kind == "text":
        body = draw(st.text(max_size=500)).encode("utf-8", "surrogatepass")
    else:
        body = json.dumps(payload, allow_nan=True).encode("utf-8", "surrogatepass")
        if kind == "form":
            body = b"payload=" + quote(body).encode()
    content_type = {"form": "application/x-www-form-urlencoded"}.get(kind, "application/json")
    headers = {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": draw(st.sampled_from([str(uuid.uuid4())]) | HEADER_TEXT),
        "Content-Type": draw(st.sampled_from([content_type, content_type]) | HEADER_TEXT),
        "X-Hub-Signature-256": draw(
            st.sampled_from([sign(SECRET, body)] * 6 + ["sha256=" + "0" * 64, "", "sha1=x"])
        ),
    }
    dropped = draw(st.sets(st.sampled_from(sorted(headers)), max_size=1))
    return {k: v for k, v in headers.items() if k not in dropped and v}, body


def edge_cases() -> list[tuple[str, dict[str, str], bytes]]:
    """Bodies a generator rarely reaches, each signed: a hostile sender with the secret (or a
    GitHub bug) must get a 4xx, never a 500."""
    sha = "b" * 40
    repo = {"full_name": "o/r", "name": "r", "owner": {"login": "o"}}
    pull = {"number": 1, "head": {"sha": sha}, "base": {"ref": "main"}, "merged": False}
    closed = {"action": "closed", "repository": repo}
    cases: dict[str, str | bytes] = {
        "deeply nested JSON": b"[" * 100_000 + b"]" * 100_000,
        "5000-digit integer": b'{"hook_id": ' + b"9" * 5000 + b"}",
        "NaN timestamp": json.dumps({**closed, "pull_request": {**pull, "closed_at": math.nan}}),
        "infinite timestamp": json.dumps({**closed, "pull_request": {**pull, "closed_at": 1e300}}),
        "huge epoch timestamp": json.dumps(
            {**closed, "pull_request": {**pull, "closed_at": 10**20}}
        ),
        "lone surrogate in repository name": json.dumps(
            json.loads(push_body("o/r", sha)) | {"repository": {**repo, "full_name": "\ud800"}}
        ),
        "lone surrogate in ref": json.dumps(json.loads(push_body("o/r", sha)) | {"ref": "\udfff"}),
        "UTF-16 body": json.dumps({"zen": "z"}).encode("utf-16"),
        "form without payload": b"other=1",
    }
    events = {"NaN timestamp": "pull_request", "infinite timestamp": "pull_request"}
    events["huge epoch timestamp"] = "pull_request"
    out = []
    for name, raw in cases.items():
        body = raw.encode() if isinstance(raw, str) else raw
        content_type = "application/x-www-form-urlencoded" if "form" in name else "application/json"
        headers = {
            "X-GitHub-Event": events.get(name, "ping" if "integer" in name else "push"),
            "X-GitHub-Delivery": str(uuid.uuid4()),
            "X-Hub-Signature-256": sign(SECRET, body),
            "Content-Type": content_type,
        }
        out.append((name, headers, body))
    return out


@dataclass
class FuzzResult:
    sent: int = 0
    statuses: Counter[int] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)  # what got a 5xx, shortest first

    def add(self, status: int, what: str) -> None:
        self.sent += 1
        self.statuses[status] += 1
        if status >= 500:
            self.failures.append(what)

    @property
    def five_hundreds(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)


def fuzz_webhooks(
    url: str, examples: int, seed: int, *, edge: bool = True, deadline_s: float = 120
) -> FuzzResult:
    """Signed and unsigned, well- and ill-formed deliveries to a running web process; the
    hand-picked edge cases first unless `edge` is False."""
    result = FuzzResult()
    deadline = time.monotonic() + deadline_s
    with httpx.Client(timeout=30) as http:
        for name, headers, body in edge_cases() if edge else []:
            status = post_webhook(http, url, headers, body)
            result.add(status, f"edge case: {name}")
        seeds = webhook_seeds()

        @hypothesis_seed(seed)
        @settings(_fuzz_settings(examples))
        @given(webhook_requests(seeds))
        def send(request: tuple[dict[str, str], bytes]) -> None:
            if time.monotonic() > deadline:
                return
            headers, body = request
            status = post_webhook(http, url, headers, body)
            if status >= 0:
                result.add(status, f"{headers!r} {body[:200]!r}")

        send()
    result.failures.sort(key=len)
    return result


def post_webhook(http: httpx.Client, url: str, headers: dict[str, str], body: bytes) -> int:
    raw = {k.encode(): v.encode("utf-8", "surrogatepass") for k, v in headers.items()}
    for _attempt in range(2):  # a connection the server closed after its last answer: once more
        try:
            return http.post(f"{url}/webhooks/github", content=body, headers=raw).status_code
        except httpx.LocalProtocolError:
            return -1  # not sendable over HTTP/1.1 at all (the client refuses)
        except httpx.HTTPError:
            continue
    return 599  # the server dropped the connection twice: as bad as a 500


def fuzz_api(url: str, examples: int, seed: int) -> FuzzResult:
    """Every GET operation of the app's OpenAPI document, with generated path and query values."""
    result = FuzzResult()
    openapi = httpx.get(f"{url}/openapi.json", timeout=10).json()
    operations = [
        (path, op.get("parameters", []))
        for path, ops in openapi["paths"].items()
        for method, op in ops.items()
        if method == "get"
    ]
    values = st.text(max_size=30) | st.integers(-(10**12), 10**12).map(str) | st.just("")
    with httpx.Client(timeout=30) as http:

        @hypothesis_seed(seed)
        @settings(_fuzz_settings(examples))
        @given(st.sampled_from(operations), st.data())
        def call(operation: tuple[str, list[dict[str, Any]]], data: st.DataObject) -> None:
            path, parameters = operation
            query = {}
            for parameter in parameters:
                value = data.draw(values)
                if parameter["in"] == "path":
                    path = path.replace("{" + parameter["name"] + "}", quote(value, safe="") or "x")
                elif parameter["in"] == "query" and data.draw(st.booleans()):
                    query[parameter["name"]] = value
            try:
                status = http.get(f"{url}{path}", params=query).status_code
            except httpx.HTTPError:
                status = 599
            result.add(status, f"GET {path} {query}")

        call()
    return result


def scenario_fuzz_webhooks(root: Path, scale: Scale, seed: int) -> Row:
    server = RedisServer(root / "redis", aof=False).start()
    try:
        with carry_env(root / "carry", server.url) as env:
            url = env.start_web()
            hooks = fuzz_webhooks(url, scale.fuzz_webhooks, seed)
            api = fuzz_api(url, scale.fuzz_api, seed)
            alive = httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    finally:
        server.kill()
    failures = hooks.failures + api.failures
    edge = [f.removeprefix("edge case: ") for f in failures if f.startswith("edge case: ")]
    generated = [f[:140] for f in failures if not f.startswith("edge case: ")]
    shown = "; ".join([f"edge cases: {', '.join(edge)}"] * bool(edge) + generated[:2])
    return Row(
        "fuzzed webhook bodies and headers (+ API)",
        f"{hooks.sent} webhook requests to the running web process (hypothesis, seed {seed}: "
        f"mutated real payloads, random bytes, form bodies, odd headers and signatures, "
        f"{len(edge_cases())} hand-picked edge cases) and {api.sent} GETs generated from "
        f"/openapi.json; statuses {dict(sorted((hooks.statuses + api.statuses).items()))}",
        "-",
        "-",
        f"500s: {hooks.five_hundreds + api.five_hundreds} (expected 0)"
        + (f": {shown}" if shown else "")
        + f"; web still healthy: {'yes' if alive else 'NO'}",
        ok=not failures and alive,
    )
