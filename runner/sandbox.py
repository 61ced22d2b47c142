"""Where a runner's setup and check commands run: in their own namespaces where the host allows it.

Steps run code nobody here wrote. With isolation `namespaces` (util-linux `unshare`), a step gets
its own PID namespace with a private /proc: it cannot see, signal or read the environment of the
runner or of any other process on the host (the runner's broker URL is in its environment). It
gets its own IPC and UTS namespaces too and its own network namespace: with nothing but a
loopback device (no route to the broker, to GitHub or to anything else), or, where its config
says `network: true`, with a way out through slirp4netns (sandbox_net.py: the host's loopback
disabled, no route to the broker's address or any of the runner host's own) unless the
runner's config says `step_network: host`. A runner that is not root maps itself to root in a user namespace to do this (no
privilege on the host). The file system is the host's, but for the runner's own Python and
carry's code (`runner_files`), which are read-only in the step's mount namespace: a step
cannot leave code there (a .pth, a patched module) for the next job or for the runner itself.
The step itself starts in a user namespace of its own with every id mapped to itself
(`sandbox_init.py --confine`): root there is root over nothing of the host's, so it cannot
take those read-only mounts away, make device nodes or load modules. Every runner's steps get
the host's whole file system read-only but for their tree, home and Python, the temporary
directories (SCRATCH) and the directories that variables passed to them name (a model
cache). A root runner's steps (uid 0, to whatever checks the uid alone) also get kernel
settings and sysfs read-only (KERNEL_INTERFACES) and a /dev of their own: the standard nodes,
the accelerators', a private /dev/shm and ptys, none of the host's disks. A runner that is not
root runs its steps as its own uid, so its HOME (an env file, credentials, dotfiles) is
covered with an empty read-only tmpfs in their view, under namespaces and bwrap alike
(`hidden_home`; the runner's Python and the step's own paths in it are bound again). In every
step's view the host's unix sockets where daemons keep them (/run, /tmp) are covered: a
network namespace does not keep a step from a socket in the file system (bwrap covers them
itself: where the runner is not root, its init holds no capability to). Elsewhere, what the
step may read is what the runner's user may.

In every mode a step starts under sandbox_init.py, a child subreaper: when the step ends, every
process it started ends too (a double-forked `setsid` daemon included), namespaces or not.
Under namespaces the step's /tmp is the job's own directory, bound over the host's.

`auto` uses namespaces when a trial `unshare` works. `namespaces` refuses to run a step without
them. No sandbox at all (`none`, or `auto` where the trial fails) cannot keep a job from later
jobs: `resolve` refuses it unless the config's accept_risk names that risk (ACCEPTED_RISK).
With `memory_mb` each process of a step may map that much (RLIMIT_AS and RLIMIT_DATA).

`bwrap` (bubblewrap, where it is installed) gives the same namespaces and a file-system view of
its own: the host's file system read-only, the step's tree writable, a private /tmp (TMPDIR
points there) and a minimal /dev with the accelerators' device nodes (NVIDIA, DRI, Gaudi's
accel and hl). A step then cannot write the runner's code, its Python or anything else of the
host's, even as root. Under either, setup steps install into the job's own Python
(job_python.py), never the runner's. bwrap is never chosen by `auto`.

With a step user (`runners.<kind>.step_user`), a root runner starts each step as that user
(`sandbox_init.py --user`, with or without namespaces): what the step may read and write on the
host is then what that user may, not what root may. The user must be able to reach the tree
(the runner's workdir) and the tools the steps run. `auto` (the default) picks `nobody` on a
root runner where the host lets it run steps (`choose_user`): it can enter the workdir, run
the runner's Python and open the accelerators; elsewhere steps run as root, and the runner
says why.
"""

from __future__ import annotations

import dataclasses
import glob
import grp
import os
import pwd
import shutil
import site
import socket
import subprocess
import sys
import sysconfig
import tempfile
import urllib.parse
from collections.abc import Sequence
from enum import StrEnum
from functools import cache
from pathlib import Path

from runner.cgroup import CgroupRoot
from runner.sandbox_init import host_sockets

INIT = Path(__file__).with_name("sandbox_init.py")
NET = Path(__file__).with_name("sandbox_net.py")
CODE_ROOT = Path(__file__).resolve().parents[1]  # carry's checkout, or the site-packages it is in
PROBE_TIMEOUT_S = 15


class Isolation(StrEnum):
    AUTO = "auto"
    NAMESPACES = "namespaces"
    BWRAP = "bwrap"
    NONE = "none"


# Device nodes a step keeps in its own /dev (bwrap's, or a root runner's under namespaces):
# the accelerators and their fabrics.
ACCELERATOR_DEVICES = (
    "/dev/nvidia*",
    "/dev/nvidia-caps",
    "/dev/dri",
    "/dev/accel",
    "/dev/hl*",
    "/dev/infiniband",
)


# What a root step, even in a user namespace of its own, could still write by uid 0 alone:
# kernel settings (a core_pattern runs a program as root at the next crash), the SysRq
# trigger (a reboot), sysfs and its cgroups. Read-only for the steps of a root runner; a
# runner that is not root has no such rights to lose.
KERNEL_INTERFACES = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/sys")
SCRATCH = ("/tmp", "/var/tmp", "/dev", "/proc")  # writable to a root runner's steps

AUTO_STEP_USER = "nobody"  # who `step_user: auto` runs a root runner's steps as
RUNNER_STEP_USER = "runner"  # `step_user: runner`: the runner's own user, root included
# The device nodes a step opens to compute (NVIDIA's, Gaudi's): `auto` keeps steps as root
# where its user may not open one. MIG's root-only nvidia-caps are not among them.
COMPUTE_DEVICES = (
    "/dev/nvidia[0-9]*",
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/accel/accel*",
    "/dev/hl[0-9]*",
)


class SandboxError(Exception):
    """The runner's config asks for isolation this host cannot give."""


# What `sandbox: {mode: none, accept_risk: ...}` must say to run steps with no job isolation.
ACCEPTED_RISK = "jobs can touch later jobs"
NO_SLIRP = (
    "needs slirp4netns for a network of its own with no route to the broker (apt-get install "
    "slirp4netns), or sandbox: {step_network: host} to give it the host's network, broker "
    "included"
)


class StepNetwork(StrEnum):
    """What a step with `network: true` gets: `own` (a network namespace of its own with a
    user-mode network, slirp4netns, and no route to the runner host or the broker) or `host`
    (the host's network, the broker included: only by an explicit setting, warned about)."""

    OWN = "own"
    HOST = "host"


@dataclasses.dataclass(frozen=True)
class StepUser:
    """Who a step runs as when it is not the runner's own user."""

    name: str
    uid: int
    gid: int


@dataclasses.dataclass(frozen=True)
class Sandbox:
    """How this runner starts steps: `namespaces`, or `none` with the reason; as `user`."""

    isolation: Isolation
    why_none: str = ""
    unshare: str = "unshare"  # its path, found when the sandbox was resolved
    user: StepUser | None = None
    bwrap: str = "bwrap"
    why_root: str = "no step_user"  # why a root runner's steps run as root (user is None)
    step_network: StepNetwork = StepNetwork.OWN
    slirp: str | None = None  # slirp4netns, where steps with network get their own
    block: tuple[str, ...] = ()  # the broker's addresses: no route there from a step
    memory_mb: int | None = None  # each step's processes: RLIMIT_AS and RLIMIT_DATA
    # where each step gets a cgroup of its own (runner/cgroup.py): all its processes end with
    # it, and memory_mb holds for all of them together; None: why not (process groups only)
    cgroups: CgroupRoot | None = None
    why_no_cgroups: str = "not looked for"

    def wrap(
        self,
        argv: Sequence[str],
        *,
        network: bool,
        tree: Path | None = None,
        writable: Sequence[Path] = (),
        protected: Sequence[Path] = (),
        private_tmp: Path | None = None,
    ) -> list[str]:
        """The command line that starts `argv` in this sandbox: `tree` (its working
        directory) and `writable` (its home, its Python) stay writable where the sandbox
        makes other files read-only; `protected` (the clone's git directory) is read-only
        all the same; `private_tmp` (the job's own) is the step's /tmp where the sandbox has
        a mount namespace (bwrap gives each step a tmpfs of its own). In every mode the step
        starts under sandbox_init, which ends every process it leaves."""
        own_net = network and self.step_network is StepNetwork.OWN
        if own_net and self.isolation is not Isolation.NONE and self.slirp is None:
            raise SandboxError(f"a step with network: true {NO_SLIRP}")
        via = f"--via={'bwrap' if self.isolation is Isolation.BWRAP else 'unshare'}"
        user_net = (
            [sys.executable, "-I", "-S", str(NET), f"--slirp={self.slirp}", via]
            + [f"--block={address}" for address in self.block]
            + ["--"]
        )
        if self.isolation is Isolation.NAMESPACES:
            writable = [*([tree] if tree else []), *writable]
            wrapped = _unshare_argv(
                self.unshare,
                argv,
                network=network and not own_net,
                user=self.user,
                writable=writable,
                protected=protected,
                private_tmp=private_tmp,
                memory_mb=self.memory_mb,
                net_wait=own_net,
            )
            return [*user_net, *wrapped] if own_net else wrapped
        if self.isolation is Isolation.BWRAP:
            wrapped = _bwrap_argv(
                self.bwrap,
                argv,
                network=network and not own_net,
                tree=tree,
                writable=writable,
                user=self.user,
                protected=protected,
                memory_mb=self.memory_mb,
                net_wait=own_net,
            )
            return [*user_net, *wrapped] if own_net else wrapped
        # No namespaces: the same init, to change the user and end what the step leaves.
        init = _init(self.user, loopback=False, confine=False, memory_mb=self.memory_mb)
        return [*init, "--", *argv]

    def describe(self, *, network: bool) -> str:
        memory = ""
        if self.memory_mb is not None:
            memory = f"; each of its processes may map at most {self.memory_mb} MiB"
        if self.cgroups is not None:
            memory += "; its processes stay in a cgroup of their own and end with it" + (
                f" ({self.memory_mb} MiB for all of them)" if self.memory_mb is not None else ""
            )
        return self._describe(network=network) + memory

    def _describe(self, *, network: bool) -> str:
        who = f", as {self.user.name} (uid {self.user.uid})" if self.user else ""
        if self.user is None and os.geteuid() == 0:  # it may write whatever root may
            who = f", as root ({self.why_root})"
        reach = "no network (loopback only)"
        if network and self.step_network is StepNetwork.HOST:
            reach = (
                "THE HOST'S NETWORK, THE BROKER INCLUDED (sandbox.step_network: host; code "
                "under test can reach every service of the runner host)"
            )
        elif network:
            reach = (
                "a network of its own (slirp4netns) with a way out but no route to the runner "
                "host or the broker"
            )
        if self.isolation is Isolation.BWRAP:
            return (
                f"runs under bubblewrap in its own PID, mount, IPC and UTS namespaces, with "
                f"{reach}, the host's files read-only but for its tree, its home, its Python "
                f"and a private /tmp{who}"
            )
        if self.isolation is not Isolation.NAMESPACES:
            return f"runs without a sandbox ({self.why_none}){who}"
        guarded = "the runner's Python and code read-only"
        if os.geteuid() == 0:  # a root runner's steps get more read-only, and a /dev
            guarded = (
                "the host's files read-only but for its tree, its home, its Python, the "
                "temporary directories and the directories passed to it, a /dev of its own"
            )
        return (
            f"runs in its own PID, mount, IPC and UTS namespaces and a user namespace that "
            f"holds no power over the host's, with {reach}, {guarded}{who}"
        )

    def summary(self) -> str:
        """One line for the runners page: the isolation and the user steps run as."""
        how = f"none ({self.why_none})" if self.isolation is Isolation.NONE else self.isolation
        if self.user is None and os.geteuid() == 0:
            return f"{how}, as root ({self.why_root})"
        return f"{how}, as {self.user.name if self.user else _user_name(os.geteuid())}"


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a container's arbitrary uid
        return f"uid {uid}"


def resolve(
    wanted: Isolation | str,
    step_user: str | None = None,
    workdir: Path | None = None,
    *,
    accept_risk: str | None = ACCEPTED_RISK,
    step_network: StepNetwork | str = StepNetwork.OWN,
    networked: bool = False,
    broker_url: str | None = None,
    memory_mb: int | None = None,
) -> Sandbox:
    """The sandbox the runner's config asks for, as this host can give it. `step_user` is
    the config's (None: the runner's own user); `auto` looks at `workdir` (choose_user).

    No sandbox (`none`, or `auto` on a host without namespaces) cannot keep a job from later
    jobs: it is a SandboxError unless `accept_risk` is ACCEPTED_RISK (the runner's config says
    so; None: it did not). Steps with network (`networked`) get a network of their own where
    slirp4netns is installed, with no route to the broker (`broker_url`'s addresses) or the
    runner host; without it, a SandboxError unless `step_network` is `host`. Each step's
    processes get `memory_mb` of address space."""
    box = _resolve_isolation(Isolation(wanted), step_user, workdir)
    if box.isolation is Isolation.NONE and accept_risk != ACCEPTED_RISK:
        raise SandboxError(
            f"steps would run without a sandbox ({box.why_none}), so a job could touch later "
            f"jobs: refused (sandbox: {{mode: none, accept_risk: {ACCEPTED_RISK!r}}} allows it)"
        )
    step_network = StepNetwork(step_network)
    slirp = shutil.which("slirp4netns")
    isolated = box.isolation is not Isolation.NONE
    if networked and isolated and step_network is StepNetwork.OWN and slirp is None:
        raise SandboxError(f"this runner's steps with network: true: each {NO_SLIRP}")
    return dataclasses.replace(
        box,
        step_network=step_network,
        slirp=slirp,
        block=broker_addresses(broker_url),
        memory_mb=memory_mb,
    )


def broker_addresses(url: str | None) -> tuple[str, ...]:
    """The IPv4 addresses of the broker in `url` but loopback's (a step's own loopback is not
    the host's): a step with a network of its own gets no route to them."""
    host = urllib.parse.urlsplit(url).hostname if url else None
    if not host:
        return ()
    try:
        found = socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)
    except OSError:
        return ()
    addresses = (str(entry[4][0]) for entry in found)
    return tuple(dict.fromkeys(a for a in addresses if not a.startswith("127.")))


def _resolve_isolation(wanted: Isolation, step_user: str | None, workdir: Path | None) -> Sandbox:
    user, why_root = choose_user(step_user, workdir)
    if wanted is Isolation.NONE:
        box = Sandbox(Isolation.NONE, "the runner's config says sandbox: none")
    elif wanted is Isolation.BWRAP:
        missing = bwrap_unavailable()
        if missing is not None:
            raise SandboxError(f"the runner's config says sandbox: bwrap, but {missing}")
        box = Sandbox(Isolation.BWRAP, bwrap=shutil.which("bwrap") or "bwrap")
    elif (failure := namespaces_unavailable()) is None:
        box = Sandbox(Isolation.NAMESPACES, unshare=shutil.which("unshare") or "unshare")
    elif wanted is Isolation.NAMESPACES:
        raise SandboxError(f"the runner's config says sandbox: namespaces, but {failure}")
    else:
        box = Sandbox(Isolation.NONE, f"sandbox: auto, and {failure}")
    return dataclasses.replace(box, user=user, why_root=why_root)


def choose_user(
    step_user: str | None,
    workdir: Path | None,
    *,
    python: Path | None = None,
    devices: Sequence[str] | None = None,
) -> tuple[StepUser | None, str]:
    """Who steps run as (None: the runner's own user) and, when that is root, why.

    `auto` on a root runner is AUTO_STEP_USER where the host lets that user run steps: it can
    enter the workdir (the trees are there), run the runner's Python (the job's own Python is
    made from it) and open the accelerators (COMPUTE_DEVICES). Where it cannot, steps run as
    root and the reason says what to change. A runner that is not root runs steps as itself.
    `python` and `devices` default to this runner's interpreter and COMPUTE_DEVICES."""
    if step_user is None or step_user == RUNNER_STEP_USER:
        return None, "step_user: runner" if step_user else "no step_user"
    if step_user != "auto":
        return resolve_user(step_user), ""
    if os.geteuid() != 0:
        return None, ""
    try:
        entry = pwd.getpwnam(AUTO_STEP_USER)
    except KeyError:
        return None, f"step_user: auto, and this host has no user {AUTO_STEP_USER}"
    user = StepUser(entry.pw_name, entry.pw_uid, entry.pw_gid)
    python = python or Path(os.path.realpath(sys.executable))
    refused = _refused_to(user, workdir, python, compute_devices() if devices is None else devices)
    if refused is not None:
        return None, f"step_user: auto, and {user.name} {refused}"
    return user, ""


def _refused_to(
    user: StepUser, workdir: Path | None, python: Path, devices: Sequence[str]
) -> str | None:
    """What `user` may not do of what a step needs (None: nothing)."""
    needs = [("the runner's Python", python)]
    if workdir is not None:
        needs.insert(0, ("the runner's workdir", workdir / "clones"))
    for what, path in needs:
        closed = unreachable(path, user)
        if closed is not None:
            return f"cannot enter {closed} ({_mode(closed)}), above {what}"
    if not _allows(python.stat(), user, 0o5):
        return f"cannot run the runner's Python {python} ({_mode(python)})"
    for device in devices:
        if not _allows(Path(device).stat(), user, 0o6):
            return f"cannot open {device} ({_mode(Path(device))})"
    return None


def _mode(path: Path) -> str:
    info = path.stat()
    try:
        group = grp.getgrgid(info.st_gid).gr_name
    except KeyError:
        group = str(info.st_gid)
    return f"mode {info.st_mode & 0o777:o}, {_user_name(info.st_uid)}:{group}"


def compute_devices() -> list[str]:
    """This host's COMPUTE_DEVICES."""
    return sorted({device for pattern in COMPUTE_DEVICES for device in glob.glob(pattern)})


def _allows(info: os.stat_result, user: StepUser, bits: int) -> bool:
    """Whether a file's mode gives `user` (its own group only: steps drop the others) `bits`
    (4 read, 2 write, 1 execute or enter)."""
    if info.st_uid == user.uid:
        shift = 6
    elif info.st_gid == user.gid:
        shift = 3
    else:
        shift = 0
    return (info.st_mode >> shift) & bits == bits


def resolve_user(step_user: str) -> StepUser:
    """The configured step user, or SandboxError saying why steps cannot run as it."""
    try:
        entry = pwd.getpwuid(int(step_user)) if step_user.isdigit() else pwd.getpwnam(step_user)
    except (KeyError, OverflowError):
        raise SandboxError(f"step_user {step_user!r} is not a user on this host") from None
    if entry.pw_uid == 0:
        raise SandboxError(f"step_user {step_user!r} is root: name an unprivileged user")
    if os.geteuid() != 0:
        raise SandboxError(
            f"step_user {step_user!r} needs a runner started as root (this one runs as uid "
            f"{os.geteuid()})"
        )
    return StepUser(entry.pw_name, entry.pw_uid, entry.pw_gid)


def unreachable(path: Path, user: StepUser) -> Path | None:
    """The first directory above `path` that `user` may not enter (None when it may reach it):
    a runner's workdir under root's 0700 home is one. One that does not exist yet is made by
    the runner later, and not counted."""
    for directory in reversed(path.resolve().parents):
        try:
            info = directory.stat()
        except FileNotFoundError:
            break
        if not _allows(info, user, 0o1):
            return directory
    return None


def _init(
    user: StepUser | None,
    *,
    loopback: bool,
    confine: bool = True,
    read_only: Sequence[str] = (),
    writable: Sequence[Path] = (),
    scratch: Sequence[Path] = (),
    devices: Sequence[str] | None = None,
    private_tmp: Path | None = None,
    memory_mb: int | None = None,
    net_wait: bool = False,
    hidden: Sequence[str] = (),
    hide_sockets: bool = True,
) -> list[str]:
    init = [sys.executable, "-I", "-S", str(INIT)]
    if loopback:
        init.append("--loopback")
    if net_wait:  # sandbox_net.py gives it a network before the step starts
        init.append("--net-wait")
    if memory_mb is not None:
        init.append(f"--memory-mb={memory_mb}")
    if confine:  # root in the step's namespaces holds no power over the host's
        init += ["--confine", *(["--hide-sockets"] if hide_sockets else [])]
    if devices is not None:  # a /dev of the step's own, with these of the host's nodes
        init += ["--private-dev", *(f"--device={device}" for device in devices)]
    if user is not None:  # the init stays who it is; the step runs as the user
        init.append(f"--user={user.uid}:{user.gid}")
    init += [f"--read-only={path}" for path in read_only]
    init += [f"--writable={path.resolve()}" for path in writable]
    init += [f"--scratch={path.resolve()}" for path in scratch]
    if private_tmp is not None:
        init.append(f"--private-tmp={private_tmp.resolve()}")
    init += [f"--hide={path}" for path in hidden]
    return init


def hidden_home() -> list[str]:
    """What a step must not see of the runner's: the HOME of a runner that is not root (its
    steps run as its own uid, so its env files, credentials and dotfiles there would be
    theirs to read and write). A root runner's steps run as a step user that cannot read
    root's HOME, or as root by the runner's own choice; they see it."""
    if os.geteuid() == 0:
        return []
    home = Path(os.path.realpath(os.path.expanduser("~")))
    if home == Path("/") or not home.is_dir():
        return []
    # A HOME in or around a temporary directory (HOME=/tmp on a CI host) is not the runner's
    # own: steps share those on purpose, and under namespaces get a /tmp of their own.
    scratch = [Path(os.path.realpath(path)) for path in scratch_dirs()]
    if any(home.is_relative_to(tmp) or tmp.is_relative_to(home) for tmp in scratch):
        return []
    return [str(home)]


@cache
def runner_files() -> tuple[str, ...]:
    """What a step must not write even where the runner's user may: the runner's Python (its
    prefixes and site-packages) and carry's code; the outermost existing directories, real
    paths."""
    found = {
        sys.prefix,
        sys.base_prefix,
        sys.exec_prefix,
        sys.base_exec_prefix,
        *site.getsitepackages(),
        sysconfig.get_paths()["purelib"],
        sysconfig.get_paths()["platlib"],
        str(CODE_ROOT),
    }
    paths = {Path(os.path.realpath(path)) for path in found if os.path.isdir(path)}
    outermost = {path for path in paths if not any(p in path.parents for p in paths)}
    return tuple(sorted(str(path) for path in outermost))


@cache
def namespaces_unavailable() -> str | None:
    """Why steps cannot run in namespaces here (None when they can): one trial run per process."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return "util-linux `unshare` is not installed"
    return _trial("unshare", _unshare_argv(unshare, ["true"], network=False))


def _trial(tool: str, argv: list[str]) -> str | None:
    """Why a trial run of `argv` (a sandboxed `true`) failed; None when it worked."""
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"a trial `{tool}` failed: {err}"
    if done.returncode != 0:
        said = (done.stderr or done.stdout).decode(errors="replace").strip()[-300:]
        return f"a trial `{tool}` failed (exit {done.returncode}): {said or 'no output'}"
    return None


def _unshare_argv(
    unshare: str,
    argv: Sequence[str],
    *,
    network: bool,
    user: StepUser | None = None,
    writable: Sequence[Path] = (),
    protected: Sequence[Path] = (),
    private_tmp: Path | None = None,
    memory_mb: int | None = None,
    net_wait: bool = False,
) -> list[str]:
    flags = ["--pid", "--fork", "--kill-child", "--mount-proc", "--ipc", "--uts"]
    if os.geteuid() != 0:
        flags.insert(0, "--map-root-user")
    if not network:  # with net_wait: a network namespace that sandbox_net.py gives a way out
        flags.append("--net")
    # The host read-only but for the step's own and scratch, for every runner: a runner that is
    # not root runs its steps as its own uid, which may write all that user's files (its HOME,
    # its other clones); a root runner's steps also get a /dev of their own.
    read_only = ["/", *runner_files(), *kernel_interfaces()]
    scratch, devices = scratch_dirs(), accelerator_devices() if os.geteuid() == 0 else None
    init = _init(
        user,
        hidden=hidden_home(),
        loopback=not network and not net_wait,
        read_only=[*read_only, *_existing(protected)],
        writable=[*writable, *([private_tmp] if private_tmp else [])],
        scratch=scratch,
        devices=devices,
        private_tmp=private_tmp,
        memory_mb=memory_mb,
        net_wait=net_wait,
    )
    return [unshare, *flags, "--", *init, "--", *argv]


def _existing(paths: Sequence[Path]) -> list[str]:
    """The real paths of those that exist (a tree with no .git yet has nothing to protect)."""
    return [str(path.resolve()) for path in paths if path.exists()]


def scratch_dirs() -> list[Path]:
    """What a root runner's steps may write of the host's besides their own: the temporary
    directories (TMPDIR too), and /dev and /proc, which the step gets its own of."""
    found = [*SCRATCH, tempfile.gettempdir()]  # TMPDIR's, which steps inherit
    return [Path(path) for path in dict.fromkeys(found) if os.path.isdir(path)]


def kernel_interfaces() -> list[str]:
    """The KERNEL_INTERFACES a step must get read-only: those this host has, for a root runner."""
    return [path for path in KERNEL_INTERFACES if os.geteuid() == 0 and os.path.exists(path)]


def accelerator_devices() -> list[str]:
    """This host's ACCELERATOR_DEVICES: what a step's own /dev keeps of the host's."""
    found = (device for pattern in ACCELERATOR_DEVICES for device in sorted(glob.glob(pattern)))
    return list(dict.fromkeys(found))  # /dev/nvidia-caps matches two patterns


@cache
def bwrap_unavailable() -> str | None:
    """Why steps cannot run under bubblewrap here (None when they can): one trial run."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap (`bwrap`) is not installed"
    return _trial("bwrap", _bwrap_argv(bwrap, ["true"], network=False, tree=None))


def _hidden_by_private_tmp() -> list[str]:
    """What the step's private /tmp would hide that the sandbox itself needs: the runner's
    Python and the init script, when they live under the host's /tmp (a clone there)."""
    needed = {Path(sys.prefix), Path(sys.executable), INIT}
    under_tmp = {path for path in needed if path.is_relative_to("/tmp")}
    return sorted(str(path) for path in under_tmp if not any(p in path.parents for p in under_tmp))


def _bwrap_argv(
    bwrap: str,
    argv: Sequence[str],
    *,
    network: bool,
    tree: Path | None,
    writable: Sequence[Path] = (),
    user: StepUser | None = None,
    protected: Sequence[Path] = (),
    memory_mb: int | None = None,
    net_wait: bool = False,
) -> list[str]:
    flags = ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if os.geteuid() != 0:
        flags.append("--unshare-user-try")
    if not network:
        flags.append("--unshare-net")  # bwrap brings the new namespace's loopback up
    if net_wait:  # sandbox_net.py: the sandbox's pid on fd 3, "go" on fd 4
        flags += ["--info-fd", "3", "--block-fd", "4"]
    flags += ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    for device in accelerator_devices():
        flags += ["--dev-bind", device, device]
    hidden = hidden_home()
    for home in hidden:  # an empty tmpfs, but for the runner's Python and code in it
        flags += ["--tmpfs", home]
        for kept in runner_files():
            if Path(kept).is_relative_to(home):
                flags += ["--ro-bind", kept, kept]
    flags += ["--perms", "1777", "--tmpfs", "/tmp", "--setenv", "TMPDIR", "/tmp"]
    # The host's sockets, covered by bwrap itself: its init holds no capability to mount
    # where the runner is not root (those under /tmp are gone with the host's /tmp).
    own_paths = [str(p.resolve()) for p in [*writable, *([tree] if tree else [])]]
    for socket_path in host_sockets(["/tmp", *own_paths]):
        flags += ["--ro-bind", "/dev/null", socket_path]
    for kept in _hidden_by_private_tmp():
        flags += ["--ro-bind", kept, kept]
    for path in writable:
        flags += ["--bind", str(path), str(path)]
    if tree is not None:
        flags += ["--bind", str(tree), str(tree), "--chdir", str(tree)]
    for kept in _existing(protected):  # after the tree's bind: read-only inside it
        flags += ["--ro-bind", kept, kept]
    for home in hidden:  # after the binds that made their mount points in it
        flags += ["--remount-ro", home]
    own = [*([tree] if tree else []), *writable]  # the step's: its sockets stay its own
    init = _init(
        user,
        loopback=False,
        read_only=kernel_interfaces(),
        writable=own,
        memory_mb=memory_mb,
        hide_sockets=False,
    )
    return [bwrap, *flags, "--", *init, "--", *argv]
