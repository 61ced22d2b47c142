"""`carry` command line. Each sub-command is a thin shell over a module that does the work.

Sub-commands import what they use when they run: `carry check` starts in well under the time
the service, Redis, Celery, GitPython and pydantic-settings would take to import.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

# `carry check` runs as a short process: what it does not need is imported where it is used.
# typing.TYPE_CHECKING without importing typing (mypy and ruff treat the name the same way).
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from bot.config import Series, Settings
    from bot.core.dropwhen import DeclaredPr
    from bot.core.fixpage import FixPage
    from bot.core.presence import HeadsEvidence
    from bot.core.report import PatchReport, SeriesReport
    from bot.core.state import SeriesState
    from bot.fixes import Carrier
    from bot.git.engine import Engine, PatchInput

DEFAULT_BASE_BRANCH = "main"  # bot.importer.DEFAULT_BASE_BRANCH, without importing it
CACHE_HELP = "mirror cache (default $CARRY_CACHE_DIR, else ~/.cache/carry)"
# Shown by `carry --version`, read from the installed metadata (none of them is imported).
KEY_DEPENDENCIES = ("fastapi", "celery", "redis", "PyGithub", "GitPython", "pydantic")
OPTIONAL_DEPENDENCIES = ("vllm",)  # listed only where installed


# Set in a resident engine (bot.resident_server): the Engine to check with, for (source, cache
# dir, largest blob), kept from one check to the next. None: a new one per check.
RESIDENT_ENGINES: Callable[[str, Path | None, int], Engine] | None = None


class UsageError(Exception):
    """Bad input from the user: printed as one line on stderr, exit status 2."""


# `carry check --exit-code` exits CHECK_NEEDS_HUMAN when a patch conflicts, is partial or
# invalid, or its decision is review (like `git diff --exit-code`): a CI job can gate on it.
CHECK_NEEDS_HUMAN = 1


def _check_local_repo(source: str) -> None:
    path = Path(source)
    if not path.exists():
        raise UsageError(f"repository {source!r} does not exist")
    bare = (path / "HEAD").is_file() and (path / "objects").is_dir()
    if not bare and not (path / ".git").exists():  # .git: a directory, or a file (worktrees)
        raise UsageError(f"{source!r} is not a git repository")


def _read_patches(names: Sequence[str]) -> list[PatchInput]:
    from bot.git.engine import PatchInput

    patches = []
    for name in names:
        try:
            patches.append(PatchInput(name, Path(name).read_bytes()))
        except OSError as err:
            raise UsageError(f"cannot read patch {name!r}: {err.strerror}") from err
    return patches


def _series_patches(
    directory: str,
) -> tuple[list[PatchInput], str | None, tuple[FixPage, ...]]:
    """The series' patches (in order), its base and its fix pages."""
    from bot.series_loader import SeriesInvalid, load_series

    try:
        loaded = load_series(Path(directory))
    except SeriesInvalid as err:
        raise UsageError("; ".join(str(p) for p in err.problems)) from err
    if loaded.awaiting_import:
        raise UsageError(
            f"series {loaded.series_id} is waiting for import: {loaded.awaiting_import}"
        )
    return _read_patches([str(p) for p in loaded.patch_paths]), loaded.base, loaded.pages


def _configured_upstream(series_dir: str) -> tuple[str, str, Series, str]:
    """(repo, head, the series, upstream owner/name) of the configured series whose patches
    live in `series_dir`."""
    from bot.config import ConfigError, load_config, load_settings

    settings = load_settings()
    try:
        config = load_config(settings.config_path, check_dirs=False)
    except ConfigError as err:
        raise UsageError(f"--repo/--head not given and the config cannot say: {err}") from err
    name = Path(series_dir).resolve().name
    for series in config.series:
        if Path(series.patches).name == name:
            if series.base.ref is None:
                raise UsageError(f"series {series.id} follows a tag pattern: give --head")
            upstream = config.upstreams[series.upstream]
            return upstream.url, series.base.ref, series, upstream.repo
    raise UsageError(
        f"no series in {settings.config_path} uses {series_dir}: give --repo and --head"
    )


def cmd_check(args: argparse.Namespace) -> int:
    if args.serve:
        return _serve(args)
    configured: tuple[Series, str] | None = None
    if args.series and not (args.repo and args.head):
        repo, head, series, upstream_repo = _configured_upstream(args.series)
        args.repo, args.head = args.repo or repo, args.head or [head]
        configured = series, upstream_repo
    if not args.repo or not args.head:
        raise UsageError("--repo and --head are required (or --series DIR of a configured series)")
    if not args.patch and not args.series:
        raise UsageError("give --patch FILE... or --series DIR")
    twice = [head for n, head in enumerate(args.head) if head in args.head[:n]]
    if twice:
        raise UsageError(f"--head {twice[0]} is given twice")
    if len(args.head) > 1 and args.write_refreshed:
        raise UsageError(
            "--write-refreshed takes one --head: a patch refreshed for one release line "
            "would not fit the others"
        )
    if "://" not in args.repo and "@" not in args.repo:
        _check_local_repo(args.repo)
    from bot.git.engine import Engine
    from bot.git.mirror import Mirror, MirrorError, normalize_source

    patches = _read_patches(args.patch or [])
    base = args.base
    declared: dict[str, list[DeclaredPr]] = {}
    if args.series:
        series_patches, series_base, pages = _series_patches(args.series)
        patches += series_patches
        base = base or series_base
        declared = _declared(pages, configured, args.repo)
    heads = [_local_revision(args.repo, head) for head in args.head]
    # The reproduce commands run after `cd carry-repro`: they name the patches by full path.
    paths = {patch.name: str(Path(patch.name).resolve()) for patch in patches}
    try:
        cache = Path(args.cache_dir).resolve() if args.cache_dir else None
        source, max_blob = normalize_source(args.repo), _max_blob_bytes()
        if RESIDENT_ENGINES is not None:
            engine = RESIDENT_ENGINES(source, cache, max_blob)
        else:
            engine = Engine(Mirror(source, cache, max_blob_bytes=max_blob))
        if len(heads) > 1:
            evidence = engine.check_heads(
                heads, patches, base=base, patch_paths=paths, declared=declared
            )
            return _print_presence(args, evidence)
        report = engine.check(heads[0], patches, base=base, patch_paths=paths, declared=declared)
    except MirrorError as err:
        raise UsageError(str(err)) from err
    if args.write_refreshed:
        _write_refreshed(report)
    if args.json:
        import json

        json.dump(report.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_table(report))
    needs_human = any(_needs_human(p) for p in report.patches)
    return CHECK_NEEDS_HUMAN if args.exit_code and needs_human else 0


def _serve(args: argparse.Namespace) -> int:
    """`carry check --serve`: the resident engine, until SIGINT or SIGTERM."""
    given = [name for name in ("repo", "head", "patch", "series", "base") if getattr(args, name)]
    if given:
        raise UsageError(f"--serve takes no --{given[0]}: the checks come from later commands")
    from bot.resident_server import ServeError, serve

    cache = Path(args.cache_dir).resolve() if args.cache_dir else _cache_dir().absolute()
    try:
        return serve(cache)
    except ServeError as err:
        raise UsageError(str(err)) from err


def _declared(
    pages: tuple[FixPage, ...], configured: tuple[Series, str] | None, repo: str
) -> dict[str, list[DeclaredPr]]:
    """The PRs declared for the series' patches: their fix pages' and, for a configured
    series, its drop_when, dropped automatically only where its policy.drop_when_merged says.
    Without a config, PRs of the upstream the --repo URL names (any, for a local path)."""
    from bot.core.dropwhen import declared_prs

    if configured is not None:
        series, upstream_repo = configured
        return declared_prs(
            pages,
            series.drop_when_prs(),
            upstream_repo,
            automatic=series.policy.drop_when_merged,
        )
    return declared_prs(pages, {}, _repo_named_by(repo), automatic=False)


def _repo_named_by(url: str) -> str | None:
    """owner/name of a GitHub-style repository URL (https, ssh, scp-like), None for a path."""
    import re

    found = re.match(r"^(?:[a-z][a-z0-9+.-]*://[^/]+/|[\w.-]+@[\w.-]+:)(.+?)(?:\.git)?/?$", url)
    if found is None:
        return None
    parts = found.group(1).strip("/").split("/")
    return "/".join(parts[-2:]) if len(parts) >= 2 else None


def _print_presence(args: argparse.Namespace, evidence: HeadsEvidence) -> int:
    """With several heads: the presence table, as text or JSON."""
    from bot.core.presence import build_table, needs_human, render_text

    table = build_table(evidence, args.head)
    if args.json:
        import json

        json.dump(table.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(render_text(table))
    return CHECK_NEEDS_HUMAN if args.exit_code and needs_human(table) else 0


def _max_blob_bytes() -> int:
    """CARRY_MAX_BLOB_BYTES, read by the settings when the variable is there, else the
    default: without it `carry check` does not load the settings (pydantic adds 0.15 s)."""
    from bot.git.runner import DEFAULT_MAX_BLOB_BYTES

    if "CARRY_MAX_BLOB_BYTES" not in os.environ:
        return DEFAULT_MAX_BLOB_BYTES
    from bot.config import ConfigError, load_settings

    try:
        return load_settings().max_blob_bytes
    except ConfigError as err:
        raise UsageError("; ".join(err.problems)) from err


def _needs_human(patch: PatchReport) -> bool:
    from bot.core.classify import Decision, Status

    stuck = (Status.CONFLICT, Status.PARTIAL, Status.INVALID)
    return patch.status in stuck or patch.decision is Decision.REVIEW


def _local_revision(repo: str, head: str) -> str:
    """`HEAD` (and `HEAD~2`, `HEAD^`) of a local repository means that repository's HEAD, which
    carry's mirror does not have: resolved to its commit here. Anything else is passed on."""
    if not (head == "HEAD" or head.startswith(("HEAD~", "HEAD^"))) or "://" in repo:
        return head
    from bot.git.runner import Git, GitError

    try:
        return Git(cwd=Path(repo)).out(
            "rev-parse", "--verify", "--end-of-options", f"{head}^{{commit}}"
        )
    except GitError as err:
        raise UsageError(
            f"revision {head!r} not found in {repo}: {err.stderr_text.strip()}"
        ) from err


def _write_refreshed(report: SeriesReport) -> None:
    """Rewrites the patch files whose context moved, and says so on stderr (stdout holds the
    table or the JSON). A `# base:` those files made stale is updated, as carry's proposals do:
    to the head, where the whole series (`--series`, or every one of its patches) was checked
    on it; otherwise removed, for the series' other patches were not checked there."""
    rewritten: dict[Path, list[str]] = {}
    checked: dict[Path, list[str]] = {}  # directory -> the names checked from it, in order
    for patch in report.patches:
        checked.setdefault(Path(patch.patch).parent.resolve(), []).append(Path(patch.patch).name)
        if patch.refreshed is not None and patch.changed:
            path = Path(patch.patch)
            path.write_bytes(patch.refreshed)
            print(
                f"carry: rewrote {path}: its context moved on {report.head[:12]}", file=sys.stderr
            )
            rewritten.setdefault(path.parent.resolve(), []).append(path.name)
    for directory, names in rewritten.items():
        _update_base(directory, names, checked[directory], report.head)


def _update_base(directory: Path, names: list[str], checked: list[str], head: str) -> None:
    """The `# base:` of the series file in `directory` that lists the rewritten `names`: the
    head where the check had every patch of the series, in order (`checked`); else none."""
    from dataclasses import replace

    from bot.core.seriesfile import parse_series, render_series, with_base
    from bot.series_loader import SERIES_FILE

    path = directory / SERIES_FILE
    try:
        series, problems = parse_series(path.read_text(encoding="utf-8"), str(path))
    except (OSError, UnicodeDecodeError):
        return  # no series file: the patches were loose files, and no base went stale
    if problems or series.base is None or series.base == head:
        return
    if not set(names) & set(series.patches):
        return
    if list(series.patches) == checked:
        path.write_text(render_series(with_base(series, head)), encoding="utf-8")
        print(
            f"carry: {path}: base is now {head[:12]} (was {series.base[:12]}): the series was "
            "checked on it",
            file=sys.stderr,
        )
        return
    path.write_text(render_series(replace(series, base=None)), encoding="utf-8")
    print(
        f"carry: {path}: removed base {series.base[:12]}: {', '.join(names)} now "
        f"fit{'s' if len(names) == 1 else ''} the head, the series' other patches were not checked there (check it with --series DIR to "
        "record the head as its base)",
        file=sys.stderr,
    )


def render_table(report: SeriesReport) -> str:
    lines = [f"head {report.head} ({report.head_ref or 'detached'}) of {report.repo}"]
    width = max((len(p.patch) for p in report.patches), default=5)
    for p in report.patches:
        lines.append(f"  {p.patch:<{width}}  {p.status.value:<16} {p.decision.value:<6} {p.reason}")
        lines += _landing_lines(p.upstream_commits)
        lines += _hunk_lines(p.conflict or {})
        if p.status.value == "partial":
            lines += _partial_lines(p.evidence)
        if p.conflict and "reproduce" in p.conflict:
            lines.append("      reproduce: " + " && ".join(p.conflict["reproduce"]))
    return "\n".join(lines) + "\n"


def _partial_lines(evidence: list[dict[str, Any]]) -> list[str]:
    """For a partial patch: which hunks upstream has, and which it lacks."""
    hunks: list[dict[str, Any]] = next(
        (e["hunks"] for e in evidence if e.get("signal") == "hunks"), []
    )
    return [
        f"      {'in the head' if h['state'] == 'applied' else 'not in the head'}: "
        f"{h['file']} {h['hunk']} ({h['state']}: {h.get('detail', '')})"
        for h in hunks
    ]


def _landing_lines(landings: list[dict[str, Any]] | None) -> list[str]:
    """Where upstream's version of a patch came from: one line per upstream commit."""
    if landings is None:
        return []
    if not landings:
        return ["      upstream's version: no upstream commit found that brought it"]
    return [
        f"      upstream's version: {c['sha'][:12]} {c['subject']}"
        + (
            f" (PR #{c['pr']})"
            if c.get("pr") is not None and f"#{c['pr']}" not in c["subject"]
            else ""
        )
        + f" [{c['how']}]"
        for c in landings
    ]


def _hunk_lines(conflict: dict[str, Any]) -> list[str]:
    """The hunks a human must look at, each with the upstream commits that touched its lines
    (or the file's recent commits when they cannot be traced), and upstream's text there
    against the patch's."""
    lines = []
    for hunk in conflict.get("hunks", []):
        lines.append(f"      {hunk['file']} {hunk['hunk']}: {hunk.get('detail') or hunk['state']}")
        touched = hunk.get("upstream_commits")
        commits = touched if touched is not None else hunk.get("recent_commits") or []
        label = "touched by" if touched is not None else "recent"
        lines += [f"        {label} {c['sha'][:12]} {c['subject']}" for c in commits[:5]]
        if hunk.get("upstream_diff"):
            lines.append("        upstream's text against the patch's:")
            lines += [f"          {line}" for line in hunk["upstream_diff"].splitlines()]
    return lines


def cmd_replay(args: argparse.Namespace) -> int:
    """What carry would have done over an upstream's past (bot.replay)."""
    if bool(args.series) == bool(args.patch):
        raise UsageError("give --series ID (a configured series) or --patch FILE..., not both")
    if args.every is not None and args.daily:
        raise UsageError("give --every N or --daily, not both")
    if args.every is not None and args.every < 1:
        raise UsageError(f"--every must be 1 or more, not {args.every}")
    spec_args = _replay_series(args) if args.series else _replay_patches(args)
    if not args.repo:
        raise UsageError("--repo is required with --patch (the upstream: local path or URL)")
    if "://" not in args.repo and "@" not in args.repo:
        _check_local_repo(args.repo)
    from bot import replay
    from bot.git.mirror import MirrorError, normalize_source

    local = "://" not in args.repo and "@" not in args.repo
    to = args.to or ("HEAD" if local else None)
    if local and to is not None:
        to = _local_commit(args.repo, to) or to
    start_commit = _local_commit(args.repo, args.start) if local else None
    cache = Path(args.cache_dir).resolve() if args.cache_dir else _cache_dir()
    try:
        spec = replay.ReplaySpec(
            repo=normalize_source(args.repo),
            start=args.start,
            start_commit=start_commit,
            end=to,
            every=args.every,
            daily=args.daily,
            **spec_args,
        )
        engine = replay.open_engine(spec.repo, cache)
        on_progress = replay.ProgressDisplay(sys.stderr)
        result = replay.run(spec, engine, cache, on_progress=on_progress)
    except (MirrorError, replay.ReplayError) as err:
        raise UsageError(str(err)) from err
    for note in result.notes:
        print(f"carry: {note}", file=sys.stderr)
    walked = len(result.records) - result.resumed_at
    rate = walked / result.walk_s * 60 if result.walk_s > 0 else 0.0
    print(
        f"carry: replayed {walked} heads in {result.elapsed_s:.1f} s ({rate:,.0f} heads/min in "
        f"the engine){f'; {result.resumed_at} resumed' if result.resumed_at else ''}",
        file=sys.stderr,
    )
    from bot import replay_report

    if args.html:
        Path(args.html).write_text(replay_report.render_html(result), encoding="utf-8")
        print(f"carry: wrote {args.html}", file=sys.stderr)
    if args.json:
        import json

        json.dump(result.as_dict(), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        sys.stdout.write(replay_report.render_text(result))
    return 0


def _local_commit(repo: str, rev: str) -> str | None:
    """The commit `rev` names in a local repository (any revision it knows: its remote-tracking
    branches too, which carry's mirror does not fetch), or None."""
    from bot.git.runner import Git

    if rev.startswith("-"):
        return None
    return Git(cwd=Path(repo)).rev_parse(rev)


def _cache_dir() -> Path:
    from bot.git.mirror import default_cache_dir

    return default_cache_dir()


def _replay_series(args: argparse.Namespace) -> dict[str, Any]:
    """The configured series `args.series`: its directory's files, order and policy; its
    upstream as --repo when none is given."""
    from bot.config import ConfigError, load_config, load_settings
    from bot.series_loader import SeriesInvalid, load_series

    settings = load_settings()
    try:
        config = load_config(settings.config_path, check_dirs=False)
    except ConfigError as err:
        raise UsageError(f"--series needs the config: {err}") from err
    series = next((s for s in config.series if s.id == args.series), None)
    if series is None:
        known = ", ".join(s.id for s in config.series) or "none"
        raise UsageError(f"no series {args.series!r} in {settings.config_path} (known: {known})")
    root = (settings.downstream_dir or Path()).resolve()
    directory = root / config.downstream.patches_dir / series.patches
    try:
        loaded = load_series(directory, root=root)
    except SeriesInvalid as err:
        raise UsageError("; ".join(str(p) for p in err.problems)) from err
    if loaded.is_awaiting_import:
        raise UsageError(f"series {series.id} is waiting for import: {loaded.awaiting_import}")
    args.repo = args.repo or config.upstreams[series.upstream].url
    files = {p.name: p.read_bytes() for p in sorted(directory.iterdir()) if p.is_file()}
    return {
        "series_id": series.id,
        "files": files,
        "order": loaded.patch_names,
        "auto_drop": series.policy.auto_drop,
        "ref": series.base.ref or _walked_ref(args.to),
        "paused": series.policy.paused,
        "runners": tuple(series.runners),
        "ci_every_head": series.ci.on == "every-head",
    }


def _walked_ref(to: str | None) -> str:
    """The ref the walk moves along, as the planner names it: the branch --to names, else
    HEAD (--to a commit or a tag, or the repository's default branch)."""
    if to is None or to == "HEAD" or to.startswith("refs/tags/"):
        return "HEAD"
    if to.startswith("refs/"):
        return to
    if len(to) >= 7 and all(c in "0123456789abcdef" for c in to.lower()):
        return "HEAD"
    return f"refs/heads/{to}"


def _replay_patches(args: argparse.Namespace) -> dict[str, Any]:
    """--patch files as a series of their own, in the order given."""
    patches = _read_patches(args.patch)
    names = [Path(p.name).name for p in patches]
    if len(set(names)) != len(names):
        raise UsageError("--patch files must have distinct file names")
    if "series" in names:
        raise UsageError("a --patch file may not be named 'series'")
    from bot.replay import loose_patches

    files = loose_patches([(name, p.data) for name, p in zip(names, patches, strict=True)])
    return {
        "series_id": "patches",
        "files": files,
        "order": tuple(names),
        "ref": _walked_ref(args.to),
    }


def cmd_fixes(args: argparse.Namespace) -> int:
    from bot.fixes import Verdict, fix_rows, render_fix_table
    from bot.series_loader import SeriesInvalid, load_all

    try:
        series = load_all(Path(args.patches_dir))
    except SeriesInvalid as err:
        raise UsageError("; ".join(str(p) for p in err.problems)) from err
    states, problem = _service_states([loaded.series_id for loaded in series])
    carriers, no_config = _carriers(states or {})
    for said in (problem, no_config):
        if said:
            print(f"carry: {said}", file=sys.stderr)
    verdicts = {
        f"{series_id}/{patch.name}": Verdict.shown(patch.status, patch.decision)
        for series_id, state in (states or {}).items()
        for patch in state.patches
    }
    rows = fix_rows(series, verdicts, unknown=states is None, carriers=carriers)
    sys.stdout.write(render_fix_table(rows))
    return 0


def _service_states(series_ids: list[str]) -> tuple[dict[str, SeriesState] | None, str | None]:
    """series id -> the service's stored state (SeriesState), read from its Redis; or None and
    why they cannot be known (no Redis answering: decisions then say "unknown")."""
    import redis

    from bot.config import ConfigError, load_settings, redact_url
    from bot.store import series as store
    from workers.service import service_redis_url

    try:
        url = service_redis_url(load_settings())
    except ConfigError as err:
        return None, f"latest decisions unknown: {err}"
    client = redis.Redis.from_url(url, socket_connect_timeout=1, socket_timeout=2)
    states = {}
    try:
        for series_id in series_ids:
            state = store.load_series(client, series_id)
            if state is not None:
                states[series_id] = state
    except redis.RedisError as err:
        return None, f"latest decisions unknown: Redis at {redact_url(url)} did not answer ({err})"
    return states, None


def _carriers(states: dict[str, SeriesState]) -> tuple[list[Carrier] | None, str | None]:
    """The configured series as release carriers, or None and why (no config to read)."""
    from bot.config import ConfigError, load_config, load_settings
    from bot.fixes import carrier_of

    try:
        config = load_config(load_settings().config_path, check_dirs=False)
    except ConfigError as err:
        return None, f"release lines unknown: {err}"
    carriers = [
        carrier_of(series.id, Path(series.patches).name, series.base, states.get(series.id))
        for series in config.series
    ]
    return carriers, None


def cmd_new(args: argparse.Namespace) -> int:
    from bot.scaffold import (
        ScaffoldRefused,
        config_entry,
        import_command,
        series_files,
        write_series,
    )

    try:
        files = series_files(args.series, args.fix, args.release, args.patches_dir)
        directory = write_series(Path(args.patches_dir), args.series, files)
    except ScaffoldRefused as err:
        raise UsageError(str(err)) from err
    written = "\n".join(f"  {directory / name}" for name in files)
    print(f"wrote\n{written}\n")
    print("1. Fill in the TODOs of the fix page (its comments say what each field holds).")
    print("2. Add the series to the config (config/carry.yaml), under series:")
    print(config_entry(args.series))
    print("3. Bring in the patches (or --pr OWNER/REPO#N, or --files A.patch ...):")
    print(f"  {import_command(args.series, args.fix, args.patches_dir)}")
    return 0


def cmd_import(args: argparse.Namespace) -> int:
    from bot import importer

    if not args.series:
        raise UsageError("--series is required (a series id under --patches-dir, or its directory)")
    series_dir = Path(args.series) if "/" in args.series else Path(args.patches_dir) / args.series
    request = importer.ImportRequest(
        series_dir=series_dir,
        repo=args.repo,
        rev_range=args.range,
        pr=args.pr,
        base_branch=args.base_branch or importer.DEFAULT_BASE_BRANCH,
        base_repo=args.base_repo,
        files=tuple(Path(name) for name in args.files or ()),
        names=tuple(args.name or ()),
        page=args.page,
        numbering_from=args.numbering_from,
        cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        dry_run=args.dry_run,
    )
    try:
        result = importer.run_import(request)
    except importer.ImportFailed as err:
        raise UsageError(str(err)) from err
    sys.stdout.write(result.render())
    return 0


def cmd_init(args: argparse.Namespace) -> int:
    from bot import onboard

    try:
        request = onboard.InitRequest(
            repo=args.repo,
            branches=tuple(onboard.BranchSpec.parse(text) for text in args.branch),
            upstream=args.upstream,
            config_path=Path(args.config) if args.config else _config_path(),
            upstream_repo=args.upstream_repo,
            upstream_name=args.upstream_name,
            series_ids=tuple(args.series or ()),
            downstream_repo=args.downstream_repo,
            patches_dir=args.patches_dir,
            cache_dir=Path(args.cache_dir) if args.cache_dir else None,
            force=args.force,
            dry_run=args.dry_run,
        )
        result = onboard.run_init(request)
    except onboard.InitRefused as err:
        raise UsageError(str(err)) from err
    sys.stdout.write(result.render())
    if not args.dry_run:
        _say_job_key()
    return 0


def _say_job_key() -> None:
    """Makes the key the service signs runner jobs with (if there is none) and says what a
    runner host sets; the private key stays in its file."""
    from bot.ci import job_keys, signing
    from bot.config import ConfigError, load_settings

    try:
        path = job_keys.private_key_path(load_settings())
        key, _ = job_keys.ensure_key_pair(path)
    except (ConfigError, OSError) as err:
        print(f"carry: cannot make the job signing key: {err}", file=sys.stderr)
        return
    print(
        f"Runner jobs are signed with {path}; on each runner host set "
        f"CARRY_JOB_PUBLIC_KEY={signing.public_key_text(key)} (`carry job-key` prints it again)."
    )


def _config_path() -> Path:
    from bot.config import load_settings

    return load_settings().config_path


def _service(name: str, *args: object) -> int:
    """Runs workers.service.<name>(*args); its ServiceError is a usage error (one line, status 2)."""
    from workers import service

    try:
        result = getattr(service, name)(*args)
    except service.ServiceError as err:
        raise UsageError(str(err)) from err
    return result if isinstance(result, int) else 0


def _check_port(host: str, port: int) -> None:
    """Refuses a host and port the web service could not listen on (another process has the
    port, or the address is not this host's), before anything starts: one line, not the URL
    of a dashboard that never comes, a bind error and the pollers' warnings. (Another process
    may still take the port in the moment between; the web service then says so itself.)"""
    import socket

    where = f"{host}:{port}"
    try:
        found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as err:
        raise UsageError(f"cannot listen on {where}: {err.strerror} (give another --host)") from err
    family, kind, proto, _, address = found[0]
    with socket.socket(family, kind, proto) as sock:
        # As uvicorn does: a port whose last connections are in TIME_WAIT is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as err:
            raise UsageError(
                f"cannot listen on {where}: {err.strerror} (give another --port)"
            ) from err


def cmd_web(args: argparse.Namespace) -> int:
    _check_port(args.host, args.port)
    return _service("web", args.host, args.port)


def cmd_worker(args: argparse.Namespace) -> int:
    return _service("worker", args.queues, args.concurrency)


def cmd_beat(args: argparse.Namespace) -> int:
    return _service("beat")


def cmd_runner(args: argparse.Namespace) -> int:
    from runner import cli as runner_cli

    return runner_cli.main(
        args.kind, args.config, args.concurrency, name=args.name, workdir=args.workdir
    )


def cmd_runner_user(args: argparse.Namespace) -> int:
    """Creates or resets the Redis user of a runner kind (bot/store/runner_channel.acl_rules)
    with the password in CARRY_RUNNER_PASSWORD, on the Redis of REDIS_URL (an admin's)."""
    import redis

    from bot.config import ConfigError, load_config, load_settings, redact_url
    from bot.store import runner_channel

    try:
        settings = load_settings()
        config = load_config(settings.config_path, check_dirs=False)
    except ConfigError as err:
        print(f"carry: error: {'; '.join(err.problems)}", file=sys.stderr)
        return 2
    runner = config.runners.get(args.kind)
    if runner is None:
        known = ", ".join(sorted(config.runners)) or "none"
        print(
            f"carry: error: runner kind {args.kind!r} is not in runners (known: {known})",
            file=sys.stderr,
        )
        return 2
    if args.print:
        print(" ".join(runner_channel.acl_setuser(args.kind, runner.queue, "<password>")))
        return 0
    if settings.runner_password is None:
        print(
            "carry: error: CARRY_RUNNER_PASSWORD is not set (the runner user's password)",
            file=sys.stderr,
        )
        return 2
    url = settings.redis_url.get_secret_value()
    try:
        client = redis.Redis.from_url(url, socket_timeout=10)
        runner_channel.set_runner_user(
            client, args.kind, runner.queue, settings.runner_password.get_secret_value()
        )
    except redis.RedisError as err:
        print(f"carry: error: Redis at {redact_url(url)}: {err}", file=sys.stderr)
        return 1
    print(
        f"Redis user {runner_channel.runner_user(args.kind)} may now run {args.kind} jobs of {runner.queue}"
    )
    return 0


def cmd_job_key(args: argparse.Namespace) -> int:
    """Makes the service's job signing key pair if there is none (CARRY_JOB_SIGNING_KEY_PATH,
    default <CARRY_CACHE_DIR>/job-signing/private.pem) and prints its public half as the line
    a runner host sets; the private key is never printed."""
    from bot.ci import job_keys, signing
    from bot.config import ConfigError, load_settings

    try:
        settings = load_settings()
        path = job_keys.private_key_path(settings)
        key, created = job_keys.ensure_key_pair(path)
    except (ConfigError, OSError) as err:
        problems = err.problems if isinstance(err, ConfigError) else [str(err)]
        print(f"carry: error: {'; '.join(problems)}", file=sys.stderr)
        return 2
    public = signing.public_key_text(key)
    if args.public_out:
        out = Path(args.public_out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(public + "\n")
        out.chmod(0o644)
    made = "made" if created else "kept"
    print(f"# {made} the job signing key {path}; on each runner host set:", file=sys.stderr)
    print(f"CARRY_JOB_PUBLIC_KEY={public}")
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    """An operator's `/carry approve`: approves one upstream head of a series, by exact SHA
    (an abbreviation must name one head waiting), for the hardware runners, and releases the
    runs that waited for it. Recorded as `/carry approve` is, with the operator's login."""
    import getpass

    import redis

    from bot.ci.job_keys import JobIssuer
    from bot.config import ConfigError, load_settings, redact_url
    from bot.core.ci_plan import ApprovalError
    from bot.queue import celery_app
    from bot.store import series as store
    from workers.ci import requests as ci
    from workers.service import service_redis_url

    try:
        settings = load_settings()
        url = service_redis_url(settings)
    except ConfigError as err:
        print(f"carry: error: {'; '.join(err.problems)}", file=sys.stderr)
        return 2
    celery_app.start_with(settings)  # the broker of the runs it releases
    by = args.by or f"{getpass.getuser()} (carry approve)"
    try:
        client = redis.Redis.from_url(url, socket_connect_timeout=5, socket_timeout=10)
        if store.load_series(client, args.series) is None:
            print(f"carry: error: carry knows no series {args.series!r}", file=sys.stderr)
            return 2
        released = ci.approve(
            client, args.series, args.sha, by, issuer=JobIssuer.from_settings(settings)
        )
    except ApprovalError as err:
        print(f"carry: error: not approved: {err}", file=sys.stderr)
        return 2
    except redis.RedisError as err:
        print(f"carry: error: Redis at {redact_url(url)}: {err}", file=sys.stderr)
        return 1
    state = store.load_series(client, args.series)
    given = args.sha.strip().lower()
    approved = [a for a in (state.approvals if state else []) if a.startswith(given)]
    sha = approved[-1] if approved else given
    runs = sorted({row.run_id for row in released})
    print(
        f"Approved {sha[:12]} of series {args.series} for the hardware runners"
        + (f"; released {', '.join(runs)}" if runs else "; no run was waiting for it")
    )
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    _check_port(args.host, args.port)
    return _service("run", args.host, args.port)


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
LOG_LEVEL_HELP = f"level of carry's log lines on stderr: {', '.join(LOG_LEVELS)} (default warning)"


def log_level_arg(text: str) -> str:
    """A level name of LOG_LEVELS, in any case, as logging spells it (DEBUG ... CRITICAL)."""
    if text.lower() not in LOG_LEVELS:
        raise argparse.ArgumentTypeError(
            f"unknown level {text!r} (choose from {', '.join(LOG_LEVELS)})"
        )
    return text.upper()


def _add_log_level(parser: argparse.ArgumentParser, default: object) -> None:
    parser.add_argument(
        "--log-level", type=log_level_arg, default=default, metavar="LEVEL", help=LOG_LEVEL_HELP
    )


# Every sub-command, in the order `carry --help` lists them (test_cli checks the parser's).
COMMANDS = (
    "check",
    "replay",
    "fixes",
    "import",
    "new",
    "init",
    "web",
    "worker",
    "beat",
    "runner",
    "runner-user",
    "job-key",
    "approve",
    "run",
    "demo",
)


def _add_check(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    check = sub.add_parser("check", help="re-apply patches on an upstream head and classify them")
    check.add_argument("--repo", help="upstream repository: local path (bare or not) or URL")
    check.add_argument(
        "--head",
        action="append",
        help="any revision: branch, tag, SHA, refs/pull/N/head; more than one (release "
        "lines): a table of where each patch is present",
    )
    check.add_argument(
        "--patch",
        action="extend",
        nargs="+",
        metavar="FILE",
        help="patch files, in series order (`--patch a b` or `--patch a --patch b`)",
    )
    check.add_argument("--series", help="series directory under patches/")
    check.add_argument("--base", help="upstream commit the series was last verified on")
    check.add_argument("--json", action="store_true", help="print one JSON object")
    check.add_argument(
        "--exit-code",
        action="store_true",
        help="exit 1 when a patch needs a human (conflict, partial, invalid, review)",
    )
    check.add_argument("--cache-dir", help=CACHE_HELP)
    check.add_argument(
        "--write-refreshed", action="store_true", help="rewrite patch files whose context moved"
    )
    check.add_argument(
        "--serve",
        action="store_true",
        help="run as a resident engine: later `carry check`s with the same cache dir are "
        "answered by this process (on a socket in the cache dir) until it is stopped",
    )
    check.set_defaults(func=cmd_check)


def build_parser(*, only_check: bool = False) -> argparse.ArgumentParser:
    """The whole command line; `only_check`: with the `check` sub-command alone (what
    `carry check ...` parses: the other sub-commands' options cost a short process more
    than nothing)."""
    parser = argparse.ArgumentParser(prog="carry", description=__doc__)
    _add_log_level(parser, "WARNING")
    parser.add_argument(
        "--version", action=_VersionAction, help="print carry's version and its dependencies'"
    )
    # Built for `check` alone, its usage line still lists every sub-command, as argparse would.
    listed = f"{{{','.join(COMMANDS)}}}" if only_check else None
    sub = parser.add_subparsers(dest="command", required=True, metavar=listed)
    _add_check(sub)
    if only_check:
        _add_log_level(sub.choices["check"], argparse.SUPPRESS)  # as the loop below does
        return parser

    replay = sub.add_parser(
        "replay", help="what carry would have done over an upstream's past (no GitHub writes)"
    )
    replay.add_argument(
        "--repo", help="upstream repository: local path or URL (default: the series' upstream)"
    )
    replay.add_argument(
        "--from",
        dest="start",
        required=True,
        metavar="REV|DATE",
        help="first head: tag, commit or branch, or a date (YYYY-MM-DD: the first commit then)",
    )
    replay.add_argument("--to", metavar="REV", help="last head (default: the repository's HEAD)")
    replay.add_argument("--series", metavar="ID", help="a series of the config (config/carry.yaml)")
    replay.add_argument(
        "--patch", action="extend", nargs="+", metavar="FILE", help="patch files, in series order"
    )
    sampled = replay.add_mutually_exclusive_group()
    sampled.add_argument("--every", type=int, metavar="N", help="walk every N-th commit")
    sampled.add_argument("--daily", action="store_true", help="walk the last commit of each day")
    replay.add_argument("--json", action="store_true", help="print one JSON object")
    replay.add_argument("--html", metavar="FILE", help="also write a self-contained HTML report")
    replay.add_argument("--cache-dir", help=CACHE_HELP + "; replay progress is kept there too")
    replay.set_defaults(func=cmd_replay)

    fixes = sub.add_parser("fixes", help="list carried fixes, their upstream state and decision")
    fixes.add_argument("--patches-dir", default="patches")
    fixes.set_defaults(func=cmd_fixes)

    imp = sub.add_parser("import", help="bring patches into a series: commit range, PR or files")
    imp.add_argument("--series", help="series id under --patches-dir (or a series directory)")
    imp.add_argument("--patches-dir", default="patches")
    imp.add_argument("--repo", help="repository of --range or --pr: local path or URL")
    imp.add_argument("--range", help="BASE..TIP: one patch per commit, BASE recorded as base")
    imp.add_argument("--pr", help="OWNER/REPO#N: merge-base(base branch, refs/pull/N/head)..head")
    imp.add_argument(
        "--base-branch",
        help=f"the PR's base: branch, tag, SHA or ref (default {DEFAULT_BASE_BRANCH})",
    )
    imp.add_argument("--base-repo", help="repository holding --base-branch (default: --repo)")
    imp.add_argument("--files", nargs="+", help="patch files (mail or plain diff), in order")
    imp.add_argument("--name", action="append", help="file name per patch, in order (repeatable)")
    imp.add_argument("--page", help="fix page that names the patches no page names yet")
    imp.add_argument("--numbering-from", type=int, help="number of the first new patch")
    imp.add_argument("--cache-dir", help=CACHE_HELP)
    imp.add_argument("--dry-run", action="store_true", help="print what would be written")
    imp.set_defaults(func=cmd_import)

    new = sub.add_parser("new", help="start a series: a directory with a fix page template")
    new.add_argument("series", help="series id (the directory under --patches-dir)")
    new.add_argument("--fix", required=True, help="name of the fix (its page is FIX.md)")
    new.add_argument(
        "--release",
        action="append",
        required=True,
        help="upstream release the fix is carried on (repeatable)",
    )
    new.add_argument("--patches-dir", default="patches")
    new.set_defaults(func=cmd_new)

    init = sub.add_parser(
        "init", help="start carrying an existing branch: series, fix pages, config entries"
    )
    init.add_argument(
        "--repo", required=True, help="repository holding the branch: local path or URL"
    )
    init.add_argument(
        "--branch",
        action="append",
        required=True,
        help="branch to carry, BRANCH or BRANCH:UPSTREAM_LINE (repeatable; one series each)",
    )
    init.add_argument("--upstream", required=True, help="upstream repository: URL or local path")
    init.add_argument("--upstream-repo", help="its OWNER/NAME on GitHub (default: from the URL)")
    init.add_argument("--upstream-name", help="its key under upstreams (default: NAME)")
    init.add_argument(
        "--series", action="append", help="series id per --branch, in order (repeatable)"
    )
    init.add_argument("--config", help="config file (default: $CARRY_CONFIG)")
    init.add_argument(
        "--downstream-repo", help="OWNER/NAME that receives carry's PRs, for a new config"
    )
    init.add_argument("--patches-dir", help="for a new config (default patches)")
    init.add_argument("--cache-dir", help=CACHE_HELP)
    init.add_argument(
        "--force", action="store_true", help="replace series directories and entries that exist"
    )
    init.add_argument("--dry-run", action="store_true", help="print what would be written")
    init.set_defaults(func=cmd_init)

    web = sub.add_parser("web", help="serve webhooks, the API and the dashboard")
    web.add_argument("--host", default="127.0.0.1")
    web.add_argument("--port", type=int, default=8000)
    web.set_defaults(func=cmd_web)

    worker = sub.add_parser("worker", help="run a Celery worker for carry's own tasks")
    worker.add_argument(
        "--queues",
        default="carry,carry.git",
        help="lanes to consume (default both; `make run` runs one worker per lane)",
    )
    worker.add_argument("--concurrency", type=int, default=1)
    worker.set_defaults(func=cmd_worker)

    beat = sub.add_parser("beat", help="run the poller's schedule (Celery beat)")
    beat.set_defaults(func=cmd_beat)

    runner = sub.add_parser("runner", help="a hardware runner: consume jobs of queue hw.<kind>")
    runner.add_argument("--kind", required=True, help="runner kind, a key of runners in config")
    runner.add_argument("--config", help="config file (default: $CARRY_CONFIG)")
    runner.add_argument("--concurrency", type=int, default=1)
    runner.add_argument("--name", help="worker name (default: <kind>@<host>)")
    runner.add_argument("--workdir", help="where the runner keeps its clones and artifacts")
    runner.set_defaults(func=cmd_runner)

    runner_user = sub.add_parser(
        "runner-user",
        help="create a runner kind's least-privilege Redis user (password: CARRY_RUNNER_PASSWORD)",
    )
    runner_user.add_argument(
        "--kind", required=True, help="runner kind, a key of runners in config"
    )
    runner_user.add_argument("--print", action="store_true", help="print the ACL command instead")
    runner_user.set_defaults(func=cmd_runner_user)

    job_key = sub.add_parser(
        "job-key",
        help="make the job signing key pair if needed; print the public half for runners",
    )
    job_key.add_argument(
        "--public-out", help="also write the public half (only) to this file, for runners"
    )
    job_key.set_defaults(func=cmd_job_key)

    approve = sub.add_parser(
        "approve", help="approve an upstream head for the hardware, as `/carry approve` does"
    )
    approve.add_argument("--series", required=True, help="the series' id")
    approve.add_argument("sha", help="the upstream head's SHA (7+ hex digits naming one head)")
    approve.add_argument("--by", help="who approves, for the history (default: your login)")
    approve.set_defaults(func=cmd_approve)

    run = sub.add_parser("run", help="web, worker and beat together (starts Redis if needed)")
    run.add_argument("--host", default="127.0.0.1")
    run.add_argument("--port", type=int, default=8000)
    run.set_defaults(func=cmd_run)

    # --log-level after the command's name too (`carry fixes --log-level info`). SUPPRESS as
    # its default there: a level given before the name stays unless one is given after it.
    for command in sub.choices.values():
        _add_log_level(command, argparse.SUPPRESS)
    # Listed for --help only: main() hands everything after `demo` to bot.demo.
    sub.add_parser("demo", help="play the whole loop against a local GitHub emulator")
    return parser


class _VersionAction(argparse.Action):
    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, help=help)

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        sys.stdout.write(version_text())
        parser.exit()


def version_text() -> str:
    """carry's version, then one line per key dependency (from the installed metadata)."""
    from importlib import metadata

    def installed(name: str) -> str | None:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return None

    import bot

    lines = [f"carry {installed('carry') or bot.__version__}"]
    for name in KEY_DEPENDENCIES:
        lines.append(f"{name} {installed(name) or 'not installed'}")
    lines += [f"{name} {v}" for name in OPTIONAL_DEPENDENCIES if (v := installed(name))]
    return "\n".join(lines) + "\n"


def _demo_argv(argv: Sequence[str]) -> list[str] | None:
    """What follows `demo` when it is the sub-command (after any --log-level), else None."""
    position = 0
    while position < len(argv):
        word = argv[position]
        if word == "--log-level":
            position += 2
        elif word.startswith("--log-level="):
            position += 1
        else:
            return list(argv[position + 1 :]) if word == "demo" else None
    return None


def _setup_logging(level: str, with_settings: bool) -> None:
    """Plain lines on stderr with every known secret redacted: those of the environment, and
    those of the service's settings for the commands that use them (`check` and `fixes` do
    not, and skip loading them). A command that uses them starts a process, so their secrets
    are installed here (bot.log.install_secrets) for what the command stores or logs."""
    from bot import log as carry_log

    settings = _settings_if_valid() if with_settings else None
    secrets = carry_log.secret_values(settings)
    if settings is not None:
        carry_log.install_secrets(secrets)
    carry_log.setup(level, json_lines=False, secrets=secrets)
    logging.getLogger("carry").setLevel(level.upper())


def _settings_if_valid() -> Settings | None:
    """The settings, or None if a variable is bad: the command reports that itself, and the
    raw variables' secrets are redacted meanwhile."""
    from bot.config import ConfigError, load_settings

    try:
        return load_settings()
    except ConfigError:
        return None


def _die_of_sigpipe() -> None:
    """What a command line tool does when its reader goes away (`carry check --json | head`):
    it stops at once, without a word, killed by SIGPIPE as `cat` or `git log` would be. (Python
    ignores SIGPIPE, so a write to the closed pipe raised BrokenPipeError instead.) stdout
    becomes /dev/null first, so that nothing tries to flush into the closed pipe again."""
    import os
    import signal

    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGPIPE)


def main(argv: Sequence[str] | None = None) -> int:
    """The command line. Run as a process (no `argv`), `carry check` goes to a resident engine
    where one listens (bot.resident), and runs here otherwise."""
    if argv is None:
        from bot import resident

        code = resident.run(sys.argv[1:])
        if code is not None:
            return code
    try:
        return run_command(sys.argv[1:] if argv is None else list(argv))
    except BrokenPipeError:
        _die_of_sigpipe()
        raise


def run_command(argv: list[str]) -> int:
    """One command line's exit status; a closed stdout raises BrokenPipeError (main stops as
    SIGPIPE would, the resident engine tells its client to)."""
    demo_argv = _demo_argv(argv)
    if demo_argv is not None:
        from bot import demo

        # carry's own options; a --log-level among them is the demo's default level
        before = build_parser().parse_args(argv[: len(argv) - len(demo_argv)])
        return int(demo.main(demo_argv, prog="carry demo", log_level=before.log_level))
    args = build_parser(only_check=argv[:1] == ["check"]).parse_args(argv)
    try:
        _setup_logging(args.log_level, args.func not in (cmd_check, cmd_fixes, cmd_replay))
        code = int(args.func(args))
        sys.stdout.flush()  # here, where a closed pipe is caught, not at interpreter exit
        return code
    except KeyboardInterrupt:  # Ctrl-C: the user knows why; 128 + SIGINT, as a shell says
        return 130
    except UsageError as err:
        print(f"carry: error: {err}", file=sys.stderr)
        return 2
    except Exception as err:
        config = sys.modules.get("bot.config")  # loaded by the commands that read the config
        if config is None or not isinstance(err, config.ConfigError):
            raise
        print(f"carry: configuration error:\n{err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
