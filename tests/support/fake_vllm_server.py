"""A small deterministic OpenAI-compatible stand-in for ``vllm serve``, with injectable bugs.

The engine is a continuous-batching loop with a per-step token budget: running prefills are
chunked first, then waiting requests are admitted, then running decodes take one token each while
budget remains, so behind a long prompt some decodes sit out steps. The "model" is greedy and
pure: the next token is a function of the last token fed (a bigram table, so a re-read token
repeats the following one, as real models tend to), and logprobs are a function of the whole fed
prefix and of the per-layer-embedding (PLE) row consumed for the token. Correct mode therefore
gives the same output for a request alone and under any load.

Bugs (``FakeConfig.bug``):

* ``stale-decode-token`` (fixes/async-inputs; needs ``async_scheduling``): decode inputs are read
  from a persistent per-row device buffer that is written only at rows of requests that were also
  in the previous step, without seeding it from the host first. A decode that sat out a step
  re-reads its old input token.
* ``one-step-behind`` (PLE offload semaphore; inactive with ``cudagraph_mode="NONE"``): each step
  consumes the PLE rows computed for the previous step; the first real step gets the zero rows of
  the warm-up (graph capture) step.

Run as ``python -m tests.support.fake_vllm_server serve MODEL --port P [vllm serve flags]``;
``FAKE_VLLM_BUG`` and ``FAKE_VLLM_STEP_DELAY`` set the bug and the simulated step time;
``FAKE_VLLM_PLE_LAYERS=1`` makes the model one with PLE layers, so that ``VLLM_PLE_CPU_OFFLOAD=1``
logs the offload worker's ready line, as PR #53899 does (without PLE layers nothing is offloaded).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

BUGS = ("correct", "stale-decode-token", "one-step-behind")
VOCAB = 4900
TOP = 20  # most logprobs a request may ask for
MAX_MODEL_LEN = 8192
_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


@dataclass(frozen=True)
class FakeConfig:
    model: str = "fake/model"
    bug: str = "correct"
    budget: int = 64
    max_num_seqs: int = 32
    async_scheduling: bool = True
    cudagraph_mode: str = "FULL_AND_PIECEWISE"  # vLLM's default since 0.26
    step_delay_s: float = 0.002
    warmup_rows: int = 32
    request_timeout_s: float = 60.0
    probe_path: str | None = None  # as carry's scheduler probe in real vLLM (CARRY_VLLM_PROBE)

    def __post_init__(self) -> None:
        if self.bug not in BUGS:
            raise ValueError(f"bug must be one of {BUGS}, not {self.bug!r}")

    @property
    def stale_inputs(self) -> bool:
        return self.bug == "stale-decode-token" and self.async_scheduling

    @property
    def ple_behind(self) -> bool:
        return self.bug == "one-step-behind" and self.cudagraph_mode.upper() != "NONE"


# ----------------------------------------------------------------------------- the model


def _h(*parts: object) -> int:
    digest = hashlib.blake2b("\x1f".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def word(tid: int) -> str:
    return _SYLLABLES[tid // len(_SYLLABLES)] + _SYLLABLES[tid % len(_SYLLABLES)]


_IDS = {word(i): i for i in range(VOCAB)}


def tokenize(text: str) -> list[int]:
    return [_IDS.get(w, _h("tok", w) % VOCAB) for w in text.split()]


def ple_row(tid: int) -> int:
    """The per-layer-embedding row the model needs for a token (never zero)."""
    return 1 + _h("ple", tid) % 997


def greedy_next(last: int) -> int:
    return _h("next", last) % VOCAB


@dataclass(frozen=True)
class Distribution:
    """The model's top candidates after a prefix, best first, and any token's logprob."""

    ctx: int
    top: tuple[tuple[int, float], ...]

    @property
    def greedy(self) -> tuple[int, float]:
        return self.top[0]

    def logprob(self, tid: int) -> tuple[float, int]:
        for rank, (cand, lp) in enumerate(self.top, start=1):
            if cand == tid:
                return lp, rank
        floor = self.top[-1][1]
        return floor - 1 - (_h("tail", self.ctx, tid) % 3000) / 1000, TOP + 1 + _h(
            "rank", self.ctx, tid
        ) % 1000


def distribution(ctx: int, last: int, row: int) -> Distribution:
    best = greedy_next(last)
    lp0 = -0.01 - (_h("base", ctx) % 2000) / 1000 - row * 1e-4
    top = [(best, lp0)]
    seen = {best}
    salt = 0
    while len(top) < TOP:
        cand = _h("alt", ctx, len(top), salt) % VOCAB
        salt += 1
        if cand in seen:
            continue
        seen.add(cand)
        top.append((cand, top[-1][1] - 0.25 - (_h("gap", ctx, len(top)) % 500) / 1000))
    return Distribution(ctx, tuple(top))


# ----------------------------------------------------------------------------- the engine


@dataclass(frozen=True)
class TokenEvent:
    tid: int
    logprob: float
    top: tuple[tuple[int, float], ...]
    last: bool


@dataclass(frozen=True)
class PromptEvent:
    prompt_logprobs: list[dict[int, tuple[float, int]] | None]


@dataclass(eq=False)
class EngineRequest:
    rid: int
    prompt: list[int]
    max_tokens: int
    prompt_logprobs: int | None
    events: queue.Queue[TokenEvent | PromptEvent] = field(default_factory=queue.Queue)
    fed: list[int] = field(default_factory=list)
    ctx: int = 0
    generated: list[int] = field(default_factory=list)
    prompt_lps: list[dict[int, tuple[float, int]] | None] = field(default_factory=lambda: [None])
    row: int = -1

    @property
    def prefilling(self) -> bool:
        return len(self.fed) < len(self.prompt)


@dataclass
class EngineStats:
    steps: int = 0
    sat_out: int = 0  # decode slots left out of a step for lack of budget
    stale_reads: int = 0  # decode inputs that differed from the request's own last token
    behind_steps: int = 0  # steps that consumed PLE rows other than their own


class FakeEngine:
    def __init__(self, config: FakeConfig) -> None:
        self.config = config
        self.stats = EngineStats()
        self._cv = threading.Condition()
        self._waiting: deque[EngineRequest] = deque()
        self._running: list[EngineRequest] = []
        self._free_rows = list(range(config.max_num_seqs))
        self._device_ids = [0] * config.max_num_seqs
        self._prev_step: set[int] = set()
        self._prev_ple = [0] * config.warmup_rows  # the warm-up step's dummy outputs
        self._next_rid = 0
        self._stopped = False
        self._thread = threading.Thread(target=self._loop, name="fake-vllm-engine", daemon=True)

    def start(self) -> None:
        self._probe({"loaded": os.getpid()})
        self._thread.start()

    def _probe(self, row: dict[str, int]) -> None:
        if self.config.probe_path:
            with open(self.config.probe_path, "a", encoding="utf-8") as out:
                out.write(json.dumps(row) + "\n")

    def stop(self) -> None:
        with self._cv:
            self._stopped = True
            self._cv.notify_all()
        self._thread.join(timeout=10)

    def submit(
        self, prompt: list[int], max_tokens: int, prompt_logprobs: int | None
    ) -> EngineRequest:
        with self._cv:
            seq = EngineRequest(self._next_rid, prompt, max_tokens, prompt_logprobs)
            self._next_rid += 1
            self._waiting.append(seq)
            self._cv.notify_all()
        return seq

    def _loop(self) -> None:
        while True:
            with self._cv:
                while not self._stopped and not (self._waiting or self._running):
                    self._cv.wait()
                if self._stopped:
                    return
                self._step()
            if self.config.step_delay_s:
                time.sleep(self.config.step_delay_s)  # simulated forward time

    def _step(self) -> None:
        budget = self.config.budget
        prefills: list[tuple[EngineRequest, list[int]]] = []
        for seq in self._running:
            if seq.prefilling and budget > 0:
                chunk = seq.prompt[len(seq.fed) : len(seq.fed) + budget]
                prefills.append((seq, chunk))
                budget -= len(chunk)
        while self._waiting and budget > 0 and self._free_rows:
            seq = self._waiting.popleft()
            seq.row = min(self._free_rows)
            self._free_rows.remove(seq.row)
            self._running.append(seq)
            prefills.append((seq, seq.prompt[:budget]))
            budget -= len(prefills[-1][1])
        decodes, sat_out = [], 0
        for seq in self._running:
            if not seq.prefilling:
                if budget > 0:
                    decodes.append(seq)
                    budget -= 1
                else:
                    sat_out += 1
        inputs = self._decode_inputs(decodes)
        self._execute(prefills, list(zip(decodes, inputs, strict=True)))
        uncarried = sum(1 for s in decodes if s.rid not in self._prev_step)
        self._prev_step = {s.rid for s, _ in prefills} | {s.rid for s in decodes}
        self.stats.steps += 1
        self.stats.sat_out += sat_out
        if sat_out or uncarried:
            row = {"step": self.stats.steps, "sat_out": sat_out, "uncarried": uncarried}
            self._probe({**row, "preempted": 0})

    def _decode_inputs(self, decodes: list[EngineRequest]) -> list[int]:
        """Mirror of the HPU runner's decode input ids under async scheduling."""
        if not self.config.async_scheduling:
            return [s.generated[-1] for s in decodes]
        if not self.config.stale_inputs:  # the fix: seed the device rows from the host ids
            for seq in decodes:
                self._device_ids[seq.row] = seq.generated[-1]
        for seq in decodes:  # device-side scatter of the previous step's sampled tokens
            if seq.rid in self._prev_step:
                self._device_ids[seq.row] = seq.generated[-1]
        inputs = [self._device_ids[s.row] for s in decodes]
        self.stats.stale_reads += sum(
            t != s.generated[-1] for t, s in zip(inputs, decodes, strict=True)
        )
        return inputs

    def _ple_rows(self, fed: list[int]) -> list[int]:
        own = [ple_row(t) for t in fed]
        if not self.config.ple_behind:
            return own
        consumed = [self._prev_ple[j] if j < len(self._prev_ple) else 0 for j in range(len(own))]
        self._prev_ple = own
        self.stats.behind_steps += consumed != own
        return consumed

    def _execute(
        self,
        prefills: list[tuple[EngineRequest, list[int]]],
        decodes: list[tuple[EngineRequest, int]],
    ) -> None:
        work = [(s, t) for s, chunk in prefills for t in chunk] + decodes
        rows = self._ple_rows([t for _, t in work])
        for (seq, tid), row in zip(work, rows, strict=True):
            self._feed(seq, tid, row)

    def _feed(self, seq: EngineRequest, tid: int, row: int) -> None:
        seq.fed.append(tid)
        seq.ctx = _h("ctx", seq.ctx, tid)
        dist = distribution(seq.ctx, tid, row)
        if seq.prefilling:
            if seq.prompt_logprobs is not None:
                seq.prompt_lps.append(
                    _position(dist, seq.prompt[len(seq.fed)], seq.prompt_logprobs)
                )
            return
        if len(seq.generated) == 0:
            seq.events.put(PromptEvent(seq.prompt_lps if seq.prompt_logprobs is not None else []))
        best, lp = dist.greedy
        seq.generated.append(best)
        last = len(seq.generated) >= seq.max_tokens
        seq.events.put(TokenEvent(best, lp, dist.top, last))
        if last:
            self._running.remove(seq)
            self._free_rows.append(seq.row)


def _position(dist: Distribution, actual: int, k: int) -> dict[int, tuple[float, int]]:
    entries = {tid: (lp, rank) for rank, (tid, lp) in enumerate(dist.top[:k], start=1)}
    entries[actual] = dist.logprob(actual)
    return entries


# ----------------------------------------------------------------------------- HTTP


class BadRequest(Exception):
    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Parsed:
    prompt: list[int]
    max_tokens: int
    logprobs: int | None
    prompt_logprobs: int | None
    stream: bool
    include_usage: bool
    token_ids: bool


def _optional_k(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= TOP:
        raise BadRequest(f"{key} must be an integer from 0 to {TOP}")
    return value


def parse_request(body: Any, model: str) -> Parsed:
    if not isinstance(body, dict):
        raise BadRequest("body must be a JSON object")
    if body.get("model") != model:
        raise BadRequest(f"The model `{body.get('model')}` does not exist.", status=404)
    raw = body.get("prompt")
    if isinstance(raw, list) and len(raw) == 1 and isinstance(raw[0], str):
        raw = raw[0]
    if isinstance(raw, str):
        prompt = tokenize(raw)
    elif isinstance(raw, list) and raw and all(isinstance(t, int) for t in raw):
        prompt = [t % VOCAB for t in raw]
    else:
        raise BadRequest("prompt must be a string or a list of token ids")
    if not prompt:
        raise BadRequest("prompt is empty")
    max_tokens = body.get("max_tokens", 16)
    if not isinstance(max_tokens, int) or max_tokens < 1:
        raise BadRequest("max_tokens must be a positive integer")
    if len(prompt) + max_tokens > MAX_MODEL_LEN:
        raise BadRequest(f"prompt plus max_tokens exceed max_model_len {MAX_MODEL_LEN}")
    if body.get("temperature") not in (None, 0, 0.0):
        raise BadRequest("this fake server only decodes greedily (temperature 0)")
    if body.get("n", 1) != 1:
        raise BadRequest("n must be 1")
    options = body.get("stream_options") or {}
    return Parsed(
        prompt=prompt,
        max_tokens=max_tokens,
        logprobs=_optional_k(body, "logprobs"),
        prompt_logprobs=_optional_k(body, "prompt_logprobs"),
        stream=bool(body.get("stream")),
        include_usage=bool(options.get("include_usage")),
        token_ids=bool(body.get("return_tokens_as_token_ids")),
    )


class _Reply:
    """Turns engine events into OpenAI completion objects."""

    def __init__(self, server: FakeVllmServer, req: Parsed, seq: EngineRequest) -> None:
        self.model = server.config.model
        self.req = req
        self.seq = seq
        self.rid = f"cmpl-{seq.rid}"
        self.offset = 0

    def events(self, timeout: float) -> Iterator[TokenEvent | PromptEvent]:
        while True:
            event = self.seq.events.get(timeout=timeout)
            yield event
            if isinstance(event, TokenEvent) and event.last:
                return

    def token_text(self, tid: int) -> str:
        return f"token_id:{tid}" if self.req.token_ids else f" {word(tid)}"

    def choice(self, tokens: Sequence[TokenEvent], prompt: PromptEvent | None) -> dict[str, Any]:
        text = "".join(f" {word(t.tid)}" for t in tokens)
        choice: dict[str, Any] = {
            "index": 0,
            "text": text,
            "logprobs": self.logprobs(tokens) if self.req.logprobs is not None else None,
            "finish_reason": "length" if tokens and tokens[-1].last else None,
        }
        if prompt is not None and self.req.prompt_logprobs is not None:
            choice["prompt_logprobs"] = [
                None
                if pos is None
                else {
                    str(tid): {"logprob": lp, "rank": rank, "decoded_token": f" {word(tid)}"}
                    for tid, (lp, rank) in pos.items()
                }
                for pos in prompt.prompt_logprobs
            ]
        return choice

    def logprobs(self, tokens: Sequence[TokenEvent]) -> dict[str, Any]:
        k = max(self.req.logprobs or 0, 1)
        offsets = []
        for t in tokens:
            offsets.append(self.offset)
            self.offset += len(word(t.tid)) + 1
        return {
            "tokens": [self.token_text(t.tid) for t in tokens],
            "token_logprobs": [t.logprob for t in tokens],
            "top_logprobs": [{self.token_text(c): lp for c, lp in t.top[:k]} for t in tokens],
            "text_offset": offsets,
        }

    def usage(self) -> dict[str, int]:
        done = len(self.seq.generated)
        prompt = len(self.seq.prompt)
        return {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}

    def envelope(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.rid,
            "object": "text_completion",
            "created": 0,
            "model": self.model,
            "choices": choices,
        }


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _HTTPServer

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        if self.path == "/health":
            self._send(200, b"", "text/plain")
        elif self.path == "/v1/models":
            model = self.server.fake.config.model
            self._json(200, {"object": "list", "data": [{"id": model, "object": "model"}]})
        else:
            self._json(404, _error("not found", 404))

    def do_POST(self) -> None:
        raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/completions":
            self._json(404, _error("not found", 404))
            return
        fake = self.server.fake
        try:
            req = parse_request(json.loads(raw or b"null"), fake.config.model)
        except BadRequest as exc:
            self._json(exc.status, _error(str(exc), exc.status))
            return
        except ValueError as exc:
            self._json(400, _error(f"invalid JSON: {exc}", 400))
            return
        seq = fake.engine.submit(req.prompt, req.max_tokens, req.prompt_logprobs)
        reply = _Reply(fake, req, seq)
        timeout = fake.config.request_timeout_s
        try:
            if req.stream:
                self._stream(reply, timeout)
            else:
                self._complete(reply, timeout)
        except queue.Empty:
            self._json(500, _error("engine timed out", 500))

    def _complete(self, reply: _Reply, timeout: float) -> None:
        events = list(reply.events(timeout))
        prompt = next((e for e in events if isinstance(e, PromptEvent)), None)
        tokens = [e for e in events if isinstance(e, TokenEvent)]
        body = reply.envelope([reply.choice(tokens, prompt)])
        body["usage"] = reply.usage()
        self._json(200, body)

    def _stream(self, reply: _Reply, timeout: float) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        prompt: PromptEvent | None = None
        for event in reply.events(timeout):
            if isinstance(event, PromptEvent):
                prompt = event
                continue
            self._chunk(reply.envelope([reply.choice([event], prompt)]))
            prompt = None
        if reply.req.include_usage:
            usage = reply.envelope([])
            usage["usage"] = reply.usage()
            self._chunk(usage)
        self._write_chunk(b"data: [DONE]\n\n")
        self._write_chunk(b"")

    def _chunk(self, obj: dict[str, Any]) -> None:
        self._write_chunk(f"data: {json.dumps(obj)}\n\n".encode())

    def _write_chunk(self, data: bytes) -> None:
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, obj: Any) -> None:
        self._send(status, json.dumps(obj).encode(), "application/json")

    def _send(self, status: int, data: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def _error(message: str, code: int) -> dict[str, Any]:
    kind = {400: "BadRequestError", 404: "NotFoundError"}.get(code, "InternalServerError")
    return {"error": {"message": message, "type": kind, "code": code}}


class _HTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, address: tuple[str, int], fake: FakeVllmServer) -> None:
        self.fake = fake
        super().__init__(address, _Handler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], ConnectionError):  # clients hanging up are normal
            super().handle_error(request, client_address)


class FakeVllmServer:
    """The engine plus an HTTP front end on ``host:port`` (0: a free port), in threads."""

    def __init__(self, config: FakeConfig | None = None, host: str = "127.0.0.1", port: int = 0):
        self.config = config or FakeConfig()
        self.engine = FakeEngine(self.config)
        self._httpd = _HTTPServer((host, port), self)
        self._thread = threading.Thread(
            target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def stats(self) -> EngineStats:
        return self.engine.stats

    def start(self, ready_timeout: float = 10.0) -> FakeVllmServer:
        self.engine.start()
        self._thread.start()
        deadline = time.monotonic() + ready_timeout
        while not _answers(self.url):
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"fake vLLM server at {self.url} did not answer /health")
            time.sleep(0.02)
        return self

    def serve_forever(self) -> None:
        """Serve in the calling thread until interrupted (the ``vllm serve`` stand-in)."""
        self.engine.start()
        try:
            self._httpd.serve_forever(poll_interval=0.05)
        finally:
            self.engine.stop()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self.engine.stop()

    def __enter__(self) -> FakeVllmServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/health", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


# ----------------------------------------------------------------------------- as `vllm serve`


def config_from_argv(argv: Sequence[str], env: dict[str, str]) -> tuple[FakeConfig, str, int]:
    """Accept the ``vllm serve`` command line the checks build; as vLLM does, refuse any flag it
    does not know (exit 2), so a check cannot pass here with a flag real vLLM would reject."""
    parser = argparse.ArgumentParser(prog="fake_vllm_server")
    parser.add_argument("command", choices=["serve"])
    parser.add_argument("model")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--async-scheduling", action="store_true")
    parser.add_argument("--max-num-batched-tokens", type=int, default=2048)
    parser.add_argument("--compilation-config", type=json.loads, default={})
    parser.add_argument("--no-enable-prefix-caching", action="store_true")
    parser.add_argument("--distributed-executor-backend", choices=["mp", "uni", "ray"])
    args = parser.parse_args(list(argv))
    config = FakeConfig(
        model=args.model,
        bug=env.get("FAKE_VLLM_BUG", "correct"),
        budget=args.max_num_batched_tokens,
        async_scheduling=args.async_scheduling,
        cudagraph_mode=str(args.compilation_config.get("cudagraph_mode", "FULL_AND_PIECEWISE")),
        step_delay_s=float(env.get("FAKE_VLLM_STEP_DELAY", "0.002")),
        probe_path=env.get("CARRY_VLLM_PROBE") or None,
    )
    return config, args.host, args.port


def main(argv: Sequence[str] | None = None) -> None:
    config, host, port = config_from_argv(sys.argv[1:] if argv is None else argv, dict(os.environ))
    server = FakeVllmServer(config, host, port)
    if os.environ.get("VLLM_PLE_CPU_OFFLOAD") == "1" and os.environ.get("FAKE_VLLM_PLE_LAYERS"):
        # as PR #53899's offload worker does, when the model has PLE layers to offload
        print("Worker ready - 1 PleOffloadLayer(s)", flush=True)
    print(f"fake vLLM serving {config.model} on {server.url} ({config})", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
