"""The step sandbox (workers/runner/sandbox.py) on this host's real `unshare`: what a step sees
of processes, the network and signals, and what a runner's config gets where a host cannot
give namespaces."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from workers.runner import sandbox
from workers.runner.sandbox import Isolation, Sandbox, SandboxError

NAMESPACES = sandbox.namespaces_unavailable() is None
# Skipped only off CI: the CI machine gives namespaces, and there a broken sandbox must fail.
needs_namespaces = pytest.mark.skipif(
    not NAMESPACES and not os.environ.get("CI"),
    reason=f"this host gives no namespaces: {sandbox.namespaces_unavailable()}",
)


def run(box: Sandbox, code: str, *, network: bool) -> subprocess.CompletedProcess[str]:
    argv = box.wrap([sys.executable, "-I", "-c", code], network=network)
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP port that this test process (the host's network) listens on."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


REACH = "import socket, sys; socket.create_connection(('127.0.0.1', {port}), 2); print('reached')"


@needs_namespaces
def test_a_step_sees_only_its_own_processes() -> None:
    done = run(
        sandbox.resolve("auto"),
        "import os; print(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))",
        network=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1, 2]"  # the init process and the step itself


@needs_namespaces
def test_without_network_a_step_has_a_working_loopback_and_no_route_to_the_host(
    listener: int,
) -> None:
    box = sandbox.resolve("auto")
    own = (
        "import socket; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
        "socket.create_connection(s.getsockname(), 2); print('loopback')"
    )
    assert run(box, own, network=False).stdout.strip() == "loopback"
    offline = run(box, REACH.format(port=listener), network=False)
    assert offline.returncode != 0 and "Connection refused" in offline.stderr
    online = run(box, REACH.format(port=listener), network=True)
    assert online.returncode == 0 and online.stdout.strip() == "reached", online.stderr


@needs_namespaces
def test_exit_status_and_death_by_signal_come_through() -> None:
    box = sandbox.resolve("auto")
    assert run(box, "raise SystemExit(3)", network=False).returncode == 3
    killed = run(box, "import os, signal; os.kill(os.getpid(), signal.SIGKILL)", network=False)
    assert killed.returncode == 128 + 9
    missing = subprocess.run(box.wrap(["no-such-program-here"], network=False), check=False)
    assert missing.returncode == 127


@needs_namespaces
def test_the_runners_signal_reaches_a_step_that_handles_it(tmp_path: Path) -> None:
    """An init process ignores signals it has no handler for; sandbox_init passes them on."""
    ready = tmp_path / "ready"
    code = (
        "import signal, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, lambda *a: (print('got TERM', flush=True), sys.exit(7)))\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    argv = sandbox.resolve("auto").wrap([sys.executable, "-I", "-c", code], network=False)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 30
    while not ready.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert "got TERM" in out


def test_sandbox_none_runs_the_command_as_it_is() -> None:
    box = sandbox.resolve("none")
    assert box.isolation is Isolation.NONE
    assert box.wrap(["pytest", "-q"], network=False) == ["pytest", "-q"]
    assert box.describe(network=False) == (
        "runs without a sandbox (the runner's config says sandbox: none)"
    )


def test_a_host_without_unshare_falls_back_under_auto_and_refuses_under_namespaces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox.namespaces_unavailable.cache_clear()
    try:
        fallback = sandbox.resolve("auto")
        assert fallback.isolation is Isolation.NONE
        assert fallback.describe(network=True) == (
            "runs without a sandbox (sandbox: auto, and util-linux `unshare` is not installed)"
        )
        with pytest.raises(SandboxError, match="says sandbox: namespaces, but util-linux"):
            sandbox.resolve("namespaces")
    finally:
        monkeypatch.undo()
        sandbox.namespaces_unavailable.cache_clear()
