"""The resident check engine (`carry check --serve`, bot.resident): real server and client
processes on a real socket, real git repositories. The same checks, through the server and
in-process, give the same bytes on stdout and stderr and the same exit status; a socket that
is stale, unsafe or of another carry is never used silently."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bot import resident
from tests.support.engine import BODY, FUNC
from tests.support.paths import REPO_ROOT


def carry(
    *args: str, cwd: Path, env: dict[str, str] | None = None, pythonpath: Path = REPO_ROOT
) -> subprocess.CompletedProcess[bytes]:
    """`carry ...` as its console script runs it (bot.resident:main), bytes as written."""
    script = "import sys; from bot.resident import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", script, *args],
        capture_output=True,
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(pythonpath), **(env or {})},
        timeout=120,
    )


@pytest.fixture
def cache(tmp_path_factory) -> Path:
    # Short: a socket's path holds at most 107 bytes, and tmp_path can be longer.
    base = Path(os.environ.get("TMPDIR", "/tmp"))
    path = Path(os.path.realpath(base)) / f"carry-res-{os.getpid()}-{time.monotonic_ns()}"
    path.mkdir(mode=0o700)
    yield path
    shutil.rmtree(path, ignore_errors=True)


class Server:
    def __init__(self, cache: Path, log: Path, pythonpath: Path = REPO_ROOT):
        self.log = log
        self.socket = cache / resident.SOCKET_NAME
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "bot.cli", "check", "--serve", "--cache-dir", str(cache)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONPATH": str(pythonpath)},
                cwd="/",
            )
        deadline = time.monotonic() + 60
        while not self.socket.exists():
            assert self.process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the server did not start"
            time.sleep(0.02)

    def served(self) -> int:
        """How many checks the server ran (one line each in its log)."""
        return self.log.read_text().count(" served ")

    def stop(self) -> str:
        self.process.send_signal(signal.SIGTERM)
        self.process.wait(timeout=30)
        return self.log.read_text()


@pytest.fixture
def server(cache, tmp_path) -> Iterator[Server]:
    running = Server(cache, tmp_path / "server.log")
    yield running
    if running.process.poll() is None:
        running.stop()


@pytest.fixture
def work(make_repo, tmp_path) -> tuple[Path, Path]:
    """(upstream repository, directory of patches): a patch that applies, one that conflicts,
    one upstream already has, one upstream took in another form, one that is no patch at all."""
    up = make_repo("upstream")
    up.commit("base", {"mod.py": BODY})
    up.checkout("main", new_branch="carried")
    up.commit("Make value 7 safe", {"mod.py": BODY.replace("compute(7)", "compute(7, safe=True)")})
    up.commit(
        "Conflicting change",
        {"mod.py": BODY.replace("compute(7)", "compute(7, safe=True)").replace("(30)", "(30, x)")},
    )
    up.commit("Taken upstream", {"new.py": "VALUE = 1\n"})
    patches = tmp_path / "patches"
    up.format_patch("main..carried", patches)
    up.checkout("main")
    up.checkout("main", new_branch="other")
    up.commit("Add frobnicate", {"mod.py": BODY.replace("(10)\n", "(10)\n" + FUNC)})
    up.format_patch("main..other", patches)
    up.checkout("main")
    up.commit("upstream moves", {"mod.py": "import os\n" + BODY.replace("(30)", "other(30)")})
    up.commit("Taken upstream (as is)", {"new.py": "VALUE = 1\n"})
    theirs = FUNC.replace("level * 2", "level * 3")
    up.commit(
        "Add frobnicate, scaled by 3 (#123)",
        {
            "mod.py": "import os\n"
            + BODY.replace("(30)", "other(30)").replace("(10)\n", "(10)\n" + theirs)
        },
    )
    (patches / "9999-not-a-patch.patch").write_bytes(b"hello\n\x00\xff not a patch\n")
    return up.path, patches


def cases(repo: Path, cache: Path) -> dict[str, list[str]]:
    """Command lines (relative patch paths: they are read in the client's directory)."""
    common = ["--repo", str(repo), "--head", "main", "--cache-dir", str(cache)]
    clean, conflict, taken = (
        "patches/0001-Make-value-7-safe.patch",
        "patches/0002-Conflicting-change.patch",
        "patches/0003-Taken-upstream.patch",
    )
    other = "patches/0001-Add-frobnicate.patch"
    return {
        "clean": ["check", *common, "--patch", clean],
        "clean json": ["check", *common, "--patch", clean, "--json"],
        "conflict": ["check", *common, "--patch", clean, conflict, "--exit-code"],
        "conflict json": ["check", *common, "--patch", clean, conflict, "--json", "--exit-code"],
        "upstream has it": ["check", *common, "--patch", taken],
        "upstream has it json": ["check", *common, "--patch", taken, "--json", "--exit-code"],
        "upstream's version": ["check", *common, "--patch", other, "--exit-code"],
        "upstream's version json": ["check", *common, "--patch", other, "--json"],
        "invalid": ["check", *common, "--patch", "patches/9999-not-a-patch.patch", "--exit-code"],
        "no such patch": ["check", *common, "--patch", "patches/none.patch"],
        "no such head": ["check", *common, "--patch", clean, "--head", "nope"],
        "no --repo": ["check", "--head", "main", "--cache-dir", str(cache), "--patch", clean],
        "unknown option": ["check", *common, "--no-such-option"],
        "help": ["check", "--help", "--cache-dir", str(cache)],
    }


def test_server_and_in_process_agree_byte_for_byte(work, cache, server):
    repo, patches = work
    lines = cases(repo, cache)
    runs = 0
    for name, argv in lines.items():
        inline = carry(*argv, cwd=patches.parent, env={resident.OPT_OUT_VARIABLE: "1"})
        served = carry(*argv, cwd=patches.parent)
        runs += 1
        assert (served.returncode, served.stdout, served.stderr) == (
            inline.returncode,
            inline.stdout,
            inline.stderr,
        ), name
    assert server.served() == runs  # every one of them went through the server
    codes = {name: carry(*argv, cwd=patches.parent).returncode for name, argv in lines.items()}
    assert codes["conflict"] == 1 and codes["invalid"] == 1 and codes["clean"] == 0
    assert codes["no such patch"] == 2 and codes["unknown option"] == 2 and codes["help"] == 0
    shown = carry(*lines["upstream has it"], cwd=patches.parent).stdout.decode()
    assert "contained        drop" in shown and "upstream's version:" in shown, shown
    assert "conflict" in carry(*lines["conflict"], cwd=patches.parent).stdout.decode()
    other = carry(*lines["upstream's version"], cwd=patches.parent)
    assert other.returncode == 1 and b"upstream-version" in other.stdout, other.stdout
    assert b"Add frobnicate, scaled by 3 (#123)" in other.stdout


def test_the_client_imports_none_of_carrys_check_before_the_socket_answers(work, cache, server):
    repo, patches = work
    # What the client adds to what Python loaded at start (site, and the .pth files of the
    # environment: an editable install's finder loads pathlib and re there, a wheel's does not).
    probe = (
        "import sys; start = set(sys.modules); from bot.resident import run; "
        "code = run(sys.argv[1:]); "
        "print('CODE', code, 'MODULES', *sorted(set(sys.modules) - start), file=sys.stderr)"
    )
    argv = cases(repo, cache)["clean"]
    result = subprocess.run(
        [sys.executable, "-c", probe, *argv],
        capture_output=True,
        cwd=patches.parent,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    code, _, loaded = result.stderr.decode().strip().partition(" MODULES ")
    assert code == "CODE 0", result.stderr
    # __future__ (for the annotations) is there already where site's .pth files loaded it
    assert set(loaded.split()) - {"__future__"} == {"_socket", "bot", "bot.resident"}, loaded
    assert b"applies" in result.stdout


def test_a_stale_socket_is_removed_and_the_check_runs_in_process(work, cache, server):
    repo, patches = work
    server.process.kill()  # no clean-up: the socket stays, nobody listens
    server.process.wait(timeout=30)
    assert server.socket.exists()
    argv = cases(repo, cache)["clean json"]
    result = carry(*argv, cwd=patches.parent)
    assert result.returncode == 0 and result.stderr == b"", result.stderr
    assert b'"applies' in result.stdout
    assert not server.socket.exists()


@pytest.mark.parametrize("problem", ["mode", "owner", "not a socket"])
def test_an_unsafe_socket_is_refused_with_a_message(work, cache, problem):
    repo, patches = work
    path = cache / resident.SOCKET_NAME
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if problem == "not a socket":
        path.write_text("")
        os.chmod(path, 0o600)
        expected = "it is not a socket"
    else:
        listener.bind(str(path))
        listener.listen(1)
        if problem == "mode":
            os.chmod(path, 0o666)
            expected = "its mode is 0666: others can reach it"
        else:
            if os.getuid() != 0:
                pytest.skip("giving a file to another user takes root")
            os.chmod(path, 0o600)
            os.chown(path, 4242, 4242)
            expected = "it is owned by uid 4242"
    try:
        argv = cases(repo, cache)["clean"]
        result = carry(*argv, cwd=patches.parent)
        inline = carry(*argv, cwd=patches.parent, env={resident.OPT_OUT_VARIABLE: "1"})
    finally:
        listener.close()
    message = f"carry: not using the resident engine's socket {path}: {expected}"
    assert result.stderr.decode().splitlines()[0].startswith(message), result.stderr
    assert (result.returncode, result.stdout) == (inline.returncode, inline.stdout)
    assert path.exists()  # not removed: it is not carry's to remove


def test_a_server_of_another_carry_is_not_used(work, cache, tmp_path):
    """A client from another install of carry (here a copy of the package) is refused by the
    server, says so, and checks in-process."""
    repo, patches = work
    other = tmp_path / "other"
    shutil.copytree(REPO_ROOT / "bot", other / "bot", ignore=shutil.ignore_patterns("__pycache__"))
    running = Server(cache, tmp_path / "server.log")
    try:
        argv = cases(repo, cache)["clean"]
        result = carry(*argv, cwd=patches.parent, pythonpath=other)
        inline = carry(*argv, cwd=patches.parent, env={resident.OPT_OUT_VARIABLE: "1"})
    finally:
        log = running.stop()
    assert result.stderr.decode().startswith(
        f"carry: not using the resident engine at {running.socket}: it runs another carry"
    ), result.stderr
    assert (result.returncode, result.stdout) == (inline.returncode, inline.stdout)
    assert " served " not in log


def test_the_server_survives_malformed_and_foreign_requests(work, cache, server):
    repo, patches = work
    for junk in (b"", b"\x00\x00\x00\x05abc", b"\xff\xff\xff\xff", os.urandom(64)):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
            probe.connect(str(server.socket))
            probe.sendall(junk)
            probe.shutdown(socket.SHUT_WR)
            probe.settimeout(30)
            try:
                answer = probe.recv(100)
            except ConnectionResetError:  # closed with part of the junk unread
                answer = b""
            assert answer == b""  # closed, nothing run
    # A well-formed request for another sub-command is refused, not run.
    reply = _ask(server, resident.request(["approve", "--series", "s", "abc", "--by", "me"]))
    assert resident.REFUSED in reply and b"it runs `carry check` alone" in reply
    # So is a check whose stdout encoding or umask is not one.
    fields = resident.request(["check", "--help"])
    head, _ = resident.unpack(fields[0])
    fields[0] = resident.pack([*head[:4], b"no-such-codec:strict", head[5]])
    reply = _ask(server, fields)
    assert resident.REFUSED in reply and b"umask or encodings are not valid" in reply
    result = carry(*cases(repo, cache)["clean"], cwd=patches.parent)
    assert result.returncode == 0 and b"applies" in result.stdout
    assert server.served() == 1


def _fds(*fds: int) -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder) for fd in fds)


def _ask(server: Server, fields: list[bytes]) -> bytes:
    """The server's first answer to a request of `fields`, sent with this process's stdio."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.connect(str(server.socket))
        body = resident.pack(fields)
        probe.sendmsg(
            [len(body).to_bytes(4, "big") + body],
            [(socket.SOL_SOCKET, socket.SCM_RIGHTS, _fds(0, 1, 2))],
        )
        probe.settimeout(30)
        return probe.recv(1000)


def test_serve_refuses_check_arguments_and_a_second_server(cache, server, tmp_path):
    both = subprocess.run(
        [sys.executable, "-m", "bot.cli", "check", "--serve", "--cache-dir", str(cache)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        timeout=60,
    )
    assert both.returncode == 2
    assert both.stderr == f"carry: error: a resident engine already serves {server.socket}\n"
    extra = subprocess.run(
        [sys.executable, "-m", "bot.cli", "check", "--serve", "--repo", "x"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), "CARRY_CACHE_DIR": str(tmp_path)},
        timeout=60,
    )
    assert extra.returncode == 2
    assert (
        extra.stderr
        == "carry: error: --serve takes no --repo: the checks come from later commands\n"
    )
    log = server.stop()
    assert not server.socket.exists()  # removed on the way out
    assert log.endswith(f"carry: resident engine at {server.socket} stopped\n")


def test_pack_and_unpack_refuse_truncated_data():
    fields = [b"", b"a", b"\x00" * 300]
    packed = resident.pack(fields)
    assert resident.unpack(packed) == (fields, len(packed))
    for cut in range(len(packed)):
        with pytest.raises(ValueError, match="truncated"):
            resident.unpack(packed[:cut])


@pytest.mark.parametrize("json_output", [True, False])
def test_a_closed_pipe_ends_a_served_check_as_it_ends_one_in_process(
    work, cache, server, json_output
):
    """`carry check ... | head -c 300` with the reader gone: the server writes into the closed
    pipe, and the client stops killed by SIGPIPE with nothing on stderr, as in-process; the
    server goes on serving."""
    repo, patches = work
    argv = cases(repo, cache)["clean json" if json_output else "clean"]
    script = "import sys; from bot.resident import main; sys.exit(main())"
    for env in ({resident.OPT_OUT_VARIABLE: "1"}, {}):
        read_end, write_end = os.pipe()
        os.close(read_end)
        proc = subprocess.Popen(
            [sys.executable, "-c", script, *argv],
            stdout=write_end,
            stderr=subprocess.PIPE,
            cwd=patches.parent,
            env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **env},
        )
        os.close(write_end)
        _, stderr = proc.communicate(timeout=120)
        assert (proc.returncode, stderr) == (-signal.SIGPIPE, b""), env
    assert server.served() == 1 and "sigpipe" in server.log.read_text()
    assert carry(*argv, cwd=patches.parent).returncode == 0
    assert server.served() == 2
