"""9. override race: maintainers' overrides racing carry's own rebases and CI."""

from __future__ import annotations

import json
import random
import threading
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from celery.exceptions import Retry

from bench.reliability.common import RedisServer, Row, Scale, _carry_in_this_process, say
from bot.ci import runs as ci_runs
from bot.ci.spec import StepSpec, TreeSpec
from bot.core import events as ev
from bot.core.ci_plan import FINAL_STATES, REUSABLE, RetryPolicy
from bot.core.state import SeriesState
from bot.core.trust import ZERO_SHA, Push
from bot.emulator import GitHubEmulator
from bot.queue.celery_app import app as celery_app
from bot.store import series as store
from harness.carry_env import BODY, DOWNSTREAM_REPO, SERIES, UPSTREAM_REPO, CarryEnv, wait_for
from harness.gitrepo import RepoBuilder, git
from harness.job_keys import job_issuer
from workers import tasks
from workers.ci import requests as ci
from workers.runtime import Runtime

RACE_USERS = ("alice", "bob")  # maintainers with write access
RACE_KIND, RACE_CHECKS = "gaudi", ("build", "smoke")
RACE_BOT, RACE_TOKEN = "carry[bot]", "ghp_race" + "0" * 32
RACE_REF = "refs/heads/main"
RACE_WRITES = 100_000  # GitHub's content-creation limits, lifted for the race
RACE_WORKERS = 2  # carry worker processes (queue carry), besides this process's worker thread
DOWN_OWNER, DOWN_NAME = DOWNSTREAM_REPO.split("/")
# The first words of carry's answer to each command (bot.core.planner._command_action).
REPLY_STARTS = {
    "Paused:": "pause",
    "Resumed.": "resume",
    "Pinned ": "keep",
    "Dropping ": "drop",
    "Approved ": "approve",
}


def race_patches() -> list[dict[str, str]]:
    """Three patches, each making its own line of mod.py safe (each on top of the one before)."""
    changes, text = [], BODY
    for n in (10, 20, 30):
        text = text.replace(f"compute({n})", f"compute({n}, safe=True)")
        changes.append({"mod.py": text})
    return changes


Holds = Callable[[SeriesState], bool]


@dataclass
class Override:
    """The last override of one kind that was sent: it holds until the next of its kind."""

    kind: str  # "pause" (pause and resume) or "pin <patch>" (keep and drop)
    what: str  # the command as sent, with its author
    holds: Holds


def _paused_by(who: str | None) -> Holds:
    return lambda state: state.paused_by == who


def _pinned(name: str, keep: bool, who: str) -> Holds:
    return lambda state: _pin(state, name) == ((True, None) if keep else (False, who))


def _pin(state: SeriesState, name: str) -> tuple[bool, str | None] | None:
    patch = state.patch(name)
    return None if patch is None else (patch.pinned, patch.drop_requested_by)


def _shown(state: SeriesState, kind: str) -> str:
    if kind == "pause":
        return f"paused_by={state.paused_by}"
    pin = _pin(state, kind.split(" ", 1)[1])
    return "no such patch" if pin is None else f"pinned={pin[0]}, drop_requested_by={pin[1]}"


def _ci_shown(state: SeriesState, key: str) -> tuple[str, str] | None:
    row = state.ci.get(key)
    return None if row is None else (row.run_id, row.state)


@dataclass
class CiResult:
    """The rows one CI result left: row key -> (run id, state), as the runner wrote them."""

    run_id: str
    rows: dict[str, tuple[str, str]]


@dataclass
class RaceLedger:
    """What the writers sent, and what they found missing when they looked."""

    sent: Counter[str] = field(default_factory=Counter)  # pause | pin | approve -> sent
    lost: list[tuple[str, str, str]] = field(default_factory=list)  # (family, sent, found)
    current: dict[str, Override] = field(default_factory=dict)
    approvals: list[str] = field(default_factory=list)
    replies_due: Counter[str] = field(default_factory=Counter)  # command verb -> comments
    ci_rows_sent: int = 0
    ci_lost: list[str] = field(default_factory=list)
    ci_runs: Counter[str] = field(default_factory=Counter)  # how each run ended
    last_ci: CiResult | None = None
    heads: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # heads the planner asked to rebase
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)


class OverrideRace:
    """One series, written to at once by: a rebaser (new upstream heads, each through the
    planner and then the `carry.rebase` task function, in this process), maintainers'
    commands (`/carry pause|resume|keep|drop|approve`, one thread per kind of override,
    entering the planner and the dispatcher as `carry.check_permission` hands them on), a CI
    requester whose runs a real runner process executes and reports, and real carry workers
    (the forced re-checks a pin asks for, approvals, replies, publishing and CI reports to the
    GitHub emulator).

    "Present" means: the last override of each kind sent (pause/resume; keep/drop of each
    patch) is in the state just before the next of its kind is sent and at the end, where a
    pin must also decide its patch; every approval is in the state's approvals at the end;
    the rows of every CI result are in the state until the next request replaces them, and
    at the end; every command has its reply on the PR (GitHub's record)."""

    def __init__(self, env: CarryEnv, rt: Runtime, gh: GitHubEmulator, seed: int) -> None:
        self.env, self.rt, self.gh, self.seed = env, rt, gh, seed
        self.client = rt.redis
        self.ledger = RaceLedger()
        self.patches_dir = env.downstream / "patches" / SERIES
        self.names = [p.name for p in sorted(self.patches_dir.glob("*.patch"))]
        self.downstream_sha = git(env.downstream, "rev-parse", "HEAD")
        self.pr = 0
        self.writers = 0
        self.stop_at = 0.0
        self._comment_id = 10_000
        self._trees: dict[str, str] = {}
        self._scratch = RepoBuilder(env.root / "scratch")
        self._worker = ThreadPoolExecutor(1, thread_name_prefix="race-worker")
        checks = tuple(StepSpec(name, ("true",), 60) for name in RACE_CHECKS)  # as configured
        retry = RetryPolicy(max_attempts=1)
        self.target = ci.CiTarget(RACE_KIND, f"hw.{RACE_KIND}", checks=checks, retry=retry)

    # -- plumbing -----------------------------------------------------------------------
    def running(self) -> bool:
        return time.monotonic() < self.stop_at

    def state(self) -> SeriesState:
        state = store.load_series(self.client, SERIES)
        assert state is not None, "the series has no state"
        return state

    def guarded(self, name: str, work: Callable[[random.Random], None], n: int) -> threading.Thread:
        def run() -> None:
            try:
                work(random.Random(self.seed * 100 + n))
            except Exception as err:  # a writer that dies is reported, not lost in its thread
                traceback.print_exc()
                with self.ledger.lock:
                    self.ledger.errors.append(f"{name}: {type(err).__name__}: {err}")

        return threading.Thread(target=run, name=f"race-{name}", daemon=True)

    def rebase_task(self, head: str) -> None:
        """The `carry.rebase` task function, run by this process's one worker thread (a worker
        keeps its engine, whose caches belong to one thread); while another job holds the series
        lock it asks to be retried, and is, a moment later."""
        self._worker.submit(self._rebase, head).result()

    def _rebase(self, head: str) -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                tasks.rebase(series_id=SERIES, head_sha=head, head_ref=RACE_REF, actor="alice")
                return
            except Retry:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def command(self, body: str, author: str) -> None:
        """A maintainer's comment on carry's PR after its author's permission was looked up:
        what `carry.check_permission` hands to the planner and the dispatcher."""
        with self.ledger.lock:
            self._comment_id += 1
            comment_id = self._comment_id
        event = ev.CommandAuthorized(
            series_id=SERIES,
            number=self.pr,
            comment_id=comment_id,
            author=author,
            permission="write",
            body=body,
            head_at_comment=self.state().head_sha,
        )
        tasks.handle_event(self.rt, event)
        with self.ledger.lock:
            self.ledger.replies_due[body.split()[1]] += 1

    def sent(self, override: Override) -> None:
        with self.ledger.lock:
            self.ledger.current[override.kind] = override
            self.ledger.sent[override.kind.split()[0]] += 1

    def settle(self, kind: str, *, final: bool = False) -> None:
        """The override of `kind` sent last must be in the state still, just before the next
        of its kind replaces it, and at the end; at the end, once the re-check a pin asks for
        has run, a pin must also decide its patch (keep -> keep, drop -> drop)."""
        override = self.ledger.current.get(kind)
        if override is None:
            return
        state = self.state()
        found = None if override.holds(state) else _shown(state, kind)
        if found is None and final and kind.startswith("pin "):
            patch = state.patch(kind.split(" ", 1)[1])
            wanted = "drop" if override.what.startswith("/carry drop") else "keep"
            if patch is None or patch.decision != wanted:
                found = f"decision {patch.decision if patch else None}, not {wanted}"
        if found is not None:
            with self.ledger.lock:
                self.ledger.lost.append((kind.split()[0], override.what, found))

    # -- the writers ----------------------------------------------------------------------
    def rebaser(self, rng: random.Random) -> None:
        n = 0
        while self.running():
            n += 1
            before = self.ledger.heads[-1]
            head = self.env.upstream.commit(f"upstream {n}", {f"race/f{n % 7}.py": f"n = {n}\n"})
            self.ledger.heads.append(head)
            moved = ev.HeadMoved(
                repo=UPSTREAM_REPO, ref=RACE_REF, before=before, after=head, actor="alice"
            )
            tasks.handle_event(self.rt, moved)  # the push: a rebase, unless paused
            if self.asked_to_rebase(head):
                with self.ledger.lock:
                    self.ledger.asked.append(head)
                self.rebase_task(head)  # a worker of this process takes the job
            time.sleep(rng.uniform(0, 0.1))

    def asked_to_rebase(self, head: str) -> bool:
        """Whether the dispatcher carried out a `rebase` for this head (a paused series only
        records it)."""
        key = f"rebase:{SERIES}:{head}"
        recent = store.history(self.client, SERIES, limit=200)
        return any(e["kind"] == "rebase" and e["data"].get("key") == key for e in recent)

    def pauser(self, rng: random.Random) -> None:
        n = 0
        while self.running():
            self.settle("pause")
            who = RACE_USERS[(n // 2) % 2]
            if n % 2 == 0:
                self.command("/carry pause", who)
                self.sent(Override("pause", f"/carry pause by {who}", _paused_by(who)))
            else:
                self.command("/carry resume", who)
                self.sent(Override("pause", f"/carry resume by {who}", _paused_by(None)))
            n += 1
            time.sleep(rng.uniform(0.1, 0.5))

    def pinner(self, name: str) -> Callable[[random.Random], None]:
        kind = f"pin {name}"

        def pin(rng: random.Random) -> None:
            n = 0
            while self.running():
                self.settle(kind)
                who, keep = RACE_USERS[(n // 2) % 2], n % 2 == 0
                verb = "keep" if keep else "drop"
                self.command(f"/carry {verb} {name}", who)
                self.sent(
                    Override(kind, f"/carry {verb} {name} by {who}", _pinned(name, keep, who))
                )
                n += 1
                time.sleep(rng.uniform(0.4, 1.2))

        return pin

    def approver(self, rng: random.Random) -> None:
        n = 0
        while self.running():
            head = self.ledger.heads[-1]
            if head not in self.ledger.approvals:
                self.command(f"/carry approve {head}", RACE_USERS[n % 2])
                with self.ledger.lock:
                    self.ledger.approvals.append(head)
                    self.ledger.sent["approve"] += 1
                n += 1
            time.sleep(rng.uniform(0.2, 0.6))

    def tester(self, rng: random.Random) -> None:
        """Hardware CI of the series as it is checked now, one run at a time; a tree tested
        already is tested again as `/carry retest` does (force), so every request runs."""
        last_head = None
        while self.running():
            if self.ledger.last_ci is not None:
                self.settle_ci(self.ledger.last_ci)
            state = self.state()
            head, digest = state.checked_head, state.checked_digest
            assert head and digest, "the series was never checked"
            # alice, a maintainer, created the ref at the head (the series' trust: issue 33)
            ci.record_push(self.client, SERIES, Push(ZERO_SHA, head, "alice", trusted=True))
            rows = ci.request_ci(
                self.client,
                celery_app,
                SERIES,
                [self.target],
                self.tree(head, digest),
                issuer=job_issuer(),
                force=head == last_head,
                debounce_s=0,
            )
            last_head = head
            if all(row.state in FINAL_STATES for row in rows):  # reused: this tree's result
                result: CiResult | None = CiResult(
                    rows[0].run_id, {row.runner: (row.run_id, row.state) for row in rows}
                )
                with self.ledger.lock:
                    self.ledger.ci_runs["reused"] += 1
            else:
                result = self.ci_result(rows[0].run_id)
            if result is not None:
                with self.ledger.lock:
                    self.ledger.last_ci = result
                    self.ledger.ci_rows_sent += len(result.rows)
            time.sleep(rng.uniform(0, 0.2))

    # -- CI -------------------------------------------------------------------------------
    def tree(self, head: str, digest: str) -> TreeSpec:
        """The exact tree to test: the downstream series applied on `head` (git am, as the
        runner builds it)."""
        if head not in self._trees:
            scratch = self._scratch
            scratch.git("fetch", "-q", str(self.env.upstream.path), head)
            scratch.git("checkout", "-q", "--detach", "--force", head)
            scratch.git(
                "am", "-q", "-3", "--keep-cr", *(str(self.patches_dir / n) for n in self.names)
            )
            self._trees[head] = scratch.git("rev-parse", "HEAD^{tree}")
        return TreeSpec(
            upstream_url=str(self.env.upstream.path),
            upstream_sha=head,
            downstream_url=str(self.env.downstream),
            downstream_ref=RACE_REF,
            downstream_sha=self.downstream_sha,
            patches_dir=f"patches/{SERIES}",
            series_digest=digest,
            expected_tree=self._trees[head],
        )

    def ci_result(self, run_id: str) -> CiResult | None:
        """Waits for the runner to end the run; the rows its result writes (None: the run did
        not end in time, which is reported as an error, not as a loss)."""
        deadline = max(self.stop_at, time.monotonic()) + 30
        while True:
            info = ci.run_info(self.client, run_id)
            if info is not None and info["state"] in FINAL_STATES:
                break
            if time.monotonic() > deadline:
                with self.ledger.lock:
                    self.ledger.errors.append(f"CI run {run_id} did not end in time")
                return None
            time.sleep(0.02)
        with self.ledger.lock:
            self.ledger.ci_runs[info["state"]] += 1
        rows = {}
        for key in ci_runs.check_keys(RACE_KIND, self.target.checks):
            verdict = (info["checks"].get(key) or {}).get("verdict")
            rows[key] = (run_id, verdict if verdict in REUSABLE else info["state"])
        return CiResult(run_id, rows)

    def settle_ci(self, result: CiResult, grace_s: float = 3.0) -> None:
        """The rows of the last CI result must be in the state until the next request replaces
        them (the runner writes them just after it ends the run: `grace_s` for that)."""
        deadline = time.monotonic() + grace_s
        while True:
            state = self.state()
            missing = [
                f"{key} of {run_id} ({want}): the state has {_ci_shown(state, key)}"
                for key, (run_id, want) in result.rows.items()
                if _ci_shown(state, key) != (run_id, want)
            ]
            if not missing or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        with self.ledger.lock:
            self.ledger.ci_lost += missing

    # -- the end --------------------------------------------------------------------------
    def close(self) -> None:
        self._worker.shutdown(wait=True, cancel_futures=True)

    def drained(self) -> bool:
        queues = ("carry", f"hw.{RACE_KIND}")
        return all(self.client.llen(q) == 0 for q in queues) and self.client.hlen("unacked") == 0

    def quiet(self) -> bool:
        if not self.drained():
            return False
        time.sleep(0.3)  # a task that just finished may queue another
        return self.drained()

    def replies(self) -> Counter[str]:
        """carry's answers on its PR (GitHub's record of them), by the verb they answer."""
        found: Counter[str] = Counter()
        for comment in self.gh.comments(DOWN_OWNER, DOWN_NAME, self.pr):
            if comment["user"]["login"] == RACE_BOT:
                body = str(comment["body"])
                verb = next((v for s, v in REPLY_STARTS.items() if body.startswith(s)), "other")
                found[verb] += 1
        return found


@dataclass
class RaceFigures:
    """What the override race sent and what was there at the end."""

    seconds: float
    overrides_sent: Counter[str]  # pause | pin | approve -> sent
    overrides_lost: Counter[str]
    ci_rows_sent: int
    ci_rows_lost: int
    replies_due: Counter[str]  # command verb -> commands that must be answered
    replies_sent: Counter[str]
    ci_runs: Counter[str]
    heads: int  # upstream heads pushed during the race
    asked: int  # of which the planner asked to rebase (the others came while paused)
    rebased: int  # of which carry checked
    superseded_by_older: list[str]  # asked for, never checked: skipped for an OLDER head
    rewinds: int  # checks of a head older than one checked before
    ended_behind: bool  # the series ended checked on a head older than the last one asked for
    drained: bool
    errors: list[str]
    lost_detail: list[str]
    writers: int

    @property
    def overrides_total(self) -> tuple[int, int]:
        return sum(self.overrides_sent.values()), sum(self.overrides_lost.values())

    @property
    def replies_lost(self) -> int:
        return sum(max(0, n - self.replies_sent[v]) for v, n in self.replies_due.items())

    @property
    def replies_extra(self) -> int:
        return sum(max(0, n - self.replies_due[v]) for v, n in self.replies_sent.items())

    @property
    def lost(self) -> dict[str, int]:
        """Every 'lost' column: each must be 0."""
        return {
            "overrides": self.overrides_total[1],
            "CI rows": self.ci_rows_lost,
            "replies": self.replies_lost,
        }

    def table(self) -> str:
        sent, lost = self.overrides_total
        due, replied = sum(self.replies_due.values()), sum(self.replies_sent.values())
        names = {"pause": "pause/resume", "pin": "keep/drop", "approve": "approve"}
        kinds = ", ".join(f"{names[k]} {n}" for k, n in sorted(self.overrides_sent.items()))
        return "\n".join(
            [
                f"override race, {self.seconds:.0f} s:",
                "| what | sent (due) | present at the end (sent) | lost |",
                "|---|---|---|---|",
                f"| overrides ({kinds}) | {sent} | {sent - lost} | {lost} |",
                f"| CI rows | {self.ci_rows_sent} | {self.ci_rows_sent - self.ci_rows_lost} "
                f"| {self.ci_rows_lost} |",
                f"| replies | {due} due | {replied} sent | {self.replies_lost} |",
                f"upstream heads: {self.rebase_line()}",
                *[f"  lost: {line}" for line in self.lost_detail[:10]],
                *[f"  error: {line}" for line in self.errors[:5]],
            ]
        )

    @property
    def heads_lost(self) -> bool:
        """A head asked for was never checked, or the series went back to an older head."""
        return bool(self.superseded_by_older) or self.rewinds > 0 or self.ended_behind

    def rebase_line(self) -> str:
        """What happened to the heads (a head asked for and never checked fails the row)."""
        return (
            f"{self.heads} pushed, {self.asked} asked to rebase (the others came while paused); "
            f"{len(self.superseded_by_older)} of those never checked, skipped as superseded by "
            f"an OLDER head; {self.rewinds} checks went back to an older head than one checked "
            f"before; the series ended checked on "
            + ("an OLDER head than the last one asked for" if self.ended_behind else "the last")
        )


def _race_config(env: CarryEnv) -> None:
    """The series has no runners of its own, so publishing starts no CI (the race's requester
    is the only one); the runner's config names the commands the requested jobs run."""
    env.write_config(trusted_authors=list(RACE_USERS))
    config = json.loads(env.config_path.read_text())
    checks = {name: {"run": ["true"], "timeout_s": 60} for name in RACE_CHECKS}
    runner = {"queue": f"hw.{RACE_KIND}", "workdir": str(env.root / "runner"), "checks": checks}
    config["runners"] = {RACE_KIND: runner}
    env.config_path.write_text(json.dumps(config, indent=2))


def _race_github(env: CarryEnv, root: Path) -> GitHubEmulator:
    """The GitHub emulator with the downstream repository (carry publishes there, and answers
    commands there); carry's processes get its token."""
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the series")
    gh = GitHubEmulator(root).start()
    # The race sends comments far faster than GitHub's content-creation limits allow (80 a
    # minute); it is about lost writes, not pacing: both sides get room for it.
    gh.set_content_limits(per_minute=RACE_WRITES, per_hour=RACE_WRITES)
    gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream)
    gh.add_user(RACE_BOT, type="Bot")
    gh.add_token(RACE_TOKEN, RACE_BOT)
    gh.set_permission(DOWN_OWNER, DOWN_NAME, RACE_BOT, "write")
    env.extra_env.update(
        {
            "GITHUB_TOKEN": RACE_TOKEN,
            "GITHUB_BASE_URL": gh.base_url,
            "CARRY_BOT_LOGIN": RACE_BOT,
            "CARRY_CI_DEBOUNCE_S": "0",
            "CARRY_GITHUB_WRITES_PER_MINUTE": str(RACE_WRITES),
            "CARRY_GITHUB_WRITES_PER_HOUR": str(RACE_WRITES),
        }
    )
    return gh


def run_override_race(root: Path, scale: Scale, seed: int) -> RaceFigures:
    """The override race on a deployment of its own under `root`: a private redis-server, the
    GitHub emulator, RACE_WORKERS carry workers and a runner; all stopped at the end."""
    server = RedisServer(root / "redis", aof=False).start()
    env = CarryEnv(root / "carry", server.url)
    env.carry_patches(race_patches())
    _race_config(env)
    gh: GitHubEmulator | None = None
    try:
        gh = _race_github(env, root / "gh")
        with ThreadPoolExecutor(RACE_WORKERS + 1) as pool:  # the processes start at once
            started = [pool.submit(env.start_worker, f"race-{n}") for n in range(RACE_WORKERS)]
            started.append(pool.submit(env.start_runner, RACE_KIND))
            for process in started:
                process.result()
        with _carry_in_this_process(env) as rt:
            race = OverrideRace(env, rt, gh, seed)
            try:
                return _race(race, scale)
            finally:
                race.close()
    finally:
        env.stop()
        if gh is not None:
            gh.stop()
        server.kill()


def _race(race: OverrideRace, scale: Scale) -> RaceFigures:
    # Upstream moves the carried lines down: the refreshed series differs from the
    # downstream branch, so the first check's publish opens carry's PR.
    first = race.env.upstream.commit("a header", {"mod.py": "# header\n" + BODY})
    race.ledger.heads.append(first)
    race.rebase_task(first)

    def opened() -> int | None:
        pr = race.state().pr
        return pr.number if pr else None

    race.pr = wait_for(opened, 60, "carry's PR")
    say(f"override race: carry's PR #{race.pr} is open; {scale.race_seconds:.0f} s of writers")
    writers: list[tuple[str, Callable[[random.Random], None]]] = [
        ("rebaser", race.rebaser),
        ("pauser", race.pauser),
        ("approver", race.approver),
        ("ci", race.tester),
    ]
    writers += [(f"pin {name}", race.pinner(name)) for name in race.names]
    threads = [race.guarded(name, work, n) for n, (name, work) in enumerate(writers)]
    race.writers = len(threads)
    began = time.monotonic()
    race.stop_at = began + scale.race_seconds
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=scale.race_seconds + 120)
    seconds = time.monotonic() - began
    try:  # the workers finish what was asked of them: approvals, replies, re-checks
        wait_for(race.quiet, scale.race_drain_s, "the queues to drain")
        drained = True
    except AssertionError:
        drained = False
    say(
        f"override race: writers stopped after {seconds:.1f} s, queues drained "
        f"{time.monotonic() - began - seconds:.1f} s later"
        if drained
        else f"override race: the queues did not drain in {scale.race_drain_s:.0f} s"
    )
    for kind in list(race.ledger.current):
        race.settle(kind, final=True)
    if race.ledger.last_ci is not None:
        race.settle_ci(race.ledger.last_ci)
    return _figures(race, seconds, drained)


def _figures(race: OverrideRace, seconds: float, drained: bool) -> RaceFigures:
    ledger, final = race.ledger, race.state()
    lost = Counter(family for family, _, _ in ledger.lost)
    detail = [f"{what} (found {found})" for _, what, found in ledger.lost]
    unapproved = [sha for sha in ledger.approvals if sha not in final.approvals]
    lost["approve"] += len(unapproved)
    detail += [f"/carry approve {sha[:12]} (not in the state's approvals)" for sha in unapproved]
    detail += [f"CI row {row}" for row in ledger.ci_lost]
    history = store.history(race.client, SERIES, limit=HISTORY_LIMIT)
    order = {head: n for n, head in enumerate(ledger.heads)}
    rebased = {e["data"].get("head") for e in history if e["kind"] == "rebased"}
    # A head the planner asked to rebase, skipped as superseded by an OLDER one, never checked.
    older = {
        e["data"]["head"]: e["data"]["newest"]
        for e in history
        if e["kind"] == "superseded"
        and order.get(e["data"].get("newest"), -1) < order.get(e["data"].get("head"), -1)
    }
    skipped = [
        f"{head[:12]} (carry:wanted was {older[head][:12]}, pushed before it)"
        for head in ledger.asked
        if head in older and head not in rebased
    ]
    # A check of a head older than one checked before it moves the series back in time.
    newest, rewinds = -1, 0
    for entry in reversed(history):
        if entry["kind"] == "rebased" and entry["data"].get("head") in order:
            at = order[entry["data"]["head"]]
            rewinds += at < newest
            newest = max(newest, at)
    last_asked = max((order[h] for h in ledger.asked), default=-1)
    behind = order.get(final.checked_head or "", -1) < last_asked
    return RaceFigures(
        seconds=seconds,
        overrides_sent=ledger.sent,
        overrides_lost=lost,
        ci_rows_sent=ledger.ci_rows_sent,
        ci_rows_lost=len(ledger.ci_lost),
        replies_due=ledger.replies_due,
        replies_sent=race.replies(),
        ci_runs=ledger.ci_runs,
        heads=len(ledger.heads) - 1,
        asked=len(ledger.asked),
        rebased=len(rebased & set(ledger.heads[1:])),
        superseded_by_older=skipped,
        rewinds=rewinds,
        ended_behind=behind,
        drained=drained,
        errors=ledger.errors,
        lost_detail=detail,
        writers=race.writers,
    )


HISTORY_LIMIT = 20_000


def scenario_override_race(root: Path, scale: Scale, seed: int) -> Row:
    figures = run_override_race(root, scale, seed)
    print(figures.table(), flush=True)
    sent, lost = figures.overrides_total
    due, replied = sum(figures.replies_due.values()), sum(figures.replies_sent.values())
    commands = ", ".join(f"{n} {verb}" for verb, n in sorted(figures.replies_due.items()))
    runs = ", ".join(f"{n} {state}" for state, n in sorted(figures.ci_runs.items()))
    problems = [*figures.errors] + ([] if figures.drained else ["the queues did not drain"])
    shown = "; ".join(figures.lost_detail[:3] + problems[:3])
    older = figures.superseded_by_older
    return Row(
        "overrides, CI rows and replies racing rebases on one series",
        f"{figures.seconds:.0f} s of {figures.writers} writer threads on one series: "
        f"{figures.heads} upstream heads (the planner, then the carry.rebase task function), "
        f"{due} maintainer commands ({commands}) through the planner and the dispatcher, "
        f"{sum(figures.ci_runs.values())} CI requests ({runs}) run by a runner process; "
        f"{RACE_WORKERS} carry workers ran the re-checks pins ask for, approvals, replies, "
        "publishes and CI reports (GitHub emulator)",
        f"overrides: {sent} sent / {sent - lost} present / {lost} lost; CI rows: "
        f"{figures.ci_rows_sent} sent / {figures.ci_rows_sent - figures.ci_rows_lost} present / "
        f"{figures.ci_rows_lost} lost; replies: {due} due / {replied} sent / "
        f"{figures.replies_lost} lost" + (f" ({shown})" if shown else ""),
        f"{figures.replies_extra} replies sent twice",
        "nothing to recover: each writer changes only its own fields, through update_series "
        f"(WATCH, re-run on a conflict); {figures.rebase_line()}"
        + (f" (e.g. {older[0]})" if older else ""),
        ok=not any(figures.lost.values())
        and not figures.replies_extra
        and not figures.heads_lost
        and figures.drained
        and not figures.errors,
    )
