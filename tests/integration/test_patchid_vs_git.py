"""patch_id against real `git patch-id --stable`: seeded random histories, their diffs as carry
feeds them to git (format-patch mails from the first `diff --git` line on, signature kept, and
per-file sections of `git log -p --no-renames`), and some damaged copies of those diffs.

All diffs go through ONE `git patch-id --stable` call, in the record format of
bot.git.history.SeriesHistory. Every id patch_id gives must be git's; None is allowed, but must be
rare for the diffs git itself made, and is required for binary patches.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from bot.core.patchid import patch_id
from harness.gitrepo import EPOCH, PINNED_ENV

SEEDS = (20260101, 7)
COMMITS_PER_SEED = 110
CONTEXT_SIZES = (3, 0, 1)  # format-patch; git log -p uses 3 and 0
MAX_FALLBACK_RATE = 0.02
MIN_CASES = 600
LINE_TEXTS = ("a", "ab", "b", "c d", "e\tf", "g  h", "", " ", "x y z", "Ü", "-- ", "\\ q")
FILES = ("f0.txt", "f1.txt", "f2.txt", "f3.txt", "dir/g.txt", "dir/sub/h.c", "zz.txt")
BINARY = ("pic.bin", "dir/blob.dat")

ENV = {
    **os.environ,
    **PINNED_ENV,
    "GIT_AUTHOR_DATE": f"@{EPOCH} +0000",
    "GIT_COMMITTER_DATE": f"@{EPOCH} +0000",
}
_MAIL_START = re.compile(rb"(?m)^From [0-9a-f]{40} Mon Sep 17 00:00:00 2001\n")
_FIRST_DIFF = re.compile(rb"(?m)^diff --git ")
_SECTION = re.compile(rb"(?m)^(?=diff --git )")
_LOG_FORMAT = "--format=%x1eCARRY-COMMIT %H%x1f%s%x1f%b%x1f"


def run_git(cwd: Path, *args: str, stdin: bytes = b"") -> bytes:
    proc = subprocess.run(
        ["git", "-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        env=ENV,
        check=False,
    )
    assert proc.returncode == 0, f"git {args}: {proc.stderr.decode(errors='replace')}"
    return proc.stdout


# --- random history ----------------------------------------------------------------------------


def random_line(rng: random.Random, eol: bytes) -> bytes:
    return rng.choice(LINE_TEXTS).encode() + eol


def random_text(rng: random.Random) -> bytes:
    eol_style = rng.choices(("lf", "crlf", "mixed"), weights=(7, 2, 1))[0]
    lines = []
    for _ in range(rng.choice((0, 1, 2, rng.randint(3, 10), rng.randint(8, 30)))):
        eol = (
            b"\r\n"
            if eol_style == "crlf" or (eol_style == "mixed" and rng.random() < 0.5)
            else b"\n"
        )
        lines.append(random_line(rng, eol))
    if lines and rng.random() < 0.25:
        lines[-1] = lines[-1].rstrip(b"\r\n")
    return b"".join(lines)


def whitespace_edit(rng: random.Random, line: bytes) -> bytes:
    body, eol = (line[:-2], line[-2:]) if line.endswith(b"\r\n") else (line.rstrip(b"\n"), b"\n")
    if not line.endswith(b"\n"):
        eol = b""
    choice = rng.randrange(5)
    if choice == 0:
        body += b" " * rng.randint(1, 3)
    elif choice == 1:
        body = body.replace(b" ", b"\t") if b" " in body else b" " + body
    elif choice == 2:
        body = body.replace(b"\t", b"  ").replace(b" ", b"")
    elif choice == 3:
        eol = b"\n" if eol == b"\r\n" else b"\r\n" if eol else b""
    else:
        body = b"\t" + body
    return body + eol


def edit_text(rng: random.Random, data: bytes) -> bytes:
    lines = re.findall(rb"[^\n]*\n|[^\n]+$", data)
    eol = b"\r\n" if b"\r\n" in data else b"\n"
    for _ in range(rng.randint(1, 4)):
        op = rng.randrange(6)
        at = rng.randint(0, len(lines))
        if op == 0 or not lines:
            insert = [random_line(rng, eol) for _ in range(rng.randint(1, 3))]
            if at == len(lines) and lines and not lines[-1].endswith(b"\n"):
                lines[-1] += eol
            lines[at:at] = insert
        elif op == 1:
            del lines[min(at, len(lines) - 1) : min(at, len(lines) - 1) + rng.randint(1, 2)]
        elif op == 2:
            i = min(at, len(lines) - 1)
            lines[i] = random_line(rng, eol if lines[i].endswith(b"\n") else b"")
        elif op in (3, 4):  # whitespace-only edits, sometimes several
            for _ in range(rng.randint(1, 3)):
                i = rng.randrange(len(lines))
                lines[i] = whitespace_edit(rng, lines[i])
        elif lines[-1].endswith(b"\n"):
            lines[-1] = lines[-1].rstrip(b"\r\n")
        else:
            lines[-1] += eol
    return b"".join(lines)


def random_commit(
    rng: random.Random, repo: Path, files: dict[str, bytes], want_binary: bool
) -> None:
    names = list(FILES)
    for _ in range(rng.choice((1, 1, 1, 2, 2, 3, 4))):
        name = rng.choice(names)
        path = repo / name
        roll = rng.random()
        if name not in files:
            files[name] = random_text(rng)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(files[name])
            if rng.random() < 0.15:
                path.chmod(0o755)
        elif roll < 0.1:
            del files[name]
            path.unlink()
        elif roll < 0.22:
            path.chmod(path.stat().st_mode ^ 0o111)  # a mode change, often alone
        else:
            files[name] = edit_text(rng, files[name])
            path.write_bytes(files[name])
    if want_binary:
        name = rng.choice(BINARY)
        path = repo / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(bytes(rng.randrange(256) for _ in range(rng.randint(1, 60))) + b"\0")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "-q", "--allow-empty", "-m", f"change {rng.random()}")


def build_history(rng: random.Random, repo: Path) -> None:
    repo.mkdir()
    run_git(repo, "init", "-q")
    files: dict[str, bytes] = {}
    for _ in range(COMMITS_PER_SEED):
        random_commit(rng, repo, files, want_binary=rng.random() < 0.06)


# --- diffs as carry feeds them -----------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    kind: str  # "mail", "section", "sections", "damaged", "empty"
    diff: bytes

    @property
    def binary(self) -> bool:
        return b"\nGIT binary patch" in self.diff or b"\nBinary files " in self.diff


def mail_diffs(repo: Path, context: int) -> list[bytes]:
    out = run_git(repo, "format-patch", f"-U{context}", "--stdout", "--root", "HEAD")
    mails = _MAIL_START.split(out)[1:]
    diffs = []
    for mail in mails:
        first = _FIRST_DIFF.search(mail)
        diffs.append(mail[first.start() :] if first else b"")
    return diffs


def log_sections(repo: Path, context: int) -> list[list[bytes]]:
    out = run_git(repo, "log", "-p", f"-U{context}", "--no-renames", _LOG_FORMAT, "HEAD")
    commits = []
    for record in out.split(b"\x1e")[1:]:
        diff = record.rpartition(b"\x1f")[2]
        commits.append([c for c in _SECTION.split(diff) if c.startswith(b"diff --git ")])
    return commits


def damage(rng: random.Random, diff: bytes) -> bytes:
    lines = re.findall(rb"[^\n]*\n|[^\n]+$", diff)
    i = rng.randrange(len(lines))
    op = rng.randrange(9)
    if op == 0:
        del lines[i]
    elif op == 1:
        lines.insert(i, lines[i])
    elif op == 2:
        lines.insert(i, b"\n")
    elif op == 3:
        lines.insert(i, b"\\ No newline at end of file\n")
    elif op == 4:
        lines = [line.replace(b"\n", b"\r\n") for line in lines]
    elif op == 5:
        lines[-1] = lines[-1].rstrip(b"\n")
    elif op == 6:  # a different hunk count
        hunks = [k for k, line in enumerate(lines) if line.startswith(b"@@ -")]
        if hunks:
            k = rng.choice(hunks)
            lines[k] = re.sub(
                rb"\d+",
                lambda m: str(int(m[0]) + rng.choice((-1, 1))).encode(),
                lines[k],
                count=rng.randint(1, 4),
            )
    elif op == 7:  # the signature gone
        return re.sub(rb"(?s)\n-- \n.*\Z", b"\n", diff)
    else:
        lines.insert(i, rng.choice((b"\\ x\n", b" \n", b"+\n", b"-\n", b"@@ -1 +1 @@\n", b"x\n")))
    return b"".join(lines)


def collect_cases(rng: random.Random, repo: Path) -> list[Case]:
    cases = [Case("empty", b""), Case("empty", b"commit message only\n")]
    for context in CONTEXT_SIZES:
        cases += [Case("mail", d) if d else Case("empty", d) for d in mail_diffs(repo, context)]
    for context in (3, 0):
        for sections in log_sections(repo, context):
            cases += [Case("section", s) for s in sections]
            if len(sections) > 1:
                cases.append(Case("sections", b"".join(rng.sample(sections, len(sections)))))
    natural = [c for c in cases if c.diff and not c.binary]
    cases += [Case("damaged", damage(rng, c.diff)) for c in rng.sample(natural, len(natural) // 3)]
    return cases


def git_ids(cwd: Path, diffs: list[bytes]) -> dict[int, str]:
    feed = [f"commit {n + 1:040x}\n".encode() + d for n, d in enumerate(diffs)]
    out = run_git(cwd, "patch-id", "--stable", stdin=b"\n".join(feed)).decode()
    ids = {}
    for line in out.splitlines():
        pid, fake = line.split()
        if int(fake, 16):  # 0: text git read after a patch ended, not a record of its own
            ids[int(fake, 16) - 1] = pid
    return ids


def test_patch_id_matches_git_or_falls_back(tmp_path: Path):
    cases: list[Case] = []
    for seed in SEEDS:
        rng = random.Random(seed)
        repo = tmp_path / f"repo-{seed}"
        build_history(rng, repo)
        cases += collect_cases(rng, repo)
    expected = git_ids(tmp_path, [c.diff for c in cases])

    counts: Counter[str] = Counter()
    wrong = []
    for n, case in enumerate(cases):
        got = patch_id(case.diff)
        category = "binary" if case.binary else case.kind
        counts[f"{category}:cases"] += 1
        if got is None:
            counts[f"{category}:none"] += 1
            continue
        counts[f"{category}:match" if got == expected.get(n) else f"{category}:WRONG"] += 1
        if got != expected.get(n):
            wrong.append((case, got, expected.get(n)))
    print(dict(sorted(counts.items())))

    assert not wrong, wrong[:3]
    assert len(cases) >= MIN_CASES
    assert counts["binary:cases"] > 0 and counts["binary:none"] == counts["binary:cases"]
    assert counts["empty:none"] == counts["empty:cases"] > 0
    natural = sum(counts[f"{k}:cases"] for k in ("mail", "section", "sections"))
    fallbacks = sum(counts[f"{k}:none"] for k in ("mail", "section", "sections"))
    assert natural > 0 and fallbacks / natural < MAX_FALLBACK_RATE, counts
