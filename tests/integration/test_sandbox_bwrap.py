"""`sandbox: bwrap` (runner/sandbox.py) on this host's real bubblewrap: the namespaces
of `sandbox: namespaces` plus a file-system view of the step's own, the host's files read-only
but for its tree, its home, its Python and a private /tmp. `make test` installs bubblewrap
where it can (root, CI)."""

from __future__ import annotations

import ast
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import sandbox
from runner.sandbox import Isolation, SandboxError

BWRAP = sandbox.bwrap_unavailable() is None
SYSTEM_PYTHON = shutil.which(
    "python3", path="/usr/bin:/bin"
)  # a step user reaches no venv of root's
# Skipped only off CI: `make test` installs bubblewrap in CI, and there a broken one must fail.
pytestmark = pytest.mark.skipif(
    not BWRAP and not os.environ.get("CI"),
    reason=f"no bubblewrap here: {sandbox.bwrap_unavailable()}",
)

WRITES = (
    "import os, sys\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        with open(path, 'a') as f: f.write('planted')\n"
    "        print(path, 'written')\n"
    "    except OSError as err:\n"
    "        print(path, 'refused', err.strerror)\n"
    "print('tmpdir', os.environ.get('TMPDIR'))\n"
    "print('pids', sorted(int(p) for p in os.listdir('/proc') if p.isdigit()))\n"
)


def step(
    tree: Path,
    code: str,
    *args: str,
    network: bool = False,
    user: str | None = None,
    python: str = sys.executable,
    home: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    box = sandbox.resolve("bwrap", user)
    argv = box.wrap(
        [python, "-I", "-c", code, *args],
        network=network,
        tree=tree,
        writable=[home] if home else [],
    )
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False, cwd=tree)


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A directory of the host outside /tmp (the step's /tmp is its own)."""
    path = Path(tempfile.mkdtemp(prefix="carry-bwrap-", dir="/var/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@pytest.fixture
def listener() -> Iterator[int]:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def test_a_step_writes_its_tree_home_and_tmp_and_nothing_else_of_the_host(
    host_dir: Path,
) -> None:
    runner_code = host_dir / "carry_code.py"  # stands for the runner's installed code
    runner_code.write_text("trusted = True\n")
    tree, home = host_dir / "tree", host_dir / "tree.home"
    tree.mkdir()
    home.mkdir()
    done = step(
        tree,
        WRITES,
        str(runner_code),
        str(tree / "build.txt"),
        str(home / "rc"),
        "/tmp/scratch",
        home=home,
    )
    assert done.returncode == 0, done.stderr
    assert f"{runner_code} refused Read-only file system" in done.stdout  # even as root
    assert f"{tree / 'build.txt'} written" in done.stdout
    assert f"{home / 'rc'} written" in done.stdout
    assert "/tmp/scratch written" in done.stdout and "tmpdir /tmp" in done.stdout
    assert runner_code.read_text() == "trusted = True\n"
    assert (tree / "build.txt").read_text() == "planted"
    assert not Path("/tmp/scratch").exists()  # its /tmp was its own
    pids = done.stdout.split("pids ")[1]
    assert len(ast.literal_eval(pids)) <= 3, (
        pids
    )  # bwrap, carry's init and the step: not the runner


def test_a_step_has_the_network_only_when_its_config_says_so(tmp_path: Path, listener: int) -> None:
    reach = f"import socket; socket.create_connection(('127.0.0.1', {listener}), 2); print('ok')"
    cut = step(tmp_path, reach)
    assert cut.returncode != 0 and "ConnectionRefusedError" in cut.stderr
    # network: true is a network of its own (slirp4netns): the host's 127.0.0.1 is not in it
    if shutil.which("slirp4netns"):
        own = step(tmp_path, reach, network=True)
        assert own.returncode != 0 and "ConnectionRefusedError" in own.stderr, own.stderr
    box = sandbox.resolve("bwrap", step_network="host")  # the host's, by explicit setting
    argv = box.wrap([sys.executable, "-I", "-c", reach], network=True, tree=tmp_path)
    joined = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert joined.returncode == 0 and joined.stdout.strip() == "ok", joined.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root runner starts steps as another user")
@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's python3")
def test_under_bwrap_a_step_runs_as_the_step_user(host_dir: Path) -> None:
    tree = host_dir / "tree"
    tree.mkdir()
    tree.chmod(0o777)
    assert SYSTEM_PYTHON is not None
    code = "import os; print(os.getuid(), os.getgid())"
    done = step(tree, code, user="nobody", python=SYSTEM_PYTHON)
    user = sandbox.resolve_user("nobody")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [str(user.uid), str(user.gid)]
    box = sandbox.resolve("bwrap", "nobody")
    assert box.describe(network=False) == (
        "runs under bubblewrap in its own PID, mount, IPC and UTS namespaces, with no network "
        "(loopback only), the host's files read-only but for its tree, its home, its Python "
        f"and a private /tmp, as nobody (uid {user.uid})"
    )


def test_without_bubblewrap_sandbox_bwrap_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sandbox.bwrap_unavailable.cache_clear()
    try:
        with pytest.raises(SandboxError, match=r"says sandbox: bwrap, but bubblewrap \(`bwrap`\)"):
            sandbox.resolve("bwrap")
        assert sandbox.resolve("auto").isolation is not Isolation.BWRAP
    finally:
        monkeypatch.undo()
        sandbox.bwrap_unavailable.cache_clear()
