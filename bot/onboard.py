"""`carry init`: start carrying an existing downstream branch.

A team's branch (its build of vllm-gaudi, say) is an upstream line plus its own commits. For
each branch named, carry finds the upstream line it follows (or takes the one the user names),
the commits on top of it, which upstream change each carries, groups them into fixes
(bot/core/onboard.py decides), and writes one series: the directory, a fix-page stub per fix
and the config entries (the upstream and the series, with links to the upstream PRs).

The series are built with `carry import --range` (bot/importer.py) in a scratch directory and
loaded with every check before anything is written; the config text is edited in place
(bot/config/edit.py) and loaded too. Nothing is overwritten without `force`: a refused init
writes nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from bot.config import ConfigError
from bot.config.edit import EditRefused, add_series, add_upstream, replace_series
from bot.config.loader import parse_config
from bot.config.schema import NAME_RE, CarryConfig
from bot.core.onboard import (
    BranchCommit,
    Fix,
    LineCandidate,
    LineChoice,
    LineKind,
    SeriesEntry,
    UpstreamChange,
    bare_subject,
    choose_line,
    group_fixes,
    picked_from,
    pr_numbers,
    release_name,
    render_config,
    render_fix_page,
    render_series_entry,
    render_upstream_entry,
    series_id,
)
from bot.git.mirror import Mirror, MirrorError, normalize_source
from bot.git.runner import GitError
from bot.importer import ImportFailed, ImportRequest, commit_patch, patch_name, run_import
from bot.series_loader import SERIES_FILE, SERIES_ID_RE, SeriesInvalid, load_series

_REPO_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$")
_FIELD, _RECORD = "\x1f", "\x1e"
TODO_PARTS = "Affects, Test, Problem, Symptom, Who is affected, Verify"


class InitRefused(Exception):
    """carry init wrote nothing; the message says why, in one line."""


@dataclass(frozen=True)
class BranchSpec:
    branch: str
    line: str | None = None  # the upstream branch or tag it follows, when the user says

    @classmethod
    def parse(cls, text: str) -> BranchSpec:
        branch, _, line = text.partition(":")
        branch, line = branch.strip(), line.strip()
        if not branch or (":" in text and not line):
            raise InitRefused(f"bad --branch {text!r} (expected BRANCH or BRANCH:UPSTREAM_LINE)")
        return cls(branch.removeprefix("refs/heads/"), line or None)


@dataclass(frozen=True)
class InitRequest:
    repo: str  # the repository holding the downstream branches: a local path or URL
    branches: tuple[BranchSpec, ...]
    upstream: str  # URL (or local path) of the upstream repository
    config_path: Path
    root: Path = Path()  # the checkout the patches directory is relative to
    upstream_repo: str | None = None  # owner/name on GitHub (derived from a GitHub URL)
    upstream_name: str | None = None  # its key under `upstreams:`
    series_ids: tuple[str, ...] = ()  # one per branch, in order
    downstream_repo: str | None = None  # owner/name receiving carry's PRs, for a new config
    patches_dir: str | None = None
    cache_dir: Path | None = None
    force: bool = False
    dry_run: bool = False


@dataclass(frozen=True)
class PlannedSeries:
    id: str
    branch: str
    line: LineCandidate
    choice: LineChoice | None  # None when the user named the line
    base: str
    tip: str
    commits: tuple[BranchCommit, ...]
    fixes: tuple[Fix, ...]
    directory: Path  # where it is written
    replaces: bool  # a directory or config entry of that id is overwritten (force)
    pages: Mapping[str, str] = field(default_factory=dict)  # file name -> text

    @property
    def release(self) -> str:
        return release_name(self.line.name)


@dataclass(frozen=True)
class InitResult:
    repo: str
    upstream: str
    upstream_name: str
    upstream_added: bool
    config_path: Path
    config_created: bool
    series: tuple[PlannedSeries, ...]
    written: tuple[str, ...]
    review: tuple[str, ...]
    dry_run: bool

    def render(self) -> str:
        out = [f"{'would carry' if self.dry_run else 'carrying'} {self.repo} on {self.upstream}"]
        for planned in self.series:
            out += _render_series(planned)
        verb = "would write" if self.dry_run else "wrote"
        out.append(f"{verb}:")
        out += [f"  {path}" for path in self.written]
        config = "new file" if self.config_created else "edited"
        added = [f"upstream {self.upstream_name}"] if self.upstream_added else []
        added += [f"series {s.id}" for s in self.series]
        out.append(f"  {self.config_path} ({config}: {', '.join(added)})")
        out.append("to review:")
        out += [f"  {number}. {note}" for number, note in enumerate(self.review, start=1)]
        out.append("then:")
        out += [f"  carry check --series {s.directory}" for s in self.series]
        out += ["  carry fixes", "  carry run"]
        if self.dry_run:
            out.append("dry run: nothing was written")
        return "\n".join(out) + "\n"


def _render_series(planned: PlannedSeries) -> list[str]:
    count = len(planned.commits)
    lines = [
        f"series {planned.id}: branch {planned.branch} follows upstream "
        f"{planned.line.describe()} ({count} commit{'s' if count != 1 else ''} on top of "
        f"{planned.base[:12]}){' [replaces the existing one]' if planned.replaces else ''}"
    ]
    if planned.choice is not None and planned.choice.next_best is not None:
        other = planned.choice.next_best
        lines.append(f"  next closest: {other.describe()} ({other.ahead} commits on top)")
    width = max(len(c.patch) for c in planned.commits)
    fix_of = {c.sha: fix.name for fix in planned.fixes for c in fix.commits}
    for commit in planned.commits:
        lines.append(
            f"  {commit.patch:<{width}}  {commit.sha[:12]} {commit.subject}  "
            f"[fix {fix_of[commit.sha]}]"
        )
    return lines


# ---------------------------------------------------------------- the init


def run_init(request: InitRequest) -> InitResult:
    """Plan, check and (unless dry_run) write. Raises InitRefused, writing nothing."""
    if not request.branches:
        raise InitRefused("give at least one --branch")
    if request.series_ids and len(request.series_ids) != len(request.branches):
        raise InitRefused(
            f"--series is given {len(request.series_ids)} times for {len(request.branches)} "
            "branches: give one per --branch, in order, or none"
        )
    config_text, config = _read_config(request.config_path)
    upstream_repo = _upstream_repo(request)
    upstream_name, upstream_added = _upstream_name(request, config, upstream_repo)
    patches_dir = _patches_dir(request, config)
    mirror = _upstream_mirror(request)
    tips = _fetch_branches(mirror, request)
    lines = _upstream_lines(mirror)
    known = _upstream_commits(mirror)
    planned: list[PlannedSeries] = []
    for index, spec in enumerate(request.branches):
        chosen_id = request.series_ids[index] if request.series_ids else None
        planned.append(
            _plan_series(
                mirror,
                request,
                spec,
                tips[spec.branch],
                lines,
                known,
                chosen_id,
                upstream_name,
                config,
                patches_dir,
            )
        )
    _check_ids(planned, request)
    releases = _releases_by_fix(planned)
    planned = [
        _with_pages(p, releases, upstream_repo, f"branch {p.branch} of {request.repo}")
        for p in planned
    ]
    links_of = {p.id: _links(p, upstream_repo) for p in planned}
    entries = [
        SeriesEntry(p.id, upstream_name, p.line.kind, p.line.name, p.id, links_of[p.id])
        for p in planned
    ]
    new_text = _config_text(
        request,
        config_text,
        config,
        entries,
        upstream_added,
        (upstream_name, request.upstream, upstream_repo),
        patches_dir,
    )
    with tempfile.TemporaryDirectory(prefix="carry-init-") as scratch:
        stage = Path(scratch) / "patches"
        for p in planned:
            _stage_series(stage, p, mirror, request.cache_dir)
        written = [str(p.directory / name) for p in planned for name in _files(stage / p.id)]
        if not request.dry_run:
            _write(stage, planned, request.root, request.config_path, new_text)
    return InitResult(
        repo=request.repo,
        upstream=request.upstream,
        upstream_name=upstream_name,
        upstream_added=upstream_added,
        config_path=request.config_path,
        config_created=config_text is None,
        series=tuple(planned),
        written=tuple(written),
        review=tuple(_review(planned, config_text is None, request)),
        dry_run=request.dry_run,
    )


# ---------------------------------------------------------------- the request


def _read_config(path: Path) -> tuple[str | None, CarryConfig | None]:
    if not path.exists():
        return None, None
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InitRefused(f"cannot read {path}: {err}") from err
    try:
        return text, parse_config(text, str(path), check_dirs=False)
    except ConfigError as err:
        problems = "; ".join(err.problems)
        raise InitRefused(f"{path} has problems; fix them first: {problems}") from err


def _upstream_repo(request: InitRequest) -> str:
    repo = request.upstream_repo
    if repo is None:
        match = re.search(
            r"[/:]([A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+?)(?:\.git)?/?$", request.upstream
        )
        if not re.match(r"^([a-z][a-z0-9+.-]*://|[\w.-]+@)", request.upstream) or not match:
            raise InitRefused(
                f"cannot tell the GitHub repository of {request.upstream}: "
                "give --upstream-repo OWNER/NAME"
            )
        repo = match.group(1)
    if not _REPO_RE.match(repo):
        raise InitRefused(f"bad --upstream-repo {repo!r} (expected OWNER/NAME)")
    return repo


def _same_url(one: str, other: str) -> bool:
    def norm(url: str) -> str:
        return url.rstrip("/").removesuffix(".git")

    return norm(one) == norm(other)


def _upstream_name(
    request: InitRequest, config: CarryConfig | None, upstream_repo: str
) -> tuple[str, bool]:
    """The key of the upstream under `upstreams:`, and whether it is new."""
    existing = config.upstreams if config else {}
    if request.upstream_name is None:
        for key, upstream in existing.items():
            if _same_url(upstream.url, request.upstream):
                return key, False
    name = request.upstream_name or re.sub(
        r"[^a-z0-9._-]+", "-", upstream_repo.split("/")[1].lower()
    ).strip("-._")
    if not NAME_RE.match(name):
        raise InitRefused(f"bad --upstream-name {name!r} (expected [a-z0-9][a-z0-9._-]*)")
    if name in existing:
        if _same_url(existing[name].url, request.upstream):
            return name, False
        raise InitRefused(
            f"upstream {name!r} is already in the config with url {existing[name].url}: "
            "give another --upstream-name"
        )
    return name, True


def _patches_dir(request: InitRequest, config: CarryConfig | None) -> str:
    if config is None:
        return request.patches_dir or "patches"
    configured = config.downstream.patches_dir
    if request.patches_dir and Path(request.patches_dir) != Path(configured):
        raise InitRefused(
            f"--patches-dir {request.patches_dir} differs from downstream.patches_dir "
            f"({configured}) of the config"
        )
    return configured


# ---------------------------------------------------------------- git


def _upstream_mirror(request: InitRequest) -> Mirror:
    try:
        mirror = Mirror(request.upstream, request.cache_dir)
        mirror.ensure().widen()  # every branch and tag: the lines a branch may follow
    except MirrorError as err:
        raise InitRefused(f"cannot read the upstream: {err}") from err
    return mirror


def _fetch_branches(mirror: Mirror, request: InitRequest) -> dict[str, str]:
    """branch -> its commit, fetched into the upstream's mirror (refs/carry/init/...)."""
    try:
        source = normalize_source(request.repo)
    except MirrorError as err:
        raise InitRefused(str(err)) from err
    try:
        advertised = mirror.git.run("ls-remote", "--heads", "--", source).text
    except GitError as err:
        raise InitRefused(f"cannot read {request.repo}: {err.stderr_text.strip()}") from err
    heads = {
        line.partition("\t")[2].removeprefix("refs/heads/") for line in advertised.splitlines()
    }
    for spec in request.branches:
        if spec.branch not in heads:
            shown = ", ".join(sorted(heads)[:10]) + (", ..." if len(heads) > 10 else "")
            raise InitRefused(
                f"no branch {spec.branch!r} in {request.repo} (its branches: {shown or 'none'})"
            )
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    local = {spec.branch: f"refs/carry/init/{digest}/{spec.branch}" for spec in request.branches}
    refspecs = [f"+refs/heads/{branch}:{ref}" for branch, ref in local.items()]
    with mirror.locked():
        try:
            mirror.git.run("fetch", "--quiet", "--no-tags", "--force", "--", source, *refspecs)
        except GitError as err:
            raise InitRefused(
                f"cannot fetch from {request.repo}: {err.stderr_text.strip()}"
            ) from err
    tips = {}
    for branch, ref in local.items():
        sha = mirror.git.rev_parse(ref)
        if sha is None:
            raise InitRefused(f"branch {branch} of {request.repo} does not name a commit")
        tips[branch] = sha
    return tips


def _upstream_lines(mirror: Mirror) -> dict[str, tuple[LineKind, str]]:
    """Upstream branches and tags as the upstream advertises them: name -> (kind, local ref)."""
    try:
        advertised = mirror.remote_refs("refs/heads/*", "refs/tags/*")
    except MirrorError as err:
        raise InitRefused(f"cannot read the upstream: {err}") from err
    lines: dict[str, tuple[LineKind, str]] = {}
    for ref in sorted(advertised):
        for prefix, kind in (("refs/heads/", LineKind.BRANCH), ("refs/tags/", LineKind.TAG)):
            if ref.startswith(prefix):
                name = ref.removeprefix(prefix)
                lines.setdefault(name, (kind, f"refs/carry/{ref.removeprefix('refs/')}"))
    return lines


@dataclass(frozen=True)
class _Known:
    """Commits of the upstream branches: sha -> subject, PR number -> shas."""

    subjects: Mapping[str, str]
    by_pr: Mapping[int, tuple[str, ...]]


def _upstream_commits(mirror: Mirror) -> _Known:
    out = mirror.git.run(
        "log", f"--format=%H{_FIELD}%s", "--glob=refs/carry/heads/*", "--"
    ).stdout.decode("utf-8", "replace")
    subjects: dict[str, str] = {}
    by_pr: dict[int, list[str]] = {}
    for line in out.splitlines():
        sha, _, subject = line.partition(_FIELD)
        subjects[sha] = subject
        for number in pr_numbers(subject):
            by_pr.setdefault(number, []).append(sha)
    return _Known(subjects, {n: tuple(shas) for n, shas in by_pr.items()})


def _count(mirror: Mirror, ref: str, tip: str) -> tuple[int, int]:
    """(ahead, behind) of `tip` against `ref`."""
    text = mirror.git.out("rev-list", "--left-right", "--count", f"{ref}...{tip}", "--")
    behind, ahead = (int(part) for part in text.split())
    return ahead, behind


def _candidate(mirror: Mirror, name: str, kind: LineKind, ref: str, tip: str) -> LineCandidate:
    ahead, behind = _count(mirror, ref, tip)
    return LineCandidate(name, kind, ahead, behind)


def _merge_base(mirror: Mirror, ref: str, tip: str) -> str | None:
    result = mirror.git.run("merge-base", ref, tip, check=False)
    return result.text if result.ok and result.text else None


def _named_line(spec: BranchSpec, lines: Mapping[str, tuple[LineKind, str]]) -> str:
    assert spec.line is not None
    for name in (
        spec.line,
        spec.line.removeprefix("refs/heads/"),
        spec.line.removeprefix("refs/tags/"),
    ):
        if name in lines:
            return name
    raise InitRefused(
        f"--branch {spec.branch}:{spec.line}: the upstream has no branch or tag {spec.line!r}"
    )


def _plan_series(
    mirror: Mirror,
    request: InitRequest,
    spec: BranchSpec,
    tip: str,
    lines: Mapping[str, tuple[LineKind, str]],
    known: _Known,
    chosen_id: str | None,
    upstream_name: str,
    config: CarryConfig | None,
    patches_dir: str,
) -> PlannedSeries:
    choice: LineChoice | None = None
    if spec.line is not None:
        name = _named_line(spec, lines)
        line = _candidate(mirror, name, *lines[name], tip)
    else:
        choice = choose_line(
            _candidate(mirror, name, kind, ref, tip) for name, (kind, ref) in lines.items()
        )
        if choice is None:
            raise InitRefused(f"the upstream {request.upstream} has no branches or tags")
        line = choice.chosen
    ref = lines[line.name][1]
    base = _merge_base(mirror, ref, tip)
    if base is None:
        which = f"its {line.describe()}" if spec.line else "any of its branches or tags"
        raise InitRefused(
            f"branch {spec.branch} of {request.repo} shares no history with {which} "
            f"({request.upstream}): is it a branch of that upstream?"
        )
    if line.ahead == 0:
        raise InitRefused(
            f"branch {spec.branch} has no commits on top of upstream {line.describe()} "
            "(it is that line, or behind it): nothing to carry"
        )
    commits = _commits(mirror, spec.branch, line, base, tip, ref, known)
    identifier = chosen_id or series_id(upstream_name, line.name)
    if not SERIES_ID_RE.match(identifier):
        raise InitRefused(
            f"bad series id {identifier!r} (expected lowercase letters, digits, '.-_')"
        )
    directory = Path(patches_dir) / identifier
    in_config = config is not None and any(s.id == identifier for s in config.series)
    exists = (request.root / directory).exists()
    if (exists or in_config) and not request.force:
        where = (
            f"{directory} already exists"
            if exists
            else f"the config already has series {identifier}"
        )
        raise InitRefused(
            f"{where}: carry init never overwrites a series; pass --force to replace it, or "
            "name the series with --series"
        )
    return PlannedSeries(
        id=identifier,
        branch=spec.branch,
        line=line,
        choice=choice,
        base=base,
        tip=tip,
        commits=commits,
        fixes=group_fixes(commits),
        directory=directory,
        replaces=exists or in_config,
    )


def _commits(
    mirror: Mirror,
    branch: str,
    line: LineCandidate,
    base: str,
    tip: str,
    line_ref: str,
    known: _Known,
) -> tuple[BranchCommit, ...]:
    log = mirror.git.run(
        "log",
        "--reverse",
        "--topo-order",
        f"--format=%H{_FIELD}%P{_FIELD}%s{_FIELD}%b{_RECORD}",
        f"{base}..{tip}",
        "--",
    ).stdout.decode("utf-8", "replace")
    rows = [record.strip("\n").split(_FIELD) for record in log.split(_RECORD) if record.strip()]
    for sha, parents, subject, _ in rows:
        if len(parents.split()) > 1:
            raise InitRefused(
                f"branch {branch} has merge commit {sha[:12]} ({subject!r}) on top of upstream "
                f"{line.describe()}: carry carries linear history; rebase the branch onto "
                f"{line.name} first, or name the line it merged last with --branch {branch}:LINE"
            )
    cherry = mirror.git.out("cherry", line_ref, tip, base)
    in_line = {row[2:] for row in cherry.splitlines() if row.startswith("- ")}
    commits = []
    for number, (sha, _, subject, body) in enumerate(rows, start=1):
        try:
            touched = commit_patch(mirror, sha, subject).touched
        except ImportFailed as err:
            raise InitRefused(
                f"branch {branch}: {err} (drop or fix it on the branch first: git rebase -i)"
            ) from err
        commits.append(
            BranchCommit(
                sha=sha,
                subject=subject,
                body=body.strip("\n"),
                patch=patch_name(number, subject),
                touched=touched,
                upstream=_upstream_change(subject, body, known),
                in_line=sha in in_line,
            )
        )
    return tuple(commits)


def _upstream_change(subject: str, body: str, known: _Known) -> UpstreamChange | None:
    for picked in picked_from(body):
        match = [sha for sha in known.subjects if sha.startswith(picked)]
        if len(match) == 1:
            sha = match[0]
            return UpstreamChange(sha, pr_numbers(known.subjects[sha]), "cherry-picked from")
    wanted = bare_subject(subject).lower()
    for number in pr_numbers(subject):
        for sha in known.by_pr.get(number, ()):
            if bare_subject(known.subjects[sha]).lower() == wanted:
                return UpstreamChange(
                    sha, pr_numbers(known.subjects[sha]), "same PR and subject as"
                )
    return None


# ---------------------------------------------------------------- pages and config


def _check_ids(planned: Sequence[PlannedSeries], request: InitRequest) -> None:
    seen: dict[str, str] = {}
    for p in planned:
        if p.id in seen:
            raise InitRefused(
                f"branches {seen[p.id]} and {p.branch} would both be series {p.id}: "
                "name the series with --series, once per --branch"
            )
        seen[p.id] = p.branch


def _releases_by_fix(planned: Sequence[PlannedSeries]) -> dict[str, list[str]]:
    releases: dict[str, list[str]] = {}
    for p in planned:
        for fix in p.fixes:
            if p.release not in releases.setdefault(fix.name, []):
                releases[fix.name].append(p.release)
    return releases


def _with_pages(
    planned: PlannedSeries, releases: Mapping[str, list[str]], upstream_repo: str, source: str
) -> PlannedSeries:
    pages = {
        f"{fix.name}.md": render_fix_page(
            fix, releases=releases[fix.name], upstream_repo=upstream_repo, source=source
        )
        for fix in planned.fixes
    }
    return replace(planned, pages=pages)


def _links(planned: PlannedSeries, upstream_repo: str) -> dict[str, tuple[str, ...]]:
    return {
        commit.patch: tuple(f"{upstream_repo}#{n}" for n in commit.upstream.prs)
        for commit in planned.commits
        if commit.upstream is not None and commit.upstream.prs
    }


def _config_text(
    request: InitRequest,
    text: str | None,
    config: CarryConfig | None,
    entries: Sequence[SeriesEntry],
    upstream_added: bool,
    upstream: tuple[str, str, str],
    patches_dir: str,
) -> str:
    label = str(request.config_path)
    if text is None:
        if request.downstream_repo is None:
            raise InitRefused(
                f"{request.config_path} does not exist: give --downstream-repo OWNER/NAME "
                "(the repository holding the patches, where carry opens its PRs) to write it"
            )
        if not _REPO_RE.match(request.downstream_repo):
            raise InitRefused(
                f"bad --downstream-repo {request.downstream_repo!r} (expected OWNER/NAME)"
            )
        new = render_config(
            downstream_repo=request.downstream_repo,
            patches_dir=patches_dir,
            upstream=upstream,
            series=entries,
        )
    else:
        new = text
        try:
            if upstream_added:
                new = add_upstream(new, render_upstream_entry(*upstream))
            existing = {s.id for s in config.series} if config else set()
            for entry in entries:
                block = render_series_entry(entry)
                new = (
                    replace_series(new, entry.id, block)
                    if entry.id in existing
                    else add_series(new, block)
                )
        except EditRefused as err:
            raise InitRefused(f"cannot add the entries to {label}: {err}") from err
    try:
        parse_config(new, label, check_dirs=False)
    except ConfigError as err:
        raise InitRefused(f"the config would not load: {'; '.join(err.problems)}") from err
    return new


def _stage_series(stage: Path, planned: PlannedSeries, mirror: Mirror, cache: Path | None) -> None:
    """The series, built in `stage` by `carry import --range` into a directory whose pages
    already name its patches; then loaded with every check."""
    directory = stage / planned.id
    directory.mkdir(parents=True)
    (directory / SERIES_FILE).write_text(
        f"# awaiting-import: the commits of branch {planned.branch} on {planned.line.name}; "
        f"run: carry import --range {planned.base}..{planned.tip}\n",
        encoding="utf-8",
    )
    for name, text in planned.pages.items():
        (directory / name).write_text(text, encoding="utf-8")
    request = ImportRequest(
        series_dir=directory,
        repo=mirror.source,
        rev_range=f"{planned.base}..{planned.tip}",
        cache_dir=cache,
    )
    try:
        run_import(request)
        load_series(directory, root=stage.parent)
    except ImportFailed as err:
        raise InitRefused(f"series {planned.id}: {err}") from err
    except SeriesInvalid as err:
        problems = "; ".join(str(p) for p in err.problems)
        raise InitRefused(f"series {planned.id} would not load: {problems}") from err


def _files(directory: Path) -> list[str]:
    names = [p.name for p in directory.iterdir()]
    order = {SERIES_FILE: 0}
    return sorted(names, key=lambda n: (order.get(n, 1 if n.endswith(".patch") else 2), n))


def _write(
    stage: Path, planned: Sequence[PlannedSeries], root: Path, config_path: Path, text: str
) -> None:
    for p in planned:
        target = root / p.directory
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.exists():
            shutil.rmtree(target)  # only with force: checked when planned
        shutil.copytree(stage / p.id, target)
    config_path.parent.mkdir(parents=True, exist_ok=True)
    temporary = config_path.with_name(f".{config_path.name}.carry-init")
    try:
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, config_path)
    finally:
        temporary.unlink(missing_ok=True)


# ---------------------------------------------------------------- what to review


def _review(
    planned: Sequence[PlannedSeries], config_created: bool, request: InitRequest
) -> list[str]:
    notes: list[str] = []
    for p in planned:
        if p.choice is not None and p.choice.tied:
            others = ", ".join(c.describe() for c in p.choice.tied)
            notes.append(
                f"{p.id}: branch {p.branch} is as close to {others} as to {p.line.name} "
                f"({p.line.ahead} commits on top); carry chose {p.line.name}. To follow "
                f"another, run again with --branch {p.branch}:LINE --force"
            )
        for commit in p.commits:
            if commit.in_line:
                notes.append(
                    f"{p.id}/{commit.patch}: upstream {p.line.name} already has an equal "
                    "change; carry's first check will likely propose dropping it"
                )
            for picked in picked_from(commit.body):
                if commit.upstream is None or not commit.upstream.sha.startswith(picked):
                    notes.append(
                        f"{p.id}/{commit.patch}: it says it was cherry-picked from {picked[:12]}, "
                        "which no upstream branch has"
                    )
            if commit.pr_numbers and commit.upstream is None:
                numbers = ", ".join(f"#{n}" for n in commit.pr_numbers)
                notes.append(
                    f"{p.id}/{commit.patch}: {numbers} in its subject matches no upstream commit "
                    "(a downstream PR?); its page says Upstream: not-filed"
                )
    pages = [str(p.directory / name) for p in planned for name in p.pages]
    notes.append(
        f"fill in the TODOs ({TODO_PARTS}) of {len(pages)} fix page"
        f"{'s' if len(pages) != 1 else ''} and delete their comments: {', '.join(pages)}"
    )
    notes.append(
        "the series have no runners or checks: carry watches and rebases them but tests "
        "nothing on hardware; add runners: and checks: (config/carry.example.yaml)"
    )
    if config_created:
        notes.append(
            f"{request.config_path} is new: carry opens its PRs on {request.downstream_repo}, "
            "branch main (downstream:)"
        )
    return notes
