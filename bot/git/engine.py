"""The patch engine: re-apply a carried series on an upstream head and classify every patch.

Patch N is tried on head + the patches before it that are kept. Nothing is checked out: trees
are built in a temporary index and only the mirror's object database is written. Each patch
gets a status, a decision and the evidence both rest on (the rules live in bot.core.classify).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from bot.core import classify
from bot.core.classify import Decision, HeadFile, HunkPresence, Signals, Status, Verdict
from bot.core.linetrack import touching_commits
from bot.core.patchfile import FileDiff, PatchFile, PatchFileError, PatchMeta, parse_patch
from bot.core.report import PatchReport, SeriesReport, interdiff, reproduce_commands, same_hunks
from bot.git import history
from bot.git.formatpatch import format_patch, make_commit
from bot.git.mirror import Mirror, MirrorError
from bot.git.runner import Git
from bot.git.tree_apply import (
    ApplyResult,
    TreeApplier,
    entries,
    moved_hunks,
    read_objects,
    tree_of,
)

log = logging.getLogger("carry.engine")


@dataclass(frozen=True)
class PatchInput:
    name: str  # as the user gave it (path or series entry)
    data: bytes


@dataclass(frozen=True)
class LinkedPr:
    ref: str  # owner/repo#N
    state: str  # open | merged | closed | ...
    merge_commit: str | None = None


@dataclass
class _Chain:
    """The series as built so far: a tree, and commits created only when someone needs them."""

    git: Git
    tree: str
    commit: str
    pending: list[tuple[str, PatchMeta]] = field(default_factory=list)
    applied: list[str] = field(default_factory=list)  # names of the patches kept so far

    def push(self, name: str, tree: str, meta: PatchMeta) -> None:
        self.pending.append((tree, meta))
        self.tree = tree
        self.applied.append(name)

    def tip(self) -> str:
        for tree, meta in self.pending:
            self.commit = make_commit(self.git, tree, self.commit, meta)
        self.pending.clear()
        return self.commit


class Engine:
    def __init__(self, mirror: Mirror):
        self.mirror = mirror
        self.git: Git = mirror.git
        self._known: dict[str, bool] = {}

    def has_commit(self, sha: str | None) -> bool:
        if not sha:
            return False
        if sha not in self._known:
            self._known[sha] = self.mirror.has_commit(sha)
        return self._known[sha]

    def check(
        self,
        head_rev: str,
        patches: list[PatchInput],
        *,
        base: str | None = None,
        links: dict[str, list[LinkedPr]] | None = None,
        patch_paths: dict[str, str] | None = None,
        commit_result: bool = False,
    ) -> SeriesReport:
        """Classifies `patches` on `head_rev`. `commit_result` also writes the resulting commit
        chain (for pushing); `patch_paths` maps names to paths for the reproduce commands."""
        started = time.perf_counter()
        head = self.mirror.resolve(head_rev)
        parsed = [_parse(item) for item in patches]
        self._ensure_preimages([p for p in parsed if isinstance(p, PatchFile)])
        histories = self._histories(head.sha, base, patches, parsed)
        chain = _Chain(self.git, tree_of(self.git, head.sha), head.sha)
        applier = TreeApplier(self.git)
        context = _Context(self, applier, head.sha, head.ref, links or {}, patch_paths or {})
        try:
            reports = [
                context.check(item, result, chain, histories.get(i))
                for i, (item, result) in enumerate(zip(patches, parsed, strict=True))
            ]
        finally:
            applier.close()
        log.info(
            "checked %d patches on %s in %.0f ms",
            len(patches),
            head.sha[:12],
            (time.perf_counter() - started) * 1000,
        )
        result_commit = chain.tip() if commit_result else None
        return SeriesReport(
            self.mirror.source, head.sha, head.ref, base, reports, chain.tree, result_commit
        )

    def _ensure_preimages(self, parsed: list[PatchFile]) -> None:
        """Fetches every branch and tag once when pre-image blobs or From commits are missing:
        a 3-way apply and the history evidence need them."""
        if self.mirror.widened:
            return
        oids = [f.old_oid for p in parsed for f in p.files if f.old_oid and not f.binary]
        commits = [p.meta.commit for p in parsed if p.meta.commit]
        if self.mirror.has_objects(*oids) and all(self.has_commit(c) for c in commits):
            return
        try:
            self.mirror.widen()
        except MirrorError as err:
            log.warning("could not widen mirror %s: %s", self.mirror.path, err)
        self._known.clear()

    def _histories(
        self,
        head: str,
        base: str | None,
        patches: list[PatchInput],
        parsed: list[PatchFile | PatchFileError],
    ) -> dict[int, tuple[str, list[history.Match]]]:
        """Per patch index: (range, matches), grouped so each distinct range is read once."""
        ranges: dict[str, list[int]] = {}
        forks: dict[str, str] = {}
        for i, p in enumerate(parsed):
            if not isinstance(p, PatchFile) or p.is_empty:
                continue
            # The patch's own base: the series base, else the parent of the commit it was made
            # from (the commit itself already holds the change, and upstream may merge it as is).
            anchor = base if self.has_commit(base) else None
            if anchor is None and self.has_commit(p.meta.commit):
                anchor = self.git.rev_parse(f"{p.meta.commit}^")
            if anchor is None:
                continue
            if anchor not in forks:
                forks[anchor] = self.git.run("merge-base", anchor, head, check=False).text
            fork = forks[anchor]
            if fork:
                ranges.setdefault(f"{fork}..{head}", []).append(i)
        found: dict[int, tuple[str, list[history.Match]]] = {}
        for rev_range, indexes in ranges.items():
            group = [(p, patches[i].data) for i in indexes if isinstance(p := parsed[i], PatchFile)]
            series_history = history.SeriesHistory(self.git, rev_range, group)
            for position, i in enumerate(indexes):
                found[i] = (rev_range, series_history.matches[position])
        return found


def _parse(item: PatchInput) -> PatchFile | PatchFileError:
    try:
        return parse_patch(item.data, name=item.name)
    except PatchFileError as err:
        return err


@dataclass
class _Context:
    engine: Engine
    applier: TreeApplier
    head: str
    head_ref: str | None
    links: dict[str, list[LinkedPr]]
    patch_paths: dict[str, str]

    def check(
        self,
        item: PatchInput,
        parsed: PatchFile | PatchFileError,
        chain: _Chain,
        found: tuple[str, list[history.Match]] | None,
    ) -> PatchReport:
        if isinstance(parsed, PatchFileError):
            return _invalid(item, parsed)
        links = self.links.get(Path(item.name).name) or self.links.get(item.name) or []
        earlier = list(chain.applied)
        report = _PatchCheck(self, item, parsed, links, found).run(chain)
        if report.status in (Status.CONFLICT, Status.PARTIAL, Status.UPSTREAM_VERSION):
            names = [*earlier, item.name]
            report.conflict = {
                **(report.conflict or {}),
                "reproduce": reproduce_commands(
                    self.engine.mirror.source,
                    self.head,
                    self.head_ref,
                    [self.patch_paths.get(n, n) for n in names],
                ),
            }
        return report


def _invalid(item: PatchInput, err: PatchFileError) -> PatchReport:
    evidence = [{"signal": "parse", "result": "failed", "line": err.line, "detail": err.message}]
    reason = f"{item.name}: {err}"
    return PatchReport(item.name, Status.INVALID, Decision.REVIEW, reason, evidence)


class _PatchCheck:
    def __init__(
        self,
        context: _Context,
        item: PatchInput,
        parsed: PatchFile,
        links: list[LinkedPr],
        found: tuple[str, list[history.Match]] | None,
    ):
        self.ctx = context
        self.git = context.engine.git
        self.item = item
        self.parsed = parsed
        self.links = links
        self.range: str | None = found[0] if found else None
        self.matches: list[history.Match] = found[1] if found else []
        self.evidence: list[dict[str, Any]] = []

    def run(self, chain: _Chain) -> PatchReport:
        if self.parsed.is_empty:
            self.evidence.append({"signal": "empty-patch", "detail": "no file is changed"})
            return self._report(classify.decide(Signals(empty=True)), None)
        before = chain.tree
        applier = self.ctx.applier
        reverse = applier.check_reverse(before, self.item.data)
        self.evidence.append(_apply_evidence("reverse-apply", reverse))
        forward = applier.apply(before, self.item.data)
        self.evidence.append(_apply_evidence("forward-apply", forward))
        merged = None if forward.ok else self._three_way(before)
        head_files = self._head_files(before)
        hunks = () if forward.ok else self._hunk_presence(head_files)
        if hunks:
            self.evidence.append({"signal": "hunks", "hunks": [h.as_dict() for h in hunks]})
        after = forward.tree if forward.ok else (merged.tree if merged and merged.ok else None)
        signals = Signals(
            forward=forward.ok,
            moved=not forward.ok or moved_hunks(forward.output),
            reverse=reverse.ok,
            three_way=_three_way_state(merged),
            three_way_unchanged=after == before,
            hunks=hunks,
            duplicate=after is not None and self._duplicate(head_files),
            removals_remain=reverse.ok and not forward.ok and self._removals_remain(head_files),
            linked_merged_in_head=self._linked_prs(),
            matched_commit=any(m.reverted_by is None for m in self.matches),
            matched_reverted=bool(self.matches) and all(m.reverted_by for m in self.matches),
        )
        if (reverse.ok and not forward.ok) or after == before:
            signals = replace(signals, state_predates_range=self._state_predates_range())
        self._history_evidence()
        if after == before:
            self.evidence.append({"signal": "tree-unchanged", "result": True})
        verdict = classify.decide(signals)
        return self._finish(chain, verdict, after, signals.moved)

    def _finish(
        self, chain: _Chain, verdict: Verdict, after: str | None, moved: bool
    ) -> PatchReport:
        keeps = verdict.decision in (Decision.KEEP, Decision.REVIEW)
        if not keeps or after is None or after == chain.tree:
            report = self._report(verdict, None)  # dropped or not applicable: never written
        else:
            refreshed = self.item.data
            if moved:
                regenerated = format_patch(
                    self.git, make_commit(self.git, after, chain.tip(), self.parsed.meta)
                )
                regenerated_parsed = parse_patch(regenerated)
                if not same_hunks(self.parsed, regenerated_parsed):
                    refreshed = regenerated
            chain.push(self.item.name, after, self.parsed.meta)
            report = self._report(verdict, refreshed)
            report.changed = refreshed != self.item.data
            if report.changed:
                report.interdiff = interdiff(
                    self.item.data, self.parsed, refreshed, parse_patch(refreshed)
                )
            elif verdict.status == Status.APPLIES_MOVED:
                report.status = Status.APPLIES
                report.reason = "applies as is"
        if verdict.status in (Status.CONFLICT, Status.PARTIAL, Status.UPSTREAM_VERSION):
            report.conflict = self._conflict_details(verdict.problem_hunks)
        return report

    def _report(self, verdict: Verdict, refreshed: bytes | None) -> PatchReport:
        return PatchReport(
            self.item.name,
            verdict.status,
            verdict.decision,
            verdict.reason,
            self.evidence,
            self.parsed.meta.subject,
            refreshed,
        )

    def _three_way(self, tree: str) -> ApplyResult:
        merged = self.ctx.applier.apply(tree, self.item.data, three_way=True)
        entry: dict[str, Any] = {"signal": "3way-apply", "result": _three_way_state(merged)}
        if merged.ok:
            entry["unchanged"] = merged.tree == tree
        else:
            entry["detail"] = _tail(merged.output)
        self.evidence.append(entry)
        return merged

    def _head_files(self, tree: str) -> dict[str, HeadFile]:
        paths = list(self.parsed.touched_paths)
        blobs = read_objects(self.git, [f"{tree}:{p}" for p in paths])
        modes = {}
        if any(f.old_mode != f.new_mode or f.binary for f in self.parsed.files):
            modes = {p: e.mode for p, e in entries(self.git, tree, paths).items()}
        files = {}
        for path in paths:
            blob = blobs.get(f"{tree}:{path}")
            if blob is None or blob.kind != "blob":
                files[path] = HeadFile(None)
            else:
                files[path] = HeadFile(blob.content, blob.oid, modes.get(path, "100644"))
        return files

    def _hunk_presence(self, files: dict[str, HeadFile]) -> tuple[HunkPresence, ...]:
        out: list[HunkPresence] = []
        for fdiff in self.parsed.files:
            old = files.get(fdiff.old_path or "", HeadFile(None))
            new = files.get(fdiff.new_path or "", HeadFile(None))
            out.extend(classify.file_presence(fdiff, old, new))
        return tuple(out)

    def _line_counts(
        self,
        files: dict[str, HeadFile],
        count: Callable[[FileDiff, HeadFile], tuple[int, int]],
        skip: Callable[[FileDiff], bool],
    ) -> tuple[int, int]:
        """(hits, total) of a per-file line count, summed over the patch's files."""
        hits = total = 0
        for fdiff in self.parsed.files:
            if not skip(fdiff):
                h, t = count(fdiff, files.get(fdiff.path, HeadFile(None)))
                hits, total = hits + h, total + t
        return hits, total

    def _duplicate(self, files: dict[str, HeadFile]) -> bool:
        hits, total = self._line_counts(files, classify.duplicated_additions, lambda f: f.is_new)
        duplicate = (
            total >= classify.DUPLICATE_MIN_LINES and hits >= total * classify.DUPLICATE_RATIO
        )
        if hits:
            self.evidence.append(
                {
                    "signal": "added-lines-already-in-head",
                    "present": hits,
                    "added": total,
                    "duplicate": duplicate,
                }
            )
        return duplicate

    def _state_predates_range(self) -> bool:
        """True when the base of the history range already held the patch's post-image: the
        head then never had what the patch changes, which is not evidence that upstream took it.
        Without a range, a patch that only removes code cannot tell "upstream removed it" from
        "the head never had it", so it counts as the latter."""
        if self.range is None:
            removal_only = not any(
                classify.normalize(line)
                for f in self.parsed.files
                for h in f.hunks
                for line in h.added
            ) and any(h.removed for f in self.parsed.files for h in f.hunks)
            if removal_only:
                self.evidence.append(
                    {
                        "signal": "removal-without-history",
                        "detail": "no base known to tell taken from never had",
                    }
                )
            return removal_only
        fork = self.range.split("..", 1)[0]
        at_fork = self.ctx.applier.check_reverse(tree_of(self.git, fork), self.item.data)
        if at_fork.ok:
            self.evidence.append(
                {"signal": "post-image-at-range-base", "base": fork, "result": True}
            )
        return at_fork.ok

    def _removals_remain(self, files: dict[str, HeadFile]) -> bool:
        hits, total = self._line_counts(files, classify.lingering_removals, lambda f: f.is_deleted)
        remain = hits >= 2 and hits * 2 >= total
        if hits:
            self.evidence.append(
                {
                    "signal": "removed-lines-still-in-head",
                    "present": hits,
                    "removed": total,
                    "suspicious": remain,
                }
            )
        return remain

    def _history_evidence(self) -> None:
        if self.range is None:
            detail = "the patch's base is unknown (no series base, no known From commit)"
            self.evidence.append({"signal": "history", "result": "skipped", "detail": detail})
            return
        for match in self.matches:
            self.evidence.append(
                {
                    "signal": f"{match.how}-match",
                    "commit": match.commit.sha,
                    "subject": match.commit.subject,
                    "reverted_by": match.reverted_by,
                    "range": self.range,
                }
            )

    def _linked_prs(self) -> bool:
        in_head = False
        for pr in self.links:
            entry: dict[str, Any] = {"signal": "linked-pr", "pr": pr.ref, "state": pr.state}
            if pr.state == "merged" and pr.merge_commit:
                known = self.ctx.engine.has_commit(pr.merge_commit)
                ancestor = known and self.git.is_ancestor(pr.merge_commit, self.ctx.head)
                entry.update(merge_commit=pr.merge_commit, ancestor_of_head=ancestor)
                if not known:
                    entry["detail"] = "the merge commit is not in the watched history"
                in_head = in_head or ancestor
            self.evidence.append(entry)
        return in_head

    def _conflict_details(self, problem: tuple[HunkPresence, ...]) -> dict[str, Any]:
        hunks = {(f.path, h.header): (f, h) for f in self.parsed.files for h in f.hunks}
        details = []
        for presence in problem:
            entry: dict[str, Any] = presence.as_dict()
            found = hunks.get((presence.path, presence.header))
            if self.range and found:
                fdiff, hunk = found
                timeline = history.file_history(self.git, self.range, fdiff.old_path or fdiff.path)
                touched = touching_commits(hunk.old_start, hunk.old_len, timeline)
                entry["upstream_commits"] = [{"sha": s, "subject": t} for s, t in touched]
            else:
                recent = history.recent_commits(self.git, self.ctx.head, presence.path)
                entry["recent_commits"] = [{"sha": s, "subject": t} for s, t in recent]
            details.append(entry)
        forward = next((e for e in self.evidence if e["signal"] == "forward-apply"), {})
        return {"hunks": details, "apply_output": forward.get("detail", "")}


def _three_way_state(merged: ApplyResult | None) -> str:
    if merged is None:
        return "not-tried"
    if merged.ok:
        return "clean"
    missing = "lacks the necessary blob" in merged.output or "cannot fall back" in merged.output
    return "unavailable" if missing else "conflict"


def _apply_evidence(signal: str, result: ApplyResult) -> dict[str, Any]:
    entry: dict[str, Any] = {"signal": signal, "result": "ok" if result.ok else "failed"}
    if not result.ok and result.output:
        entry["detail"] = _tail(result.output)
    return entry


def _tail(text: str, limit: int = 1500) -> str:
    lines = [
        line
        for line in text.strip().splitlines()
        if not line.startswith(("Checking", "Applied", "Hunk #"))
    ]
    text = "\n".join(lines)
    return text if len(text) <= limit else "…" + text[-limit:]
