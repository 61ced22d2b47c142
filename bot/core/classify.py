"""Decide what a carried patch's state is on a new upstream head, from content signals.

Pure: the git side gathers the signals (apply results, file contents, history matches) and
this module turns them into a status and a decision with a reason. The one rule that matters
most: `drop` is only ever decided on content evidence that the head fully contains the patch.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from bot.core.patchfile import FileDiff, Hunk


class Status(StrEnum):
    APPLIES = "applies"
    APPLIES_MOVED = "applies-moved"
    CONTAINED = "contained"
    UPSTREAM_VERSION = "upstream-version"
    PARTIAL = "partial"
    CONFLICT = "conflict"
    INVALID = "invalid"
    PENDING = "pending"  # not checked yet
    AWAITING_IMPORT = "awaiting-import"  # the series file waits for `carry import`


class Decision(StrEnum):
    KEEP = "keep"
    DROP = "drop"
    REVIEW = "review"
    NONE = "none"  # not decided yet


class HunkState(StrEnum):
    APPLIED = "applied"  # the hunk's post-image is in the head, its pre-image is not
    PENDING = "pending"  # the pre-image is in the head: the hunk still has work to do
    SIMILAR = "similar"  # neither image, but the head has most of the hunk's change
    ABSENT = "absent"  # the change is not in the head and its context moved
    UNKNOWN = "unknown"  # not enough substantive lines to tell


# Lines this short or this generic say nothing about whether a change is present.
_TRIVIAL = {
    "else:",
    "try:",
    "pass",
    "return",
    "break",
    "continue",
    "finally:",
    "}",
    "{",
    "};",
    ")",
    "]",
    "),",
    "],",
    "end",
    '"""',
    "#",
    "//",
}
_ALNUM = re.compile(r"[A-Za-z0-9_]")
SIMILAR_ADDED_RATIO = 0.6
FUZZY_LINE_CUTOFF = 0.8  # difflib ratio at which an edited line counts as the same line
FUZZY_WEIGHT = 0.75
SIMILAR_REMOVED_RATIO = 0.5
DUPLICATE_RATIO = 0.8
DUPLICATE_MIN_LINES = 3
SPECIFIC_LINE_CHARS = 24  # a lone line this long (whitespace left out) is specific enough


def normalize(line: bytes) -> str | None:
    """Whitespace-free text of a line, or None when the line is too generic to be evidence."""
    text = "".join(line.decode("utf-8", "surrogateescape").split())
    if text in _TRIVIAL or len(_ALNUM.findall(text)) < 3:
        return None
    return text


def _bare(line: bytes) -> bytes:
    return line.rstrip(b"\r\n")


def _find_block(haystack: Sequence[bytes], block: Sequence[bytes]) -> bool:
    if not block:
        return True
    first = block[0]
    width = len(block)
    for i in range(len(haystack) - width + 1):
        if haystack[i] == first and list(haystack[i : i + width]) == list(block):
            return True
    return False


@dataclass(frozen=True)
class HunkPresence:
    path: str
    header: str
    state: HunkState
    detail: str = ""

    def as_dict(self) -> dict[str, str]:
        out = {"file": self.path, "hunk": self.header, "state": self.state.value}
        if self.detail:
            out["detail"] = self.detail
        return out


def hunk_state(hunk: Hunk, head_lines: Sequence[bytes]) -> tuple[HunkState, str]:
    """Where one hunk stands against the head's version of its file (lines without endings)."""
    pre = [_bare(line) for line in hunk.side("-")]
    post = [_bare(line) for line in hunk.side("+")]
    has_pre, has_post = _find_block(head_lines, pre), _find_block(head_lines, post)
    end = _file_end(hunk)
    if has_pre and end and not hunk.removed:
        # A hunk that only adds at the start or the end of the file has nothing but context
        # as its pre-image, and that context is where the change is still to be made only at
        # that end of the head's file (as `git apply` matches it): elsewhere it is the start
        # of the post-image, or code that other lines now follow.
        width = len(pre)
        edge = head_lines[:width] if end == "start" else head_lines[len(head_lines) - width :]
        has_pre = len(head_lines) >= width and list(edge) == pre
    if has_post and not has_pre:
        return HunkState.APPLIED, "post-image found"
    if has_pre and not has_post:
        return HunkState.PENDING, "pre-image found"
    if has_pre and has_post:
        return HunkState.PENDING, "both images found (duplicated code in the head)"
    return _similarity(hunk, head_lines)


def _file_end(hunk: Hunk) -> str | None:
    """ "start" or "end" when the hunk begins or ends the old file, as git writes a diff with
    context: lines of context on one side of the change and none on the other."""
    body = [line for line in hunk.lines if not line.startswith(b"\\")]
    changed = [i for i, line in enumerate(body) if line[:1] in (b"+", b"-")]
    if not changed:
        return None
    lead, trail = changed[0], len(body) - 1 - changed[-1]
    if lead and not trail:
        return "end"
    if trail and not lead and hunk.old_start <= 1:
        return "start"
    return None


def _similarity(hunk: Hunk, head_lines: Sequence[bytes]) -> tuple[HunkState, str]:
    counts = Counter(n for n in map(normalize, head_lines) if n)
    added = [n for n in map(normalize, hunk.added) if n]
    removed = [n for n in map(normalize, hunk.removed) if n]
    context = [n for n in map(normalize, hunk.side("-")) if n and n not in removed]
    hits = _multiset_hits(Counter(added), counts)
    gone = sum(1 for n in removed if counts[n] == 0)
    if added:
        fuzzy = _fuzzy_hits([n for n in added if counts[n] == 0], counts)
        added_score = (hits + FUZZY_WEIGHT * fuzzy) / len(added)
        removed_ratio = gone / len(removed) if removed else 1.0
        detail = (
            f"{hits}/{len(added)} added lines present ({fuzzy} more with edits), "
            f"{gone}/{len(removed)} removed gone"
        )
        if hits and added_score >= SIMILAR_ADDED_RATIO and removed_ratio >= SIMILAR_REMOVED_RATIO:
            return HunkState.SIMILAR, detail
        return HunkState.ABSENT, detail
    if removed:
        detail = f"{gone}/{len(removed)} removed lines gone"
        context_seen = any(counts[n] for n in context)
        if gone == len(removed) and context_seen:
            return HunkState.SIMILAR, detail
        return HunkState.ABSENT, detail
    return HunkState.UNKNOWN, "no substantive lines to compare"


def _fuzzy_hits(missing: list[str], have: Counter[str]) -> int:
    """Added lines that the head has in an edited form (review changes, renamed arguments)."""
    if not missing:
        return 0
    import difflib  # here: `carry check` runs as a short process, and most checks never need it

    pool = list(have)
    return sum(1 for n in missing if difflib.get_close_matches(n, pool, 1, FUZZY_LINE_CUTOFF))


def _multiset_hits(wanted: Counter[str], have: Counter[str]) -> int:
    return sum(min(n, have[line]) for line, n in wanted.items())


@dataclass(frozen=True)
class HeadFile:
    """The head's version of one path: None content means the path does not exist."""

    content: bytes | None
    oid: str | None = None
    mode: str | None = None

    @property
    def lines(self) -> list[bytes]:
        return [_bare(line) for line in (self.content or b"").splitlines()]


def file_presence(fdiff: FileDiff, old: HeadFile, new: HeadFile) -> list[HunkPresence]:
    """Presence of each hunk (or of the whole-file change) of one file diff in the head.

    `old` is the head's file at the diff's old path, `new` at its new path (the same for
    an in-place change)."""
    path = fdiff.path

    def one(state: HunkState, detail: str, header: str = "(file)") -> list[HunkPresence]:
        return [HunkPresence(path, header, state, detail)]

    if fdiff.binary:
        return one(*_binary_state(fdiff, old, new))
    if fdiff.is_new:
        return _new_file_presence(fdiff, new)
    if fdiff.is_deleted:
        return _deleted_file_presence(fdiff, old)
    target = new if (fdiff.is_rename and new.content is not None) else old
    if not fdiff.hunks:
        return one(*_metadata_state(fdiff, old, new))
    if target.content is None:
        return one(HunkState.ABSENT, f"{path} does not exist in the head")
    lines = target.lines
    return [HunkPresence(path, h.header, *hunk_state(h, lines)) for h in fdiff.hunks]


def _binary_state(fdiff: FileDiff, old: HeadFile, new: HeadFile) -> tuple[HunkState, str]:
    if fdiff.is_deleted:
        if old.content is None:
            return HunkState.APPLIED, "binary file already deleted"
        return HunkState.PENDING, "binary file still present"
    head = new if new.content is not None else old
    if head.oid and fdiff.new_oid and head.oid.startswith(fdiff.new_oid):
        return HunkState.APPLIED, "head blob equals the patch's post-image"
    if head.content is None:
        return (
            (HunkState.PENDING, "binary file not yet present")
            if fdiff.is_new
            else (
                HunkState.ABSENT,
                "binary file missing in the head",
            )
        )
    if head.oid and fdiff.old_oid and head.oid.startswith(fdiff.old_oid):
        return HunkState.PENDING, "head blob equals the patch's pre-image"
    return HunkState.ABSENT, "head has a different version of the binary file"


def _metadata_state(fdiff: FileDiff, old: HeadFile, new: HeadFile) -> tuple[HunkState, str]:
    if fdiff.is_rename:
        if old.content is None and new.content is not None:
            return HunkState.APPLIED, "file already renamed"
        if old.content is not None and new.content is None:
            return HunkState.PENDING, "rename not yet done"
        return HunkState.ABSENT, "rename source and target both present or both missing"
    head_mode = old.mode
    if head_mode == fdiff.new_mode:
        return HunkState.APPLIED, f"mode already {head_mode}"
    if head_mode == fdiff.old_mode:
        return HunkState.PENDING, f"mode still {head_mode}"
    return HunkState.ABSENT, f"head mode {head_mode} is neither side of the patch"


def _new_file_presence(fdiff: FileDiff, new: HeadFile) -> list[HunkPresence]:
    path = fdiff.path
    if new.content is None:
        return [HunkPresence(path, "(new file)", HunkState.PENDING, "file does not exist yet")]
    post = [_bare(line) for h in fdiff.hunks for line in h.side("+")]
    if post == new.lines:
        return [HunkPresence(path, "(new file)", HunkState.APPLIED, "identical file exists")]
    merged = Hunk(0, 0, 1, len(post), b"", tuple(b"+" + line for line in post))
    state, detail = _similarity(merged, new.lines)
    return [HunkPresence(path, "(new file)", state, f"file exists and differs: {detail}")]


def _deleted_file_presence(fdiff: FileDiff, old: HeadFile) -> list[HunkPresence]:
    path = fdiff.path
    if old.content is None:
        return [HunkPresence(path, "(deleted file)", HunkState.APPLIED, "file already gone")]
    pre = [_bare(line) for h in fdiff.hunks for line in h.side("-")]
    if pre == old.lines:
        return [HunkPresence(path, "(deleted file)", HunkState.PENDING, "file unchanged")]
    return [HunkPresence(path, "(deleted file)", HunkState.ABSENT, "file changed upstream")]


def duplicated_additions(fdiff: FileDiff, head: HeadFile) -> tuple[int, int]:
    """(hits, total): substantive lines the diff adds that the head already has elsewhere, as
    the blocks the diff adds them in (see _lines_elsewhere).

    Lines the head has only because they are in the hunks' own context do not count."""
    if fdiff.binary or head.content is None:
        return 0, 0
    context = [[n for n in map(normalize, h.side("-")) if n] for h in fdiff.hunks]
    blocks = [b for h in fdiff.hunks for b in _blocks(h, b"+")]
    return _lines_elsewhere(blocks, head, context), sum(map(len, blocks))


def lingering_removals(fdiff: FileDiff, head: HeadFile) -> tuple[int, int]:
    """(hits, total): substantive lines the diff removes that the head still has somewhere, as
    the blocks the diff removes them in, beyond the copies the hunks' own post-image keeps."""
    if fdiff.binary or head.content is None:
        return 0, 0
    kept = [[n for n in map(normalize, h.side("+")) if n] for h in fdiff.hunks]
    blocks = [b for h in fdiff.hunks for b in removed_blocks(h)]
    return _lines_elsewhere(blocks, head, kept), sum(map(len, blocks))


def _lines_elsewhere(blocks: list[list[str]], head: HeadFile, own: list[list[str]]) -> int:
    """How many lines of `blocks` the head holds as those blocks, beyond the copies in `own`
    (each hunk's own lines on the head's side). A block of several lines must occur as
    consecutive substantive lines; a lone line counts only when it is long enough to be
    specific. Lines every file of a project repeats (`return NGX_ERROR;`, `} else {`, a
    cleanup call) then stop passing for code that is already there."""
    have_lines = [n for n in map(normalize, head.lines) if n]
    have = Counter(have_lines)
    have.subtract(n for side in own for n in side)
    hits = 0
    for block in blocks:
        if len(block) > 1:
            copies = _occurrences(have_lines, block) - sum(_occurrences(s, block) for s in own)
            hits += len(block) if copies > 0 else 0
        elif len(block[0]) >= SPECIFIC_LINE_CHARS and have[block[0]] > 0:
            have[block[0]] -= 1
            hits += 1
    return hits


def _occurrences(lines: Sequence[str], block: Sequence[str]) -> int:
    size = len(block)
    return sum(
        1
        for i in range(len(lines) - size + 1)
        if lines[i] == block[0] and list(lines[i : i + size]) == list(block)
    )


def removed_blocks(hunk: Hunk) -> list[list[str]]:
    """The runs of consecutive removed lines of a hunk, normalized, generic lines left out."""
    return _blocks(hunk, b"-")


def _blocks(hunk: Hunk, sign: bytes) -> list[list[str]]:
    blocks: list[list[str]] = [[]]
    for line in hunk.lines:
        if line.startswith(sign):
            if n := normalize(line[1:]):
                blocks[-1].append(n)
        elif blocks[-1] and not line.startswith(b"\\"):
            blocks.append([])
    return [block for block in blocks if block]


def added_runs(diff: bytes) -> list[list[str]]:
    """The runs of consecutive added lines of a diff, normalized, generic lines left out."""
    runs: list[list[str]] = [[]]
    for line in diff.splitlines():
        if line.startswith(b"+") and not line.startswith(b"+++"):
            if n := normalize(line[1:]):
                runs[-1].append(n)
        elif runs[-1]:
            runs.append([])
    return [run for run in runs if run]


def contains(lines: Sequence[str], block: Sequence[str]) -> bool:
    """True when `block` occurs in `lines` as consecutive entries."""
    size = len(block)
    first = block[0]
    return any(
        lines[i] == first and list(lines[i : i + size]) == list(block)
        for i in range(len(lines) - size + 1)
    )


@dataclass(frozen=True)
class Signals:
    """Everything the decision rests on, gathered by the engine for one patch on one tree."""

    empty: bool = False
    forward: bool = False  # `git apply --cached` without 3-way succeeded
    moved: bool = False  # forward (or 3-way) result differs from the patch's own hunks
    reverse: bool = False  # `git apply -R --check` succeeded: the head has the post-image
    three_way: str = "not-tried"  # clean | conflict | unavailable | not-tried
    three_way_unchanged: bool = False  # clean 3-way merge left the tree unchanged
    hunks: tuple[HunkPresence, ...] = ()
    duplicate: bool = False  # the change would add code the head already has elsewhere
    removals_remain: bool = False  # lines the patch removes still exist elsewhere in the head
    state_predates_range: bool = False  # the history range's base already had the post-image
    # (or, with no_base, nothing tells "upstream took it" from "never had it")
    no_base: bool = False  # no base to read history from: no series base, no known From commit
    linked_merged_in_head: bool = False  # a linked PR's merge commit is an ancestor of head
    matched_commit: bool = False  # an upstream commit in range matches (patch-id or subject)
    matched_reverted: bool = False  # ... and a later upstream commit reverted it
    landed_same_diff: bool = False  # an upstream commit has the patch's very diff (patch id,
    # or the same changed lines in the same functions with other context), and nothing undid it
    landed_other_context: bool = False  # ... found only by its changed lines (changeid)
    removals_readded: bool = False  # a commit after that landing adds back lines the patch removes
    added_all_in_head: bool = False  # every substantive line the patch adds is in the head
    added_kept_or_edited: bool = False  # ... or, followed through the commits after the landing,
    # each is where the landing put it or was edited in place, and the head has its last form
    edited_by: tuple[str, ...] = ()  # those later commits, oldest first
    deleted_later: tuple[tuple[str, str], ...] = ()  # (path, commit): files the patch changes
    # that a later commit, made on top of the landing, deleted whole
    reverts: tuple[tuple[str, str], ...] = ()  # (landing, the commit that undid it) pairs
    present_predates_range: bool = False  # the history range was read whole and no commit in
    # it brought any hunk the head has (added its lines there, or took out what it removes):
    # those hunks were so at the range base, as on a line that never had the code the patch edits


@dataclass(frozen=True)
class Verdict:
    status: Status
    decision: Decision
    reason: str
    problem_hunks: tuple[HunkPresence, ...] = field(default=())


def decide(sig: Signals) -> Verdict:
    """The classification table. Every branch states its reason in words a maintainer reads."""
    states = Counter(h.state for h in sig.hunks)
    present = states[HunkState.APPLIED] + states[HunkState.SIMILAR]
    if sig.empty:
        return Verdict(
            Status.CONTAINED,
            Decision.REVIEW,
            "the patch carries no changes: drop it, or keep it if it should carry some",
        )
    if sig.forward and sig.reverse:
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            "the head holds both the patch's pre-image and post-image (duplicated code): drop "
            "if the head's copy is the change, keep if the patch must still change the other",
        )
    if not sig.forward and sig.reverse and sig.removals_remain and not _landed_as_is(sig):
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            "the patch reverse-applies, but code it removes still exists elsewhere in the head "
            "(upstream may have moved it): drop if that copy is upstream's on purpose, keep if "
            "it must go too",
        )
    all_present = (
        bool(sig.hunks) and not sig.forward and states[HunkState.APPLIED] == len(sig.hunks)
    )
    predates = sig.state_predates_range and not _landed_in_range(sig)
    if predates and (sig.reverse or sig.three_way_unchanged or all_present):
        if sig.no_base:
            reason = (
                "the head is in the state the patch produces, but the patch mostly removes code "
                "and no base is known: decide whether upstream removed it (drop) or never had "
                "it (keep), or give a base (--base, or the series' base) to let history tell"
            )
        else:
            reason = (
                "the head is in the state the patch produces, but it already was before the "
                "patch's base: upstream never had what the patch changes, so nothing shows "
                "upstream took it; keep if the patch is still wanted on this line, drop if it "
                "was only ever for older heads"
            )
        return Verdict(Status.CONTAINED, Decision.REVIEW, reason)
    if not sig.forward and sig.reverse and sig.removals_remain:
        return Verdict(
            Status.CONTAINED,
            Decision.DROP,
            f"upstream took the patch's very diff ({_same_diff_words(sig)}) and nothing undid "
            "it: the patch "
            "reverse-applies, a 3-way apply changes nothing and every line it adds is in the "
            "head; the code it removes that the head still has elsewhere was not added back "
            "after upstream took it",
        )
    if not sig.forward and sig.reverse:
        return Verdict(
            Status.CONTAINED, Decision.DROP, "the patch reverse-applies: the head has every change"
        )
    if sig.three_way_unchanged:
        return Verdict(
            Status.CONTAINED,
            Decision.DROP,
            "a 3-way apply leaves the head's tree unchanged: the head has every change",
        )
    if all_present:
        return Verdict(
            Status.CONTAINED, Decision.DROP, "every hunk's post-image is present in the head"
        )
    if sig.forward or sig.three_way == "clean":
        return _applied_verdict(sig, present)
    return _failed_verdict(sig, states, present)


def _same_diff_words(sig: Signals) -> str:
    if sig.landed_other_context:
        return "the same changed lines in the same functions, with other context"
    return "same patch id"


def _landed_in_range(sig: Signals) -> bool:
    """Upstream took this very diff and no later commit added back what it removes: whatever
    the range base looked like, the head's state is upstream's taking of the patch."""
    return sig.landed_same_diff and not sig.removals_readded


def _landed_then_edited(sig: Signals, present: int) -> bool:
    """Upstream took this very diff, then edited the code further (the patch no longer
    reverse-applies), none of the lines it removes was added back, and either the head has
    every hunk in some version and every line the patch adds, or the history after the landing
    accounts for every added line (kept where the landing put it, or edited in place: see
    edits.edited_later) while no hunk still has work to do (pending): nothing is left for the
    patch to do."""
    if not _landed_in_range(sig) or not sig.hunks:
        return False
    if sig.added_all_in_head and present == len(sig.hunks):
        return True
    taken = (HunkState.APPLIED, HunkState.SIMILAR, HunkState.ABSENT)
    return sig.added_kept_or_edited and all(h.state in taken for h in sig.hunks)


def _landed_as_is(sig: Signals) -> bool:
    """Upstream took this very diff and the head shows it in every way the engine looks: code
    the patch removes that still exists elsewhere in the head is then upstream's own copy, not
    the patch's code moved, unless a later commit added it back."""
    return (
        sig.landed_same_diff
        and not sig.removals_readded
        and sig.reverse
        and sig.three_way_unchanged
        and sig.added_all_in_head
    )


def _nothing_taken(sig: Signals) -> bool:
    """The hunks the head has are not upstream's taking of the patch: no commit of the range
    brought any of them, and no commit of the range matches the patch (patch id, subject, a
    linked PR). They look done only because the head was already that way at the range base
    (a release line that never had the code the patch edits), so they are not a landing."""
    return (
        sig.present_predates_range
        and not sig.matched_commit
        and not sig.landed_same_diff
        and not sig.linked_merged_in_head
    )


def _predating_words(sig: Signals, present: int) -> str:
    total = len(sig.hunks)
    return (
        f"the head has {present} of its {total} hunks in some version, but no upstream commit "
        "in range brought them and none matches the patch: they were already so at the range "
        "base, so upstream took none of it"
    )


def _edited_landing_verdict(sig: Signals) -> Verdict:
    other = sum(1 for h in sig.hunks if h.state != HunkState.APPLIED)
    if sig.added_all_in_head and not sig.added_kept_or_edited:
        kept = "every line the patch adds is still in the head"
    elif not sig.edited_by:
        kept = "no later upstream commit took out any line the patch adds, and the head has each"
    else:
        named = ", ".join(sha[:12] for sha in sig.edited_by)
        kept = (
            "every line the patch adds is still in the head or was edited in place by "
            f"upstream's later {'commit' if len(sig.edited_by) == 1 else 'commits'} {named}"
        )
    if sig.deleted_later:
        gone = ", ".join(f"{path} ({sha[:12]})" for path, sha in sig.deleted_later)
        kept = f"{kept}, except in what upstream later deleted whole: {gone}"
    return Verdict(
        Status.CONTAINED,
        Decision.DROP,
        f"upstream took the patch's very diff ({_same_diff_words(sig)}) and nothing undid it; "
        "later "
        f"upstream edits left {other} of its {len(sig.hunks)} hunks in another version, but "
        f"{kept}, and none it removes came back: nothing is left for the patch to do",
    )


def _applied_verdict(sig: Signals, present: int) -> Verdict:
    if not sig.forward and _landed_then_edited(sig, present):
        # a 3-way apply that succeeds only by adding again what upstream moved elsewhere
        return _edited_landing_verdict(sig)
    if present and _nothing_taken(sig) and not sig.duplicate:
        return Verdict(
            Status.APPLIES_MOVED,
            Decision.KEEP,
            f"applies with a 3-way merge; {_predating_words(sig, present)}",
        )
    if present and present == len(sig.hunks) and sig.three_way == "clean" and not sig.forward:
        differ = sum(1 for h in sig.hunks if h.state == HunkState.SIMILAR)
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            f"the head has all {present} hunks and {differ} of them "
            f"{'differs' if differ == 1 else 'differ'} from the patch; a 3-way apply succeeds "
            "only by adding code the head already has: drop if the head's version is the fix, "
            "keep and rebase by hand if the differences matter",
        )
    if present and sig.three_way == "clean" and not sig.forward:
        rest = tuple(h for h in sig.hunks if h.state != HunkState.APPLIED)
        return Verdict(
            Status.PARTIAL,
            Decision.REVIEW,
            f"{present} of {len(sig.hunks)} hunks are already in the head; the rest applies: "
            "keep the rest if it is still needed, drop if upstream's change covers it",
            rest,
        )
    if sig.duplicate:
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            "the patch applies, but the head already has the code it adds elsewhere "
            "(upstream moved or reworked it); applying would duplicate it: drop if upstream's "
            "copy is the fix, keep if the patch's place is the right one",
        )
    if sig.linked_merged_in_head:
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            "the linked upstream PR is merged into the head, but the patch's content is not: "
            "upstream merged a different version; drop if it covers the fix, keep if the "
            "patch's difference still matters",
        )
    if sig.matched_commit and not sig.matched_reverted:
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            "an upstream commit in range matches this patch, yet its content is not in the head "
            "and nothing found undid it: keep if upstream lost the change, drop if it was "
            "replaced on purpose",
        )
    via = "with a 3-way merge" if not sig.forward else "after its context moved"
    if sig.moved or not sig.forward:
        reason = f"applies {via}; the refreshed patch differs only in context"
        if sig.matched_reverted:
            reason += f" ({_reverted_words(sig)})"
        return Verdict(Status.APPLIES_MOVED, Decision.KEEP, reason)
    reason = "applies as is"
    if sig.matched_reverted:
        reason += f"; {_reverted_words(sig)}, so it is still needed"
    return Verdict(Status.APPLIES, Decision.KEEP, reason)


def _reverted_words(sig: Signals) -> str:
    undone = "; ".join(f"took it in {a[:12]} and undid it in {b[:12]}" for a, b in sig.reverts)
    return f"upstream {undone}" if undone else "upstream took it once and reverted it"


def _in_another_version(states: Counter[HunkState], total: int) -> str:
    """How many hunks the head has in a version other than the patch's, and how many as is."""
    similar = states[HunkState.SIMILAR]
    if similar == total:
        return "all of them in a different version from the patch's"
    same = total - similar
    return (
        f"{similar} of them in a different version from the patch's and the other {same} "
        f"as the patch has {'it' if same == 1 else 'them'}"
    )


def _failed_verdict(sig: Signals, states: Counter[HunkState], present: int) -> Verdict:
    total = len(sig.hunks)
    missing = tuple(h for h in sig.hunks if h.state not in (HunkState.APPLIED, HunkState.SIMILAR))
    if _landed_then_edited(sig, present):
        return _edited_landing_verdict(sig)
    if present and _nothing_taken(sig):
        rest = tuple(h for h in sig.hunks if h.state != HunkState.APPLIED) or sig.hunks
        return Verdict(
            Status.CONFLICT,
            Decision.KEEP,
            f"the patch does not apply; {_predating_words(sig, present)}: it is still needed "
            "and must be rebased by hand",
            rest,
        )
    if total and present == total:
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            f"the head has all {total} hunks, {_in_another_version(states, total)}: drop if "
            "upstream's version is the fix, keep and rebase by hand if the differences matter",
        )
    if present:
        return Verdict(
            Status.PARTIAL,
            Decision.REVIEW,
            f"the head has {present} of {total} hunks; {len(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not there: keep and rebase by hand if "
            "they are still needed, drop if upstream's change makes them unnecessary",
            missing,
        )
    if sig.linked_merged_in_head or (sig.matched_commit and not sig.matched_reverted):
        return Verdict(
            Status.UPSTREAM_VERSION,
            Decision.REVIEW,
            "the patch conflicts, and upstream merged a matching change in range: "
            "upstream likely took a different version; drop if it covers the fix, keep and "
            "rebase by hand if not",
            missing,
        )
    reason = (
        "the patch does not apply and the head does not have its change: "
        "it is still needed and must be rebased by hand"
    )
    if sig.matched_reverted:
        reason += f" ({_reverted_words(sig)})"
    return Verdict(Status.CONFLICT, Decision.KEEP, reason, missing)
