"""A network for a step with `network: true` that has a way out but no way to the runner host:
standard library only, run by the runner (in the host's network namespace) as
`python -I -S sandbox_net.py --slirp=PATH --via=unshare|bwrap [--block=IPV4]... -- ARGV...`.

ARGV (an `unshare --net ...` or `bwrap --unshare-net ...` command line, see sandbox.py) starts
the step in a network namespace of its own. This process starts it with two pipes at fixed
descriptors: on NETNS_FD the sandbox says its namespace exists (bwrap's --info-fd, with the
pid of the process in it; sandbox_init's --net-wait for unshare, whose own pid is in it), and
the step waits on GO_FD before it starts (bwrap's --block-fd; sandbox_init's --net-wait).
Between the two, this process gives the namespace a user-mode network, slirp4netns with
`--disable-host-loopback` (the step's 10.0.2.2 does not lead to the host's 127.0.0.1), and an
`unreachable` route to every --block address (the broker's, and each of the runner host's own
addresses: a broker or any daemon listening on all of the host's interfaces is out of reach
too). The step itself holds no capability over its network namespace (it is confined to a user
namespace of its own, or bwrap dropped them), so it cannot take those routes away.

If slirp4netns cannot start, or a route cannot be set, the step never runs: this process
kills the sandbox, says why on stderr and exits 126. Otherwise it waits for the sandbox,
ends slirp4netns, and exits with the sandbox's status.
"""

from __future__ import annotations

import ctypes
import fcntl
import itertools
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable

NETNS_FD, GO_FD = 3, 4  # in the sandbox's process: where it says "ready" and waits for "go"
READY_TIMEOUT_S = 20
USAGE = "usage: sandbox_net.py --slirp=PATH --via=unshare|bwrap [--block=IPV4]... -- ARGV..."
_CLONE_NEWNET, _CLONE_NEWUSER = 0x40000000, 0x10000000
_NS_GET_USERNS = 0xB701  # ioctl on a namespace: the user namespace that owns it
_SIOCGIFFLAGS, _IFF_UP = 0x8913, 0x1
_PR_SET_PDEATHSIG = 1
# rtnetlink: RTM_NEWROUTE of type RTN_UNREACHABLE for one IPv4 address
_NETLINK_ROUTE, _RTM_NEWROUTE, _NLMSG_ERROR = 0, 24, 2
_NLM_F_REQUEST, _NLM_F_ACK, _NLM_F_CREATE, _NLM_F_EXCL = 0x1, 0x4, 0x400, 0x200
_RT_TABLE_MAIN, _RTPROT_STATIC, _RT_SCOPE_UNIVERSE, _RTN_UNREACHABLE, _RTA_DST = 254, 4, 0, 7, 1


class NetError(Exception):
    """The step's network could not be made as promised: it must not run."""


def host_addresses() -> list[str]:
    """Every IPv4 address of this host (network namespace) but loopback's, from fib_trie's
    local routes."""
    found: list[str] = []
    try:
        with open("/proc/net/fib_trie") as handle:
            lines = handle.read().splitlines()
    except OSError:
        return found
    for before, line in itertools.pairwise(lines):
        if line.strip() == "/32 host LOCAL":
            address = before.strip().removeprefix("|-- ")
            if not address.startswith("127.") and address not in found:
                found.append(address)
    return found


def unreachable_route(address: str) -> None:
    """In this process's network namespace: no route to `address` (EHOSTUNREACH)."""
    dst = socket.inet_aton(address)
    rtmsg = struct.pack(
        "BBBBBBBBI",
        socket.AF_INET,
        32,  # dst_len
        0,
        0,
        _RT_TABLE_MAIN,
        _RTPROT_STATIC,
        _RT_SCOPE_UNIVERSE,
        _RTN_UNREACHABLE,
        0,
    )
    attr = struct.pack("HH", 4 + len(dst), _RTA_DST) + dst
    body = rtmsg + attr
    flags = _NLM_F_REQUEST | _NLM_F_ACK | _NLM_F_CREATE | _NLM_F_EXCL
    message = struct.pack("IHHII", 16 + len(body), _RTM_NEWROUTE, flags, 1, 0) + body
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_ROUTE) as sock:
        sock.bind((0, 0))
        sock.send(message)
        reply = sock.recv(4096)
    kind = struct.unpack_from("H", reply, 4)[0]
    error = struct.unpack_from("i", reply, 16)[0] if kind == _NLMSG_ERROR else 0
    if error:
        raise OSError(-error, f"route {address} unreachable: {os.strerror(-error)}")


def block_in(pid: int, addresses: list[str]) -> None:
    """Unreachable routes to `addresses` in the network namespace of `pid`."""

    def block() -> None:
        for address in dict.fromkeys(addresses):
            unreachable_route(address)

    if not _in_netns_of(pid, block):
        raise NetError("the routes that keep the step from the runner host could not be set")


def loopback_is_up() -> None:
    """Raises until this network namespace's loopback is up."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        request = struct.pack("16sh", b"lo", 0)
        flags = struct.unpack("16sh", fcntl.ioctl(sock, _SIOCGIFFLAGS, request))[1]
    if not flags & _IFF_UP:
        raise OSError(0, "the loopback device is not up yet")


def wait_for_loopback(pid: int, deadline: float) -> None:
    """bwrap brings its namespace's loopback up after it says the namespace exists, and
    slirp4netns would race it: wait until it is up."""

    def wait() -> None:
        while True:
            try:
                loopback_is_up()
                return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.005)

    if not _in_netns_of(pid, wait):
        raise NetError("bubblewrap did not bring the step's loopback up")


def _in_netns_of(pid: int, action: Callable[[], None]) -> bool:
    """Runs `action` in a child process that enters the network namespace of `pid` (and its
    owning user namespace, where that is not ours); whether it succeeded."""
    child = os.fork()
    if child == 0:
        code = 0
        try:
            _enter(pid)
            action()
        except OSError as err:
            print(f"in the step's network namespace: {err}", file=sys.stderr)
            code = 1
        os._exit(code)
    _pid, status = os.waitpid(child, 0)
    return status == 0


def _enter(pid: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    owner = netns_owner(pid)
    if owner is not None:
        _setns(libc, f"/proc/self/fd/{owner}", _CLONE_NEWUSER)
        os.close(owner)
    _setns(libc, f"/proc/{pid}/ns/net", _CLONE_NEWNET)


def netns_owner(pid: int) -> int | None:
    """A descriptor of the user namespace that owns the network namespace of `pid`, None
    where that is ours. It is not always the user namespace of `pid`: bwrap started by a user
    that is not root runs the step in a user namespace nested in the one that owns its
    network namespace, and entering the step's own then gives no power over its network."""
    net = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
    try:
        owner = fcntl.ioctl(net, _NS_GET_USERNS)
    except OSError:  # a kernel before 4.9: the process's own
        owner = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY)
    finally:
        os.close(net)
    if os.fstat(owner).st_ino == os.stat("/proc/self/ns/user").st_ino:
        os.close(owner)
        return None
    return owner


def _setns(libc: ctypes.CDLL, path: str, kind: int) -> None:
    handle = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(handle, kind) != 0:
            number = ctypes.get_errno()
            raise OSError(number, f"setns {path}: {os.strerror(number)}")
    finally:
        os.close(handle)


def _read_some(fd: int, deadline: float, done: bytes) -> bytes:
    """What the sandbox writes on `fd` up to `done` (or its end), by `deadline`."""
    got = b""
    while done not in got:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise NetError(
                f"the sandbox did not say its network namespace was made in time: {got!r}"
            )
        chunk = os.read(fd, 4096)
        if not chunk:
            raise NetError("the sandbox ended before its network namespace was made")
        got += chunk
    return got


def _start_sandbox(argv: list[str]) -> tuple[subprocess.Popen[bytes], int, int]:
    """The sandbox, with NETNS_FD (it writes) and GO_FD (it reads); our ends of both."""
    netns_r, netns_w = os.pipe()
    go_r, go_w = os.pipe()

    def fds() -> None:
        _die_with_us()
        os.dup2(netns_w, NETNS_FD)
        os.dup2(go_r, GO_FD)

    proc = subprocess.Popen(argv, preexec_fn=fds, close_fds=False)
    os.close(netns_w)
    os.close(go_r)
    os.set_inheritable(netns_r, False)
    os.set_inheritable(go_w, False)
    return proc, netns_r, go_w


def _die_with_us() -> None:
    """preexec_fn: SIGKILL the sandbox and slirp4netns when this process dies (the runner
    gives it PR_SET_PDEATHSIG too: a runner that dies takes the whole step with it)."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _slirp(slirp: str, pid: int, deadline: float) -> subprocess.Popen[bytes]:
    ready_r, ready_w = os.pipe()
    owner = netns_owner(pid)  # slirp4netns would enter the user namespace of `pid`
    where = [str(pid)]
    if owner is not None:
        where = [f"--userns-path=/proc/self/fd/{owner}", "--netns-type=path"]
        where.append(f"/proc/{pid}/ns/net")
    try:
        proc = subprocess.Popen(
            [
                slirp,
                "--configure",
                "--disable-host-loopback",
                f"--ready-fd={ready_w}",
                *where,
                "tap0",
            ],
            pass_fds=(ready_w, *([owner] if owner is not None else [])),
            preexec_fn=_die_with_us,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
    finally:
        if owner is not None:
            os.close(owner)
    os.close(ready_w)
    try:
        _read_some(ready_r, deadline, b"1")
    except NetError:
        proc.kill()
        said = (proc.communicate()[1] or b"").decode(errors="replace").strip()[-300:]
        raise NetError(
            f"{slirp} did not bring the step's network up: {said or 'no output'}"
        ) from None
    finally:
        os.close(ready_r)
    return proc


def main(args: list[str]) -> int:
    slirp, via, block = "", "", []
    while args and args[0] != "--":
        option, _, value = args.pop(0).partition("=")
        if option == "--slirp" and value:
            slirp = value
        elif option == "--via" and value in ("unshare", "bwrap"):
            via = value
        elif option == "--block" and value:
            block.append(value)
        else:
            print(USAGE, file=sys.stderr)
            return 126
    if not (slirp and via and len(args) > 1):
        print(USAGE, file=sys.stderr)
        return 126
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # the sandbox, in our process
        signal.signal(sig, lambda *_: None)  # group, gets them too and ends in its own time
    proc, netns_r, go_w = _start_sandbox(args[1:])
    network: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + READY_TIMEOUT_S
        if via == "bwrap":  # its --info-fd: {"child-pid": N}, N in the new namespaces
            pid = int(json.loads(_read_some(netns_r, deadline, b"}"))["child-pid"])
            wait_for_loopback(pid, deadline)
        else:  # sandbox_init runs in unshare's namespaces: unshare's own process is in them
            _read_some(netns_r, deadline, b"n")
            pid = proc.pid
        network = _slirp(slirp, pid, deadline)
        block_in(pid, [*block, *host_addresses()])
        os.write(go_w, b"1")
    except (NetError, OSError, ValueError, KeyError) as err:
        print(f"[carry] the step did not run: no safe network for it: {err}", file=sys.stderr)
        proc.kill()
        proc.wait()
        if network is not None:
            network.kill()
        return 126
    finally:
        os.close(netns_r)
        os.close(go_w)
    code = proc.wait()
    network.terminate()
    try:
        network.wait(5)
    except subprocess.TimeoutExpired:
        network.kill()
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
