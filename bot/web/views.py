"""The views of the store that the dashboard's pages and their JSON twins both render: one
function per page builds its response model, so the API mirrors the pages by construction.
Handlers only read the store (and the fix pages on disk)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import redis

from bot.config import BaseSpec, CarryConfig
from bot.core.bisect import Bisection, pr_of
from bot.core.ci_plan import FINAL_STATES
from bot.core.ci_report import shown_on_github, table_shown_on_github
from bot.core.fixpage import FixPage, UpstreamEntry
from bot.core.state import CiState, CiStatus, PatchState, PrInfo, SeriesState
from bot.fixes import carrier_of, release_line
from bot.series_loader import LoadedSeries, SeriesInvalid
from bot.series_loader import load_series as load_series_dir
from bot.store.ci_runs import all_runs, run_fields
from bot.store.metrics import queue_depths, rate_limit_seen
from bot.store.runners import runlog, runners
from bot.store.series import (
    HISTORY_MAXLEN,
    all_series,
    history,
    load_series,
    series_documents,
    series_versions,
)
from bot.web.models import (
    AttentionOut,
    BisectOut,
    CiOut,
    FixPageOut,
    GoodHeadOut,
    HeadCheckOut,
    HeadOut,
    HistoryEntryOut,
    HistoryOut,
    HumanWaitOut,
    NoticeOut,
    PatchDetailOut,
    PatchFilesOut,
    PatchHistoryEntryOut,
    PatchOut,
    PatchStateOut,
    PrOut,
    QueueOut,
    RedStreakOut,
    ReleaseLineOut,
    RunLogLineOut,
    RunLogOut,
    RunnerOut,
    RunnersOut,
    RunOut,
    RunRowOut,
    RunsFilterOut,
    RunsOut,
    SectionOut,
    SeriesListOut,
    SeriesOut,
    SeriesSummaryOut,
    SuccessorOut,
    TreeBranchOut,
    UpstreamPrOut,
)
from bot.web.series_cache import (
    DirectoryCache,
    Kept,
    SeriesCache,
    document_digest,
    fingerprint,
    identity,
)
from bot.web.timeline import Outcome, describe, outcome_of

GITHUB_WEB: Final = "https://github.com"


# --------------------------------------------------------------------------- small helpers


class NotFound(Exception):
    """An unknown series, patch or run; the message says which."""


def age_seconds(iso: str | None, now: datetime | None = None) -> int | None:
    return _seconds_since(_moment(iso), now or datetime.now(UTC))


def age_text(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def web_host(state: SeriesState) -> str:
    """Where the series' upstream has its web pages; "" where it has none (a local path)."""
    if state.upstream_web_host is None:
        return GITHUB_WEB  # stored before carry kept the host, when it assumed github.com
    return state.upstream_web_host


def commit_link(repo: str, host: str) -> Callable[[str], str | None]:
    """Web links to an upstream's commits, when the upstream has web pages at `host`."""
    on_web = bool(host) and re.fullmatch(r"[\w.-]+/[\w.-]+", repo) is not None

    def link(sha: str) -> str | None:
        return f"{host}/{repo}/commit/{sha}" if on_web and sha else None

    return link


def pr_url(ref: str, host: str) -> str | None:
    """OWNER/REPO#N on the upstream's web host (a PR ref names a repository on the same one)."""
    repo, sep, number = ref.partition("#")
    if not host or not sep or not number.isdigit() or repo.count("/") != 1:
        return None
    return f"{host}/{repo}/pull/{number}"


# --------------------------------------------------------------------------- upstream PRs

_STATE_WORDS: Final = {"closed_unmerged": "closed unmerged", "closed": "closed unmerged"}


def _upstream_state(state: str) -> str:
    return "closed_unmerged" if state in ("closed", "closed-unmerged") else state


def _upstream_label(state: str, superseded_by: str | None) -> str:
    words = _STATE_WORDS.get(state, state)
    if not superseded_by:
        return words
    if state == "superseded":
        return f"superseded by {superseded_by}"
    return f"{words}, superseded by {superseded_by}"


def _carry_upstream(entry: dict[str, Any], host: str) -> UpstreamPrOut:
    ref = str(entry.get("ref", ""))
    state = _upstream_state(str(entry.get("state", "")))
    by = entry.get("superseded_by")
    return UpstreamPrOut(
        ref=ref,
        state=state,
        label=_upstream_label(state, str(by) if by else None),
        url=pr_url(ref, host),
        merge_commit=entry.get("merge_commit") or None,
        superseded_by=str(by) if by else None,
        source="carry",
    )


def _page_upstream(entry: UpstreamEntry, host: str) -> UpstreamPrOut:
    ref = str(entry.ref) if entry.ref else (entry.repo or "")
    by = str(entry.superseded_by) if entry.superseded_by else None
    state = _upstream_state(entry.state)
    return UpstreamPrOut(
        ref=ref,
        state=state,
        label=_upstream_label(state, by),
        url=pr_url(ref, host),
        superseded_by=by,
        source="fix page",
    )


def upstream_prs(patch: PatchState, page: FixPage | None, host: str) -> list[UpstreamPrOut]:
    """What carry observed (newest truth) first, then what the fix page lists besides."""
    observed = [_carry_upstream(e, host) for e in patch.upstream_prs]
    known = {e.ref for e in observed}
    listed = [_page_upstream(e, host) for e in page.upstream] if page else []
    return observed + [e for e in listed if e.ref not in known]


# --------------------------------------------------------------------------- fix pages


@dataclass(frozen=True)
class FixPageFound:
    page: FixPage | None
    text: str | None
    note: str | None


@dataclass(frozen=True)
class FixPages:
    """Fix pages under downstream.patches_dir. No root (no config): no fix pages."""

    root: Path | None
    directories: dict[str, str] = field(default_factory=dict)  # series id -> directory name
    bases: dict[str, BaseSpec] = field(default_factory=dict)  # series id -> its base
    # each directory's load, kept while its files are unchanged (the overview loads them all)
    loads: DirectoryCache[LoadedSeries | str] = field(
        default_factory=DirectoryCache, compare=False, repr=False
    )

    @classmethod
    def from_config(
        cls, config: CarryConfig | None, root: Path | None = None, *, exported: bool = False
    ) -> FixPages:
        """`exported`: root is carry's copy of the downstream repository's series, exported
        from GitHub, whose directories are only ever replaced whole (never edited in place),
        so a directory's identity says whether it changed, without a look at its files."""
        if config is None:
            return cls(None)
        # Resolved now: later requests must not depend on the working directory.
        base = (root if root is not None else Path(config.downstream.patches_dir)).resolve()
        directories = {series.id: series.patches for series in config.series}
        bases = {series.id: series.base for series in config.series}
        loads: DirectoryCache[LoadedSeries | str] = DirectoryCache(
            identity if exported else fingerprint
        )
        return cls(base, directories, bases, loads)

    def release_lines(self, client: redis.Redis, page: FixPage) -> list[ReleaseLineOut]:
        """Each release the page lists, and whether a configured series with a page of the
        same fix sits on it (from the config and the series' stored state)."""
        carriers = []
        for series_id, directory in self.directories.items():
            loaded = self._load(series_id)
            if isinstance(loaded, str) or all(p.name != page.name for p in loaded.pages):
                continue
            state = load_series(client, series_id)
            carriers.append(carrier_of(series_id, directory, self.bases[series_id], state))
        lines = [release_line(page.name, release, carriers) for release in page.releases]
        return [
            ReleaseLineOut(release=x.release, carried=not x.mark, mark=x.mark, reason=x.reason)
            for x in lines
        ]

    def _load(self, series_id: str) -> LoadedSeries | str:
        """The series directory, or why there is none to show."""
        if self.root is None:
            return "no configuration loaded: fix pages are not shown"
        directory = self.root / self.directories.get(series_id, series_id)
        if not directory.is_dir():
            return f"no directory for series '{series_id}' under the patches directory"
        return self.loads.get(directory, self._read)

    def _read(self, directory: Path) -> LoadedSeries | str:
        assert self.root is not None
        try:
            return load_series_dir(directory, root=self.root.parent)
        except SeriesInvalid as exc:
            problems = "; ".join(str(p) for p in exc.problems[:5])
            return f"the series directory has problems: {problems}"

    def loaded(self, series_id: str) -> LoadedSeries | str:
        """The series directory's load (the same object while its files are unchanged), or
        why there is none."""
        return self._load(series_id)

    def pages_of(self, series_id: str) -> dict[str, FixPage]:
        """Patch name -> its fix page (empty when there are none to show)."""
        return pages_in(self._load(series_id))

    def patch_files(self, series_id: str) -> list[str] | None:
        """The patch files of the series directory, in series order; None when it cannot be
        read (no configuration, no directory, problems)."""
        return patch_files_in(self._load(series_id))

    def lookup(self, series_id: str, patch: str) -> FixPageFound:
        loaded = self._load(series_id)
        if isinstance(loaded, str):
            return FixPageFound(None, None, loaded)
        page = loaded.page_for(patch)
        if page is None:
            return FixPageFound(None, None, f"no fix page names {patch}")
        text = (loaded.directory / Path(page.file).name).read_text(encoding="utf-8")
        return FixPageFound(page, text, None)


def pages_in(loaded: LoadedSeries | str) -> dict[str, FixPage]:
    if isinstance(loaded, str):
        return {}
    return {name: page for page in loaded.pages for name in page.patch_names}


def patch_files_in(loaded: LoadedSeries | str) -> list[str] | None:
    return None if isinstance(loaded, str) else list(loaded.patch_names)


def fix_page_out(
    page: FixPage, text: str, host: str, release_lines: list[ReleaseLineOut]
) -> FixPageOut:
    return FixPageOut(
        name=page.name,
        file=page.file,
        summary=page.summary,
        affects=page.affects,
        releases=list(page.releases),
        release_lines=release_lines,
        patches=[PatchFilesOut(patch=p.patch, files=list(p.files)) for p in page.patches],
        upstream=[_page_upstream(e, host) for e in page.upstream],
        test=page.test,
        sections=[SectionOut(title=s.title, body=s.body) for s in page.sections],
        markdown=text,
    )


# --------------------------------------------------------------------------- series views


def head_out(state: SeriesState, now: datetime | None = None) -> HeadOut:
    seconds = age_seconds(state.head_seen_at, now)
    return HeadOut(
        ref=state.head_ref,
        sha=state.head_sha,
        short_sha=state.head_sha[:12] if state.head_sha else None,
        seen_at=state.head_seen_at,
        age_s=seconds,
        age=age_text(seconds),
        actor=state.head_actor,
    )


def patch_out(patch: PatchState, page: FixPage | None, host: str) -> PatchOut:
    return PatchOut(
        name=patch.name,
        subject=patch.subject,
        status=patch.status,
        decision=patch.decision,
        reason=patch.reason,
        pinned=patch.pinned,
        drop_requested_by=patch.drop_requested_by,
        changed=patch.changed,
        needs_attention=patch.needs_attention,
        upstream=upstream_prs(patch, page, host),
        refresh=str(patch.refresh.get("class", "")) if patch.changed else "",
        forced_by=[c for c in patch.refresh.get("forced_by", []) if c.get("sha")]
        if patch.changed
        else [],
    )


def patch_state_out(patch: PatchState, page: FixPage | None, host: str) -> PatchStateOut:
    return PatchStateOut(
        **patch_out(patch, page, host).model_dump(),
        evidence=list(patch.evidence),
        interdiff=patch.interdiff,
        conflict=patch.conflict,
        upstream_commits=list(patch.upstream_commits),
    )


def ci_out(ci: CiState, has_pr: bool) -> CiOut:
    return CiOut(
        runner=ci.runner,
        state=ci.state,
        run_id=ci.run_id,
        tree_key=ci.tree_key,
        head_sha=ci.head_sha,
        detail=ci.detail,
        url=ci.url,
        updated_at=ci.updated_at,
        attempt=ci.attempt,
        on_github=shown_on_github(ci, has_pr),
        check_run_id=ci.check_run_id,
    )


def pr_out(pr: PrInfo | None) -> PrOut | None:
    if pr is None:
        return None
    return PrOut(
        number=pr.number,
        url=pr.url,
        branch=pr.branch,
        state=pr.state,
        draft=pr.draft,
        head_sha=pr.head_sha,
        ci_table_on_github=table_shown_on_github(pr),
    )


def attention(state: SeriesState) -> list[AttentionOut]:
    """state.needs_attention (its words and order), each with what it points at and since
    when (a problem of a patch since the check that found it, of CI since its row changed)."""
    out = []
    for reason in state.needs_attention:
        patch = next((p.name for p in state.patches if reason.startswith(f"{p.name}: ")), None)
        row = next((c for c in state.ci.values() if reason.startswith(f"CI {c.runner}:")), None)
        since = _since(state, reason, patch, row)
        out.append(
            AttentionOut(
                series=state.id,
                reason=reason,
                patch=patch,
                run_id=row.run_id or None if row else None,
                since=since,
                age=age_text(age_seconds(since)),
            )
        )
    return out


def _since(state: SeriesState, reason: str, patch: str | None, row: CiState | None) -> str | None:
    if reason.startswith("error: "):
        return state.error_since
    if reason.startswith("upstream unreachable: "):
        return state.upstream_error_since
    if patch is not None:
        return state.checked_at
    if state.closed_pr is not None and reason == state.closed_pr_words:
        return state.closed_pr.at
    if state.publish_refused is not None and reason == state.publish_refused.words:
        return state.publish_refused.at
    return row.updated_at or None if row else None


RATE_LIMIT_LOW: Final = 0.1  # a share of the window's requests left that needs a look


def carry_health(client: redis.Redis, config: CarryConfig | None) -> list[AttentionOut]:
    """carry's own trouble, which is no series': GitHub's rate limit nearly spent, and hardware
    jobs waiting for a runner kind that has no runner online."""
    out = []
    seen = rate_limit_seen(client)
    if seen is not None and seen.remaining < (seen.limit or 1000) * RATE_LIMIT_LOW:
        since = datetime.fromtimestamp(seen.seen_at, UTC).isoformat(timespec="seconds")
        of = f" of {seen.limit}" if seen.limit else ""
        reason = f"GitHub rate limit nearly spent: {seen.remaining}{of} requests left"
        out.append(
            AttentionOut(series="", reason=reason, since=since, age=age_text(age_seconds(since)))
        )
    queues = {kind: runner.queue for kind, runner in (config.runners.items() if config else [])}
    waiting_in = {kind: n for kind, n in queue_depths(client, queues).items() if n}
    # Looked for only when jobs wait: finding the heartbeats walks the whole store.
    online = {info.get("kind") for info in runners(client)} if waiting_in else set()
    for kind, waiting in sorted(waiting_in.items()):
        if kind not in online:
            reason = f"no {kind} runner is online: {waiting} job(s) wait in {queues[kind]}"
            out.append(AttentionOut(series="", reason=reason, link="/runners"))
    return out


def _summary_fields(state: SeriesState) -> dict[str, Any]:
    return {
        "id": state.id,
        "upstream_repo": state.upstream_repo,
        "base": state.base,
        "base_pr_state": state.base_pr_state,
        "waiting_for_ref": state.waiting_for_ref,
        "head": head_out(state),
        "phase": state.phase,
        "outcome": state.outcome,
        "version": state.version,
        "paused_by": state.paused_by,
        "error": state.error,
        "last_event": state.last_event,
        "checked_at": state.checked_at,
        "updated_at": state.updated_at,
        "needs_attention": state.needs_attention,
        "attention": attention(state),
        "pr": pr_out(state.pr),
        "ci": {kind: ci_out(ci, state.pr is not None) for kind, ci in sorted(state.ci.items())},
    }


def series_summary(
    state: SeriesState,
    pages: Mapping[str, FixPage] | None = None,
    patch_files: list[str] | None = None,
) -> SeriesSummaryOut:
    found = pages or {}
    patches = [patch_out(p, found.get(p.name), web_host(state)) for p in state.patches]
    return SeriesSummaryOut(**_summary_fields(state), patches=patches, patch_files=patch_files)


def series_full(
    state: SeriesState,
    pages: Mapping[str, FixPage] | None = None,
    patch_files: list[str] | None = None,
) -> SeriesOut:
    found = pages or {}
    return SeriesOut(
        **_summary_fields(state),
        patch_files=patch_files,
        patches=[patch_state_out(p, found.get(p.name), web_host(state)) for p in state.patches],
        checked_head=state.checked_head,
        checked_digest=state.checked_digest,
        approvals=list(state.approvals),
        base_override=state.base_override,
        successor=successor_out(state.successor),
        heads=[HeadCheckOut(**asdict(h)) for h in reversed(state.heads)],
        last_good=(
            GoodHeadOut(**asdict(state.last_good), badge=f"/badges/series/{state.id}/good.svg")
            if state.last_good
            else None
        ),
        tree_branch=TreeBranchOut(**asdict(state.tree_branch)) if state.tree_branch else None,
        red_streak=RedStreakOut(**asdict(state.red_streak)) if state.red_streak else None,
        human_wait=HumanWaitOut(**asdict(state.human_wait)) if state.human_wait else None,
        bisect=bisect_out(state.bisect) if state.bisect else None,
        notices=[
            NoticeOut(id=n.id, kind=n.kind.value, body=n.body, at=n.at, said_at=n.said_at, pr=n.pr)
            for n in sorted(state.notices, key=lambda n: (not n.due, n.at))
        ],
    )


def bisect_out(b: Bisection) -> BisectOut:
    subject = b.subjects.get(b.culprit) if b.culprit else None
    return BisectOut(
        check=b.check,
        good=b.good,
        bad=b.bad,
        commits=len(b.commits),
        status=b.status.value,
        culprit=b.culprit,
        culprit_subject=subject,
        culprit_pr=pr_of(subject) if subject else None,
        suspects=b.suspects,
        ab=b.ab,
        runs=b.runs,
        budget=b.budget,
        reading=b.reading,
        started_at=b.started_at,
        ended_at=b.ended_at,
    )


def successor_out(found: dict[str, Any] | None) -> SuccessorOut | None:
    if not found:
        return None
    command = (found.get("retarget") or {}).get("command")
    fields = ("closed", "summary", "ref", "state", "commit", "reasons", "evidence", "candidates")
    return SuccessorOut(command=command, **{k: found[k] for k in fields if k in found})


def series_list(
    client: redis.Redis,
    fix_pages: FixPages,
    config: CarryConfig | None = None,
    kept: SeriesCache[SeriesSummaryOut] | None = None,
) -> SeriesListOut:
    """Every series, those that need attention first, then by id; and carry's own health.
    With `kept`, a series whose document and directory are unchanged since the last call is
    not parsed or summarized again (only its ages are brought up to now)."""
    if kept is None:
        summaries = [
            series_summary(s, fix_pages.pages_of(s.id), fix_pages.patch_files(s.id))
            for s in all_series(client)
        ]
    else:
        summaries = [entry.value for entry in kept_summaries(client, fix_pages, kept)]
    return listing(client, config, summaries)


def listing(
    client: redis.Redis, config: CarryConfig | None, summaries: Iterable[SeriesSummaryOut]
) -> SeriesListOut:
    return SeriesListOut(
        series=sorted(summaries, key=lambda s: (not s.needs_attention, s.id)),
        health=carry_health(client, config),
    )


def kept_summaries(
    client: redis.Redis, fix_pages: FixPages, kept: SeriesCache[SeriesSummaryOut]
) -> list[Kept[SeriesSummaryOut]]:
    """Each stored series' summary (by id) as `kept` holds it, made again where its document or
    its directory changed, with its ages as of now (an entry's `derived` is the kept one's).
    Only the documents whose version `kept` has not seen are read from the store."""
    now = datetime.now(UTC)
    versions = series_versions(client)
    found: dict[str, Kept[SeriesSummaryOut]] = {}
    loads = {series_id: fix_pages.loaded(series_id) for series_id in versions}
    for series_id, version in versions.items():
        entry = kept.get(series_id, version, loads[series_id])
        if entry is not None:
            found[series_id] = entry
    changed = sorted(set(versions) - set(found))
    for series_id, raw in series_documents(client, changed).items():
        loaded = loads[series_id]
        state = SeriesState.from_dict(json.loads(raw))
        summary = series_summary(state, pages_in(loaded), patch_files_in(loaded))
        found[series_id] = kept.put(series_id, document_digest(raw), loaded, summary)
    kept.keep_only(set(found))
    return [replace(found[sid], value=aged(found[sid], now)) for sid in sorted(found)]


def aged(entry: Kept[SeriesSummaryOut], now: datetime) -> SeriesSummaryOut:
    """The kept summary with its head's and its attention items' ages as of `now` (the
    moments parsed once, the attention items copied only when their ages in words changed)."""
    summary, derived = entry.value, entry.derived
    if "moments" not in derived:
        derived["seen"] = _moment(summary.head.seen_at)  # before "moments", which says both are
        derived["moments"] = [_moment(item.since) for item in summary.attention]
    ages = [age_text(_seconds_since(moment, now)) for moment in derived["moments"]]
    attention = derived.get("attention_aged")
    if attention is None or attention[0] != ages:
        items = [
            item.model_copy(update={"age": age})
            for item, age in zip(summary.attention, ages, strict=True)
        ]
        attention = derived["attention_aged"] = (ages, items)
    seconds = _seconds_since(derived["seen"], now)
    head = summary.head.model_copy(update={"age_s": seconds, "age": age_text(seconds)})
    return summary.model_copy(update={"head": head, "attention": attention[1]})


def _seconds_since(moment: datetime | None, now: datetime) -> int | None:
    """age_seconds of a moment already parsed."""
    return None if moment is None else max(0, int((now - moment).total_seconds()))


def require_series(client: redis.Redis, series_id: str) -> SeriesState:
    state = load_series(client, series_id)
    if state is None:
        raise NotFound(f"unknown series '{series_id}'")
    return state


def series_detail(client: redis.Redis, series_id: str, fix_pages: FixPages) -> SeriesOut:
    state = require_series(client, series_id)
    return series_full(state, fix_pages.pages_of(series_id), fix_pages.patch_files(series_id))


def _entry_out(entry: dict[str, Any]) -> HistoryEntryOut:
    data = entry["data"] if isinstance(entry["data"], dict) else {"value": entry["data"]}
    return HistoryEntryOut(
        id=entry["id"],
        at=entry["at"],
        series=entry["series"],
        kind=entry["kind"],
        summary=describe(entry["kind"], data),
        outcome=outcome_of(entry["kind"], data),
        data=data,
    )


def series_history(
    client: redis.Redis,
    series_id: str | None,
    limit: int,
    *,
    before: str | None = None,
    kind: str | None = None,
    outcome: Outcome | None = None,
) -> HistoryOut:
    if series_id is not None:
        require_series(client, series_id)
    if outcome is None:
        found = history(client, series_id, limit=limit, before=before, kind=kind)
        entries = [_entry_out(e) for e in found]
    else:
        entries = _entries_of_outcome(client, series_id, limit, before, kind, outcome)
    more = entries[-1].id if len(entries) == limit else None
    return HistoryOut(
        series=series_id, kind=kind, outcome=outcome, entries=entries, next_before=more
    )


_OUTCOME_BATCH: Final = 500


def _entries_of_outcome(
    client: redis.Redis,
    series_id: str | None,
    limit: int,
    before: str | None,
    kind: str | None,
    wanted: Outcome,
) -> list[HistoryEntryOut]:
    """Up to `limit` entries of one outcome, newest first, older than `before`. Like the
    store's kind filter, it reads at most HISTORY_MAXLEN entries to find them."""
    found: list[HistoryEntryOut] = []
    read = 0
    while len(found) < limit and read < HISTORY_MAXLEN:
        batch = history(client, series_id, limit=_OUTCOME_BATCH, before=before, kind=kind)
        if not batch:
            break
        read += len(batch)
        for entry in batch:
            shown = _entry_out(entry)
            if shown.outcome == wanted:
                found.append(shown)
        before = batch[-1]["id"]
    return found[:limit]


# --------------------------------------------------------------------------- patch view


def patch_part(data: dict[str, Any], name: str) -> dict[str, Any] | None:
    """The part of a history entry about patch `name`, or None when it is not about it.

    Recognized shapes: {"patch": name, ...}; {"patches": {name: {...}}};
    {"patches": [name, ...]} and {"patches": [{"name"|"patch": name, ...}, ...]}."""
    if data.get("patch") == name or data.get("name") == name:
        return data
    patches = data.get("patches")
    if isinstance(patches, dict) and name in patches:
        part = patches[name]
        return part if isinstance(part, dict) else {"value": part}
    if isinstance(patches, list):
        return _part_in_list(patches, name, data)
    return None


def _part_in_list(items: Sequence[Any], name: str, whole: dict[str, Any]) -> dict[str, Any] | None:
    for item in items:
        if item == name:
            return whole
        if isinstance(item, dict) and name in (item.get("name"), item.get("patch")):
            return item
    return None


def patch_history(entries: Iterable[dict[str, Any]], name: str) -> list[PatchHistoryEntryOut]:
    out = []
    for entry in entries:
        base = _entry_out(entry)
        part = patch_part(base.data, name)
        if part is not None:
            out.append(PatchHistoryEntryOut(**base.model_dump(), about=part))
    return out


def patch_detail(
    client: redis.Redis, fix_pages: FixPages, series_id: str, name: str
) -> PatchDetailOut:
    state = require_series(client, series_id)
    patch = state.patch(name)
    if patch is None:
        raise NotFound(f"unknown patch '{name}' in series '{series_id}'")
    found = fix_pages.lookup(series_id, name)
    host = web_host(state)
    page = None
    if found.page and found.text is not None:
        lines = fix_pages.release_lines(client, found.page)
        page = fix_page_out(found.page, found.text, host, lines)
    entries = history(client, series_id, limit=HISTORY_MAXLEN)
    return PatchDetailOut(
        series=series_id,
        patch=patch_state_out(patch, found.page, host),
        fix_page=page,
        fix_page_note=found.note,
        history=patch_history(entries, name),
    )


# --------------------------------------------------------------------------- runners and runs


def _runner_out(data: dict[str, str]) -> RunnerOut:
    info = {k: v for k, v in data.items() if k not in ("name", "seen_at")}
    seen = data.get("seen_at")
    return RunnerOut(name=data["name"], seen_at=seen, age=age_text(age_seconds(seen)), info=info)


def runners_view(client: redis.Redis, config: CarryConfig | None) -> RunnersOut:
    queues = {kind: runner.queue for kind, runner in (config.runners.items() if config else [])}
    depths = queue_depths(client, queues)
    return RunnersOut(
        runners=[_runner_out(r) for r in runners(client)],
        queues=[
            QueueOut(runner=kind, queue=queue, depth=depths[kind])
            for kind, queue in sorted(queues.items())
        ],
    )


def _record_ci(run_id: str, record: Mapping[str, str]) -> CiOut:
    """A run's facts from its record, for a run no series' CI row refers to any more."""
    attempt = record.get("attempt", "")
    return CiOut(
        runner=record.get("kind", ""),
        state=record.get("state", ""),
        run_id=run_id,
        tree_key=record.get("tree_key", ""),
        head_sha=record.get("head_sha", ""),
        detail=record.get("detail", ""),
        url="",
        updated_at=record.get("updated_at", ""),
        attempt=int(attempt) if attempt.isdigit() else 0,
    )


def find_run(client: redis.Redis, run_id: str) -> RunOut:
    """The run as its series' CI row shows it, else as its record says (every run /runs lists
    has one), else a run known only by its log."""
    record = run_fields(client, run_id)
    taken_by = record.get("runner") or None
    for state in all_series(client):
        for kind, ci in state.ci.items():
            if ci.run_id == run_id:
                return RunOut(
                    run_id=run_id,
                    series=state.id,
                    runner=kind,
                    ci=ci_out(ci, state.pr is not None),
                    taken_by=taken_by,
                )
    if record.get("series"):
        return RunOut(
            run_id=run_id,
            series=record["series"],
            runner=record.get("kind") or None,
            ci=_record_ci(run_id, record),
            taken_by=taken_by,
        )
    if runlog(client, run_id, limit=1):
        return RunOut(run_id=run_id, series=None, runner=None, ci=None)
    raise NotFound(f"unknown run '{run_id}'")


def run_log(client: redis.Redis, run_id: str, after: str, limit: int = 1000) -> RunLogOut:
    lines = [
        RunLogLineOut(id=e["id"], stream=e.get("stream", ""), text=e.get("text", ""))
        for e in runlog(client, run_id, after=after, limit=limit)
    ]
    if not lines and after == "-":
        find_run(client, run_id)  # raises NotFound for a run nobody knows
    return RunLogOut(run_id=run_id, after=lines[-1].id if lines else after, lines=lines)


# --------------------------------------------------------------------------- the list of runs

RUNS_PAGE: Final = 50
RUN_RESULTS: Final = tuple(status.value for status in CiStatus)


def duration_text(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def _moment(iso: str | None) -> datetime | None:
    if not iso:
        return None
    try:
        moment = datetime.fromisoformat(iso)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def run_row(record: Mapping[str, str], now: datetime) -> RunRowOut:
    result = record.get("state", "")
    finished = result in FINAL_STATES
    requested, updated = record.get("created_at") or None, record.get("updated_at") or None
    start, end = _moment(requested), (_moment(updated) if finished else now)
    seconds = max(0, int((end - start).total_seconds())) if start and end else None
    attempt = record.get("attempt", "")
    return RunRowOut(
        run_id=record["run_id"],
        series=record.get("series", ""),
        kind=record.get("kind", ""),
        runner=record.get("runner", ""),
        head_sha=record.get("head_sha", ""),
        result=result,
        finished=finished,
        detail=record.get("detail", ""),
        attempt=int(attempt) if attempt.isdigit() else 0,
        requested_at=requested,
        updated_at=updated,
        duration_s=seconds,
        duration=duration_text(seconds),
        age=age_text(age_seconds(requested, now)),
    )


def _matches(row: RunRowOut, chosen: RunsFilterOut) -> bool:
    return (
        (not chosen.series or row.series == chosen.series)
        and (not chosen.runner or chosen.runner in (row.kind, row.runner))
        and (not chosen.head or row.head_sha.startswith(chosen.head.lower()))
        and (not chosen.result or row.result == chosen.result)
    )


def runs_view(
    client: redis.Redis,
    chosen: RunsFilterOut | None = None,
    page: int = 1,
    per_page: int = RUNS_PAGE,
    now: datetime | None = None,
) -> RunsOut:
    """Every hardware run carry keeps, newest request first, those that match `chosen`, one
    page of `per_page` (a page past the last is empty)."""
    chosen = chosen or RunsFilterOut()
    moment = now or datetime.now(UTC)
    every = [run_row(record, moment) for record in all_runs(client)]
    every.sort(key=lambda r: (r.requested_at or "", r.run_id), reverse=True)
    shown = [row for row in every if _matches(row, chosen)]
    start = (page - 1) * per_page
    return RunsOut(
        runs=shown[start : start + per_page],
        filters=chosen,
        total=len(shown),
        page=page,
        pages=max(1, -(-len(shown) // per_page)),
        per_page=per_page,
        series_ids=sorted({r.series for r in every if r.series}),
        kinds=sorted({r.kind for r in every if r.kind}),
        results=list(RUN_RESULTS),
    )
