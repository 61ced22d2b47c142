"""Measure drop decisions on real history: release branches that carry ports of main commits.

Usage: python bench/realhistory.py PATH_TO_UPSTREAM_CLONE [--branches 'releases/*'] [--limit N]
       [--main main]   (vLLM's history as Habana's fork holds it: --main habana_main --branches 'v1.*')
       [--to-main]     (the other way: release commits checked on main's tip)

For each release branch R (forked from main at F), every main commit C in F..main becomes a
carried patch checked on R's tip:
- "contained" label: R has a port of C that R did not revert later: the same change title once
  PR numbers, release tags and cherry-pick markers are stripped (where main used that title
  for C alone), a release commit naming C's PR as `#N` or as a link to `.../pull/N`, C's
  message linking a release commit's PR as `.../pull/N`, the very same diff by patch id (also
  inside a bigger release commit), or every changed block of C verbatim inside one release
  commit; or such a port from before the fork that C's own history lacks
  (`ported_before_fork`);
- "not contained" label: no port of C on R, or the port was reverted on R;
- "partly held", among the not contained: R's own commits brought part of C's changed lines
  (`partly_held`), so a review of C is about a change upstream holds in part; where they
  brought all of them, C is contained ("held in full").
The engine's decision is compared with the label, next to plain git's tools on the same
samples (patch-id match, reverse-apply check, `am -3` leaving the tree unchanged). Nothing of
the upstream repository is copied; it is only read.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.core.classify import Decision
from bot.core.patchid import patch_id
from bot.git.engine import Engine, PatchInput
from bot.git.history import LOG_FORMAT, UpstreamCommit, parse_commits
from bot.git.mirror import Mirror
from bot.git.runner import Git

_NOISE = re.compile(
    r"(\(#\d+\))|(\[[^\]]*\])|(cherry[- ]?pick(ed)?( to)?( v?[\d.]+)?:?)|(port( to)? v?[\d.]+:?)"
    r"|(\bv?\d+\.\d+(\.\d+)?\b:?)",
    re.I,
)


def title_key(subject: str) -> str:
    text = _NOISE.sub(" ", subject)
    return " ".join(re.sub(r"[^a-z0-9 ]", " ", text.lower()).split())


def git(repo: Path, *args: str, input: bytes | None = None) -> str:
    proc = subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True)
    return proc.stdout.decode("utf-8", "replace")


@dataclass
class Sample:
    branch: str
    head: str
    commit: str
    subject: str
    contained: bool
    why: str
    partly: bool = False  # not contained, but the branch's own commits brought part of it


@functools.cache
def patch_ids(repo: Path, rev_range: str) -> list[tuple[str, str]]:
    """(patch-id, commit) for the non-merge commits of a range (`git patch-id --stable`)."""
    log = subprocess.run(
        ["git", "-C", str(repo), "log", "--no-merges", "-p", "--format=commit %H", rev_range],
        capture_output=True,
        env=_env(),
        check=True,
    ).stdout
    ids = subprocess.run(
        ["git", "-C", str(repo), "patch-id", "--stable"],
        input=log,
        capture_output=True,
        env=_env(),
        check=True,
    ).stdout.decode()
    return [(pid, sha) for pid, sha in (line.split() for line in ids.splitlines() if line)]


class SameDiffInside:
    """Release commits whose diff, cut down to the files of a main commit, is that main commit's
    diff exactly (by patch id): a port folded into a bigger commit, such as release notes
    written on the branch and then ported to main."""

    def __init__(self, repo: Path, release_range: str, main_range: str):
        self.release = _commits(repo, release_range)
        self.main = {c.sha: c for c in _commits(repo, main_range)}

    def carriers(self, sha: str) -> list[str]:
        commit = self.main.get(sha)
        if commit is None or not commit.sections:
            return []
        paths = list(commit.sections)
        own = patch_id(b"".join(commit.sections[p] for p in paths))
        if own is None:
            return []
        return [
            other.sha
            for other in self.release
            if all(p in other.sections for p in paths)
            and patch_id(b"".join(other.sections[p] for p in paths)) == own
        ]

    def hunk_carriers(self, sha: str) -> list[str]:
        """Release commits holding every changed block of the main commit verbatim (its `-`/`+`
        lines, context left out) in the same files: a port squashed into another change, with
        other edits of its own around it."""
        commit = self.main.get(sha)
        if commit is None or not commit.sections:
            return []
        wanted = {path: _changed_blocks(section) for path, section in commit.sections.items()}
        if not any(wanted.values()):
            return []
        return [
            other.sha
            for other in self.release
            if all(
                path in other.sections
                and all(_has_block(_changed_lines(other.sections[path]), b) for b in blocks)
                for path, blocks in wanted.items()
            )
        ]


def _changed_lines(section: bytes) -> list[bytes]:
    return [
        line
        for line in section.splitlines()
        if line[:1] in (b"-", b"+") and not line.startswith((b"---", b"+++"))
    ]


def _changed_blocks(section: bytes) -> list[list[bytes]]:
    blocks: list[list[bytes]] = [[]]
    for line in section.splitlines():
        if line[:1] in (b"-", b"+") and not line.startswith((b"---", b"+++")):
            blocks[-1].append(line)
        elif blocks[-1]:
            blocks.append([])
    return [block for block in blocks if block]


def _has_block(lines: list[bytes], block: list[bytes]) -> bool:
    size = len(block)
    return any(lines[i : i + size] == block for i in range(len(lines) - size + 1))


def _substantive(line: bytes) -> bytes | None:
    text = line[1:].strip()
    return text if len(text) >= 8 and re.search(rb"[A-Za-z0-9]", text) else None


def partly_held(repo: Path, fork: str, head: str, commit: UpstreamCommit | None) -> str | None:
    """Whether the branch's own commits (fork..head) brought part of a main commit's change: of
    its substantive changed lines (8+ characters), lines it adds that the head has and the fork
    had not, and lines it removes that the fork had and the head has not. Part is at least 2
    such lines and at least a tenth of them; all of them (3 or more) is "held in full", which
    the bench counts as contained (the branch made the whole change under commits that name no
    port). A label that the bench reads from history alone, for "reviews about changes upstream
    holds, all or part"; None when it holds no part."""
    if commit is None:
        return None
    held = total = 0
    for path, section in commit.sections.items():
        lines = [ln for ln in section.splitlines() if not ln.startswith((b"---", b"+++"))]
        added = {t for ln in lines if ln[:1] == b"+" and (t := _substantive(ln))}
        removed = {t for ln in lines if ln[:1] == b"-" and (t := _substantive(ln))} - added
        total += len(added) + len(removed)
        at_fork = {ln.strip() for ln in git(repo, "show", f"{fork}:{path}").encode().splitlines()}
        at_head = {ln.strip() for ln in git(repo, "show", f"{head}:{path}").encode().splitlines()}
        held += len((added & at_head) - at_fork) + len((removed & at_fork) - at_head)
    if held >= 3 and held == total:
        return f"held in full ({held} of {total} changed lines brought by the branch)"
    if held >= 2 and held * 10 >= total:
        return f"partly held ({held} of {total} changed lines brought by the branch)"
    return None


@functools.cache
def ported_before_fork(
    repo: Path, fork: str, head: str, sha: str, subject: str, by_title: bool
) -> str | None:
    """A port of main commit `sha` that the branch holds from before its fork: a commit of
    `sha..fork` (none where `sha` descends from the fork). A fork that merges its upstream (vLLM
    into `habana_main`) often cherry-picked an upstream fix before merging the upstream commit
    itself. The same tests as a port after the fork (title where main used it once, the PR
    number named, the same patch id), not undone by a revert up to the head."""
    log = git(repo, "log", "--no-merges", "--format=%H\x1f%s\x1f%b\x1e", f"{sha}..{fork}")
    earlier = [r.split("\x1f") for r in log.replace("\n", " ").split("\x1e") if r.strip()]
    own = re.findall(r"\(#(\d+)\)\s*$", subject)
    key = title_key(subject)
    port = None
    for other, other_subject, body in (r for r in earlier if len(r) == 3):
        if (by_title and title_key(other_subject) == key) or (
            own and own[-1] in re.findall(r"(?:#|/pull/)(\d+)\b", other_subject + " " + body)
        ):
            port = other.strip()
            break
    if port is None and earlier and git(repo, "cherry", fork, sha, f"{sha}~1").startswith("-"):
        port = "the same patch id"
    if port is None:
        return None
    reverts = git(repo, "log", "--no-merges", "--format=%s%n%b", f"{sha}..{head}")
    if f"This reverts commit {port[:7]}" in reverts or any(
        line.lower().startswith("revert ") and title_key(line[7:].strip().strip('"')) == key
        for line in reverts.splitlines()
    ):
        return None
    return f"ported before the fork ({port[:10]})"


def _commits(repo: Path, rev_range: str) -> list[UpstreamCommit]:
    mirror_git = Git(git_dir=repo if (repo / "objects").is_dir() else repo / ".git")
    out = mirror_git.run("log", "--no-merges", "-p", "--no-renames", LOG_FORMAT, rev_range).stdout
    return parse_commits(out)


def samples_for(
    repo: Path, branch: str, limit: int, main: str = "main", any_title: bool = False
) -> list[Sample]:
    head = git(repo, "rev-parse", branch).strip()
    fork = git(repo, "merge-base", main, branch).strip()
    release = [
        line.split("\x1f")
        for line in git(
            repo, "log", "--no-merges", "--format=%H\x1f%s\x1f%b\x1e", f"{fork}..{head}"
        )
        .replace("\n", " ")
        .split("\x1e")
        if line.strip()
    ]
    ports: dict[str, list[str]] = {}
    reverted: set[str] = set()
    mentioned: dict[str, list[str]] = {}  # PR number mentioned by a release commit -> its shas
    own_prs: dict[str, str] = {}  # a release commit's own PR number -> its sha
    for sha, subject, body in (r for r in release if len(r) == 3):
        sha = sha.strip()
        ports.setdefault(title_key(subject), []).append(sha)
        for number in re.findall(r"(?:#|/pull/)(\d+)\b", subject + " " + body):
            mentioned.setdefault(number, []).append(sha)
        own = re.findall(r"\(#(\d+)\)\s*$", subject)
        if own:
            own_prs[own[-1]] = sha
        for target in re.findall(r"This reverts commit ([0-9a-f]{7,40})", body):
            reverted.add(target)
        if subject.lower().startswith("revert "):
            reverted.add("title:" + title_key(subject[7:].strip().strip('"')))
    same_diff = dict(patch_ids(repo, f"{fork}..{head}"))  # patch-id -> release commit
    main_ids = {sha: pid for pid, sha in patch_ids(repo, f"{fork}..{main}")}
    inside = SameDiffInside(repo, f"{fork}..{head}", f"{fork}..{main}")
    out = []
    log = git(repo, "log", "--no-merges", "--format=%H\x1f%s\x1f%b\x1e", f"{fork}..{main}")
    mains = [r.strip("\n").split("\x1f") for r in log.split("\x1e") if r.strip()]
    # A title main used for more than one change ("Update CODEOWNERS") names no one port.
    titles = Counter(title_key(subject) for _, subject, _ in mains)
    for sha, subject, body in mains:
        key = title_key(subject)
        if len(key) < 12:
            continue
        port = list(ports.get(key, [])) if any_title or titles[key] == 1 else []
        own = re.findall(r"\(#(\d+)\)\s*$", subject)
        if own:
            port += mentioned.get(own[-1], [])  # a release commit names this main PR
        port += [
            own_prs[n] for n in re.findall(r"#(\d+)", subject) if n in own_prs and n not in own
        ]
        port += [  # C's message links a release commit's PR ("Port of .../pull/994")
            own_prs[n] for n in re.findall(r"/pull/(\d+)\b", body) if n in own_prs and n not in own
        ]
        if main_ids.get(sha) in same_diff:
            port.append(same_diff[main_ids[sha]])  # the very same diff, under another title
        port += inside.carriers(sha)  # ... or inside a bigger release commit
        port += inside.hunk_carriers(sha)  # ... or its changed lines squashed into another one
        if port:
            undone = any(p in reverted or any(p.startswith(r) for r in reverted) for p in port)
            undone = undone or ("title:" + key) in reverted
            out.append(
                Sample(
                    branch,
                    head,
                    sha,
                    subject,
                    not undone,
                    "ported, reverted" if undone else "ported",
                )
            )
        else:
            out.append(Sample(branch, head, sha, subject, False, "not ported"))
    positives = [s for s in out if s.contained]
    negatives = [s for s in out if not s.contained]
    # Negatives by a hash of their sha, not by their place in the list: a label that changes
    # elsewhere on the branch does not move which negatives are sampled.
    plain = sorted(
        (s for s in negatives if s.why == "not ported"),
        key=lambda s: hashlib.sha256(s.commit.encode()).hexdigest(),
    )
    chosen = [s for s in negatives if s.why != "not ported"] + plain[:limit]
    for sample in chosen:
        if sample.why == "not ported":
            earlier = ported_before_fork(
                repo,
                fork,
                head,
                sample.commit,
                sample.subject,
                any_title or titles[title_key(sample.subject)] == 1,
            )
            if earlier:
                sample.contained, sample.why = True, earlier
                continue
        part = partly_held(repo, fork, head, inside.main.get(sample.commit))
        if part and part.startswith("held in full"):  # every changed line, by other commits
            sample.contained, sample.why = True, f"{sample.why}; {part}"
        elif part:
            sample.partly, sample.why = True, f"{sample.why}; {part}"
    return positives + chosen


def plain_git_says_contained(
    repo: Path, sample: Sample, patch: bytes, work: Path
) -> tuple[bool, bool]:
    """(safe plain-git catch, patch-id alone) on the sample's head."""
    cherry = git(repo, "cherry", sample.head, sample.commit, f"{sample.commit}~1")
    patch_id_hit = cherry.startswith("-")
    index = work / "index"
    env_index = {"GIT_INDEX_FILE": str(index)}
    subprocess.run(
        ["git", "-C", str(repo), "read-tree", sample.head],
        env={**_env(), **env_index},
        capture_output=True,
    )
    reverse = (
        subprocess.run(
            ["git", "-C", str(repo), "apply", "--cached", "-R", "--check", "-"],
            input=patch,
            env={**_env(), **env_index},
            capture_output=True,
        ).returncode
        == 0
    )
    three = subprocess.run(
        ["git", "-C", str(repo), "apply", "--cached", "--3way", "-"],
        input=patch,
        env={**_env(), **env_index},
        capture_output=True,
    )
    unchanged = False
    if three.returncode == 0:
        tree = subprocess.run(
            ["git", "-C", str(repo), "write-tree"],
            env={**_env(), **env_index},
            capture_output=True,
            text=True,
        ).stdout.strip()
        unchanged = tree == git(repo, "rev-parse", f"{sample.head}^{{tree}}").strip()
    return reverse or unchanged, patch_id_hit


def share_objects(mirror: Mirror, repo: Path) -> None:
    """Borrow the source's objects (git alternates) instead of fetching them: snapshots of public
    repositories can lack a few large blobs, which makes a full fetch refuse to pack. The engine
    still resolves heads and reads evidence through its mirror as in production."""
    mirror.ensure()
    source = repo if (repo / "objects").is_dir() else repo / ".git"
    alternates = mirror.path / "objects" / "info" / "alternates"
    alternates.write_text(str((source / "objects").resolve()) + "\n")


def _env() -> dict[str, str]:
    import os

    return {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("repo", type=Path)
    parser.add_argument("--branches", default="releases/*", help="patterns, comma-separated")
    parser.add_argument(
        "--main",
        default="main",
        help="the line the release branches fork from (vLLM forks: habana_main)",
    )
    parser.add_argument("--limit", type=int, default=25, help="negatives sampled per branch")
    parser.add_argument(
        "--no-from", action="store_true", help="strip the From <sha> line (no history anchor)"
    )
    parser.add_argument(
        "--any-title",
        action="store_true",
        help="a title main used for several commits still labels a port (the labels before 2026-12-07)",
    )
    parser.add_argument(
        "--to-main",
        action="store_true",
        help="the other way: each release branch's own commits checked on main's tip (does "
        "main hold the release's ports?), labelled by main's ports of them",
    )
    parser.add_argument("--verbose", action="store_true")
    args = parser.parse_args()
    patterns = [f"refs/heads/{p.strip()}" for p in args.branches.split(",") if p.strip()]
    branches = git(args.repo, "for-each-ref", "--format=%(refname:short)", *patterns).split()
    cache = Path(tempfile.mkdtemp(prefix="carry-eval-"))
    mirror = Mirror(str(args.repo), cache)
    share_objects(mirror, args.repo)
    engine = Engine(mirror)
    table: Counter[tuple[str, str]] = Counter()
    plain: Counter[str] = Counter()
    wrong: list[str] = []
    started = time.perf_counter()
    total = 0
    skipped: list[str] = []
    for branch in branches:
        try:
            if args.to_main:  # the same labeller with the two lines' roles swapped
                samples = samples_for(args.repo, args.main, args.limit, branch, args.any_title)
                for sample in samples:
                    sample.branch = f"{branch}->{args.main}"
            else:
                samples = samples_for(args.repo, branch, args.limit, args.main, args.any_title)
        except subprocess.CalledProcessError as error:  # a snapshot lacking a large blob
            skipped.append(f"{branch}: {error.stderr.decode('utf-8', 'replace').strip()}")
            continue
        for sample in samples:
            patch = subprocess.run(
                ["git", "-C", str(args.repo), "format-patch", "-1", "--stdout", sample.commit],
                capture_output=True,
                env=_env(),
            ).stdout
            if args.no_from:
                patch = patch.split(b"\n", 1)[1]
            report = engine.check(sample.head, [PatchInput(f"{sample.commit[:10]}.patch", patch)])
            result = report.patches[0]
            label = "contained" if sample.contained else "not-contained"
            table[(label, result.decision.value)] += 1
            if sample.partly:
                table[("partly-held", result.decision.value)] += 1
            safe, by_id = plain_git_says_contained(args.repo, sample, patch, cache)
            plain[f"{label}:plain-safe={safe}"] += 1
            plain[f"{label}:patch-id={by_id}"] += 1
            total += 1
            if not sample.contained and result.decision == Decision.DROP:
                wrong.append(
                    f"{branch} {sample.commit[:10]} {sample.subject} ({sample.why}): {result.reason}"
                )
            if args.verbose:
                print(
                    f"{label:13} {result.status.value:16} {result.decision.value:6} {branch} {sample.commit[:10]} {sample.subject[:60]}"
                    + (f"  [{sample.why}]" if sample.partly else "")
                )
    elapsed = time.perf_counter() - started
    pos = sum(v for (lab, _), v in table.items() if lab == "contained")
    neg = sum(v for (lab, _), v in table.items() if lab == "not-contained")
    caught = table[("contained", "drop")] + table[("contained", "review")]
    print(f"\nsamples: {total} ({pos} contained upstream, {neg} not) in {elapsed:.1f} s")
    print(f"{'label':15}{'drop':>7}{'review':>8}{'keep':>7}")
    for label in ("contained", "not-contained", "partly-held"):
        print(
            f"{label:15}{table[(label, 'drop')]:>7}{table[(label, 'review')]:>8}{table[(label, 'keep')]:>7}"
        )
    print(f"\ncarry catches (drop + review): {caught}/{pos} = {caught / max(pos, 1):.0%}")
    reviews = table[("contained", "review")] + table[("not-contained", "review")]
    print(
        f"drop share (of contained): {table[('contained', 'drop')] / max(pos, 1):.3f}; "
        f"reviews well spent (on contained): {table[('contained', 'review')]}/{reviews} = "
        f"{table[('contained', 'review')] / max(reviews, 1):.3f}"
    )
    part = table[("partly-held", "review")]
    print(
        f"reviews well spent, all or part (on contained, or not contained but partly held by the "
        f"branch's own commits): {table[('contained', 'review')] + part}/{reviews} = "
        f"{(table[('contained', 'review')] + part) / max(reviews, 1):.3f}"
    )
    print(f"carry wrong drops: {len(wrong)}")
    print(f"carry reviews on not-contained: {table[('not-contained', 'review')]}/{neg}")
    print(
        f"plain git safe catches (reverse-apply or am -3 unchanged): {plain['contained:plain-safe=True']}/{pos}"
        f" = {plain['contained:plain-safe=True'] / max(pos, 1):.0%}"
    )
    print(
        f"patch-id (git cherry) hits: contained {plain['contained:patch-id=True']}/{pos}, "
        f"not contained {plain['not-contained:patch-id=True']}/{neg} (each of these would be a wrong drop)"
    )
    for line in wrong:
        print("  WRONG DROP:", line)
    for line in skipped:
        print("  SKIPPED (history unreadable):", line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
