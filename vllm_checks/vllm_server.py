"""Start and stop ``vllm serve`` for a check (runner only; vLLM is the ``carry[runner]`` extra).

Nothing here imports vllm: the server is a subprocess, found through ``--vllm-bin``. Both checks
turn prefix caching off: async-inputs sends the same prompts concurrently and then alone, and a
cache hit on the second pass would skip the chunked prefill the check relies on; ple-offload
follows its test plan (prefix cache off).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from types import TracebackType
from typing import IO

from vllm_checks.openai_client import health_ok
from vllm_checks.report import InfraError

NONE_COMPILATION_CONFIG = {"cudagraph_mode": "NONE"}
DEFAULT_STARTUP_TIMEOUT = 1200.0
STOP_GRACE_S = 30.0


@dataclass(frozen=True)
class ServeSpec:
    model: str
    port: int
    host: str = "127.0.0.1"
    vllm_bin: str = "vllm"
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    startup_timeout: float = DEFAULT_STARTUP_TIMEOUT
    log_dir: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


def with_log_dir(spec: ServeSpec) -> ServeSpec:
    """The spec with its log directory chosen now, so files beside the log can be named first."""
    return (
        spec
        if spec.log_dir
        else replace(spec, log_dir=Path(tempfile.mkdtemp(prefix="carry-vllm-")))
    )


def with_env(spec: ServeSpec, extra: Mapping[str, str]) -> ServeSpec:
    return replace(spec, env=(*spec.env, *extra.items()))


def serve_command(spec: ServeSpec, *check_args: str) -> list[str]:
    return [
        *shlex.split(spec.vllm_bin),
        "serve",
        spec.model,
        "--host",
        spec.host,
        "--port",
        str(spec.port),
        "--no-enable-prefix-caching",
        *check_args,
        *spec.extra_args,
    ]


def async_inputs_command(spec: ServeSpec, budget: int) -> list[str]:
    return serve_command(spec, "--async-scheduling", "--max-num-batched-tokens", str(budget))


def ple_offload_command(spec: ServeSpec, *, reference: bool) -> list[str]:
    """The run under test keeps vLLM's default cudagraph mode; the reference turns graphs off."""
    if reference:
        return serve_command(spec, "--compilation-config", json.dumps(NONE_COMPILATION_CONFIG))
    return serve_command(spec)


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def port_in_use(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(1.0)
        return sock.connect_ex((host, port)) == 0


class VllmServer:
    """One ``vllm serve`` subprocess in its own process group, ready once ``/health`` is 200."""

    def __init__(
        self,
        command: list[str],
        spec: ServeSpec,
        label: str,
        poll_interval: float = 0.5,
    ) -> None:
        self.command = command
        self.spec = spec
        self.poll_interval = poll_interval
        log_dir = spec.log_dir or Path(tempfile.mkdtemp(prefix="carry-vllm-"))
        self.log_path = log_dir / f"vllm-{label}.log"
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0  # the log is appended to: this run's part starts here

    @property
    def base_url(self) -> str:
        return self.spec.base_url

    def __enter__(self) -> VllmServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def start(self) -> VllmServer:
        if port_in_use(self.spec.host, self.spec.port):
            raise InfraError(f"port {self.spec.port} is already in use; cannot start vLLM there")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log_start = self._log.tell()
        try:
            self._proc = subprocess.Popen(
                self.command,
                stdout=self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **dict(self.spec.env)},
                start_new_session=True,
            )
        except OSError as exc:
            self._close_log()
            raise InfraError(
                f"cannot run {self.command[0]!r} ({exc}); is carry[runner] (vllm) installed?"
            ) from exc
        try:
            self.wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def wait_ready(self) -> None:
        proc = self._require_proc()
        deadline = time.monotonic() + self.spec.startup_timeout
        while True:
            code = proc.poll()
            if code is not None:
                raise InfraError(
                    f"vllm serve exited with code {code} before /health answered; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            if health_ok(self.base_url):
                return
            if time.monotonic() > deadline:
                raise InfraError(
                    f"vllm serve did not answer /health within {self.spec.startup_timeout:.0f} s; "
                    f"log {self.log_path}:\n{self.log_tail()}"
                )
            time.sleep(self.poll_interval)

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=STOP_GRACE_S)
        self._close_log()

    def run_log(self) -> str:
        """What this run of the server wrote to its log (earlier runs' lines excluded)."""
        try:
            with self.log_path.open("rb") as log:
                log.seek(self._log_start)
                return log.read().decode(errors="replace")
        except OSError:
            return ""

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def _require_proc(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            raise InfraError("vllm serve is not running")
        return self._proc

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _signal_group(proc: subprocess.Popen[bytes], sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, sig)


def _env_pair(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    return key, value


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("start vLLM itself (runner only, needs carry[runner])")
    group.add_argument("--serve", metavar="MODEL", help="start `vllm serve MODEL` for this check")
    group.add_argument("--port", type=int, default=0, help="port for --serve (default: a free one)")
    group.add_argument(
        "--vllm-bin", default="vllm", help="command that runs vLLM, shell-split (default: vllm)"
    )
    group.add_argument(
        "--serve-arg",
        action="append",
        default=[],
        metavar="ARG",
        help="extra vllm serve argument, repeatable; write --serve-arg=--max-model-len=4096",
    )
    group.add_argument(
        "--serve-env", action="append", default=[], type=_env_pair, metavar="KEY=VALUE"
    )
    group.add_argument(
        "--startup-timeout",
        type=float,
        default=DEFAULT_STARTUP_TIMEOUT,
        help=f"seconds to wait for /health (default {DEFAULT_STARTUP_TIMEOUT:.0f})",
    )
    group.add_argument("--serve-log-dir", type=Path, help="where vllm serve logs go")


def spec_from_args(args: argparse.Namespace) -> ServeSpec:
    return ServeSpec(
        model=args.serve,
        port=args.port or free_port(),
        vllm_bin=args.vllm_bin,
        extra_args=tuple(args.serve_arg),
        env=tuple(args.serve_env),
        startup_timeout=args.startup_timeout,
        log_dir=args.serve_log_dir,
    )
