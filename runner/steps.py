"""Run one step (a setup command or a check) in its own process group, with live, bounded logs.

- The step is the leader of a new session, so the whole group (a shell, the vLLM server it
  started, its workers) is signalled together: SIGTERM, a grace period, then SIGKILL, on
  timeout, on cancellation, and for whatever the step left running after its leader exited.
- The leader gets PR_SET_PDEATHSIG=SIGKILL: if the runner process dies, the step dies with it
  instead of holding the accelerator. What escapes that (grandchildren) is found again by the
  token in its environment: `reap_orphans` kills it before the next job on this workdir.
- stdout and stderr are streamed line by line into the run log as they come (`RunLog`), bounded:
  the first lines up to the limits, then a marker saying how much was left out, then the tail.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import redis

from bot.ci.spec import LogLimits
from bot.log import SecretFilter
from bot.store.runners import append_runlog
from runner.cgroup import CgroupRoot, StepCgroup

CancelCheck = Callable[[], str | None]  # a reason when the step must stop, else None
STEP_TOKEN_ENV = "CARRY_STEP_TOKEN"
_PR_SET_PDEATHSIG = 1
_FILE_LOG_CAP = 64 * 1024 * 1024
DEFAULT_LIMITS = LogLimits()


class RunLog:
    """The live log of one run: a Redis stream (bot.store.runners.append_runlog), bounded, and an
    optional complete-ish copy in a local file (capped at 64 MiB). Every line passes through
    the same secret redaction as carry's own logs before it is stored anywhere."""

    def __init__(
        self,
        client: redis.Redis,
        run_id: str,
        limits: LogLimits = DEFAULT_LIMITS,
        file: Path | None = None,
        secrets: Iterable[str] = (),
    ) -> None:
        self.client = client
        self._redactor = SecretFilter(secrets)
        self.run_id = run_id
        self.limits = limits
        self.lines = 0
        self.bytes = 0
        self.dropped = 0
        self._tail: deque[tuple[str, str]] = deque(maxlen=limits.tail_lines)
        self._lock = threading.Lock()
        self._file: IO[bytes] | None = None
        self._file_bytes = 0
        if file is not None:
            file.parent.mkdir(parents=True, exist_ok=True)
            self._file = file.open("ab")

    def write(self, stream: str, text: str) -> None:
        text = _clip(self._redactor.redact(text), self.limits.max_line_bytes)
        with self._lock:
            self._to_file(stream, text)
            if self._fits(text):
                self.lines += 1
                self.bytes += len(text.encode())
                append_runlog(self.client, self.run_id, stream, text)
            else:
                self.dropped += 1
                self._tail.append((stream, text))

    def note(self, text: str) -> None:
        """A line from carry itself (stream "carry")."""
        self.write("carry", text)

    def flush(self) -> None:
        """Writes the truncation marker and the kept tail, if anything was left out."""
        with self._lock:
            if not self.dropped:
                return
            omitted = self.dropped - len(self._tail)
            marker = (
                f"[carry] log truncated: {omitted} lines omitted, last {len(self._tail)} follow"
            )
            append_runlog(self.client, self.run_id, "carry", marker)
            for stream, text in self._tail:
                append_runlog(self.client, self.run_id, stream, text)
            self._tail.clear()
            self.dropped = 0

    def close(self) -> None:
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None

    def _fits(self, text: str) -> bool:
        limits = self.limits
        room = limits.max_lines - limits.tail_lines
        return self.lines < room and self.bytes + len(text.encode()) <= limits.max_bytes

    def _to_file(self, stream: str, text: str) -> None:
        if self._file is None or self._file_bytes > _FILE_LOG_CAP:
            return
        line = f"{stream}: {text}\n".encode()
        self._file.write(line)
        self._file.flush()
        self._file_bytes += len(line)


def _clip(text: str, limit: int) -> str:
    raw = text.encode()
    if len(raw) <= limit:
        return text
    return raw[:limit].decode("utf-8", "ignore") + f" [carry: line cut at {limit} bytes]"


@dataclass(frozen=True)
class StepResult:
    exit_code: int | None  # None when killed by a signal
    signal: int | None
    timed_out: bool
    cancelled: str | None
    duration_s: float
    pid: int = 0
    out_of_memory: int = 0  # processes the kernel ended at the step's cgroup memory limit


def run_step(
    argv: Sequence[str],
    *,
    cwd: Path,
    env: Mapping[str, str],
    timeout_s: float,
    log: RunLog,
    cancelled: CancelCheck,
    state_dir: Path | None = None,
    poll_s: float = 0.5,
    grace_s: float = 5.0,
    cgroups: CgroupRoot | None = None,
    memory_mb: int | None = None,
) -> StepResult:
    """Runs argv to its end, its timeout or a cancel; the process group never outlives it,
    nor (with `cgroups`) any process it started, and all of them together may use at most
    `memory_mb` MiB."""
    started = time.monotonic()
    token = uuid.uuid4().hex
    group = _step_cgroup(cgroups, token, memory_mb, log)
    try:
        proc = _spawn(argv, cwd, {**env, STEP_TOKEN_ENV: token}, group)
    except (OSError, subprocess.SubprocessError) as err:  # the latter: joining its cgroup
        log.note(f"[carry] cannot start {argv[0]!r}: {getattr(err, 'strerror', None) or err}")
        code = 127 if isinstance(err, FileNotFoundError) else 126
        if group is not None:
            group.remove()
        return StepResult(code, None, False, None, time.monotonic() - started)
    record = _record_group(state_dir, token, proc.pid)
    readers = [_reader(proc.stdout, "stdout", log), _reader(proc.stderr, "stderr", log)]
    out_of_memory = 0
    try:
        timed_out, reason = _supervise(proc, started + timeout_s, cancelled, poll_s, grace_s)
    finally:
        _stop_group(proc.pid, grace_s)  # leftovers of a finished step too
        if group is not None:
            out_of_memory = _end_cgroup(group, memory_mb, log)
        proc.wait()
        _join(readers, log)
        if record is not None:
            record.unlink(missing_ok=True)
    code = proc.returncode
    sig = -code if code < 0 else None
    return StepResult(
        None if sig else code,
        sig,
        timed_out,
        reason,
        time.monotonic() - started,
        proc.pid,
        out_of_memory,
    )


def _step_cgroup(
    cgroups: CgroupRoot | None, token: str, memory_mb: int | None, log: RunLog
) -> StepCgroup | None:
    if cgroups is None:
        return None
    try:
        return cgroups.create(token, memory_mb)
    except OSError as err:  # the step still runs, followed by its process group
        log.note(f"[carry] no cgroup for this step ({err.strerror or err}): its process group only")
        return None


def _end_cgroup(group: StepCgroup, memory_mb: int | None, log: RunLog) -> int:
    """Ends what the step left outside its process group, says so, and removes the cgroup;
    returns how many processes the kernel ended at the memory limit."""
    left = group.end()
    if left:
        log.note(
            f"[carry] ended {len(left)} process{'es' if len(left) != 1 else ''} the step left "
            f"running outside its process group (pids {', '.join(map(str, left))})"
        )
    oom = group.out_of_memory()
    if oom:
        log.note(
            f"[carry] the step's processes went over its memory limit of {memory_mb} MiB "
            f"(all of them together): the kernel ended {oom} of them"
        )
    group.remove()
    return oom


def _spawn(
    argv: Sequence[str], cwd: Path, env: Mapping[str, str], group: StepCgroup | None = None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        list(argv),
        cwd=cwd,
        env=dict(env),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        preexec_fn=_before_exec(group),
    )


def _before_exec(group: StepCgroup | None) -> Callable[[], None] | None:
    """preexec_fn: into the step's cgroup (before it starts anything), and SIGKILL the step
    when the runner process that started it dies."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        prctl = libc.prctl
    except (OSError, AttributeError):
        prctl = None
    if prctl is None and group is None:
        return None
    parent = os.getpid()

    def arm() -> None:
        if group is not None:
            group.join()
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
            if os.getppid() != parent:  # the parent died before prctl took effect
                os._exit(137)

    return arm


def _supervise(
    proc: subprocess.Popen[bytes],
    deadline: float,
    cancelled: CancelCheck,
    poll_s: float,
    grace_s: float,
) -> tuple[bool, str | None]:
    """Waits for the leader; stops the group on timeout or cancel. (timed_out, cancel reason).
    The wait starts short and grows to poll_s, so quick steps end quickly too."""
    pause = 0.01
    while not _exited(proc.pid):
        reason = cancelled()
        if reason is not None:
            _stop_group(proc.pid, grace_s)
            return False, reason
        if time.monotonic() >= deadline:
            _stop_group(proc.pid, grace_s)
            return True, None
        time.sleep(min(pause, max(0.01, deadline - time.monotonic())))
        pause = min(poll_s, pause * 2)
    return False, None


def _exited(pid: int) -> bool:
    """True once the leader has exited; it stays a zombie (not reaped), so its pid, which is
    also the group id, cannot be reused while we still signal the group."""
    info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    return info is not None


def _stop_group(pgid: int, grace_s: float) -> None:
    if not group_members(pgid):
        return
    _signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while group_members(pgid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if group_members(pgid):
        _signal_group(pgid, signal.SIGKILL)


def _signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes of a process group, read from /proc."""
    members = []
    for pid, stat in _proc_stats():
        state, pgrp = stat[0], int(stat[2])
        if pgrp == pgid and state not in ("Z", "X"):
            members.append(pid)
    return members


def _proc_stats() -> Iterator[tuple[int, list[str]]]:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            raw = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
        yield int(entry.name), raw[raw.rfind(")") + 2 :].split()


def _reader(pipe: IO[bytes] | None, stream: str, log: RunLog) -> threading.Thread:
    def pump() -> None:
        assert pipe is not None
        with pipe:
            for raw in iter(pipe.readline, b""):
                log.write(stream, raw.decode("utf-8", "replace").rstrip("\r\n"))

    thread = threading.Thread(target=pump, name=f"step-{stream}", daemon=True)
    thread.start()
    return thread


def _join(readers: list[threading.Thread], log: RunLog) -> None:
    for thread in readers:
        thread.join(timeout=5)
        if thread.is_alive():
            log.note("[carry] an output pipe is still open: a process left the step's group")


# --------------------------------------------------------------------------- orphans


def _record_group(state_dir: Path | None, token: str, pgid: int) -> Path | None:
    if state_dir is None:
        return None
    state_dir.mkdir(parents=True, exist_ok=True)
    path = state_dir / f"{token}.json"
    path.write_text(json.dumps({"token": token, "pgid": pgid}))
    return path


def reap_orphans(state_dir: Path) -> list[int]:
    """Kills what steps of a dead runner left behind (found by their token); returns the pids.

    A record stays only when its runner died mid-step. Each process is matched by the token in
    its environment, so a reused pid or group id is never signalled by mistake."""
    killed: list[int] = []
    if not state_dir.is_dir():
        return killed
    for record in sorted(state_dir.glob("*.json")):
        try:
            token = str(json.loads(record.read_text())["token"])
        except (OSError, ValueError, KeyError):
            token = ""
        if token:
            killed += _kill_by_token(token)
        record.unlink(missing_ok=True)
    return killed


def _kill_by_token(token: str) -> list[int]:
    needle = f"{STEP_TOKEN_ENV}={token}".encode()
    killed = []
    for pid, _ in _proc_stats():
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0"):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed
