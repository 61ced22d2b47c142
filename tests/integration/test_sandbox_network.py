"""Steps with `network: true` get a network of their own (runner/sandbox_net.py, slirp4netns)
with a way out but no route to carry's Redis or the runner host; a sandbox that cannot keep
jobs apart is refused unless the config names the risk; each step process gets a memory limit.
Real processes: redis-server, unshare/bubblewrap, slirp4netns, and (for the way out) a TCP
server in a network namespace of its own behind a veth pair, as another machine would be."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bot.config.loader import ConfigError
from bot.config.schema import Runner
from bot.config.settings import Settings
from bot.local_redis import free_port
from runner import sandbox
from runner.cli import _steps
from runner.sandbox_net import host_addresses

NAMESPACES = sandbox.namespaces_unavailable() is None
ROOT = os.geteuid() == 0
MODES = [
    pytest.param(
        "namespaces",
        marks=pytest.mark.skipif(not NAMESPACES, reason=str(sandbox.namespaces_unavailable())),
    ),
    pytest.param(
        "bwrap",
        marks=pytest.mark.skipif(
            sandbox.bwrap_unavailable() is not None, reason=str(sandbox.bwrap_unavailable())
        ),
    ),
]
needs_slirp = pytest.mark.skipif(
    shutil.which("slirp4netns") is None and not os.environ.get("CI"),
    reason="no slirp4netns here (make test installs it as root or in CI)",
)

PROBE = r"""
import socket, sys
for host in sys.argv[2:]:
    try:
        with socket.create_connection((host, int(sys.argv[1])), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            print(host, "reached", sock.recv(64))
    except OSError as err:
        print(host, "refused", err.strerror or err)
"""


@pytest.fixture(scope="module")
def broker() -> Iterator[tuple[int, list[str]]]:
    """A password-protected redis-server on loopback and on each of this host's addresses."""
    addresses = host_addresses()
    port = free_port()
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            *addresses,
            "--save",
            "",
            "--requirepass",
            secrets.token_hex(8),
        ],
        stdout=subprocess.DEVNULL,
    )
    client = redis.Redis(port=port, socket_connect_timeout=0.5)
    deadline = time.monotonic() + 20
    while True:
        try:
            client.ping()
        except redis.AuthenticationError:
            break
        except redis.ConnectionError:
            assert time.monotonic() < deadline, "redis-server did not start"
            time.sleep(0.05)
    yield port, ["127.0.0.1", *addresses]
    server.kill()
    server.wait()


@pytest.fixture(scope="module")
def other_machine() -> Iterator[tuple[str, int]]:
    """A TCP server in a network namespace of its own, reached from the host through a veth
    pair: an address that is not the host's, as a package index or a model hub would be."""
    if not ROOT or shutil.which("ip") is None:
        pytest.skip("a veth pair needs root and iproute2")
    tag = secrets.token_hex(3)
    name, outer, inner = f"carry-egress-{tag}", f"ce{tag}o", f"ce{tag}i"
    here, there = "10.231.77.1", "10.231.77.2"
    commands = [
        ["ip", "netns", "add", name],
        ["ip", "link", "add", outer, "type", "veth", "peer", "name", inner],
        ["ip", "link", "set", inner, "netns", name],
        ["ip", "addr", "add", f"{here}/30", "dev", outer],
        ["ip", "link", "set", outer, "up"],
        ["ip", "netns", "exec", name, "ip", "addr", "add", f"{there}/30", "dev", inner],
        ["ip", "netns", "exec", name, "ip", "link", "set", inner, "up"],
    ]
    try:
        for command in commands:
            subprocess.run(command, check=True, capture_output=True)
        port = free_port()
        serve = (
            "import socket\n"
            f"s = socket.create_server(({there!r}, {port}))\n"
            "print('listening', flush=True)\n"
            "while True:\n"
            "    c, _ = s.accept(); c.recv(64); c.sendall(b'+EGRESS\\r\\n'); c.close()\n"
        )
        server = subprocess.Popen(
            ["ip", "netns", "exec", name, sys.executable, "-c", serve], stdout=subprocess.PIPE
        )
        assert server.stdout is not None and server.stdout.readline() == b"listening\n"
        yield there, port
        server.kill()
        server.wait()
    finally:  # the pair first, at once: a namespace's own clean-up is deferred by the kernel
        subprocess.run(["ip", "link", "del", outer], capture_output=True, check=False)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)


def run_in(
    mode: str, code: str, *args: str, network: bool, tmp_path: Path, **kwargs: object
) -> subprocess.CompletedProcess[str]:
    box = sandbox.resolve(mode, "runner", networked=network, **kwargs)  # type: ignore[arg-type]
    argv = box.wrap([sys.executable, "-I", "-c", code, *args], network=network, tree=tmp_path)
    return subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)


@needs_slirp
@pytest.mark.parametrize("mode", MODES)
def test_a_step_with_network_cannot_reach_the_broker_on_any_address_of_the_host(
    mode: str, tmp_path: Path, broker: tuple[int, list[str]]
) -> None:
    """Before: a step with network: true had the host's network and reached carry's Redis."""
    port, addresses = broker
    assert len(addresses) >= 2, "the host has a non-loopback address to try"
    done = run_in(mode, PROBE, str(port), *addresses, network=True, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == len(addresses), done.stdout
    assert all(" refused " in line for line in lines), done.stdout
    assert all("reached" not in line for line in lines), done.stdout
    # The same probe outside the sandbox reaches it on every address: the probe can tell.
    bare = subprocess.run(
        [sys.executable, "-I", "-c", PROBE, str(port), *addresses],
        capture_output=True,
        text=True,
        check=True,
    )
    assert bare.stdout.count("reached b'-NOAUTH") == len(addresses), bare.stdout


@needs_slirp
@pytest.mark.parametrize("mode", MODES)
def test_a_step_with_network_reaches_another_machine(
    mode: str, tmp_path: Path, other_machine: tuple[str, int]
) -> None:
    address, port = other_machine
    done = run_in(mode, PROBE, str(port), address, network=True, tmp_path=tmp_path)
    assert done.stdout.strip() == f"{address} reached b'+EGRESS\\r\\n'", (done.stdout, done.stderr)
    # And without network: true, no way out at all.
    closed = run_in(mode, PROBE, str(port), address, network=False, tmp_path=tmp_path)
    assert "refused Network is unreachable" in closed.stdout, closed.stdout


@pytest.mark.parametrize("mode", MODES)
def test_without_slirp4netns_a_step_with_network_is_refused_clearly(
    mode: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no slirp4netns on it
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    with pytest.raises(sandbox.SandboxError, match="needs slirp4netns"):
        sandbox.resolve(mode, "runner", networked=True)
    # ... unless the config gives such steps the host's network, broker included (warned).
    box = sandbox.resolve(mode, "runner", networked=True, step_network="host")
    assert "THE HOST'S NETWORK, THE BROKER INCLUDED" in box.describe(network=True)


def runner_config(tmp_path: Path, **settings: object) -> Runner:
    return Runner.model_validate(
        {
            "queue": "hw.gaudi",
            "workdir": str(tmp_path),
            "checks": {"c": {"run": ["true"]}},
            **settings,
        }
    )


def test_a_runner_without_a_sandbox_is_refused_at_start_unless_it_names_the_risk(
    tmp_path: Path,
) -> None:
    """Before: sandbox: none (and step-user-only) ran every job without job isolation."""
    settings = Settings()
    with pytest.raises(ConfigError) as refused:
        _steps(
            "gaudi", runner_config(tmp_path, sandbox="none", step_user="runner"), tmp_path, settings
        )
    (reason,) = refused.value.problems
    assert "runners.gaudi: steps would run without a sandbox" in reason
    assert "a job could touch later jobs: refused" in reason
    accepted = runner_config(
        tmp_path,
        sandbox={"mode": "none", "accept_risk": "jobs can touch later jobs"},
        step_user="runner",
    )
    assert _steps("gaudi", accepted, tmp_path, settings).startswith("none (")
    with pytest.raises(ValueError, match="accept_risk"):
        runner_config(tmp_path, sandbox={"mode": "none", "accept_risk": "yes"})


@pytest.mark.parametrize(
    "mode",
    [
        *MODES,
        pytest.param("none", id="none (risk accepted)"),
    ],
)
def test_a_step_past_its_memory_limit_fails_and_says_why(mode: str, tmp_path: Path) -> None:
    """Before: a runner's steps had no memory limit."""
    hog = "blob = bytearray(1024 * 1024 * 1024)\nprint('allocated', len(blob))\n"
    limited = run_in(mode, hog, network=False, tmp_path=tmp_path, memory_mb=256)
    assert limited.returncode == 1, (limited.stdout, limited.stderr)
    assert "allocated" not in limited.stdout
    assert "MemoryError" in limited.stderr
    assert "under the runner's memory limit: each of its processes may map 256 MiB" in (
        limited.stderr
    )
    free = run_in(mode, hog, network=False, tmp_path=tmp_path)
    assert free.stdout.strip() == f"allocated {1024 * 1024 * 1024}", free.stderr


def test_the_memory_limit_comes_from_the_runner_or_carry_task_memory_mb(tmp_path: Path) -> None:
    from runner.sandbox_config import runner_sandbox

    accepted = {"mode": "auto", "accept_risk": "jobs can touch later jobs"}
    own = runner_config(tmp_path, sandbox=accepted, step_memory_mb=300)
    assert runner_sandbox(own, Settings(), tmp_path).memory_mb == 300
    plain = runner_config(tmp_path, sandbox=accepted)
    assert runner_sandbox(plain, Settings(), tmp_path).memory_mb is None
    assert runner_sandbox(plain, Settings(task_memory_mb=700), tmp_path).memory_mb == 700
    box = runner_sandbox(own, Settings(), tmp_path)
    described = box.describe(network=False)
    assert "each of its processes may map at most 300 MiB" in described
    # where the host lends the runner a cgroup, the same figure bounds all the step's processes
    if box.cgroups is not None:
        assert described.endswith("(300 MiB for all of them)")
    else:
        assert described.endswith("each of its processes may map at most 300 MiB")
