"""Publish a series' proposal on GitHub: branch `carry/<series>`, one PR updated in place.

Nothing is pushed when the proposed tree equals the branch's current tree (no CI rerun for an
identical force-push). Conflicts are reported in one comment that is edited as things change;
main keeps the last good series because carry never writes to it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from bot.core import events as ev
from bot.core import proposal, push_refusal
from bot.core import transitions as tr
from bot.core.history import HistoryKind
from bot.core.publishing import PublishStep, Step, publish_step, replaces_words
from bot.core.render import (
    NOTICE_MARKER,
    commits_kept_notice,
    conflict_report,
    notice_comment,
    pr_body,
)
from bot.core.state import Notice, NoticeKind, PrInfo, PublishRefused, SeriesState
from bot.git.downstream import Downstream, PushRefused
from bot.git.mirror import MirrorError
from bot.git.runner import GitError
from bot.github.forge import DraftsNotSupported, PullInfo
from bot.github.port import ForgePort
from bot.store import series as store
from bot.store.series import now_iso
from workers import downstream as downstream_repo
from workers import tree_branch
from workers.ci import github as hardware
from workers.runtime import Runtime

log = logging.getLogger("carry.publish")

CONFLICT_MARKER = "<!-- carry:conflict-report -->"
# the history entry written when a notice of each kind is said
NOTICE_HISTORY = {
    NoticeKind.COMMITS_KEPT: HistoryKind.BRANCH_COMMITS_KEPT,
    NoticeKind.OTHER: HistoryKind.NOTICE_SAID,
}
LABELS = {"conflict": "carry:conflict", "review": "carry:needs-review"}
NO_DRAFTS_NOTE = (
    "\n> note: GitHub does not allow draft pull requests in this repository (private "
    "repositories on the Free and Pro plans), so this one is open for review although it needs "
    "a human first: see the `{label}` label."
)
NOT_A_DRAFT_NOTE = (
    "\n> note: this pull request needs a human before merging: see the `{label}` label."
)
# GitHub's REST API cannot turn a draft into a ready pull request (only its GraphQL API and
# the web page can), so carry says so instead.
STILL_A_DRAFT_NOTE = (
    "\n> note: carry opened this pull request as a draft because an earlier head needed a "
    'human; this one does not. Press "Ready for review" to take it out of draft.'
)


def publish(
    rt: Runtime,
    state: SeriesState,
    title: str,
    body: str,
    version: str | None,
    changed: bool,
    tree: str | None = None,
    *,
    every_head: bool = False,
) -> list[ev.TreeReady]:
    """Brings carry's PR (or, with nothing to propose, its report) up to date. Returns the tree
    to test, as an event for the planner (it decides whether runners test it), when `tree` is
    given and the tree is on a downstream branch now."""
    series = rt.config.series_by_id(state.id)
    forge = rt.forge()
    downstream = Downstream(
        downstream_repo.url(rt.settings, rt.config),
        rt.cache_dir,
        forge.token,
        network_timeout_s=rt.settings.git_timeout_s,
    )
    main, branch = rt.config.downstream.branch, f"carry/{state.id}"
    heads = downstream.fetch(main, branch)
    if main not in heads:
        raise RuntimeError(
            f"downstream branch {main!r} does not exist in {rt.config.downstream.repo}"
        )
    directory = f"{rt.config.downstream.patches_dir}/{series.patches}"
    current = downstream.read_dir(heads[main], directory)
    stash = store.refreshed(
        rt.redis, state.id, state.checked_head or "", state.checked_digest or ""
    )
    plan = proposal.build(current, state, stash, version, datetime.now(UTC).date())
    pull = forge.find_open_pull(branch)
    if pull is None:
        _notice_close(rt, forge, state)
    step = publish_step(
        files=plan.files,
        open_pr=pull.number if pull is not None else None,
        branch_exists=branch in heads,
        outcome=state.outcome,
        closed=state.closed_pr,
        checked_head=state.checked_head,
    )
    if step.step is Step.HELD:
        _held(rt, state, step)
        return []
    if step.step is Step.NOTHING:
        store.append_history(
            rt.redis,
            state.id,
            HistoryKind.PUBLISHED,
            result="nothing to propose",
            reason=step.reason,
            head=state.checked_head,
        )
        if tree is not None and every_head:  # every head verified: the series as carried
            built = tree_branch.publish_tree(rt, state, tree, current)
            if built is None:  # tested all the same, from the downstream branch
                return [_ready(state, tree, main, heads[main], heads[main], directory)]
            # the check runs go on the tree's own commit (no PR shows them)
            return [_ready(state, tree, built.branch, built.commit, heads[main], directory)]
        return []
    if step.step is Step.REPORT:
        _report_without_pr(rt, state, step.reason)  # a conflict or review with no file to propose
        return []
    on_branch = downstream.read_dir(heads[branch], directory) if branch in heads else None
    if on_branch is not None and proposal.same_patches(
        proposal.applied(current, plan.files), on_branch
    ):
        pushed = None  # the branch already proposes exactly these patches: no push, no CI run
    else:
        append = rt.config.publish_of(state.id).mode == "append"
        try:
            pushed = _push(
                rt, downstream, heads, (main, branch, directory), plan.files, state, append=append
            )
        except PushRefused as refused:
            _refused(rt, forge, state, pull, refused.refusal)
            return []
    # The version GitHub has is the one carry's branch carries, read back: after a push that
    # landed but answered an error, the retry pushes nothing and the branch has the build
    # number the state does not (bot.core.render.landed_version).
    carried = _version_of(downstream.read_dir(pushed, directory) if pushed else on_branch)
    if carried is not None and carried != version:
        body = pr_body(state, carried)
    body = body + "".join(f"\n> note: {n}" for n in plan.notes)
    if pull is None:
        if step.closed_pr is not None and state.closed_pr is not None:
            body = f"{replaces_words(state.closed_pr)}\n\n{body}"
        pull = _open_pull(rt, forge, main, branch, title, body, state)
    else:
        text = body + _not_a_draft(state, pull)
        forge.update_pull(pull.number, title, text, current=pull, series=state.id)
    labels = [label for outcome, label in LABELS.items() if state.outcome == outcome]
    if labels:
        forge.add_labels(pull.number, labels, current=pull)
    _drop_stale_labels(rt, forge, state, pull, labels)
    _conflict_comment(forge, pull.number, state)
    if state.publish_refused is not None:  # what GitHub refused is on the branch now
        text = push_refusal.recovered_comment(state.checked_head)
        forge.upsert_comment(
            pull.number, push_refusal.MARKER, text, only_existing=True, series=state.id
        )
    hardware.note_rename(rt, state.id, forge)
    pr = PrInfo(pull.number, pull.url, branch, "open", pull.draft, pushed or pull.head_sha)
    note = f"PR #{pull.number} {'updated' if pushed else 'report refreshed (nothing pushed)'}"
    tr.published(state, pr, carried, note)
    store.update_series(
        rt.redis,
        state.id,
        lambda fresh: tr.published(fresh, pr, carried, note),
        also=lambda pipe: store.queue_history(
            pipe,
            state.id,
            HistoryKind.PUBLISHED,
            pr=pull.number,
            pushed=bool(pushed),
            head=state.checked_head,
            files=sorted(plan.files),
            notes=plan.notes,
            **({"replaces": step.closed_pr} if step.closed_pr is not None else {}),
        ),
    )
    # carry's branch holds carry's tree now (pushed, or found there): the replaced commits a
    # notice names are replaced indeed
    _say_notices(rt, forge, state.id, pull.number)
    if tree is None:
        return []
    branch_sha = pushed or heads.get(branch) or pull.head_sha
    files = downstream.read_dir(branch_sha, directory)
    tree_branch.publish_tree(rt, state, tree, files)  # the PR's checks stay on the PR
    return [_ready(state, tree, branch, branch_sha, branch_sha, directory)]


def _ready(
    state: SeriesState, tree: str, branch: str, branch_sha: str, series_sha: str, directory: str
) -> ev.TreeReady:
    return ev.TreeReady(
        series_id=state.id,
        head_sha=str(state.checked_head),
        tree=tree,
        branch=branch,
        branch_sha=branch_sha,
        series_sha=series_sha,
        patches_dir=directory,
    )


def _notice_close(rt: Runtime, forge: ForgePort, state: SeriesState) -> None:
    """carry's PR is not open on GitHub although carry last knew it open: its close (or merge)
    was not delivered, or not yet. It is read from GitHub and recorded, so that a person's
    close is respected even then; GitHub's PR does not say who closed it."""
    known = state.pr
    if known is None or known.state != "open" or state.closed_pr is not None:
        return
    found, _ = forge.pull_state(rt.config.downstream.repo, known.number, None)
    if found is None or found.state == "open":
        return

    def record(fresh: SeriesState) -> bool:
        # the close's delivery may have come meanwhile, naming who closed it: that one stays
        still_open = fresh.pr is not None and fresh.pr.state == "open"
        if not still_open or fresh.pr is None or fresh.pr.number != known.number:
            return False
        return tr.record_carry_pr(fresh, found.state)

    store.update_series(
        rt.redis,
        state.id,
        record,
        also=lambda pipe: store.queue_history(
            pipe, state.id, HistoryKind.CARRY_PR_FOUND_CLOSED, pr=known.number, state=found.state
        ),
    )
    fresh = store.load_series(rt.redis, state.id)
    if fresh is not None:  # this copy decides the publish
        state.pr, state.closed_pr = fresh.pr, fresh.closed_pr


def _held(rt: Runtime, state: SeriesState, step: PublishStep) -> None:
    """A person closed carry's PR on this head: no PR is opened, and the history says why."""
    store.append_history(
        rt.redis,
        state.id,
        HistoryKind.PUBLISHED,
        result=f"no new PR: {state.closed_pr_words}" if state.closed_pr else "no new PR",
        reason=step.reason,
        head=state.checked_head,
        **step.fields(),
    )


def _drop_stale_labels(
    rt: Runtime, forge: ForgePort, state: SeriesState, pull: PullInfo, wanted: list[str]
) -> None:
    """carry's outcome labels that no longer hold (a conflict resolved upstream) come off the
    PR; labels carry does not own stay."""
    for label in LABELS.values():
        if label in pull.labels and label not in wanted:
            forge.remove_label(pull.number, label)
            store.append_history(
                rt.redis,
                state.id,
                HistoryKind.LABEL_REMOVED,
                pr=pull.number,
                label=label,
                now=state.outcome,
            )


def _open_pull(
    rt: Runtime,
    forge: ForgePort,
    main: str,
    branch: str,
    title: str,
    body: str,
    state: SeriesState,
) -> PullInfo:
    """A draft when a human must act first; where GitHub refuses drafts, a ready PR whose label
    and body say so."""
    label = LABELS.get(state.outcome)
    try:
        return forge.create_pull(
            main, branch, title, body, draft=label is not None, series=state.id
        )
    except DraftsNotSupported:
        assert label is not None
        store.append_history(
            rt.redis,
            state.id,
            HistoryKind.DRAFT_REFUSED,
            reason="drafts not supported",
            label=label,
        )
        note = NO_DRAFTS_NOTE.format(label=label)
        return forge.create_pull(main, branch, title, body + note, draft=False, series=state.id)


def _not_a_draft(state: SeriesState, pull: PullInfo) -> str:
    """What the PR's draft state does not say: that it needs a human, or no longer does."""
    label = LABELS.get(state.outcome)
    if label and not pull.draft:
        return NOT_A_DRAFT_NOTE.format(label=label)
    return STILL_A_DRAFT_NOTE if pull.draft and not label else ""


def _push(
    rt: Runtime,
    downstream: Downstream,
    heads: dict[str, str],
    where: tuple[str, str, str],
    files: dict[str, bytes | None],
    state: SeriesState,
    *,
    append: bool = False,
) -> str | None:
    """The commit pushed, or None when the branch already has this tree. where: (main,
    carry's branch, the series directory). Commits of others it replaces are kept on a backup
    branch first, and the notice that says so is recorded before the push (said by
    _say_notices once the PR is known). `append` (publish mode append): the commit goes on
    top of carry's branch, which needs no force push, and merges main in where the branch
    lacks it, so the PR shows only the series; nothing is replaced. PushRefused: a GitHub
    setting refuses it."""
    main, branch, directory = where
    changes = {f"{directory}/{name}": data for name, data in files.items()}
    tree = downstream.tree_with(heads[main], changes)
    if branch in heads and downstream.tree_of(heads[branch]) == tree:
        return None
    message = f"carry({state.id}): refresh on {state.base} {str(state.checked_head)[:12]}\n"
    if append and branch in heads:
        on_main = downstream.is_ancestor(heads[main], heads[branch])
        merged = () if on_main else (heads[main],)
        commit = downstream.commit(tree, heads[branch], message, *merged)
        _push_or_read_back(rt, downstream, state.id, (branch, directory), commit, heads[branch])
        return commit
    replaced = downstream.commits_by_others(heads[main], heads[branch]) if branch in heads else []
    if replaced:
        backup = backup_branch(state.id, heads[branch])
        downstream.keep(heads[branch], backup)
        notice = commits_kept_notice(
            (branch, backup, main), heads[branch], state.checked_head or "", replaced, now_iso()
        )
        store.update_series(rt.redis, state.id, lambda fresh: tr.notice_due(fresh, notice))
    commit = downstream.commit(tree, heads[main], message)
    _push_or_read_back(rt, downstream, state.id, (branch, directory), commit, heads.get(branch))
    return commit


def _push_or_read_back(
    rt: Runtime,
    downstream: Downstream,
    series_id: str,
    where: tuple[str, str],
    commit: str,
    expected: str | None,
) -> None:
    """Pushes `commit` to carry's branch (where: the branch, the series directory); a push
    that fails may have landed, so the branch is read back before the error goes on (a
    refusal by a GitHub setting moved nothing and goes on as it is)."""
    try:
        downstream.push(commit, where[0], expected)
    except PushRefused:
        raise
    except GitError:
        _read_back_version(rt, downstream, series_id, where, commit)
        raise


def _version_of(files: dict[str, bytes] | None) -> str | None:
    """The VERSION a series directory carries (None without one)."""
    data = (files or {}).get("VERSION")
    if data is None:
        return None
    return data.decode("utf-8", "replace").strip() or None


def _read_back_version(
    rt: Runtime, downstream: Downstream, series_id: str, where: tuple[str, str], commit: str
) -> None:
    """A push answered an error, but it may have landed (GitHub moved the ref, then the answer
    was lost): the VERSION carry's branch carries now is recorded, so that the next refresh
    does not label another tree with the same build number. The failure itself is the
    caller's to raise (the task is retried)."""
    branch, directory = where
    try:
        tip = downstream.fetch(branch).get(branch)
    except (GitError, MirrorError) as err:
        log.warning(
            "%s: carry's branch could not be read back after a failed push: %s", series_id, err
        )
        return
    carried = _version_of(downstream.read_dir(tip, directory)) if tip else None
    store.update_series(
        rt.redis,
        series_id,
        lambda fresh: tr.version_landed(fresh, carried),
        also=lambda pipe: store.queue_history(
            pipe,
            series_id,
            HistoryKind.PUSH_READ_BACK,
            branch=branch,
            tip=tip,
            landed=tip == commit,
            version=carried,
        ),
    )


def _refused(
    rt: Runtime,
    forge: ForgePort,
    state: SeriesState,
    pull: PullInfo | None,
    refusal: push_refusal.PushRefusal,
) -> None:
    """GitHub refused the push because of a ruleset or a branch protection: recorded as the
    series' `publish_refused` (the dashboard's "needs attention") and in its history, said in
    one PR comment that later refusals edit; not retried, as it would be refused again."""
    log.warning("%s: push refused by GitHub (%s): %s", state.id, refusal.code, refusal.setting)
    found = PublishRefused(
        code=refusal.code,
        source=refusal.source.value,
        branch=refusal.branch,
        blocks=[b.value for b in refusal.blocks],
        setting=refusal.setting,
        fix=refusal.fix,
        head=state.checked_head,
        pr=pull.number if pull is not None else None,
    )
    now = datetime.now(UTC).isoformat(timespec="seconds")
    store.update_series(
        rt.redis,
        state.id,
        lambda fresh: tr.publish_refused(fresh, found, now),
        also=lambda pipe: store.queue_history(
            pipe,
            state.id,
            HistoryKind.PUBLISH_REFUSED,
            head=state.checked_head,
            pr=found.pr,
            **refusal.fields(),
        ),
    )
    fresh = store.load_series(rt.redis, state.id)
    attempts = fresh.publish_refused.attempts if fresh and fresh.publish_refused else 1
    if pull is not None:
        text = push_refusal.comment(refusal, state.checked_head, attempts)
        forge.upsert_comment(pull.number, push_refusal.MARKER, text, series=state.id)


def backup_branch(series_id: str, tip: str) -> str:
    """Outside `carry/`: git cannot hold `carry/<series>` and `carry/<series>/...` at once."""
    return f"carry-backup/{series_id}/{tip[:12]}"


def _say_notices(rt: Runtime, forge: ForgePort, series_id: str, number: int) -> None:
    """Says every notice still due on PR `number`: one comment each, found by its marker before
    one is created (a comment that was posted although GitHub answered an error is not posted
    again), then recorded as said with its history entry. A failure leaves it due: the task's
    retry, or the next publish that pushes (or finds its tree on the branch), says it."""
    fresh = store.load_series(rt.redis, series_id)
    for notice in [n for n in (fresh.notices if fresh else []) if n.due]:
        marker = NOTICE_MARKER.format(id=notice.id)
        comment_id = forge.upsert_comment(number, marker, notice_comment(notice), series=series_id)
        _said(rt, series_id, notice, number, comment_id or 0)


def _said(rt: Runtime, series_id: str, notice: Notice, number: int, comment_id: int) -> None:
    store.update_series(
        rt.redis,
        series_id,
        lambda fresh: tr.notice_said(fresh, notice.id, number, comment_id, now_iso()),
        also=lambda pipe: store.queue_history(
            pipe,
            series_id,
            NOTICE_HISTORY[notice.kind],
            pr=number,
            notice=notice.id,
            comment_id=comment_id,
            **notice.details,
        ),
    )


def _conflict_comment(forge: ForgePort, number: int, state: SeriesState) -> None:
    conflicts = [p for p in state.patches if p.status == "conflict"]
    if conflicts:
        text = "\n".join(
            [CONFLICT_MARKER, "## carry: conflicts", "", *map(conflict_report, conflicts)]
        )
        forge.upsert_comment(number, CONFLICT_MARKER, text, series=state.id)
        return
    # Update an earlier report (if any) so nobody acts on a conflict that is gone.
    forge.upsert_comment(
        number,
        CONFLICT_MARKER,
        f"{CONFLICT_MARKER}\nThe earlier conflicts are resolved on {str(state.checked_head)[:12]}.",
        only_existing=True,
        series=state.id,
    )


def _report_without_pr(rt: Runtime, state: SeriesState, reason: str) -> None:
    store.append_history(
        rt.redis,
        state.id,
        HistoryKind.PUBLISHED,
        result="needs attention, but nothing to push: see the dashboard",
        reason=reason,
        outcome=state.outcome,
        head=state.checked_head,
    )
