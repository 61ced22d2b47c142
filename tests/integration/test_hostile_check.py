"""bench/reliability's hostile-check scenario (issue 14): a check whose code tries every
thing check code could want with carry (the broker's password and a GitHub token, the runner
process, the broker itself, the runner's own Python, root's powers over the host's mounts,
devices, kernel settings, disks and files, a host daemon's unix socket, hooks for the next job, a .pth in HOME) and a forged job
in the runner's queue.
Every attempt must be blocked.

It starts its own password-protected redis-server and a `carry runner` process (about 10 s).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.reliability import (
    BLOB_BOMB_ATTEMPT,
    BROKER_NET_ATTEMPT,
    COMMONDIR_ATTEMPT,
    DISK_ATTEMPT,
    GIT_LINK_ATTEMPT,
    GIT_SWAP_ATTEMPT,
    HOST_FILE_ATTEMPT,
    LINGER_ATTEMPT,
    MKNOD_ATTEMPT,
    NEEDS_NAMESPACES,
    NO_USER_NAMESPACES,
    POISON_ATTEMPT,
    RUNNER_HOME_ATTEMPTS,
    RUNNER_HOME_READ_ATTEMPT,
    RUNNER_HOME_WRITE_ATTEMPT,
    RUNNER_PYTHON_ATTEMPT,
    SHARED_TMP_ATTEMPT,
    SOCKET_ATTEMPT,
    SYSCTL_ATTEMPT,
    UNDO_ATTEMPT,
    RefusedAtStart,
    render_attempts,
    run_hostile_check,
    shipped_runner,
    unprivileged_unavailable,
)
from runner.sandbox import ACCEPTED_RISK, bwrap_unavailable, namespaces_unavailable
from tests.support.markers import needs_redis_server

pytestmark = [
    pytest.mark.slow,
    needs_redis_server,
]

ATTEMPTS = [
    "find the broker's password in the step's environment",
    "find a GitHub token in the step's environment",
    "read the runner's environment in /proc",
    "see or signal the runner process",
    "connect to the broker",
    "write an approval into carry's store",
    "queue a task for carry's workers",
    RUNNER_PYTHON_ATTEMPT,
    UNDO_ATTEMPT,
    MKNOD_ATTEMPT,
    SYSCTL_ATTEMPT,
    DISK_ATTEMPT,
    SOCKET_ATTEMPT,
    HOST_FILE_ATTEMPT,
    POISON_ATTEMPT,
    "leave git hooks and config that run in the next job",
    "leave code in HOME (a user site .pth) for the next job or the runner",
    "have the runner run a job nobody issued (a forged run_job in its queue)",
    BLOB_BOMB_ATTEMPT,
    # What a job leaves for the next one in the clone, the host's processes and /tmp (issue 33)
    COMMONDIR_ATTEMPT,
    GIT_SWAP_ATTEMPT,
    GIT_LINK_ATTEMPT,
    LINGER_ATTEMPT,
    SHARED_TMP_ATTEMPT,
    BROKER_NET_ATTEMPT,  # a second check, with network: true
]
ACCEPTED_NONE = {"mode": "none", "accept_risk": ACCEPTED_RISK}
NEXT_JOB = [COMMONDIR_ATTEMPT, GIT_SWAP_ATTEMPT, GIT_LINK_ATTEMPT, LINGER_ATTEMPT]
ROOT = os.geteuid() == 0


@pytest.mark.skipif(namespaces_unavailable() is not None, reason=str(namespaces_unavailable()))
@pytest.mark.parametrize(
    "sandbox",
    [
        "auto",
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(
                bwrap_unavailable() is not None, reason=str(bwrap_unavailable())
            ),
        ),
    ],
)
def test_every_attempt_of_hostile_check_code_is_blocked(tmp_path: Path, sandbox: str) -> None:
    attempts = run_hostile_check(tmp_path, sandbox=sandbox)
    shown = render_attempts(attempts)
    assert [a.attempt for a in attempts] == ATTEMPTS, shown
    assert [a.attempt for a in attempts if a.achieved] == [], shown
    how = {a.attempt: a.how for a in attempts}
    assert "no route out of the step's network namespace" in how["connect to the broker"], shown
    assert "/tmp is the job's own" in how[SHARED_TMP_ATTEMPT], shown
    # the forged job: carry's service did not sign it (issue 33)
    assert "the job carries no signature from carry's service" in how[ATTEMPTS[-8]], shown
    # network: true: a network of its own with a way out, and no route to the broker
    assert "egress: default route via tap0" in how[BROKER_NET_ATTEMPT], shown
    assert "127.0.0.1: Connection refused" in how[BROKER_NET_ATTEMPT], shown
    assert "No route to host" in how[BROKER_NET_ATTEMPT], shown


def test_without_the_sandbox_the_same_check_reaches_the_runner_and_the_broker(
    tmp_path: Path,
) -> None:
    """The scenario can fail: on a runner configured with sandbox: none and its own user for
    the steps (carry before the sandbox), the step finds the broker's URL in the runner's
    /proc environment and connects with it. What it can do there is what the runner's own
    broker user may: writing carry's store or queueing a task for its workers is refused."""
    attempts = run_hostile_check(tmp_path, sandbox=ACCEPTED_NONE, step_user="runner")
    achieved = {a.attempt for a in attempts if a.achieved}
    shown = render_attempts(attempts)
    assert [a.attempt for a in attempts] == ATTEMPTS, shown
    assert {
        "read the runner's environment in /proc",
        "see or signal the runner process",
        "connect to the broker",
        RUNNER_PYTHON_ATTEMPT,
        UNDO_ATTEMPT,  # nothing to undo: it was writable
        SOCKET_ATTEMPT,  # the scenario's stand-in daemon, at least
        *([MKNOD_ATTEMPT, SYSCTL_ATTEMPT, HOST_FILE_ATTEMPT] if ROOT else []),  # root's own
        POISON_ATTEMPT,  # the runner's own git then reads no replace ref
        SHARED_TMP_ATTEMPT,  # no mount namespace: the host's /tmp
        BROKER_NET_ATTEMPT,  # no network namespace: the host's network
    } <= achieved, shown
    # What the clean environment, the fresh clone, the runner's own config and its broker
    # user keep out.
    broker_writes = ATTEMPTS[5:7]
    assert not achieved & {*ATTEMPTS[:2], *broker_writes, *ATTEMPTS[-10:-6], *NEXT_JOB}, shown
    how = {a.attempt: a.how for a in attempts}
    for attempt in broker_writes:
        assert "NOPERM" in how[attempt] and "from the runner's environment" in how[attempt], shown


@pytest.mark.skipif(not ROOT, reason="a step user needs a runner started as root")
def test_with_no_sandbox_a_step_user_alone_keeps_out_all_but_what_needs_namespaces(
    tmp_path: Path,
) -> None:
    """A host without namespaces (the compose file's containers): the step user keeps the
    check from the runner's environment and Python, root's powers, the host's files and the
    clone; only the host's network, its process list and a socket open to all stay in reach."""
    attempts = run_hostile_check(tmp_path, sandbox=ACCEPTED_NONE, step_user="nobody")
    shown = render_attempts(attempts)
    assert [a.attempt for a in attempts] == ATTEMPTS, shown
    achieved = {a.attempt for a in attempts if a.achieved}
    assert achieved <= set(NEEDS_NAMESPACES), shown
    assert "connect to the broker" in achieved, shown  # the scenario can tell
    # The clone, its clean-up and the step's processes are out of reach without namespaces too.
    assert not achieved & set(NEXT_JOB), shown


@pytest.mark.parametrize("step_user", ["runner", "auto"])
def test_a_runner_without_a_sandbox_is_refused_at_start(tmp_path: Path, step_user: str) -> None:
    """sandbox: none (with a step user or not) cannot keep a job from later jobs: the runner
    refuses to start unless its config names that risk (issue 33)."""
    with pytest.raises(RefusedAtStart) as refused:
        run_hostile_check(tmp_path, sandbox="none", step_user=step_user)
    assert "steps would run without a sandbox" in str(refused.value), refused.value
    assert "a job could touch later jobs: refused" in str(refused.value), refused.value


def test_the_runners_broker_user_decides_nothing(tmp_path: Path) -> None:
    """The hostile-check rows for a stolen runner broker password (issue 33): a forged run, a
    flipped waiting run, a planted verdict and a trusted push over a stranger's are each
    refused or kept waiting for approval; a job forged with the password alone (no signing
    key) is refused by the runner and runs nothing."""
    from bench.runner_broker import ATTACKS, run_broker_attempts

    attempts = run_broker_attempts(tmp_path)
    assert len(attempts) == len(ATTACKS) == 5
    assert [a.attempt for a in attempts if a.achieved] == []
    assert all(a.how for a in attempts)


@pytest.mark.skipif(namespaces_unavailable() is not None, reason=str(namespaces_unavailable()))
def test_the_shipped_configuration_as_is_blocks_every_attempt(tmp_path: Path) -> None:
    """Issue 33: what a user deploys is config/carry.yaml, where every step (the `pip install
    -e .` setup, which runs upstream's build backend, and the check) has network: true. The
    hostile code runs as that setup step (the network attempts) and as that check (the rest),
    under the shipped runner's own sandbox and step-user settings: nothing gets through."""
    runner = shipped_runner()
    assert runner["setup"][0]["network"] is True and "sandbox" not in runner  # as shipped
    attempts = run_hostile_check(tmp_path, shipped=True)
    shown = render_attempts(attempts)
    assert [a.attempt for a in attempts] == ATTEMPTS, shown
    assert [a.attempt for a in attempts if a.achieved] == [], shown
    how = {a.attempt: a.how for a in attempts}
    assert "egress: default route via tap0" in how[BROKER_NET_ATTEMPT], shown
    assert "No route to host" in how[BROKER_NET_ATTEMPT], shown


# A runner that is not root also has its HOME tried: the step is its own uid.
UNPRIVILEGED_ATTEMPTS = [*ATTEMPTS[:7], *RUNNER_HOME_ATTEMPTS, *ATTEMPTS[7:]]


@pytest.mark.parametrize(
    "sandbox",
    [
        "auto",
        "namespaces",
        pytest.param(
            "bwrap",
            marks=pytest.mark.skipif(
                bwrap_unavailable() is not None, reason=str(bwrap_unavailable())
            ),
        ),
    ],
)
def test_a_runner_that_is_not_root_blocks_every_attempt(tmp_path: Path, sandbox: str) -> None:
    """Issue 33: compose's runners run as the unprivileged `carry`, their steps as that uid in
    a user namespace. A root test starts a real `carry runner` as its own unprivileged user
    (harness/unprivileged.py); its HOME holds an env file with its broker URL (mode 600). Every
    attempt is blocked, the runner's HOME included: it was read and written by the step under
    namespaces, and bwrap refused to start (a host socket it could not cover) or gave no
    network to a step with network: true. The only reason not to run: no user namespaces for
    an unprivileged user on this host."""
    reason = unprivileged_unavailable()
    if reason is not None:
        assert reason.startswith(NO_USER_NAMESPACES), reason
        pytest.skip(reason)
    attempts = run_hostile_check(tmp_path, sandbox=sandbox, unprivileged=True)
    shown = render_attempts(attempts)
    assert [a.attempt for a in attempts] == UNPRIVILEGED_ATTEMPTS, shown
    assert [a.attempt for a in attempts if a.achieved] == [], shown
    how = {a.attempt: a.how for a in attempts}
    assert "No such file or directory" in how[RUNNER_HOME_READ_ATTEMPT], shown
    assert "the runner's HOME is not the step's" in how[RUNNER_HOME_WRITE_ATTEMPT], shown
    assert "not in the step's PID namespace" in how["see or signal the runner process"], shown
    assert "egress: default route via tap0" in how[BROKER_NET_ATTEMPT], shown
    assert "No route to host" in how[BROKER_NET_ATTEMPT], shown
