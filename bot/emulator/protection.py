"""Branch protection and rulesets, enforced on git pushes as GitHub does.

Two settings GitHub offers block what a bot's push may do to a branch:
- a classic branch protection (`PUT /repos/{o}/{r}/branches/{branch}/protection`): force pushes
  refused unless `allow_force_pushes`, deletions unless `allow_deletions`, and
  `required_status_checks` contexts that must have passed on the pushed commit; repository
  admins pass unless `enforce_admins`. A refusal is `GH006` ("protected branch hook declined").
- rulesets of a repository (`POST /repos/{o}/{r}/rulesets`) or of its organization
  (`POST /orgs/{org}/rulesets`), whose rules (`non_fast_forward`, `deletion`,
  `required_status_checks`) apply to the refs their `conditions.ref_name` matches, for everyone
  but their `bypass_actors`. A refusal is `GH013` ("push declined due to repository rule
  violations").

The check runs in git's own pre-receive step (bot/emulator/pre_receive.py, through
`core.hooksPath`) so that a fast-forward is judged on the pushed objects; the emulator tells it
which rules cover which ref, and puts GitHub's reason into git's report afterwards.
Not modelled: pull-request, review, signature, linear-history and merge-queue rules, push
restrictions to users or teams, and the same rules on REST ref updates and merges.
"""

from __future__ import annotations

import gzip
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import ApiError, validation_failed
from .gitops import ZERO_SHA
from .state import Identity, Repo
from .util import iso

DOCS_PROTECTION = "https://docs.github.com/rest/branches/branch-protection#update-branch-protection"
DOCS_RULESETS = "https://docs.github.com/rest/repos/rules#create-a-repository-ruleset"
RULE_TYPES = frozenset({"non_fast_forward", "deletion", "required_status_checks", "creation"})
ENFORCEMENTS = frozenset({"active", "disabled", "evaluate"})
# GitHub's ids of the built-in repository roles in bypass_actors (actor_type RepositoryRole).
ROLE_IDS = {1: "read", 2: "maintain", 3: "triage", 4: "write", 5: "admin"}
PASSED = frozenset({"success", "neutral", "skipped"})
REASONS = {
    "GH013": "push declined due to repository rule violations",
    "GH006": "protected branch hook declined",
}
HOOK_DECLINED = b"pre-receive hook declined"


@dataclass
class BranchProtection:
    branch: str
    required_contexts: list[str] = field(default_factory=list)
    strict: bool = False
    enforce_admins: bool = False
    allow_force_pushes: bool = False
    allow_deletions: bool = False


@dataclass
class Ruleset:
    id: int
    name: str
    source_type: str  # Repository / Organization
    source: str  # full name or organization login
    enforcement: str
    rules: list[dict[str, Any]]
    ref_include: list[str]
    ref_exclude: list[str]
    repo_include: list[str] = field(default_factory=lambda: ["~ALL"])
    repo_exclude: list[str] = field(default_factory=list)
    bypass_actors: list[dict[str, Any]] = field(default_factory=list)
    created_at: float = 0.0
    updated_at: float = 0.0

    def rule(self, kind: str) -> dict[str, Any] | None:
        return next((r for r in self.rules if r.get("type") == kind), None)


@dataclass
class Protections:
    """Every repository's protections and every ruleset, in the hub."""

    classic: dict[tuple[str, str], BranchProtection] = field(default_factory=dict)
    rulesets: dict[int, Ruleset] = field(default_factory=dict)
    next_id: int = 1

    def any_for(self, repo: Repo) -> bool:
        return any(key[0] == repo.full_name.lower() for key in self.classic) or any(
            _covers_repo(r, repo) for r in self.rulesets.values()
        )


# -- parsing what REST clients send --------------------------------------------------------------


def parse_protection(branch: str, data: dict[str, Any]) -> BranchProtection:
    """PUT .../protection's body: its four keys are required (null allowed), as GitHub says."""
    for key in (
        "required_status_checks",
        "enforce_admins",
        "required_pull_request_reviews",
        "restrictions",
    ):
        if key not in data:
            raise ApiError(
                422,
                f'Invalid request.\n\n"{key}" wasn\'t supplied.',
                documentation_url=DOCS_PROTECTION,
            )
    checks = data["required_status_checks"] or {}
    contexts = list(checks.get("contexts") or [])
    contexts += [c["context"] for c in checks.get("checks") or [] if isinstance(c, dict)]
    return BranchProtection(
        branch=branch,
        required_contexts=list(dict.fromkeys(contexts)),
        strict=bool(checks.get("strict")),
        enforce_admins=bool(data["enforce_admins"]),
        allow_force_pushes=bool(data.get("allow_force_pushes")),
        allow_deletions=bool(data.get("allow_deletions")),
    )


def parse_ruleset(
    data: dict[str, Any], source_type: str, source: str, ruleset_id: int, now: float
) -> Ruleset:
    name, enforcement = data.get("name"), data.get("enforcement")
    if not isinstance(name, str) or not name:
        raise validation_failed("Ruleset", "name", "missing_field")
    if enforcement not in ENFORCEMENTS:
        raise validation_failed("Ruleset", "enforcement", "invalid")
    if data.get("target", "branch") != "branch":
        raise ApiError(422, "Invalid target: only branch rulesets are emulated")
    rules = data.get("rules") or []
    if not isinstance(rules, list) or any(
        not isinstance(r, dict) or r.get("type") not in RULE_TYPES for r in rules
    ):
        raise validation_failed("Ruleset", "rules", "invalid")
    conditions = data.get("conditions") or {}
    ref_name = conditions.get("ref_name") or {}
    repo_name = conditions.get("repository_name") or {}
    if source_type == "Organization" and not repo_name:
        raise validation_failed("Ruleset", "conditions", "missing_field")
    return Ruleset(
        id=ruleset_id,
        name=name,
        source_type=source_type,
        source=source,
        enforcement=enforcement,
        rules=rules,
        ref_include=list(ref_name.get("include") or []),
        ref_exclude=list(ref_name.get("exclude") or []),
        repo_include=list(repo_name.get("include") or ["~ALL"]),
        repo_exclude=list(repo_name.get("exclude") or []),
        bypass_actors=list(data.get("bypass_actors") or []),
        created_at=now,
        updated_at=now,
    )


# -- which rules hold for a push ---------------------------------------------------------------


def _glob(pattern: str) -> re.Pattern[str]:
    """GitHub's fnmatch patterns: `*` stays within a path segment, `**` crosses them."""
    out = ""
    for part in re.split(r"(\*\*|\*|\?)", pattern):
        out += {"**": ".*", "*": "[^/]*", "?": "[^/]"}.get(part, re.escape(part))
    return re.compile(out)


def _ref_matches(pattern: str, ref: str, repo: Repo) -> bool:
    if pattern == "~ALL":
        return True
    if pattern == "~DEFAULT_BRANCH":
        return ref == f"refs/heads/{repo.default_branch}"
    return _glob(pattern).fullmatch(ref) is not None


def _covers_repo(ruleset: Ruleset, repo: Repo) -> bool:
    if ruleset.source_type == "Repository":
        return ruleset.source.lower() == repo.full_name.lower()
    if ruleset.source.lower() != repo.owner.lower():
        return False

    def named(patterns: list[str]) -> bool:
        return any(p == "~ALL" or _glob(p).fullmatch(repo.name) for p in patterns)

    return named(ruleset.repo_include) and not named(ruleset.repo_exclude)


def covers(ruleset: Ruleset, repo: Repo, ref: str) -> bool:
    return (
        ruleset.enforcement == "active"
        and _covers_repo(ruleset, repo)
        and any(_ref_matches(p, ref, repo) for p in ruleset.ref_include)
        and not any(_ref_matches(p, ref, repo) for p in ruleset.ref_exclude)
    )


def bypasses(ruleset: Ruleset, identity: Identity, role: str, app_id: int | None) -> bool:
    for actor in ruleset.bypass_actors:
        kind, actor_id = actor.get("actor_type"), actor.get("actor_id")
        if kind == "Integration" and app_id is not None and actor_id == app_id:
            return True
        if kind == "RepositoryRole" and ROLE_IDS.get(int(actor_id or 0)) == role:
            return True
        if kind == "OrganizationAdmin" and role == "admin" and identity.kind == "user":
            return True
    return False


def passed_contexts(repo: Repo, check_runs: list[Any], sha: str) -> set[str]:
    """The contexts that passed on `sha`: the latest commit status of each, and check runs."""
    latest: dict[str, str] = {}
    for status in repo.statuses:
        if status.sha == sha:
            latest[status.context] = status.state
    passed = {context for context, state in latest.items() if state == "success"}
    passed |= {
        run.name
        for run in check_runs
        if run.head_sha == sha and run.status == "completed" and run.conclusion in PASSED
    }
    return passed


def rules_for(
    protections: Protections,
    repo: Repo,
    ref: str,
    new_sha: str,
    *,
    identity: Identity,
    role: str,
    app_id: int | None,
    passed: set[str],
) -> dict[str, dict[str, Any]]:
    """What the pre-receive hook enforces on `ref` for this pusher: {"ruleset": ..., "classic":
    ...}, each only where something applies."""
    out: dict[str, dict[str, Any]] = {}
    merged: dict[str, Any] = {}
    required: list[str] = []
    for ruleset in protections.rulesets.values():
        if not covers(ruleset, repo, ref) or bypasses(ruleset, identity, role, app_id):
            continue
        merged["non_fast_forward"] = merged.get("non_fast_forward") or bool(
            ruleset.rule("non_fast_forward")
        )
        merged["deletion"] = merged.get("deletion") or bool(ruleset.rule("deletion"))
        checks = ruleset.rule("required_status_checks")
        if checks:
            params = checks.get("parameters") or {}
            required += [c["context"] for c in params.get("required_status_checks") or []]
    if merged:
        out["ruleset"] = {**merged, **_missing(required, passed)}
    if ref.startswith("refs/heads/"):
        key = (repo.full_name.lower(), ref.removeprefix("refs/heads/"))
        classic = protections.classic.get(key)
        if classic is not None and (role != "admin" or classic.enforce_admins):
            out["classic"] = {
                "non_fast_forward": not classic.allow_force_pushes,
                "deletion": not classic.allow_deletions,
                **_missing(classic.required_contexts, passed),
            }
    if new_sha == ZERO_SHA:
        for rules in out.values():
            rules["missing_checks"] = []
    return out


def _missing(required: list[str], passed: set[str]) -> dict[str, Any]:
    wanted = list(dict.fromkeys(required))
    return {
        "missing_checks": [c for c in wanted if c not in passed],
        "required_checks": len(wanted),
    }


# -- the push on the wire ----------------------------------------------------------------------


def push_commands(body: bytes, content_encoding: str | None) -> list[tuple[str, str, str]]:
    """(old, new, ref) of each update a receive-pack request asks for (its leading pkt-lines)."""
    if content_encoding == "gzip":
        body = gzip.decompress(body)
    commands, pos = [], 0
    while pos + 4 <= len(body):
        try:
            size = int(body[pos : pos + 4], 16)
        except ValueError:
            break
        if size < 4:
            break
        line = body[pos + 4 : pos + size].split(b"\0", 1)[0].rstrip(b"\n")
        pos += size
        parts = line.decode("utf-8", "replace").split(" ")
        if len(parts) == 3 and len(parts[0]) == 40 and len(parts[1]) == 40:
            commands.append((parts[0], parts[1], parts[2]))
    return commands


def hook_env(hooks_dir: Path, policy: dict[str, Any]) -> dict[str, str]:
    """Environment for http-backend: run the pre-receive hook, with what it must enforce."""
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "core.hooksPath",
        "GIT_CONFIG_VALUE_0": str(hooks_dir),
        "EMULATOR_PROTECTION": json.dumps(policy),
    }


def install_hook(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    hook = directory / "pre-receive"
    script = Path(__file__).with_name("pre_receive.py")
    hook.write_text(f"#!/bin/sh\nexec '{sys.executable}' '{script}'\n")
    hook.chmod(0o755)
    return directory


def _pkt(payload: bytes) -> bytes:
    return f"{len(payload) + 4:04x}".encode() + payload


def _pkt_lines(data: bytes) -> list[bytes | None]:
    """pkt-line payloads; None for a flush packet."""
    out: list[bytes | None] = []
    pos = 0
    while pos + 4 <= len(data):
        size = int(data[pos : pos + 4], 16)
        out.append(None if size == 0 else data[pos + 4 : pos + size])
        pos += 4 if size == 0 else size
    return out


def github_reasons(body: bytes) -> bytes:
    """git's receive-pack report with GitHub's reason for each refused ref (GH013 / GH006 from
    the hook's own words) in place of "pre-receive hook declined"."""
    try:
        packets = _pkt_lines(body)
    except ValueError:
        return body
    sideband = any(p is not None and p[:1] in (b"\x01", b"\x02") for p in packets)
    said = b"".join(p[1:] for p in packets if p is not None and p[:1] == b"\x02")
    codes = {
        ref.decode(): code.decode()
        for code, ref in re.findall(rb"(GH013|GH006): [^\n]*? for (\S+?)\.\s", said)
    }
    if not codes:
        return body

    def rewrite(report: bytes) -> bytes:
        out = b""
        for line in _pkt_lines(report):
            if line is not None and line.startswith(b"ng ") and HOOK_DECLINED in line:
                ref = line.split(b" ")[1].decode()
                if ref in codes:
                    line = line.replace(HOOK_DECLINED, REASONS[codes[ref]].encode())
            out += b"0000" if line is None else _pkt(line)
        return out

    if not sideband:
        return rewrite(body)
    report = b"".join(p[1:] for p in packets if p is not None and p[:1] == b"\x01")
    out, placed = b"", False
    for packet in packets:
        if packet is not None and packet[:1] == b"\x01":
            if not placed:
                out += _pkt(b"\x01" + rewrite(report))
                placed = True
            continue
        out += b"0000" if packet is None else _pkt(packet)
    return out


# -- REST views ----------------------------------------------------------------------------------


def protection_view(base_url: str, repo: Repo, p: BranchProtection) -> dict[str, Any]:
    url = f"{base_url}/repos/{repo.full_name}/branches/{p.branch}/protection"
    checks = None
    if p.required_contexts or p.strict:
        checks = {
            "url": f"{url}/required_status_checks",
            "strict": p.strict,
            "contexts": p.required_contexts,
            "checks": [{"context": c, "app_id": None} for c in p.required_contexts],
            "contexts_url": f"{url}/required_status_checks/contexts",
        }
    return {
        "url": url,
        "required_status_checks": checks,
        "enforce_admins": {"url": f"{url}/enforce_admins", "enabled": p.enforce_admins},
        "allow_force_pushes": {"enabled": p.allow_force_pushes},
        "allow_deletions": {"enabled": p.allow_deletions},
        "required_linear_history": {"enabled": False},
        "block_creations": {"enabled": False},
        "required_conversation_resolution": {"enabled": False},
        "lock_branch": {"enabled": False},
        "allow_fork_syncing": {"enabled": False},
    }


def ruleset_view(base_url: str, web_url: str, r: Ruleset, *, can_bypass: bool) -> dict[str, Any]:
    if r.source_type == "Repository":
        api = f"{base_url}/repos/{r.source}/rulesets/{r.id}"
        html = f"{web_url}/{r.source}/rules/{r.id}"
    else:
        api = f"{base_url}/orgs/{r.source}/rulesets/{r.id}"
        html = f"{web_url}/organizations/{r.source}/settings/rules/{r.id}"
    conditions: dict[str, Any] = {"ref_name": {"include": r.ref_include, "exclude": r.ref_exclude}}
    if r.source_type == "Organization":
        conditions["repository_name"] = {"include": r.repo_include, "exclude": r.repo_exclude}
    return {
        "id": r.id,
        "name": r.name,
        "target": "branch",
        "source_type": r.source_type,
        "source": r.source,
        "enforcement": r.enforcement,
        "bypass_actors": r.bypass_actors,
        "current_user_can_bypass": "always" if can_bypass else "never",
        "node_id": f"RRS_{r.id:08d}",
        "_links": {"self": {"href": api}, "html": {"href": html}},
        "conditions": conditions,
        "rules": r.rules,
        "created_at": iso(r.created_at),
        "updated_at": iso(r.updated_at),
    }
