"""The patch engine: re-apply a carried series on an upstream head and classify every patch.

Patch N is tried on head + the patches before it that still apply. Nothing is checked out:
trees are built in a temporary index and only the mirror's object database is written.
Each patch gets a status, a decision and the evidence both rest on (see bot.core.classify).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bot.core import classify
from bot.core.classify import Decision, HeadFile, HunkPresence, Signals, Status
from bot.core.linetrack import touching_commits
from bot.core.patchfile import PatchFile, PatchFileError, parse_patch
from bot.core.report import PatchReport, SeriesReport, interdiff, reproduce_commands, same_hunks
from bot.git import history
from bot.git.formatpatch import format_patch, make_commit
from bot.git.mirror import Mirror, MirrorError
from bot.git.runner import Git
from bot.git.tree_apply import ApplyResult, TreeApplier, entries, read_blobs, tree_of

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
class _Step:
    """Mutable state threaded through the series: the tree and commit patches build on."""

    tree: str
    commit: str
    applied: list[str] = field(default_factory=list)  # names of patches applied so far


class Engine:
    def __init__(self, mirror: Mirror):
        self.mirror = mirror
        self.git: Git = mirror.git

    def check(
        self,
        head_rev: str,
        patches: list[PatchInput],
        *,
        base: str | None = None,
        links: dict[str, list[LinkedPr]] | None = None,
        patch_paths: dict[str, str] | None = None,
    ) -> SeriesReport:
        started = time.perf_counter()
        head = self.mirror.resolve(head_rev)
        step = _Step(tree_of(self.git, head.sha), head.sha)
        applier = TreeApplier(self.git)
        reports = []
        try:
            for item in patches:
                checker = _PatchCheck(self, applier, head.sha, head.ref, base, item, links or {})
                report = checker.run(step, patch_paths or {})
                reports.append(report)
        finally:
            applier.close()
        log.info(
            "checked %d patches on %s in %.0f ms",
            len(patches),
            head.sha[:12],
            (time.perf_counter() - started) * 1000,
        )
        return SeriesReport(
            self.mirror.source, head.sha, head.ref, base, reports, step.tree, step.commit
        )


class _PatchCheck:
    def __init__(
        self,
        engine: Engine,
        applier: TreeApplier,
        head: str,
        head_ref: str | None,
        base: str | None,
        item: PatchInput,
        links: dict[str, list[LinkedPr]],
    ):
        self.engine = engine
        self.git = engine.git
        self.applier = applier
        self.head = head
        self.head_ref = head_ref
        self.base = base
        self.item = item
        self.links = links.get(Path(item.name).name, []) or links.get(item.name, [])
        self.evidence: list[dict[str, Any]] = []

    def run(self, step: _Step, patch_paths: dict[str, str]) -> PatchReport:
        try:
            parsed = parse_patch(self.item.data, name=self.item.name)
        except PatchFileError as err:
            return self._invalid(err)
        report = self._classify(step, parsed)
        if report.status == Status.CONFLICT or (
            report.status in (Status.PARTIAL, Status.UPSTREAM_VERSION) and report.conflict
        ):
            names = [*step.applied, self.item.name]
            report.conflict = {
                **(report.conflict or {}),
                "reproduce": reproduce_commands(
                    self.engine.mirror.source,
                    self.head,
                    self.head_ref,
                    [patch_paths.get(n, n) for n in names],
                ),
            }
        return report

    def _invalid(self, err: PatchFileError) -> PatchReport:
        reason = f"{self.item.name}: {err}"
        evidence = [
            {"signal": "parse", "result": "failed", "line": err.line, "detail": err.message}
        ]
        return PatchReport(self.item.name, Status.INVALID, Decision.REVIEW, reason, evidence)

    def _classify(self, step: _Step, parsed: PatchFile) -> PatchReport:
        data = self.item.data
        if parsed.is_empty:
            verdict = classify.decide(Signals(empty=True))
            self.evidence.append({"signal": "empty-patch", "detail": "no file is changed"})
            return self._report(parsed, verdict, None)
        self._ensure_preimages(parsed)
        forward = self.applier.apply(step.tree, data)
        self.evidence.append(_apply_evidence("forward-apply", forward))
        reverse = self.applier.check_reverse(step.tree, data)
        self.evidence.append(_apply_evidence("reverse-apply", reverse))
        three_way, merged = self._three_way(step.tree, data, forward)
        head_files = self._head_files(step.tree, parsed)
        hunks = self._hunk_presence(parsed, head_files) if not forward.ok else ()
        if hunks:
            self.evidence.append({"signal": "hunks", "hunks": [h.as_dict() for h in hunks]})
        applied_tree = forward.tree if forward.ok else merged.tree if merged else None
        duplicate = applied_tree is not None and self._duplicate(parsed, head_files)
        regenerated, regen_commit = None, None
        moved = False
        if applied_tree is not None and applied_tree != step.tree:
            regen_commit = make_commit(self.git, applied_tree, step.commit, parsed.meta)
            regenerated = format_patch(self.git, regen_commit)
            moved = not same_hunks(parsed, parse_patch(regenerated))
        matched, reverted = self._history(parsed)
        merged_in_head = self._linked_prs()
        signals = Signals(
            forward=forward.ok,
            moved=moved,
            reverse=reverse.ok,
            three_way=three_way,
            three_way_unchanged=merged is not None and merged.tree == step.tree,
            hunks=hunks,
            duplicate=duplicate,
            linked_merged_in_head=merged_in_head,
            matched_commit=matched,
            matched_reverted=reverted,
        )
        if forward.ok and forward.tree == step.tree:
            signals = Signals(**{**signals.__dict__, "three_way_unchanged": True})
            self.evidence.append({"signal": "tree-unchanged", "result": True})
        verdict = classify.decide(signals)
        report = self._report(parsed, verdict, regenerated if moved else data)
        if verdict.decision == Decision.KEEP and regen_commit and applied_tree:
            step.tree, step.commit = applied_tree, regen_commit
            step.applied.append(self.item.name)
            report.changed = moved
            if moved and regenerated is not None:
                report.interdiff = interdiff(data, parsed, regenerated, parse_patch(regenerated))
        elif verdict.decision == Decision.REVIEW and regen_commit and applied_tree:
            # Review keeps the patch in the series until a human decides; later patches see it.
            step.tree, step.commit = applied_tree, regen_commit
            step.applied.append(self.item.name)
            report.changed = moved
        else:
            report.refreshed = None  # dropped, conflicting or unusable: never written as a patch
        if verdict.status in (Status.CONFLICT, Status.PARTIAL, Status.UPSTREAM_VERSION):
            report.conflict = self._conflict_details(parsed, verdict.problem_hunks, forward)
        return report

    def _report(
        self, parsed: PatchFile, verdict: classify.Verdict, refreshed: bytes | None
    ) -> PatchReport:
        return PatchReport(
            self.item.name,
            verdict.status,
            verdict.decision,
            verdict.reason,
            self.evidence,
            parsed.meta.subject,
            refreshed,
        )

    def _ensure_preimages(self, parsed: PatchFile) -> None:
        """Fetches every branch and tag once when the patch's pre-image blobs are not here yet."""
        oids = [f.old_oid for f in parsed.files if f.old_oid and not f.binary]
        commit = parsed.meta.commit
        missing = (oids and not self.engine.mirror.has_objects(*oids)) or (
            commit and not self.engine.mirror.has_commit(commit)
        )
        if missing and not getattr(self.engine.mirror, "_widened", False):
            try:
                self.engine.mirror.widen()
            except MirrorError as err:
                self.evidence.append({"signal": "fetch", "result": "failed", "detail": str(err)})
            self.engine.mirror._widened = True  # type: ignore[attr-defined]

    def _three_way(
        self, tree: str, data: bytes, forward: ApplyResult
    ) -> tuple[str, ApplyResult | None]:
        if forward.ok:
            return "not-tried", None
        merged = self.applier.apply(tree, data, three_way=True)
        if merged.ok:
            self.evidence.append(
                {"signal": "3way-apply", "result": "clean", "unchanged": merged.tree == tree}
            )
            return "clean", merged
        unavailable = "repository lacks the necessary blob" in merged.output or (
            "cannot fall back" in merged.output
        )
        state = "unavailable" if unavailable else "conflict"
        self.evidence.append(
            {"signal": "3way-apply", "result": state, "detail": _tail(merged.output)}
        )
        return state, None

    def _head_files(self, tree: str, parsed: PatchFile) -> dict[str, HeadFile]:
        paths = list(parsed.touched_paths)
        found = entries(self.git, tree, paths)
        blobs = read_blobs(self.git, [e.oid for e in found.values() if e.mode != "160000"])
        return {
            path: HeadFile(blobs.get(found[path].oid), found[path].oid, found[path].mode)
            if path in found
            else HeadFile(None)
            for path in paths
        }

    def _hunk_presence(
        self, parsed: PatchFile, files: dict[str, HeadFile]
    ) -> tuple[HunkPresence, ...]:
        out: list[HunkPresence] = []
        for fdiff in parsed.files:
            old = files.get(fdiff.old_path or "", HeadFile(None))
            new = files.get(fdiff.new_path or "", HeadFile(None))
            out.extend(classify.file_presence(fdiff, old, new))
        return tuple(out)

    def _duplicate(self, parsed: PatchFile, files: dict[str, HeadFile]) -> bool:
        hits = total = 0
        for fdiff in parsed.files:
            if fdiff.is_new:
                continue
            h, t = classify.duplicated_additions(fdiff, files.get(fdiff.path, HeadFile(None)))
            hits, total = hits + h, total + t
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

    def _history_range(self, parsed: PatchFile) -> str | None:
        mirror = self.engine.mirror
        anchor = self.base if self.base and mirror.has_commit(self.base) else None
        if anchor is None and parsed.meta.commit and mirror.has_commit(parsed.meta.commit):
            anchor = parsed.meta.commit
        if anchor is None:
            return None
        fork = self.git.run("merge-base", anchor, self.head, check=False).text
        return f"{fork}..{self.head}" if fork else None

    def _history(self, parsed: PatchFile) -> tuple[bool, bool]:
        rev_range = self._history_range(parsed)
        self._range = rev_range
        if rev_range is None:
            self.evidence.append(
                {
                    "signal": "history",
                    "result": "skipped",
                    "detail": "the patch's base is unknown (no series base, no known From commit)",
                }
            )
            return False, False
        matches = history.find_matches(self.git, rev_range, parsed, self.item.data)
        for match in matches:
            self.evidence.append(
                {
                    "signal": f"{match.how}-match",
                    "commit": match.commit.sha,
                    "subject": match.commit.subject,
                    "reverted_by": match.reverted_by,
                    "range": rev_range,
                }
            )
        live = [m for m in matches if m.reverted_by is None]
        return bool(live), bool(matches) and not live

    def _linked_prs(self) -> bool:
        in_head = False
        for pr in self.links:
            entry: dict[str, Any] = {"signal": "linked-pr", "pr": pr.ref, "state": pr.state}
            if pr.state == "merged" and pr.merge_commit:
                entry["merge_commit"] = pr.merge_commit
                known = self.engine.mirror.has_commit(pr.merge_commit)
                ancestor = known and self.git.is_ancestor(pr.merge_commit, self.head)
                entry["ancestor_of_head"] = ancestor
                if not known:
                    entry["detail"] = "merge commit is not in the watched history"
                in_head = in_head or ancestor
            self.evidence.append(entry)
        return in_head

    def _conflict_details(
        self, parsed: PatchFile, problem: tuple[HunkPresence, ...], forward: ApplyResult
    ) -> dict[str, Any]:
        rev_range = getattr(self, "_range", None)
        hunks_by_key = {(f.path, h.header): (f, h) for f in parsed.files for h in f.hunks}
        details = []
        for presence in problem:
            found = hunks_by_key.get((presence.path, presence.header))
            entry: dict[str, Any] = presence.as_dict()
            if rev_range and found:
                fdiff, hunk = found
                path = fdiff.old_path or fdiff.path
                timeline = history.file_history(self.git, rev_range, path)
                entry["upstream_commits"] = [
                    {"sha": sha, "subject": subject}
                    for sha, subject in touching_commits(hunk.old_start, hunk.old_len, timeline)
                ]
            else:
                entry["recent_commits"] = [
                    {"sha": sha, "subject": subject}
                    for sha, subject in history.recent_commits(self.git, self.head, presence.path)
                ]
            details.append(entry)
        return {"hunks": details, "apply_output": _tail(forward.output)}


def _apply_evidence(signal: str, result: ApplyResult) -> dict[str, Any]:
    entry: dict[str, Any] = {"signal": signal, "result": "ok" if result.ok else "failed"}
    if not result.ok and result.output:
        entry["detail"] = _tail(result.output)
    return entry


def _tail(text: str, limit: int = 1500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]
