"""harness/unprivileged.py: a process a root test starts as the unprivileged user reaches what
it was given under a directory that user cannot enter, and nothing else there; the host's
directories keep their modes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.unprivileged import RUNNER_USER, ensure_user, unavailable, unprivileged_argv

pytestmark = pytest.mark.skipif(unavailable() is not None, reason=str(unavailable()))


def test_the_user_reaches_what_it_is_given_and_nothing_else(tmp_path: Path) -> None:
    closed = tmp_path / "closed"
    (closed / "given").mkdir(parents=True)
    (closed / "given" / "note").write_text("for the user\n")
    (closed / "kept").write_text("root's\n")
    closed.chmod(0o700)
    probe = (
        "import os, sys\n"
        "print(os.getuid(), os.getgroups())\n"
        "print(open(sys.argv[1]).read().strip())\n"
        "try:\n"
        "    open(sys.argv[2]).read()\n"
        "    print('read root kept')\n"
        "except OSError as err:\n"
        "    print(type(err).__name__)\n"
    )
    line = [sys.executable, "-c", probe, str(closed / "given" / "note"), str(closed / "kept")]
    done = subprocess.run(
        unprivileged_argv(line, [Path(sys.base_prefix), Path.cwd(), closed / "given"]),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    user = ensure_user(RUNNER_USER)
    assert done.stdout.splitlines() == [f"{user.pw_uid} []", "for the user", "FileNotFoundError"]
    assert oct(os.stat(closed).st_mode & 0o777) == oct(0o700)  # opened up nowhere on the host
