"""Every head verified (issue 32), with real processes: a private redis-server, the GitHub
emulator, carry's web and worker, a runner, and a webhook receiver.

A synthetic upstream gets N heads pushed one after another (through the emulator, so carry hears
each as GitHub's push webhook), each of several commits. The series applies unchanged on every
head, so carry has nothing to propose; its check (does mod.py carry the fix, and is the tree
free of `broken.txt`) runs on the runner for each head all the same. From one known upstream
commit on, inside a head, the check fails (it adds `broken.txt`); carry bisects the range from
the last good head and names that commit, then reads the check on plain upstream there (A/B);
a later head repairs it. Each line of the table ends in ok or WRONG: heads pushed and verified,
PRs opened (0), the last known good head, the bisected commit and the runs it took, the A/B
reading, the fix's owner mentioned once on the dashboard issue after a red streak, the tested tree as carry/tree/<series> in the downstream repository (the last head plus
one commit per patch, the exact tree, its check on that commit, one push a head, none of
carry's own pushes checked as a head) and carry/good/<series> at the last good head's tree, and
the notifications the receiver got (red, bisected, green, each signed).

    python -m bench.reliability --scenario every-head          # 30 heads
    python -m bench.every_head --heads 8                       # the same, any size
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from bot.core.notify import SIGNATURE_HEADER
from bot.core.state import SeriesState, Verdict
from bot.emulator import GitHubEmulator
from bot.store import series as store
from harness.carry_env import BODY, SECRET, SERIES, CarryEnv, wait_for
from harness.gitrepo import git
from harness.pushes import approve_with_cli
from harness.redis_server import PrivateRedis

UP_OWNER, UP_NAME = "upstream-org", "engine"
DOWN_OWNER, DOWN_NAME = "downstream-org", "carry"
KIND, CHECK = "gaudi", "fixed"
PUSHER = "upstream-dev"  # a trusted author: heads run without /carry approve
NOTIFY_SECRET = "notify-secret-for-the-bench"
FIX = {"mod.py": BODY.replace("compute(10)", "compute(10, safe=True)")}
CHECK_RUN = ["sh", "-c", "grep -q 'safe=True' mod.py && test ! -e broken.txt"]
COMMITS_PER_HEAD = 3  # the breaking commit is the middle one of its head
NO_LONGER_WORKS = "the fix no longer works after"  # plain upstream fails the check too
OWNER = "fix-owner"  # the fix page's Owners: mentioned once the check is red MENTION_AFTER heads
MENTION_AFTER = 2
REPORT_WAIT_S = 60  # for the last head's check status on carry/tree (see _reported)


@dataclass
class Received:
    event: str
    body: dict[str, Any]
    signed: bool


@dataclass
class Receiver:
    """A webhook endpoint: records what carry sends, and whether its signature holds."""

    messages: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/hook"

    @contextmanager
    def running(self) -> Iterator[Receiver]:
        messages = self.messages

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                raw = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                expected = (
                    "sha256=" + hmac.new(NOTIFY_SECRET.encode(), raw, hashlib.sha256).hexdigest()
                )
                signed = hmac.compare_digest(self.headers.get(SIGNATURE_HEADER, ""), expected)
                event = self.headers.get("X-Carry-Event", "")
                messages.append(Received(event, json.loads(raw), signed))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        thread.start()
        try:
            yield self
        finally:
            self.server.shutdown()
            self.server.server_close()


@dataclass(frozen=True)
class TreeRef:
    """A branch of carry's in the downstream repository, as read from the emulator's git."""

    commit: str
    parent: str  # the upstream head under the carried patches
    patches: int  # commits from that head to the branch
    tree: str
    tested_tree: str  # the tree the runner built for that head (the series' CI tree spec)
    statuses: tuple[str, ...]  # carry's commit statuses on the commit

    def words(self) -> str:
        same = "exact tree" if self.tree == self.tested_tree else f"tree {self.tree[:12]}"
        shown = ", ".join(self.statuses) or "no checks"
        return f"{self.parent[:12]} + {self.patches}, {same}, {shown}"


@dataclass
class Figures:
    heads: list[str]
    broken_from: int  # index of the first head the check fails on
    repaired_at: int  # index of the first head it passes on again
    breaking: str  # the upstream commit that breaks it (inside head broken_from)
    verdicts: dict[str, Verdict]
    prs: int
    last_good: str | None
    messages: list[Received]
    seconds: float
    bisect: dict[str, Any] = field(default_factory=dict)  # the series' bisection at the end
    tree_ref: TreeRef | None = None  # carry/tree/<series> in the downstream repository
    good_ref: TreeRef | None = None  # carry/good/<series>
    tree_pushes: int = 0  # pushes of carry/tree/<series> (one per head)
    mentions: list[str] = field(default_factory=list)  # dashboard issue comments naming OWNER
    own_pushes_rebased: int = 0  # rebases of a commit carry pushed itself (0: no loop)
    own_pushes_noted: int = 0  # push webhooks of carry's own tree branches, noted and left

    def expected_verdict(self, n: int) -> Verdict:
        return Verdict.RED if self.broken_from <= n < self.repaired_at else Verdict.GREEN

    def rows(self) -> list[tuple[str, str, str, bool]]:
        """(what, expected, found, ok)."""
        wrong = [
            f"{n}:{self.verdicts.get(h)}"
            for n, h in enumerate(self.heads)
            if self.verdicts.get(h) != self.expected_verdict(n)
        ]
        verified = sum(1 for h in self.heads if h in self.verdicts)
        told = [(m.event, m.body.get("head")) for m in self.messages]
        expected_told = [
            ("went-red", self.heads[self.broken_from]),
            ("bisected", self.heads[self.broken_from]),
            *self._expected_mention(),
            ("went-green", self.heads[self.repaired_at]),
        ]
        b = self.bisect
        named = b.get("culprit") or "none"
        return [
            (
                "heads pushed / verified on the exact tree",
                f"{len(self.heads)} / {len(self.heads)}",
                f"{len(self.heads)} / {verified}",
                verified == len(self.heads),
            ),
            (
                "verdict of each head (red from the breaking commit to the repair)",
                "all as expected",
                "all as expected" if not wrong else "wrong: " + ", ".join(wrong),
                not wrong,
            ),
            (
                "PRs opened for heads whose patches applied unchanged",
                "0",
                str(self.prs),
                not self.prs,
            ),
            (
                "last known good at the end",
                self.heads[-1][:12],
                (self.last_good or "none")[:12],
                self.last_good == self.heads[-1],
            ),
            (
                "bisected commit (runs used / budget)",
                f"{self.breaking[:12]} (at most {b.get('budget', '?')})",
                f"{named[:12]} ({b.get('runs', '?')} / {b.get('budget', '?')})",
                named == self.breaking and 0 < b.get("runs", 0) <= b.get("budget", 0),
            ),
            (
                "A/B reading (plain upstream fails at the commit and its parent)",
                NO_LONGER_WORKS,
                b.get("reading", "none")[: len(NO_LONGER_WORKS)] or "none",
                b.get("reading", "").startswith(NO_LONGER_WORKS),
            ),
            self._tree_row(),
            self._good_row(),
            self._mention_row(),
            (
                "notifications (signed, one per change)",
                ", ".join(e for e, _ in expected_told),
                ", ".join(f"{e} {h[:12] if h else ''}".strip() for e, h in told) or "none",
                told == expected_told and all(m.signed for m in self.messages),
            ),
        ]

    def _expected_mention(self) -> list[tuple[str, str]]:
        """The owners are told once, on the red streak's MENTION_AFTER-th head."""
        if self.repaired_at - self.broken_from < MENTION_AFTER:
            return []
        return [("red-streak", self.heads[self.broken_from + MENTION_AFTER - 1])]

    def _mention_row(self) -> tuple[str, str, str, bool]:
        expected = 1 if self._expected_mention() else 0
        found = len(self.mentions)
        return (
            f"@{OWNER} mentioned on the dashboard issue after {MENTION_AFTER} red heads",
            f"{expected} (once per streak)",
            str(found),
            found == expected,
        )

    def _tree_row(self) -> tuple[str, str, str, bool]:
        t = self.tree_ref
        expected = f"{self.heads[-1][:12]} + 1, exact tree, carry/{KIND}/{CHECK}: success"
        ok = (
            t is not None
            and (t.parent, t.patches, t.tree) == (self.heads[-1], 1, t.tested_tree)
            and f"carry/{KIND}/{CHECK}: success" in t.statuses
        )
        found = t.words() if t is not None else "no branch"
        pushes = (
            f"; {self.tree_pushes} pushes ({self.own_pushes_noted} webhooks heard), "
            f"{self.own_pushes_rebased} rebased"
        )
        ok = ok and self.tree_pushes == len(self.heads) and not self.own_pushes_rebased
        return (
            f"carry/tree/{SERIES} = the last head's tested tree (pushed once a head)",
            f"{expected}; {len(self.heads)} pushes, 0 rebased",
            found + pushes,
            ok,
        )

    def _good_row(self) -> tuple[str, str, str, bool]:
        g = self.good_ref
        ok = g is not None and g.parent == self.heads[-1] and g.tree == g.tested_tree
        found = f"{g.parent[:12]} + {g.patches}" if g is not None else "no ref"
        return (
            f"carry/good/{SERIES} at the last good head",
            f"{self.heads[-1][:12]} + 1",
            found,
            ok,
        )

    def table(self) -> str:
        lines = [
            f"every head verified: {len(self.heads)} heads in {self.seconds:.0f} s",
            "",
            "| what | expected | found | |",
            "|---|---|---|---|",
        ]
        lines += [
            f"| {what} | {expected} | {found} | {'ok' if ok else 'WRONG'} |"
            for what, expected, found, ok in self.rows()
        ]
        return "\n".join(lines)

    @property
    def ok(self) -> bool:
        return all(ok for *_, ok in self.rows())


def run_every_head(root: Path, heads: int) -> Figures:
    """Pushes `heads` heads; the check breaks at a third of them and is repaired at two thirds."""
    assert heads >= 4, "needs room for green, red and green again"
    broken_from, repaired_at = max(1, heads // 3), max(2, 2 * heads // 3)
    server = PrivateRedis(root / "redis", persist=False).start()
    env = CarryEnv(root / "carry", server.url)
    try:
        with Receiver().running() as receiver, _github(env, root / "gh") as gh:
            _configure(env, gh, receiver.url)
            url = env.start_web()
            env.start_worker()
            env.start_runner(KIND)
            gh.add_webhook(f"{url}/webhooks/github", secret=SECRET)
            started = time.monotonic()
            pushed: list[str] = []
            verdicts: dict[str, Verdict] = {}
            breaking = ""
            for n in range(heads):
                for c in range(COMMITS_PER_HEAD):
                    files: dict[str, str | None] = {f"upstream/f{n}-{c}.py": f"n = {n}\n"}
                    if n == broken_from and c == COMMITS_PER_HEAD // 2:
                        files["broken.txt"] = "an upstream change that breaks the fix\n"
                    if n == repaired_at and c == 0:
                        files["broken.txt"] = None
                    head = env.upstream.commit(f"upstream change {n}.{c} (#{100 + n})", files)
                    if "broken.txt" in files and files["broken.txt"] is not None:
                        breaking = head
                gh.push(UP_OWNER, UP_NAME, env.upstream.path, "main", pusher=PUSHER)
                if n == 0:  # no trusted head under the first push carry sees: approved once
                    approve_with_cli(env.env, SERIES, head)
                pushed.append(head)
                verdicts[head] = wait_for(lambda h=head: _verdict(env, h), 120, f"head {n}")
                if n == broken_from:  # its explanation, before upstream moves on
                    wait_for(lambda: _bisect_ended(env), 180, "the bisection")
            told = 3 + len(_expected(broken_from, repaired_at))
            wait_for(lambda: len(receiver.messages) >= told, 60, "the notifications")
            time.sleep(1.0)  # a duplicate message would come now
            state = env.state()
            assert state is not None
            prs = [p for p in gh.pulls(DOWN_OWNER, DOWN_NAME)]
            tested = str((store.ci_tree(env.client, SERIES) or {}).get("expected_tree", ""))
            wait_for(lambda: _good_pushed(env), 60, "carry/good")
            tree_ref = _reported(gh, pushed[-1], tested)
            good_ref = _read_ref(gh, f"carry/good/{SERIES}", pushed[-1], tested)
            trees = [e["data"] for e in env.history("tree-branch") if e["data"].get("pushed")]
            own = {str(e.get("commit")) for e in trees}
            rebased = [e for e in env.history("rebase") if e["data"].get("head_sha") in own]
            notes = store.history(env.client, None, limit=1000, kind="note")
            noted = [e for e in notes if "carry's own tree branch" in e["data"].get("reason", "")]
            return Figures(
                heads=pushed,
                broken_from=broken_from,
                repaired_at=repaired_at,
                breaking=breaking,
                verdicts=verdicts,
                prs=len(prs),
                last_good=state.last_good.head if state.last_good else None,
                messages=list(receiver.messages),
                seconds=time.monotonic() - started,
                bisect=state.bisect.__dict__ if state.bisect else {},
                tree_ref=tree_ref,
                good_ref=good_ref,
                tree_pushes=len(trees),
                own_pushes_rebased=len(rebased),
                own_pushes_noted=len(noted),
                mentions=_mentions(gh),
            )
    finally:
        env.stop()
        server.stop(kill=True)


def _verdict(env: CarryEnv, head: str) -> Verdict | None:
    state: SeriesState | None = env.state()
    if state is None:
        return None
    entry = next((h for h in state.heads if h.head == head), None)
    if entry is None or entry.verdict not in (Verdict.GREEN, Verdict.RED):
        return None
    return entry.verdict


def _expected(broken_from: int, repaired_at: int) -> list[str]:
    return ["red-streak"] if repaired_at - broken_from >= MENTION_AFTER else []


def _mentions(gh: GitHubEmulator) -> list[str]:
    """The comments on carry's dashboard issue that mention the fix's owner."""
    found = []
    for issue in gh.issues(DOWN_OWNER, DOWN_NAME):
        for comment in gh.comments(DOWN_OWNER, DOWN_NAME, issue["number"]):
            if f"@{OWNER}" in comment["body"]:
                found.append(comment["body"])
    return found


def _good_pushed(env: CarryEnv) -> bool:
    state = env.state()
    return state is not None and state.last_good is not None and bool(state.last_good.ref)


def _read_ref(gh: GitHubEmulator, branch: str, head: str, tested: str) -> TreeRef | None:
    """The branch as the downstream repository has it: its commit, the upstream head under it
    (`head` when it is an ancestor), the commits on top of that head, its tree."""
    repo = gh.hub.repo(DOWN_OWNER, DOWN_NAME).git
    commit = repo.ref_sha(f"refs/heads/{branch}")
    if commit is None:
        return None
    parent = head if repo.is_ancestor(head, commit) else ""
    count = int(repo.out("rev-list", "--count", f"{parent}..{commit}")) if parent else -1
    newest = {st["context"]: st["state"] for st in gh.statuses(DOWN_OWNER, DOWN_NAME, commit)}
    tree = repo.out("rev-parse", f"{commit}^{{tree}}")
    statuses = tuple(f"{context}: {state}" for context, state in newest.items())
    return TreeRef(commit, parent, count, tree, tested, statuses)


def _reported(gh: GitHubEmulator, head: str, tested: str) -> TreeRef | None:
    """carry/tree once the last head's check status is on it: the status is a GitHub write of
    its own, which may land after the verdict, the messages and carry/good (writes are paced).
    Read as it is after REPORT_WAIT_S if it never lands (the row then says what is missing)."""
    branch = f"carry/tree/{SERIES}"
    deadline = time.monotonic() + REPORT_WAIT_S
    while True:
        ref = _read_ref(gh, branch, head, tested)
        done = ref is not None and any(s.startswith(f"carry/{KIND}/") for s in ref.statuses)
        if done or time.monotonic() >= deadline:
            return ref
        time.sleep(0.2)


def _bisect_ended(env: CarryEnv) -> bool:
    state = env.state()
    return state is not None and state.bisect is not None and not state.bisect.active


@contextmanager
def _github(env: CarryEnv, root: Path) -> Iterator[GitHubEmulator]:
    env.carry_patches([FIX])
    page = env.downstream / "patches" / SERIES / "the-fix.md"
    row = "| Test | the unit test below |\n"
    page.write_text(page.read_text().replace(row, f"{row}| Owners | @{OWNER} |\n"))
    git(env.downstream, "init", "-q", "-b", "main")
    git(env.downstream, "add", "-A")
    git(env.downstream, "commit", "-q", "-m", "carry the fix")
    with GitHubEmulator(root) as gh:
        gh.create_repo(UP_OWNER, UP_NAME, from_path=env.upstream.path)
        gh.create_repo(DOWN_OWNER, DOWN_NAME, from_path=env.downstream, private=True, plan="team")
        gh.add_user("carry[bot]", type="Bot")
        gh.add_token("carry-token", "carry[bot]")
        gh.set_permission(DOWN_OWNER, DOWN_NAME, "carry[bot]", "write")
        gh.add_user(PUSHER)
        yield gh


def _configure(env: CarryEnv, gh: GitHubEmulator, hook_url: str) -> None:
    env.write_config(runners=[KIND], checks=[CHECK], trusted_authors=[PUSHER])
    config = json.loads(env.config_path.read_text())
    config["upstreams"]["engine"]["url"] = gh.git_url(UP_OWNER, UP_NAME)
    check = {"run": CHECK_RUN, "timeout_s": 60}
    config["runners"] = {
        KIND: {"queue": f"hw.{KIND}", "workdir": str(env.root / "runner"), "checks": {CHECK: check}}
    }
    config["notify"] = {
        "webhooks": [{"url": hook_url, "format": "json", "secret_env": "CARRY_BENCH_NOTIFY"}],
        "red_streak_mention": MENTION_AFTER,
    }
    env.config_path.write_text(json.dumps(config, indent=2))
    env.extra_env.update(
        {
            "GITHUB_TOKEN": "carry-token",
            "GITHUB_BASE_URL": gh.base_url,
            "CARRY_DOWNSTREAM_DIR": "",
            "CARRY_BOT_LOGIN": "carry[bot]",
            "CARRY_CI_DEBOUNCE_S": "0",
            "CARRY_BENCH_NOTIFY": NOTIFY_SECRET,
        }
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--heads", type=int, default=30)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="carry-every-head-") as tmp:
        figures = run_every_head(Path(tmp), args.heads)
    print(figures.table())
    return 0 if figures.ok else 1


if __name__ == "__main__":
    sys.exit(main())
