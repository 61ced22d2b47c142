"""The step sandbox (runner/sandbox.py) on this host's real `unshare`: what a step sees
of processes, the network and signals, and what a runner's config gets where a host cannot
give namespaces."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from runner import sandbox
from runner.job import hand_over, shared_dirs
from runner.sandbox import Isolation, Sandbox, SandboxError

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
    # network: true is a network of its own, whose 127.0.0.1 is not the host's (issue 33) ...
    if shutil.which("slirp4netns"):
        own_net = run(box, REACH.format(port=listener), network=True)
        assert own_net.returncode != 0 and "Connection refused" in own_net.stderr
    # ... unless the config gives such steps the host's network (step_network: host)
    host = sandbox.resolve("auto", step_network="host")
    online = run(host, REACH.format(port=listener), network=True)
    assert online.returncode == 0 and online.stdout.strip() == "reached", online.stderr


WRITE = "import sys\nfor path in sys.argv[1:]:\n    try:\n        open(path, 'w').close()\n        print(path, 'written')\n    except OSError as err:\n        print(path, err.strerror)\n"


@needs_namespaces
def test_a_step_cannot_write_the_runners_python_or_code() -> None:
    """Even as root: the runner's site-packages and carry's own code are read-only in the
    step's mount namespace, and the host sees nothing written there."""
    targets = [Path(p) / "carry_probe.pth" for p in sandbox.runner_files()]
    targets.append(sandbox.CODE_ROOT / "runner" / "carry_probe.py")
    done = run_argv(
        sandbox.resolve("auto"), [sys.executable, "-I", "-c", WRITE, *map(str, targets)]
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [f"{t} Read-only file system" for t in targets]
    assert not any(t.exists() for t in targets)
    assert str(Path(sys.prefix).resolve()) in sandbox.runner_files() or any(
        Path(sys.prefix).resolve().is_relative_to(p) for p in sandbox.runner_files()
    )


UNDO = """
import ctypes, os, stat, sys
libc = ctypes.CDLL(None, use_errno=True)
guarded, node = sys.argv[1].encode(), sys.argv[2]
def said(status):
    return "done" if status == 0 else os.strerror(ctypes.get_errno())
print("remount", said(libc.mount(guarded, guarded, None, 0x20 | 0x1000, None)))
print("umount", said(libc.umount2(guarded, 2)))
try:
    os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(8, 0))
    os.unlink(node)
    print("mknod done")
except OSError as err:
    print("mknod", err.strerror)
"""


def _bwrap_works() -> bool:
    return sandbox.bwrap_unavailable() is None


@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_a_root_step_cannot_undo_the_read_only_mounts_or_use_the_hosts_kernel(
    isolation: str, tmp_path: Path
) -> None:
    """Root in the step's namespaces is root in no namespace of the host's: it cannot
    remount the runner's Python writable or unmount the read-only view (which would give it
    back the host's writable one), and it cannot make a device node for the host's disk."""
    if isolation == "auto" and not NAMESPACES and not os.environ.get("CI"):
        pytest.skip("no namespaces here")
    if isolation == "bwrap" and not _bwrap_works():
        pytest.skip(f"no bubblewrap here: {sandbox.bwrap_unavailable()}")
    guarded = sandbox.runner_files()[0]
    probe = Path(guarded) / "carry_probe.pth"
    step = [sys.executable, "-I", "-c", UNDO + WRITE_AFTER, guarded, str(tmp_path / "disk")]
    try:
        done = run_argv(sandbox.resolve(isolation), [*step, str(probe)])
        assert done.returncode == 0, done.stderr
        assert "done" not in done.stdout, done.stdout
        assert f"{probe} Read-only file system" in done.stdout
        assert not probe.exists()
    finally:  # a failure must not leave a .pth in the runner's own Python
        probe.unlink(missing_ok=True)


WRITE_AFTER = WRITE.replace("sys.argv[1:]", "sys.argv[3:]")


@needs_namespaces
def test_a_writable_directory_inside_a_read_only_one_stays_writable(tmp_path: Path) -> None:
    """A tree the runner keeps under its own code (a workdir in the checkout) is still the
    step's to write; the rest of that directory is not."""
    guarded, tree = tmp_path / "guarded", tmp_path / "guarded" / "tree"
    tree.mkdir(parents=True)
    box = sandbox.resolve("auto")
    argv = box.wrap(
        [sys.executable, "-I", "-c", WRITE, str(guarded / "x"), str(tree / "y")],
        network=False,
        tree=tree,
    )
    at = argv.index(f"--writable={tree.resolve()}")
    argv.insert(at, f"--read-only={guarded}")
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:-1] == [
        f"{guarded / 'x'} Read-only file system",
        f"{tree / 'y'} written",
    ]


def test_a_mount_that_fails_stops_the_step_before_it_starts(tmp_path: Path) -> None:
    """sandbox_init never runs a step with less protection than it was given (here outside
    any mount namespace, where it may not or must not mount)."""
    marker = tmp_path / "ran"
    argv = [sys.executable, "-I", "-S", str(sandbox.INIT), f"--read-only={tmp_path / 'missing'}"]
    argv += ["--", "touch", str(marker)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 126
    assert "cannot make the runner's files read-only for the step" in done.stderr
    assert not marker.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="a root runner's steps")
@needs_namespaces
def test_a_root_runners_step_writes_only_its_own_the_temporary_and_the_shared_directories(
    tmp_path: Path,
) -> None:
    """To whatever checks the uid alone, root in a user namespace is still root: the host's
    files are read-only to a root runner's steps (/etc, where a planted file would run as
    root later, among them), but for the tree, the temporary directories and a directory the
    job shares on purpose (a model cache)."""
    tree, cache = tmp_path / "tree", Path(tempfile.mkdtemp(prefix="carry-cache-", dir="/var/tmp"))
    tree.mkdir()
    try:
        planted = [f"/etc/carry-probe-{os.getpid()}", f"/var/lib/carry-probe-{os.getpid()}"]
        allowed = [tree / "built", cache / "model", Path(f"/var/tmp/carry-probe-{os.getpid()}")]
        targets = [*planted, *map(str, allowed)]
        box = sandbox.resolve("auto")
        argv = box.wrap(
            [sys.executable, "-I", "-c", WRITE, *targets],
            network=False,
            tree=tree,
            writable=[cache],
        )
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        said = done.stdout.splitlines()
        assert said == [f"{t} Read-only file system" for t in planted] + [
            f"{t} written" for t in allowed
        ], done.stdout
        assert not any(Path(t).exists() for t in planted)
    finally:
        shutil.rmtree(cache)
        Path(f"/var/tmp/carry-probe-{os.getpid()}").unlink(missing_ok=True)


def test_only_directories_passed_by_name_are_shared(tmp_path: Path) -> None:
    """A variable the host passes by name that names a directory (a model cache) stays
    writable under a read-only host; carry's own variables and other values do not count."""
    cache = tmp_path / "hf"
    cache.mkdir()
    env = {
        "PATH": "/usr/bin:/bin",
        "TMPDIR": str(tmp_path),  # a scratch directory: the sandbox's own business
        "HF_HOME": str(cache),
        "HF_TOKEN": "hf_not_a_path",
        "MODEL_FILE": str(cache / "missing"),
        "RELATIVE": "hf",
    }
    assert shared_dirs(env) == [cache]


KERNEL = """
import os, sys
try:
    with open("/proc/sys/kernel/core_pattern", "rb") as setting:
        pattern = setting.read()
    with open("/proc/sys/kernel/core_pattern", "wb") as setting:
        setting.write(pattern)  # as it was: a run where this works changes nothing
    print("core_pattern written")
except OSError as err:
    print("core_pattern", err.strerror)
seen = {}  # a mount point's last mount is the one on top, the one a path reaches
for line in open("/proc/self/mountinfo"):
    point, options = line.split()[4:6]
    if point == "/sys" or point.startswith("/sys/"):
        seen[point] = options.split(",")[0]
for point, access in seen.items():
    print(point, access)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a root runner's steps")
@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_a_root_step_cannot_change_the_hosts_kernel_settings_or_sysfs(isolation: str) -> None:
    """Root in its own user namespace is still uid 0 to /proc/sys and sysfs, which check the
    uid alone: they are read-only to the step, every sysfs mount (cgroups) included."""
    if isolation == "auto" and not NAMESPACES and not os.environ.get("CI"):
        pytest.skip("no namespaces here")
    if isolation == "bwrap" and not _bwrap_works():
        pytest.skip(f"no bubblewrap here: {sandbox.bwrap_unavailable()}")
    done = run(sandbox.resolve(isolation), KERNEL, network=False)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "core_pattern Read-only file system", done.stdout
    assert len(lines) > 1 and all(line.endswith(" ro") for line in lines[1:]), done.stdout


DEV = """
import os, stat, sys
print(sorted(os.listdir("/dev")))
print("block devices", [e.name for e in os.scandir("/dev") if stat.S_ISBLK(e.stat().st_mode)])
with open("/dev/null", "w") as null, open("/dev/urandom", "rb") as random:
    null.write("x")
    print("urandom", len(random.read(16)))
leader, follower = os.openpty()
os.write(leader, b"typed\\n")
print("pty", os.read(follower, 16))
open(os.path.join("/dev/shm", sys.argv[1]), "w").close()
print("shm", os.listdir("/dev/shm"))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="a root runner's steps")
@needs_namespaces
def test_a_root_runners_step_gets_a_dev_of_its_own() -> None:
    """The host's /dev holds its disks (and a root step may open them): the step's own has
    the standard nodes, the accelerators', ptys of its own and a private /dev/shm."""
    name = f"carry-probe-{os.getpid()}"
    done = run_argv(sandbox.resolve("auto"), [sys.executable, "-I", "-c", DEV, name])
    assert done.returncode == 0, done.stderr
    listing, blocks, urandom, pty, shm = done.stdout.splitlines()
    standard = ["fd", "full", "null", "ptmx", "pts", "random", "shm", "stderr", "stdin"]
    standard += ["stdout", "tty", "urandom", "zero"]
    accelerators = [Path(device).name for device in sandbox.accelerator_devices()]
    assert listing == str(sorted(standard + accelerators))
    assert blocks == "block devices []"
    assert (urandom, pty) == ("urandom 16", "pty b'typed\\n'")
    assert shm == f"shm [{name!r}]"
    assert not Path("/dev/shm", name).exists()  # the host's /dev/shm never saw it


CONNECT = """
import socket, sys
for path in sys.argv[1:]:
    with socket.socket(socket.AF_UNIX) as client:
        try:
            client.connect(path)
            print(path, "connected")
        except OSError as err:
            print(path, err.strerror)
with socket.socket(socket.AF_UNIX) as own:  # what the step serves itself still works
    own.bind(sys.argv[-1] + ".own")
    own.listen()
    socket.socket(socket.AF_UNIX).connect(sys.argv[-1] + ".own")
    print("own socket connected")
"""


@needs_namespaces
@pytest.mark.parametrize("isolation", ["auto", "bwrap"])
def test_a_step_cannot_reach_the_hosts_daemons_through_their_unix_sockets(
    isolation: str, open_dir: Path
) -> None:
    """No network namespace keeps a step from a socket in the file system (Docker's,
    systemd's, a database's): those where daemons keep them are covered; the step's tree
    keeps its own."""
    if isolation == "bwrap" and not _bwrap_works():
        pytest.skip(f"no bubblewrap here: {sandbox.bwrap_unavailable()}")
    tree = Path(tempfile.mkdtemp(prefix="carry-step-tree-", dir="/tmp"))  # its socket: /tmp/X/Y
    daemon, in_tree = socket.socket(socket.AF_UNIX), socket.socket(socket.AF_UNIX)
    with daemon, in_tree, contextlib.ExitStack() as cleanup:
        cleanup.callback(shutil.rmtree, tree)
        daemon.bind(str(open_dir / "daemon.sock"))  # as /tmp/NAME/SOCKET, like ssh-agent's
        in_tree.bind(str(tree / "step.sock"))
        for server in (daemon, in_tree):
            server.listen()
        host_side = socket.socket(socket.AF_UNIX)
        host_side.connect(str(open_dir / "daemon.sock"))  # the host still reaches it
        host_side.close()
        step = [sys.executable, "-I", "-c", CONNECT, str(open_dir / "daemon.sock")]
        step.append(str(tree / "step.sock"))
        argv = sandbox.resolve(isolation).wrap(step, network=False, tree=tree)
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    if isolation == "auto":
        assert f"{open_dir / 'daemon.sock'} Connection refused" in done.stdout, done.stdout
    else:  # bwrap's /tmp is its own: the host's is not there at all
        assert f"{open_dir / 'daemon.sock'} No such file or directory" in done.stdout
    assert f"{tree / 'step.sock'} connected" in done.stdout, done.stdout
    assert "own socket connected" in done.stdout


@needs_namespaces
def test_a_step_that_cannot_have_its_own_user_namespace_never_runs(tmp_path: Path) -> None:
    """Where no user namespace may be made (here: none left under a limit of 0), the step is
    not started with root's powers instead: sandbox_init says why and exits 126."""
    marker = tmp_path / "ran"
    init = [sys.executable, "-I", "-S", str(sandbox.INIT), "--confine", "--", "touch", str(marker)]
    limit = 'echo 0 > /proc/sys/user/max_user_namespaces && exec "$@"'
    argv = ["unshare", "--user", "--map-root-user", "sh", "-c", limit, "sh", *init]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 126, done.stderr
    assert "cannot confine the step to its own user namespace" in done.stderr
    assert not marker.exists()


def run_argv(box: Sandbox, argv: list[str]) -> subprocess.CompletedProcess[str]:
    wrapped = box.wrap(argv, network=False)
    return subprocess.run(wrapped, capture_output=True, text=True, timeout=60, check=False)


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


# A root runner with no step user says, in every run log, that its steps run as root.
AS_ROOT = ", as root (no step_user)" if os.geteuid() == 0 else ""


def test_sandbox_none_runs_the_command_under_the_init_alone() -> None:
    """No namespaces, no user: the init only ends what the step leaves (issue 33)."""
    box = sandbox.resolve("none")
    assert box.isolation is Isolation.NONE
    wrapped = box.wrap(["pytest", "-q"], network=False)
    assert wrapped == [sys.executable, "-I", "-S", str(sandbox.INIT), "--", "pytest", "-q"]
    assert box.describe(network=False) == (
        f"runs without a sandbox (the runner's config says sandbox: none){AS_ROOT}"
    )
    user = "root (no step_user)" if os.geteuid() == 0 else pwd.getpwuid(os.geteuid()).pw_name
    assert box.summary() == f"none (the runner's config says sandbox: none), as {user}"


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
            f"{AS_ROOT}"
        )
        with pytest.raises(SandboxError, match="says sandbox: namespaces, but util-linux"):
            sandbox.resolve("namespaces")
    finally:
        monkeypatch.undo()
        sandbox.namespaces_unavailable.cache_clear()


# ---------------------------------------------------------------- the step user

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(
    not ROOT, reason="only a root runner can start steps as another user"
)
WRITES = (
    "import os, sys\n"
    "print('uid', os.getuid(), 'groups', os.getgroups())\n"
    "for path in sys.argv[1:]:\n"
    "    try:\n"
    "        with open(path, 'a') as f: f.write('planted')\n"
    "        print(path, 'written')\n"
    "    except OSError as err:\n"
    "        print(path, 'refused', err.errno)\n"
)


# The step user reaches no file of root's (the test's own Python lives under /root).
SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A directory any user may enter (pytest's own are root's 0700)."""
    path = Path(tempfile.mkdtemp(prefix="carry-step-user-", dir="/tmp"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


@needs_root
@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's python3")
@pytest.mark.parametrize("isolation", ["auto", "none"])
def test_a_step_user_cannot_write_what_the_runner_owns(open_dir: Path, isolation: str) -> None:
    """As root a step can rewrite the runner's own code; as the step user it cannot, and it
    can still write the tree handed to it."""
    if isolation == "auto" and not NAMESPACES:
        pytest.skip("no namespaces here")
    assert SYSTEM_PYTHON is not None
    code = open_dir / "carry_code.py"  # stands for the runner's installed code
    code.write_text("trusted = True\n")
    code.chmod(0o644)
    tree = open_dir / "tree"
    tree.mkdir()
    (tree / "build.txt").write_text("")
    box = sandbox.resolve(isolation, "nobody")
    assert box.user is not None
    assert sandbox.unreachable(tree, box.user) is None
    hand_over(tree, box.user.uid, box.user.gid)
    step = [SYSTEM_PYTHON, "-I", "-c", WRITES, str(code), str(tree / "build.txt")]
    done = subprocess.run(
        box.wrap(step, network=False), capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert f"uid {box.user.uid} groups []" in done.stdout
    assert f"{code} refused 13" in done.stdout  # EACCES
    assert f"{tree / 'build.txt'} written" in done.stdout
    assert code.read_text() == "trusted = True\n"
    assert f"as {box.user.name} (uid {box.user.uid})" in box.describe(network=False)
    assert "as root" not in box.describe(network=False)
    assert box.summary().endswith(f", as {box.user.name}")


@needs_root
def test_a_tree_the_step_user_cannot_reach_is_named(tmp_path: Path) -> None:
    user = sandbox.resolve_user("nobody")
    blocked = sandbox.unreachable(tmp_path / "tree", user)  # pytest's own dirs are 0700
    assert blocked is not None and blocked in (tmp_path / "tree").parents
    assert not blocked.stat().st_mode & 0o001


@needs_root
def test_hand_over_changes_links_not_what_they_point_to(tmp_path: Path) -> None:
    outside = tmp_path / "host-file"
    outside.write_text("x")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "link").symlink_to(outside)
    hand_over(tree, 65534, 65534)
    assert (tree / "link").lstat().st_uid == 65534
    assert outside.stat().st_uid == 0


@pytest.mark.parametrize(
    ("user", "said"),
    [
        ("no-such-user-here", "is not a user on this host"),
        ("root", "is root: name an unprivileged user"),
        ("0", "is root: name an unprivileged user"),
    ],
)
def test_a_step_user_that_cannot_be_used_is_refused_by_name(user: str, said: str) -> None:
    with pytest.raises(SandboxError, match=said):
        sandbox.resolve_user(user)


def as_runner_that_is_not_root(check: Callable[[], None]) -> None:
    """Run `check` as a runner that is not root: here when the tests are not root, else in a
    forked child that became nobody for good (a root CI still runs the case). The child's
    failure comes back as its traceback."""
    if not ROOT:
        check()
        return
    nobody = pwd.getpwnam("nobody")
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        os.close(read)
        said = b""
        try:
            os.setgroups([])
            os.setgid(nobody.pw_gid)
            os.setuid(nobody.pw_uid)
            check()
        except BaseException:  # everything goes back to the parent
            said = traceback.format_exc().encode()
        os.write(write, said or b"ok")
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as pipe:
        said = pipe.read().decode()
    os.waitpid(pid, 0)
    assert said == "ok", said


def test_a_step_user_needs_a_root_runner() -> None:
    def check() -> None:
        assert os.geteuid() != 0
        with pytest.raises(SandboxError, match="needs a runner started as root"):
            sandbox.resolve_user("nobody")

    as_runner_that_is_not_root(check)


# ---------------------------------------------------------------- step_user: auto


@pytest.fixture
def runner_host(open_dir: Path) -> tuple[Path, Path]:
    """A runner host where nobody may do what a step needs: a workdir it can enter and a
    Python it can run (the system's, not the test's under root's 0700 home)."""
    assert SYSTEM_PYTHON is not None
    workdir = open_dir / "runner"
    workdir.mkdir(mode=0o755)
    return workdir, Path(os.path.realpath(SYSTEM_PYTHON))


def closed_dir(open_dir: Path) -> Path:
    closed = open_dir / "closed"
    closed.mkdir(mode=0o700)
    return closed


@needs_root
@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's python3")
def test_auto_runs_a_root_runners_steps_as_nobody_where_the_host_lets_it(
    runner_host: tuple[Path, Path], open_dir: Path
) -> None:
    workdir, python = runner_host
    device = open_dir / "accel0"  # stands for an accelerator's node: mode is what counts
    device.write_text("")
    device.chmod(0o666)
    user, why = sandbox.choose_user("auto", workdir, python=python, devices=[str(device)])
    nobody = pwd.getpwnam("nobody")
    assert user == sandbox.StepUser("nobody", nobody.pw_uid, nobody.pw_gid) and why == ""


@needs_root
@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="needs the system's python3")
@pytest.mark.parametrize(
    ("what", "said"),
    [
        (
            "workdir",
            "nobody cannot enter {closed} (mode 700, root:root), above the runner's workdir",
        ),
        (
            "python dir",
            "nobody cannot enter {closed} (mode 700, root:root), above the runner's Python",
        ),
        ("python file", "nobody cannot run the runner's Python {file} (mode 700, root:root)"),
        ("device", "nobody cannot open {file} (mode 660, root:root)"),
    ],
)
def test_auto_keeps_steps_as_root_where_nobody_cannot_run_them_and_says_why(
    runner_host: tuple[Path, Path], open_dir: Path, what: str, said: str
) -> None:
    workdir, python = runner_host
    closed = closed_dir(open_dir)
    devices: list[str] = []
    file = open_dir / "file"
    file.write_text("")
    if what == "workdir":
        workdir = closed / "runner"
    elif what == "python dir":
        python = closed / "python3"
        shutil.copy(SYSTEM_PYTHON or "", python)
    elif what == "python file":
        shutil.copy(SYSTEM_PYTHON or "", file)
        file.chmod(0o700)
        python = file
    else:
        file.chmod(0o660)
        devices = [str(file)]
    user, why = sandbox.choose_user("auto", workdir, python=python, devices=devices)
    assert user is None
    assert why == "step_user: auto, and " + said.format(closed=closed, file=file)


def test_runner_and_no_step_user_keep_the_runners_own_user() -> None:
    assert sandbox.choose_user("runner", None) == (None, "step_user: runner")
    assert sandbox.choose_user(None, None) == (None, "no step_user")


@needs_root
def test_a_root_runner_says_why_its_steps_run_as_root(tmp_path: Path) -> None:
    """pytest's directories are root's 0700: nobody cannot reach a workdir there."""
    box = sandbox.resolve("none", "auto", tmp_path / "runner")
    assert box.user is None
    closed = next(p for p in reversed((tmp_path / "runner").parents) if not p.stat().st_mode & 1)
    said = f"as root (step_user: auto, and nobody cannot enter {closed} (mode 700, root:root)"
    assert said in box.describe(network=False)
    assert box.summary().startswith(f"none (the runner's config says sandbox: none), {said}")


def test_auto_on_a_runner_that_is_not_root_is_its_own_user(tmp_path: Path) -> None:
    def check() -> None:
        assert os.geteuid() != 0
        assert sandbox.choose_user("auto", tmp_path) == (None, "")

    as_runner_that_is_not_root(check)


def test_a_runner_that_is_not_root_hides_its_home_from_its_steps() -> None:
    """Its steps run as its own uid (issue 33): its HOME (an env file, dotfiles) is covered in
    their view. A HOME that is a temporary directory (HOME=/tmp on a CI host) is not: steps
    share those on purpose. A root runner's steps run as a step user, or as root on purpose."""
    parent = "/var/lib" if ROOT else str(Path.home())
    home = tempfile.mkdtemp(prefix="carry-runner-home-", dir=parent)
    os.chmod(home, 0o755)
    try:
        if ROOT:
            assert sandbox.hidden_home() == []  # root's own HOME stays in its steps' view

        def check() -> None:
            assert os.geteuid() != 0
            before = os.environ.get("HOME")
            try:
                os.environ["HOME"] = home
                assert sandbox.hidden_home() == [os.path.realpath(home)]
                os.environ["HOME"] = tempfile.gettempdir()
                assert sandbox.hidden_home() == []
            finally:
                if before is not None:
                    os.environ["HOME"] = before

        as_runner_that_is_not_root(check)
    finally:
        os.rmdir(home)
