"""A series' base PR was closed unmerged: find the PR that carries its work on, and check the
series' patches on it, so a maintainer can retarget with evidence (`/carry retarget`).

GitHub's records (the closed PR's timeline) name the candidates; bot.core.successor ranks them;
the engine checks the patches on the best one's merge (or head) commit. Nothing moves until a
maintainer says so: the proposal is stored, shown under "needs attention" and in the history.
"""

from __future__ import annotations

import logging
from typing import Any

from bot.core import successor as core
from bot.core import transitions as tr
from bot.core.history import HistoryKind
from bot.git.engine import PatchInput
from bot.git.mirror import MirrorError
from bot.github.forge import PullState
from bot.series_loader import SeriesInvalid, load_series
from bot.store import series as store
from workers.rebase import engine_for
from workers.runtime import Runtime

log = logging.getLogger("carry.successor")


def find_successor(rt: Runtime, series_id: str, repo: str, number: int) -> dict[str, Any]:
    """Looks the successor up, stores the proposal (or that there is none) and returns it."""
    closed = f"{repo}#{number}"
    if rt.settings.github_auth == "none":
        proposal: dict[str, Any] = {
            "closed": closed,
            "candidates": [],
            "summary": f"base PR {closed} was closed without being merged; without GitHub "
            "credentials carry cannot read its records to find a successor",
        }
        return _store(rt, series_id, proposal)
    forge = rt.forge()
    found = core.candidates(repo, number, forge.timeline(repo, number))
    proposal = {"closed": closed, "candidates": [c.number for c in found]}
    if not found:
        proposal["summary"] = core.summary(closed, None, None, None)
    else:
        best = found[0]
        pull, _etag = forge.pull_state(repo, best.number, None)
        assert pull is not None  # no ETag sent: never a 304
        retarget = core.retarget_for(repo, best.number, pull.state, pull.base_ref)
        proposal |= {
            "ref": f"{repo}#{best.number}",
            "number": best.number,
            "state": pull.state,
            "base_ref": pull.base_ref,
            "commit": pull.merge_commit or pull.head_sha,
            "reasons": list(best.reasons),
            "retarget": {"base": retarget.base, "command": retarget.command},
            "summary": core.summary(closed, best, pull.state, retarget),
            "evidence": _evidence(rt, series_id, best.number, pull),
        }
    return _store(rt, series_id, proposal)


def _store(rt: Runtime, series_id: str, proposal: dict[str, Any]) -> dict[str, Any]:
    store.update_series(
        rt.redis,
        series_id,
        lambda fresh: tr.propose_successor(fresh, proposal),
        create={},
        also=lambda pipe: store.queue_history(
            pipe, series_id, HistoryKind.SUCCESSOR_PROPOSED, **proposal
        ),
    )
    log.info("base PR %s of %s: %s", proposal["closed"], series_id, proposal["summary"])
    return proposal


def _evidence(rt: Runtime, series_id: str, number: int, pull: PullState) -> dict[str, str]:
    """patch -> "status, decision" of the series' patches on the successor's merge commit (or
    its head while it is open), as the engine finds them; one entry saying why when it cannot."""
    series = rt.config.series_by_id(series_id)
    try:
        loaded = load_series(rt.patches_root / series.patches, root=rt.downstream_dir)
    except SeriesInvalid as err:
        return {"(series)": f"not checked: the series has problems ({err.problems[0]})"}
    if not loaded.patch_paths:
        return {"(series)": "not checked: the series has no patches yet"}
    upstream_url = rt.config.upstreams[series.upstream].url
    engine, lock = engine_for(
        upstream_url, rt.cache_dir, rt.settings.git_timeout_s, rt.settings.max_blob_bytes
    )
    commit = pull.merge_commit or pull.head_sha
    ref = f"refs/heads/{pull.base_ref}" if pull.merge_commit else f"refs/pull/{number}/head"
    patches = [PatchInput(p.name, p.read_bytes()) for p in loaded.patch_paths]
    try:
        with lock:
            engine.mirror.ensure()
            if not engine.mirror.has_commit(commit):
                engine.mirror.resolve(ref)
            report = engine.check(commit, patches, base=loaded.base)
    except MirrorError as err:
        return {"(series)": f"not checked: {err}"}
    return {p.patch: f"{p.status.value}, {p.decision.value}" for p in report.patches}
