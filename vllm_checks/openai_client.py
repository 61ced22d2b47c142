"""A small client for an OpenAI-compatible ``/v1/completions`` endpoint, as served by vLLM.

Besides the OpenAI fields it speaks vLLM's extensions: ``prompt_logprobs`` (request field, and a
choice field holding, per prompt position, ``{token_id: {logprob, rank, decoded_token}}`` or
null for the first position), ``ignore_eos`` and ``return_tokens_as_token_ids``. Every transport
or protocol failure surfaces as :class:`InfraError`, so callers can tell "the server misbehaved
as a service" (exit 2) from "the server computed something wrong" (exit 1).
"""

from __future__ import annotations

import argparse
import json
import random
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx

from vllm_checks.report import InfraError

_FILLER = (
    "river carried small stones past the old mill while children counted boats and birds above "
    "quiet field near a wooden bridge where baker sold warm bread every morning before market "
    "opened its green doors to farmers from hills"
)
_WORDS = _FILLER.split()


def filler_prompt(words: int, seed: int | str) -> str:
    """A deterministic prompt of ``words`` plain English words (about one token each)."""
    rng = random.Random(seed)
    return " ".join(rng.choice(_WORDS) for _ in range(words))


@dataclass(frozen=True)
class CompletionRequest:
    prompt: str
    max_tokens: int
    logprobs: int | None = None
    prompt_logprobs: int | None = None
    temperature: float = 0.0
    ignore_eos: bool = True
    tokens_as_ids: bool = True

    def payload(self, model: str, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": model,
            "prompt": self.prompt,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "ignore_eos": self.ignore_eos,
            "stream": stream,
        }
        if self.logprobs is not None:
            body["logprobs"] = self.logprobs
        if self.prompt_logprobs is not None:
            body["prompt_logprobs"] = self.prompt_logprobs
        if self.tokens_as_ids:
            body["return_tokens_as_token_ids"] = True
        if stream:
            body["stream_options"] = {"include_usage": True}
        return body


@dataclass(frozen=True)
class TokenLogprob:
    logprob: float
    rank: int | None = None
    decoded: str | None = None


PositionLogprobs = Mapping[int, TokenLogprob]


@dataclass(frozen=True)
class Completion:
    text: str
    tokens: tuple[str, ...] = ()
    token_logprobs: tuple[float | None, ...] = ()
    prompt_logprobs: tuple[PositionLogprobs | None, ...] | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None


@dataclass(frozen=True)
class Timing:
    """Monotonic times of the first and the last streamed token (None when none arrived)."""

    first_token: float | None
    last_token: float | None


def parse_position(raw: Any) -> PositionLogprobs | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InfraError(f"prompt_logprobs position is not an object: {raw!r:.200}")
    position: dict[int, TokenLogprob] = {}
    for key, entry in raw.items():
        if isinstance(entry, dict):
            logprob, rank, decoded = (
                entry.get("logprob"),
                entry.get("rank"),
                entry.get("decoded_token"),
            )
        else:  # some servers flatten the entry to its logprob
            logprob, rank, decoded = entry, None, None
        if not isinstance(logprob, int | float):
            raise InfraError(f"prompt_logprobs entry {key!r} has no numeric logprob")
        position[int(key)] = TokenLogprob(float(logprob), rank, decoded)
    return position


def parse_prompt_logprobs(raw: Any) -> tuple[PositionLogprobs | None, ...] | None:
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise InfraError(f"prompt_logprobs is not a list: {raw!r:.200}")
    return tuple(parse_position(item) for item in raw)


@dataclass
class _Accumulator:
    """Collects a completion from one full reply or from a stream of chunks."""

    text: list[str] = field(default_factory=list)
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    prompt_logprobs: tuple[PositionLogprobs | None, ...] | None = None
    prompt_tokens: int | None = None
    finish_reason: str | None = None

    def add(self, body: Mapping[str, Any]) -> int:
        """Fold one reply object in; return how many tokens it carried."""
        if "error" in body and body.get("error"):
            raise InfraError(f"server reported an error: {body['error']!r:.500}")
        usage = body.get("usage")
        if isinstance(usage, dict) and isinstance(usage.get("prompt_tokens"), int):
            self.prompt_tokens = usage["prompt_tokens"]
        choices = body.get("choices")
        if not isinstance(choices, list):
            raise InfraError(f"reply has no choices list: {json.dumps(body)[:300]}")
        added = 0
        for choice in choices:
            added += self._add_choice(choice)
        return added

    def _add_choice(self, choice: Mapping[str, Any]) -> int:
        self.text.append(str(choice.get("text") or ""))
        if choice.get("finish_reason"):
            self.finish_reason = str(choice["finish_reason"])
        if choice.get("prompt_logprobs") is not None:
            self.prompt_logprobs = parse_prompt_logprobs(choice["prompt_logprobs"])
        logprobs = choice.get("logprobs")
        if not logprobs:
            return 1 if choice.get("text") else 0
        tokens = logprobs.get("tokens")
        values = logprobs.get("token_logprobs") or [None] * len(tokens or [])
        if not isinstance(tokens, list) or len(values) != len(tokens):
            raise InfraError("logprobs.tokens and logprobs.token_logprobs do not line up")
        self.tokens += [str(t) for t in tokens]
        self.token_logprobs += [None if v is None else float(v) for v in values]
        return len(tokens)

    def result(self) -> Completion:
        return Completion(
            text="".join(self.text),
            tokens=tuple(self.tokens),
            token_logprobs=tuple(self.token_logprobs),
            prompt_logprobs=self.prompt_logprobs,
            prompt_tokens=self.prompt_tokens,
            finish_reason=self.finish_reason,
        )


def parse_completion(body: Mapping[str, Any]) -> Completion:
    acc = _Accumulator()
    acc.add(body)
    return acc.result()


def health_ok(base_url: str, timeout: float = 2.0) -> bool:
    """Whether ``GET /health`` answers 200 (vLLM's readiness probe)."""
    try:
        response = httpx.get(f"{normalize_base_url(base_url)}/health", timeout=timeout)
    except httpx.HTTPError:
        return False
    return response.status_code == 200


def normalize_base_url(url: str) -> str:
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class OpenAIClient:
    """Thread-safe (one pooled httpx client) access to one server and one model."""

    def __init__(self, base_url: str, model: str, timeout: float = 300.0) -> None:
        self.base_url = normalize_base_url(base_url)
        self.model = model
        self._http = httpx.Client(
            base_url=self.base_url,
            timeout=httpx.Timeout(timeout, connect=min(timeout, 10.0)),
            limits=httpx.Limits(max_connections=128, max_keepalive_connections=32),
        )

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def complete(self, request: CompletionRequest) -> Completion:
        payload = request.payload(self.model, stream=False)
        with _transport_errors(self.base_url):
            response = self._http.post("/v1/completions", json=payload)
            _raise_for_status(response)
            try:
                body = response.json()
            except ValueError as exc:
                raise InfraError(f"reply is not JSON: {response.text[:300]!r}") from exc
        return parse_completion(body)

    def stream(
        self,
        request: CompletionRequest,
        on_tokens: Callable[[int], None] | None = None,
    ) -> tuple[Completion, Timing]:
        """Stream one completion; ``on_tokens(n)`` runs each time the count of tokens grows."""
        acc = _Accumulator()
        first: float | None = None
        last: float | None = None
        payload = request.payload(self.model, stream=True)
        with (
            _transport_errors(self.base_url),
            self._http.stream("POST", "/v1/completions", json=payload) as response,
        ):
            if response.status_code >= 400:
                response.read()
                _raise_for_status(response)
            received = 0
            for chunk in _sse_objects(response.iter_lines()):
                added = acc.add(chunk)
                if added == 0:
                    continue
                received += added
                last = time.monotonic()
                first = last if first is None else first
                if on_tokens is not None:
                    on_tokens(received)
        return acc.result(), Timing(first, last)


@contextmanager
def _transport_errors(base_url: str) -> Iterator[None]:
    """Turn httpx transport failures (refused, reset, timed out) into InfraError."""
    try:
        yield
    except httpx.TimeoutException as exc:
        raise InfraError(f"{base_url}: request timed out ({exc})") from exc
    except httpx.HTTPError as exc:
        raise InfraError(f"{base_url}: {type(exc).__name__}: {exc}") from exc


def _raise_for_status(response: httpx.Response) -> None:
    if response.status_code >= 400:
        raise InfraError(
            f"{response.request.method} {response.request.url.path}: "
            f"HTTP {response.status_code}: {response.text[:500]}"
        )


def _sse_objects(lines: Iterator[str]) -> Iterator[dict[str, Any]]:
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise InfraError(f"stream chunk is not JSON: {data[:200]!r}") from exc
        if not isinstance(obj, dict):
            raise InfraError(f"stream chunk is not an object: {data[:200]!r}")
        yield obj
    raise InfraError("stream ended without [DONE]")


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def add_connection_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--base-url", help="server under test, e.g. http://127.0.0.1:8000 (a /v1 suffix is fine)"
    )
    parser.add_argument("--model", help="model name the server serves (default: the --serve model)")
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds per request (default 300)"
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="write the verdict as JSON here")


def target_model(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The model under test, after checking that exactly one target was given."""
    if bool(args.base_url) == bool(args.serve):
        parser.error("give exactly one of --base-url (a running server) and --serve MODEL")
    model = args.model or args.serve
    if not model:
        parser.error("--model is required with --base-url")
    return str(model)
