"""The first process of a step's PID namespace (see sandbox.py); standard library only, run as
`python -I -S sandbox_init.py [--loopback] [--confine] [--private-dev] [--hide-sockets]
[--user=UID:GID] [--read-only=PATH]... [--writable=PATH]... [--scratch=PATH]... [--device=PATH]...
[--private-tmp=PATH] [--hide=PATH]... -- ARGV...`.

It is the step's init in every mode, namespaces or not: a child subreaper (PR_SET_CHILD_SUBREAPER),
so every process the step starts, a double-forked `setsid` daemon included, is re-parented to
it when its parent exits, and when the step ends the init kills every process left below it
(and looks again until none is left) before it exits itself. No process of a job outlives it.
With --private-tmp the step's /tmp is PATH (the job's own, made anew for each job), bound over
the host's in the step's mount namespace; the step's own paths under the host's /tmp are bound
again where they were.

In the step's own mount namespace it makes each --read-only path a read-only bind mount of
itself (the runner's Python and code: a step must not leave code there for the next job or
the runner), keeping each --writable path (the step's own) and --scratch path (the host's
temporary directories) below one writable. A mount that fails stops the
step before it starts (status 126): it never runs with less protection than it was given.
With --confine the step then starts in a user namespace of its own (every id mapped to
itself, so it reads and writes the files it could before): root there holds no capability in
any namespace the runner's files, the host's kernel or the host's network belong to, so the
step can neither remount nor unmount what was made read-only (the kernel locks mounts handed
to a less privileged namespace), nor make device nodes, load modules or reconfigure the host.
Each --hide path (a runner's HOME) is covered with an empty read-only tmpfs, but for the
read-only, writable and scratch paths below it.
With --private-dev it gets a /dev of its own with only the standard nodes and each --device.
With --hide-sockets the host's unix sockets where daemons keep them (/run, /tmp) are covered:
a network namespace keeps no step from a socket in the file system, and through Docker's,
systemd's or a database's a step could act outside the sandbox.
With --net-wait (a step with network: true, see sandbox_net.py) it says on fd 3 that its
network namespace exists and starts the step only once fd 4 says its network is made.
With --memory-mb=N the step and what it starts may each map N MiB (RLIMIT_AS, RLIMIT_DATA);
a step that fails under it is told so on stderr.
It brings the loopback device up when the step has its own network namespace, starts the step,
passes on the signals the runner sends (an init process ignores those it has no handler for),
reaps every orphan the step leaves (they are re-parented to it), and exits with the step's
status: its exit code, or 128 + the signal that killed it.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import re
import resource
import signal
import socket
import stat
import struct
import sys
import time
import warnings  # noqa: F401  os.execvp imports it; a step user may not read the stdlib
from collections.abc import Iterator
from typing import Any, NoReturn

_SIOCGIFFLAGS = 0x8913
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1
_FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1)
_MS_RDONLY, _MS_REMOUNT, _MS_BIND, _MS_REC = 0x1, 0x20, 0x1000, 0x4000
_CLONE_NEWNS, _CLONE_NEWUSER = 0x20000, 0x10000000
_PR_SET_CHILD_SUBREAPER = 36
_NETNS_FD, _GO_FD = 3, 4  # --net-wait: sandbox_net.py's NETNS_FD and GO_FD
# After the runner asks the step to stop (SIGTERM), what is left of it gets this long before
# SIGKILL: less than the runner's own grace, so that the init ends every process of the step
# before the runner kills the init itself.
_STOP_GRACE_S = 3
_ST_RDONLY = 0x1
_OCTAL = re.compile(r"\\([0-7]{3})")  # mountinfo writes a space in a path as \040
USAGE = (
    "usage: sandbox_init.py [--loopback] [--confine] [--private-dev] [--hide-sockets] "
    "[--user=UID:GID] [--read-only=PATH]... [--writable=PATH]... [--scratch=PATH]... "
    "[--device=PATH]... [--private-tmp=PATH] [--hide=PATH]... [--net-wait] [--memory-mb=N] "
    "-- ARGV..."
)
# statvfs flag -> the mount flag a remount must keep (in a user namespace these are locked)
_KEPT = {0x2: 0x2, 0x4: 0x4, 0x8: 0x8, 0x400: 0x400, 0x800: 0x800, 0x1000: 0x200000}
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC = 0x2, 0x4, 0x8
# Where hosts keep their daemons' unix sockets (Docker's, systemd's, a database's), and how
# many directory levels down to look: a network namespace does not keep a step from them.
_SOCKET_DIRS = {"/run": 4, "/var/run": 4, "/tmp": 2, "/var/tmp": 2}
# A step's own /dev holds these of the host's nodes (and the devices it is given) and links.
_DEV_NODES = ("null", "zero", "full", "random", "urandom", "tty")
_DEV_LINKS = {
    "fd": "/proc/self/fd",
    "stdin": "/proc/self/fd/0",
    "stdout": "/proc/self/fd/1",
    "stderr": "/proc/self/fd/2",
    "ptmx": "pts/ptmx",
}


def loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(sock, _SIOCSIFFLAGS, struct.pack("16sh", b"lo", flags | _IFF_UP))


def _mount(source: str, target: str, flags: int, fstype: str = "", data: str = "") -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    kind, options = (fstype.encode() or None), (data.encode() or None)
    if libc.mount(source.encode(), target.encode(), kind, flags, options) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"mount {target}: {os.strerror(number)}")


def private_dev(devices: list[str]) -> None:
    """A /dev of the step's own, in place of the host's: a tmpfs with the standard nodes and
    `devices` (the accelerators') bound from the host's, a private /dev/shm and a devpts of
    its own. No disk, memory or terminal of the host's is in it."""
    wanted = [f"/dev/{name}" for name in _DEV_NODES] + devices
    handles = {path: os.open(path, os.O_PATH) for path in wanted if os.path.exists(path)}
    try:  # bound from these handles: the host's /dev is hidden once the tmpfs is on it
        _mount("tmpfs", "/dev", _MS_NOSUID, "tmpfs", "mode=0755")
        for path, handle in handles.items():
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if os.path.isdir(f"/proc/self/fd/{handle}"):
                os.mkdir(path)
            else:
                os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
            _mount(f"/proc/self/fd/{handle}", path, _MS_BIND | _MS_REC)
    finally:
        for handle in handles.values():
            os.close(handle)
    os.mkdir("/dev/shm")
    _mount("tmpfs", "/dev/shm", _MS_NOSUID | _MS_NODEV, "tmpfs", "mode=1777")
    os.mkdir("/dev/pts")
    pts = "newinstance,ptmxmode=0666,mode=620"
    _mount("devpts", "/dev/pts", _MS_NOSUID | _MS_NOEXEC, "devpts", pts)
    for name, target in _DEV_LINKS.items():
        os.symlink(target, f"/dev/{name}")


def private_tmp(own: str, kept: list[str]) -> None:
    """`own` becomes the step's /tmp. The paths of `kept` under the host's /tmp (the step's
    tree, home and Python, the runner's code, where a workdir or checkout lives there) are
    bound again at their places, from handles opened before the host's /tmp is covered."""
    handles = _handles_under("/tmp", kept, itself=True)
    source = os.open(own, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        _mount(f"/proc/self/fd/{source}", "/tmp", _MS_BIND | _MS_REC)
        _bind_back(handles)
    finally:
        os.close(source)
        for handle in handles.values():
            os.close(handle)


def hide(hidden: list[str], kept: list[str]) -> None:
    """Cover each path of `hidden` (a runner's HOME, where a runner that is not root keeps its
    secrets: its steps are its own uid) with an empty read-only tmpfs. The paths of `kept`
    under it (the runner's Python, the step's tree and home) are bound again at their places,
    from handles opened before it is covered, each as it was (read-only or writable)."""
    for path in hidden:
        handles = _handles_under(path, kept)
        try:
            _mount("carry-hidden", path, _MS_NOSUID | _MS_NODEV, "tmpfs", "mode=0755,size=64k")
            _bind_back(handles)
            flags = _MS_REMOUNT | _MS_BIND | _MS_RDONLY | _MS_NOSUID | _MS_NODEV
            _mount(path, path, flags)
        finally:
            for handle in handles.values():
                os.close(handle)


def _handles_under(top: str, kept: list[str], *, itself: bool = False) -> dict[str, int]:
    """O_PATH handles of the outermost existing paths of `kept` below `top` (and `top` itself
    where `itself`), opened before `top` is covered so that _bind_back puts them back."""
    under = [k for k in kept if _within(k, top) and (itself or k != top) and os.path.exists(k)]
    outermost = [p for p in under if not any(_within(p, o) and p != o for o in under)]
    return {path: os.open(path, os.O_PATH) for path in dict.fromkeys(outermost)}


def _bind_back(handles: dict[str, int]) -> None:
    """Each handle's file or directory bound again at its path (made first, empty)."""
    for path, handle in handles.items():
        if os.path.isdir(f"/proc/self/fd/{handle}"):
            os.makedirs(path, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            os.close(os.open(path, os.O_CREAT | os.O_WRONLY, 0o600))
        _mount(f"/proc/self/fd/{handle}", path, _MS_BIND | _MS_REC)


def become_subreaper() -> None:
    """Orphans of the step's processes are re-parented to this process, not to the host's init."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"prctl(PR_SET_CHILD_SUBREAPER): {os.strerror(number)}")


def descendants(pid: int) -> list[int]:
    """Every live process below `pid` (children first), from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as handle:
                raw = handle.read()
        except OSError:
            continue
        fields = raw[raw.rfind(")") + 2 :].split()  # comm may hold spaces and parentheses
        if fields[0] not in ("Z", "X"):
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, queue = [], list(children.get(pid, []))
    while queue:
        child = queue.pop(0)
        found.append(child)
        queue += children.get(child, [])
    return found


def end_descendants(deadline_s: float = 30.0) -> None:
    """SIGKILLs every process below this one, and again until none is left (each is re-parented
    to this subreaper and reaped here). One that outlasts `deadline_s` (stuck in the kernel) is
    named on stderr."""
    deadline = time.monotonic() + deadline_s
    while True:
        left = descendants(os.getpid())
        for pid in left:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        _reap_exited()
        if not left:
            return
        if time.monotonic() > deadline:
            print(f"processes of the step outlived SIGKILL: {left}", file=sys.stderr)
            return
        time.sleep(0.01)


_REAPED: dict[int, int] = {}  # pid -> wait status, of those reaped outside main's loop


def _reap_exited() -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        _REAPED[pid] = status


def hide_sockets(exempt: list[str]) -> None:
    """Cover each unix socket of the host's in _SOCKET_DIRS (but those under `exempt`, the
    step's own) with /dev/null: a step's connect() to it is then refused."""
    for path in host_sockets(exempt):
        _mount("/dev/null", path, _MS_BIND)


def host_sockets(exempt: list[str]) -> list[str]:
    """The host's unix sockets in _SOCKET_DIRS but those under `exempt` (bwrap covers them
    itself: its init holds no capability to mount)."""
    tops = dict.fromkeys(os.path.realpath(top) for top in _SOCKET_DIRS)  # /var/run is /run
    return [
        path
        for top in tops
        for path in _sockets(top, _SOCKET_DIRS.get(top, 2))
        if not any(_within(path, kept) for kept in exempt)
    ]


def _sockets(directory: str, depth: int) -> Iterator[str]:
    try:
        entries = list(os.scandir(directory))
    except OSError:  # what the runner cannot list, its step cannot reach either
        return
    for entry in entries:
        try:
            mode = entry.stat(follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISSOCK(mode):
            yield entry.path
        elif depth > 1 and stat.S_ISDIR(mode):
            yield from _sockets(entry.path, depth - 1)


def _unshare_user_namespace() -> None:
    """This process into a new user namespace and a mount namespace it owns: every mount it
    sees is then locked as it is."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(_CLONE_NEWUSER | _CLONE_NEWNS) != 0:
        number = ctypes.get_errno()
        raise OSError(number, f"unshare a user namespace: {os.strerror(number)}")


def map_ids_to_themselves(pid: int) -> None:
    """Give the user namespace `pid` has just made the ids of this one, each as itself
    (written from outside it: only a process with the right here may map more than one id)."""
    for name in ("uid_map", "gid_map"):
        with open(f"/proc/self/{name}") as own:
            ranges = [line.split() for line in own if line.strip()]
        identity = "".join(f"{first} {first} {count}\n" for first, _, count in ranges)
        fd = os.open(f"/proc/{pid}/{name}", os.O_WRONLY)
        try:
            os.write(fd, identity.encode())  # the kernel takes a map in one write only
        finally:
            os.close(fd)


def protect(read_only: list[str], writable: list[str]) -> None:
    """Each read-only path, and every mount below it, becomes read-only, but for the writable
    paths below it: each of those is bound first and stays a writable mount of its own. A path
    that is a mount point (the root, say) is made read-only where it is, others are bound."""
    for path in writable:
        around = [other for other in (*read_only, *writable) if _within(path, other)]
        innermost = max((other for other in around if other != path), key=len, default=None)
        if innermost in read_only:  # not where a writable one already makes it writable
            _mount(path, path, _MS_BIND | _MS_REC)
    for path in read_only:
        if path not in _mount_points(path):
            _mount(path, path, _MS_BIND | _MS_REC)
        below = [kept for kept in writable if _within(kept, path) and kept != path]
        for point in _mount_points(path):
            if any(_within(point, kept) for kept in below):
                continue
            flags = os.statvfs(point).f_flag
            if not flags & _ST_RDONLY:  # MS_BIND: this view's flags, never the file system's
                kept = sum(mount for st, mount in _KEPT.items() if flags & st)
                _mount(point, point, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _mount_points(path: str) -> list[str]:
    """The mount points at and below `path`, outermost first (the kernel's list)."""
    with open("/proc/self/mountinfo") as mounts:
        points = [_OCTAL.sub(_unescape, line.split()[4]) for line in mounts]
    return [point for point in dict.fromkeys(points) if _within(point, path)]


def _unescape(match: re.Match[str]) -> str:
    return chr(int(match.group(1), 8))


def parse(args: list[str]) -> tuple[dict[str, Any], list[str]] | None:
    """The options and the step's argv, or None when `args` are not sandbox_init's."""
    options: dict[str, Any] = {
        "loopback": False,
        "confine": False,
        "private-dev": False,
        "hide-sockets": False,
        "net-wait": False,
        "user": None,
        "private-tmp": None,
        "memory-mb": None,
    }
    paths: dict[str, list[str]] = {
        "--read-only": [],
        "--writable": [],
        "--scratch": [],
        "--device": [],
        "--hide": [],
    }
    flags = ("--loopback", "--confine", "--private-dev", "--hide-sockets", "--net-wait")
    while args and args[0] != "--":
        option, _, value = args.pop(0).partition("=")
        if option in flags and not value:
            options[option.removeprefix("--")] = True
        elif option == "--user":
            uid, _, gid = value.partition(":")
            if not (uid.isdigit() and gid.isdigit()):
                return None
            options["user"] = (int(uid), int(gid))
        elif option == "--private-tmp" and value:
            options["private-tmp"] = value
        elif option == "--memory-mb" and value.isdigit() and int(value) > 0:
            options["memory-mb"] = int(value)
        elif option in paths and value:
            paths[option].append(value)
        else:
            return None
    if len(args) < 2:
        return None
    options.update(
        read_only=paths["--read-only"],
        writable=paths["--writable"],  # the step's own
        scratch=paths["--scratch"],  # writable too, and shared with the host
        devices=paths["--device"],
        hidden=paths["--hide"],
    )
    return options, args[1:]


def main(args: list[str]) -> int:
    parsed = parse(list(args))
    if parsed is None:
        print(USAGE, file=sys.stderr)
        return 126
    options, argv = parsed
    if options["net-wait"] and not _say_netns_made():
        return 126
    preparations = (
        (True, "make the step's init a subreaper of its processes", become_subreaper),
        (
            True,
            "make the runner's files read-only for the step",
            lambda: protect(options["read_only"], [*options["writable"], *options["scratch"]]),
        ),
        (
            bool(options["hidden"]),
            "hide the runner's HOME from the step",
            lambda: hide(
                options["hidden"],
                [*options["writable"], *options["scratch"], *options["read_only"]],
            ),
        ),
        (
            options["private-tmp"] is not None,
            "give the step a /tmp of its own",
            lambda: private_tmp(
                options["private-tmp"], [*options["writable"], *options["read_only"]]
            ),
        ),
        (
            options["private-dev"],
            "give the step a /dev of its own",
            lambda: private_dev(options["devices"]),
        ),
        (
            options["hide-sockets"],
            "hide the host's unix sockets from the step",
            lambda: hide_sockets(options["writable"]),
        ),
    )
    for wanted, what, prepare in preparations:
        try:
            if wanted:
                prepare()
        except OSError as err:  # the step never runs with less than it was given
            print(f"cannot {what}: {err}", file=sys.stderr)
            return 126
    # The working directory was entered before these mounts: entered again by its name, it
    # is the one they give (a writable tree inside a read-only root, say).
    os.chdir(os.getcwd())
    if options["loopback"]:
        loopback_up()
    if options["net-wait"] and not _wait_for_network():
        return 126
    child = start(
        argv, user=options["user"], confine=options["confine"], memory_mb=options["memory-mb"]
    )
    for sig in _FORWARDED:
        signal.signal(sig, lambda number, _frame: _pass_on(child, number))
    signal.signal(signal.SIGALRM, lambda _number, _frame: end_descendants())
    while True:
        if child in _REAPED:  # the stop signal's grace ran out: it was killed and reaped there
            end_descendants()
            return _exit_code(_REAPED[child])
        try:
            pid, status = os.wait()
        except ChildProcessError:  # reaped by end_descendants in the meantime: _REAPED has it
            if child not in _REAPED:
                return 0
            continue
        except InterruptedError:
            continue
        if pid == child:
            end_descendants()  # what the step left running ends with it
            code = _exit_code(status)
            if code != 0 and options["memory-mb"] is not None:
                print(
                    f"[carry] the step failed (exit {code}) under the runner's memory limit: "
                    f"each of its processes may map {options['memory-mb']} MiB (step_memory_mb "
                    "or CARRY_TASK_MEMORY_MB); an allocation past it fails (MemoryError, or "
                    "the process is killed)",
                    file=sys.stderr,
                )
            return code


def _say_netns_made() -> bool:
    """--net-wait: tells sandbox_net.py (on NET_FD) that the step's network namespace exists."""
    try:
        os.write(_NETNS_FD, b"n")
        os.close(_NETNS_FD)
    except OSError as err:
        print(f"cannot tell the runner the step's network namespace exists: {err}", file=sys.stderr)
        return False
    return True


def _wait_for_network() -> bool:
    """--net-wait: the step starts only once sandbox_net.py says its network is made (GO_FD)."""
    try:
        said = os.read(_GO_FD, 1)
        os.close(_GO_FD)
    except OSError as err:
        said = str(err).encode()
    if said != b"1":
        print("the step's network was not made: it does not run", file=sys.stderr)
        return False
    return True


def start(
    argv: list[str], *, user: tuple[int, int] | None, confine: bool, memory_mb: int | None = None
) -> int:
    """Fork and exec the step (in its own user namespace when `confine`); its pid. A step
    that cannot be confined says why and exits 126 without running."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    child = os.fork()
    if child == 0:
        os.close(ready_r)
        os.close(go_w)
        _run_step(argv, user=user, confine=confine, ready=ready_w, go=go_r, memory_mb=memory_mb)
    os.close(ready_w)
    os.close(go_r)
    try:
        if confine:
            if os.read(ready_r, 1) != b"u":
                return child  # it could not: it said why and exits 126
            map_ids_to_themselves(child)
        os.write(go_w, b"y")
    except OSError as err:  # the step, told nothing, exits 126
        print(f"cannot confine the step to its own user namespace: {err}", file=sys.stderr)
    finally:
        os.close(ready_r)
        os.close(go_w)
    return child


def _run_step(
    argv: list[str],
    *,
    user: tuple[int, int] | None,
    confine: bool,
    ready: int,
    go: int,
    memory_mb: int | None = None,
) -> NoReturn:
    for sig in _FORWARDED:
        signal.signal(sig, signal.SIG_DFL)
    if confine:
        try:
            _unshare_user_namespace()
        except OSError as err:
            print(f"cannot confine the step to its own user namespace: {err}", file=sys.stderr)
            os._exit(126)
        os.write(ready, b"u")
    if os.read(go, 1) != b"y":
        os._exit(126)
    os.close(ready)
    os.close(go)
    try:
        if memory_mb is not None:  # each process of the step, and what it starts, inherits it
            limit = memory_mb * 1024 * 1024
            for which in (resource.RLIMIT_AS, resource.RLIMIT_DATA):
                resource.setrlimit(which, (limit, limit))
        if user is not None:  # groups first: setuid gives up the right to change them
            os.setgroups([])
            os.setgid(user[1])
            os.setuid(user[0])
        os.execvp(argv[0], argv)
    except OSError as err:
        print(f"cannot start {argv[0]!r}: {err.strerror or err}", file=sys.stderr)
        os._exit(127 if isinstance(err, FileNotFoundError) else 126)


def _pass_on(child: int, number: int) -> None:
    """The signal goes to the step and to every process it started (those that left its
    group too); after a stop signal what is left is killed _STOP_GRACE_S later."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(child, number)
    if number == signal.SIGUSR1:
        return
    for pid in descendants(os.getpid()):
        if pid != child:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, number)
    signal.alarm(_STOP_GRACE_S)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
