"""What a step leaves never reaches the next job, in every sandbox mode (issue 33): the
step's init (runner/sandbox_init.py) ends every process the step started, a double-forked
`setsid` daemon included, with namespaces or without; and under namespaces the step's /tmp is
the job's own. Real processes on this host's real `unshare` and `bwrap`."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner import sandbox
from runner.sandbox import Sandbox

ROOT = os.geteuid() == 0
NAMESPACES = sandbox.namespaces_unavailable() is None
BWRAP = sandbox.bwrap_unavailable() is None
# The step user reaches no file of root's (the test's own Python may live under /root).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")
LINGER_S = 1.5  # how long the escaped process waits before it writes its mark
STOP_GRACE_S = 3  # sandbox_init's, after the runner's SIGTERM

# A step that leaves a daemon behind the way a hostile one would: fork, setsid in the child
# (a session and process group of its own, out of the step's), fork again and let the middle
# process exit, so that the daemon's parent is gone. It closes its output (the runner's pipes
# would otherwise show it) and writes its mark LINGER_S later, when the step is long over.
ESCAPE = """
import os, sys, time
mark, linger = sys.argv[1], float(sys.argv[2])
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        time.sleep(linger)
        with open(mark, "w") as out:
            out.write(str(os.getpid()))
        os._exit(0)
    os._exit(0)
os.wait()
print("left a daemon behind", flush=True)
"""


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory any user may enter and write (pytest's own are root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="carry-job-bounds-", dir="/var/tmp"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path)


def box_for(isolation: str, step_user: str | None) -> Sandbox:
    if step_user is not None and not ROOT:
        pytest.skip("a step user needs a root runner")
    if isolation == "auto" and not NAMESPACES:
        pytest.skip(f"no namespaces here: {sandbox.namespaces_unavailable()}")
    if isolation == "bwrap" and not BWRAP:
        pytest.skip(f"no bubblewrap here: {sandbox.bwrap_unavailable()}")
    box = sandbox.resolve(isolation, step_user)
    assert (box.user is not None) == (step_user is not None)
    return box


MODES = [
    ("none", None),
    ("none", "nobody"),
    ("auto", None),
    ("auto", "nobody"),
    ("bwrap", None),
]


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's python3")
@pytest.mark.parametrize(("isolation", "step_user"), MODES)
def test_a_double_forked_setsid_process_ends_with_its_step(
    open_dir: Path, isolation: str, step_user: str | None
) -> None:
    box = box_for(isolation, step_user)
    assert SYSTEM_PYTHON is not None
    mark = open_dir / "lingered"
    argv = box.wrap(
        [SYSTEM_PYTHON, "-I", "-c", ESCAPE, str(mark), str(LINGER_S)],
        network=False,
        writable=[open_dir],
    )
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "left a daemon behind" in done.stdout
    time.sleep(LINGER_S + 1.5)  # the daemon, had it lived, would have written its mark
    assert not mark.exists(), f"a process of the step outlived it: pid {mark.read_text()}"


@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's python3")
@pytest.mark.parametrize(("isolation", "step_user"), [("none", None), ("none", "nobody")])
def test_a_step_stopped_by_the_runner_takes_its_escaped_processes_with_it(
    open_dir: Path, isolation: str, step_user: str | None
) -> None:
    """A step that ignores SIGTERM and left a daemon: the init passes the runner's SIGTERM on
    to every process below it (the daemon inherited the step's SIG_IGN), then kills what is
    left when its grace ends, before the runner's own SIGKILL; and says the step was killed."""
    box = box_for(isolation, step_user)
    assert SYSTEM_PYTHON is not None
    mark = open_dir / "lingered"
    ready = open_dir / "ready"
    linger = STOP_GRACE_S + 2
    stubborn = (
        "import signal, subprocess, sys, time, pathlib\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"escape = [sys.executable, '-I', '-c', {ESCAPE!r}, {str(mark)!r}, '{linger}']\n"
        "subprocess.run(escape)\n"
        f"pathlib.Path({str(ready)!r}).touch()\n"
        "time.sleep(60)\n"
    )
    argv = box.wrap([SYSTEM_PYTHON, "-I", "-c", stubborn], network=False, writable=[open_dir])
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while not ready.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ready.exists()
        os.killpg(proc.pid, 15)
        assert proc.wait(timeout=20) == 128 + 9  # the init ends everything within its grace
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
    time.sleep(linger + 1)
    assert not mark.exists(), f"a process of the step outlived it: pid {mark.read_text()}"


@pytest.mark.skipif(
    not NAMESPACES, reason=f"no namespaces here: {sandbox.namespaces_unavailable()}"
)
def test_under_namespaces_a_steps_tmp_is_the_jobs_own(tmp_path: Path) -> None:
    """A file a step writes to /tmp lands in the job's own directory, never in the host's
    /tmp, and the next job (another directory) does not see it; the step's tree under the
    host's /tmp (pytest's tmp_path) stays where it was."""
    box = sandbox.resolve("auto")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "here.txt").write_text("tree\n")
    name = f"carry-planted-{uuid.uuid4().hex}"
    plant = (
        "import os, sys\n"
        "name = sys.argv[1]\n"
        "print('seen' if os.path.exists('/tmp/' + name) else 'not seen', flush=True)\n"
        "open('/tmp/' + name, 'w').write('planted')\n"
        "print(open('here.txt').read().strip(), flush=True)\n"
    )
    outputs = []
    for job in ("first", "second"):
        private = tmp_path / f"{job}.tmp"
        private.mkdir(mode=0o700)
        argv = box.wrap(
            [sys.executable, "-I", "-c", plant, name], network=False, tree=tree, private_tmp=private
        )
        done = subprocess.run(
            argv, cwd=tree, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout.split())
        assert (private / name).read_text() == "planted"
    assert outputs == [["not", "seen", "tree"], ["not", "seen", "tree"]]
    assert not Path("/tmp", name).exists()
