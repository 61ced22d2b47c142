"""REST endpoints that set what protects a branch, as GitHub documents them: a branch's classic
protection (`GET`/`PUT`/`DELETE /repos/{o}/{r}/branches/{branch}/protection`) and rulesets of a
repository (`/repos/{o}/{r}/rulesets[/{id}]`) or of an organization (`/orgs/{org}/rulesets`).
They need a repository admin (an organization's rulesets: an admin of its repositories), or an
App installation with `administration: write`. Enforcement is bot/emulator/protection.py's."""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import protection as p
from .api import Reply
from .errors import ApiError, not_found

if TYPE_CHECKING:
    from .api import Request, RestApi
    from .state import Repo

NOT_PROTECTED = "https://docs.github.com/rest/branches/branch-protection#get-branch-protection"


class RulesApi:
    def __init__(self, api: RestApi) -> None:
        self.api = api
        self.hub = api.hub
        add = api.router.add
        r = "/repos/{owner}/{repo}"
        add("GET", r + "/branches/{branch}/protection", self.get_protection)
        add("PUT", r + "/branches/{branch}/protection", self.put_protection)
        add("DELETE", r + "/branches/{branch}/protection", self.delete_protection)
        add("GET", r + "/rulesets", self.list_repo_rulesets)
        add("POST", r + "/rulesets", self.create_repo_ruleset)
        add("GET", r + "/rulesets/{ruleset_id}", self.get_repo_ruleset)
        add("DELETE", r + "/rulesets/{ruleset_id}", self.delete_repo_ruleset)
        add("POST", "/orgs/{org}/rulesets", self.create_org_ruleset)
        add("GET", "/orgs/{org}/rulesets", self.list_org_rulesets)

    # -- who may -------------------------------------------------------------------------------

    def _admin_repo(self, req: Request, owner: str, repo: str) -> Repo:
        found = self.api.repo_for(req, owner, repo)
        self._require_admin(req, found)
        return found

    def _require_admin(self, req: Request, repo: Repo) -> None:
        ident = req.identity
        if ident.kind == "installation":
            app = self.hub.apps[self.hub.installations[ident.installation_id or 0].app_id]
            if app.permissions.get("administration") != "write":
                raise ApiError(403, "Resource not accessible by integration")
            return
        if self.hub.permission(repo, req.actor) != "admin":
            raise not_found()

    def _org_repos(self, req: Request, org: str) -> list[Repo]:
        repos = [r for r in self.hub.repos.values() if r.owner.lower() == org.lower()]
        if not repos:
            raise not_found()
        for repo in repos:
            self._require_admin(req, repo)
        return repos

    # -- classic protection --------------------------------------------------------------------

    def get_protection(self, req: Request, owner: str, repo: str, branch: str) -> Reply:
        found = self._admin_repo(req, owner, repo)
        held = self.hub.protections.classic.get((found.full_name.lower(), branch))
        if held is None:
            raise ApiError(404, "Branch not protected", documentation_url=NOT_PROTECTED)
        return Reply(200, p.protection_view(self.hub.base_url, found, held))

    def put_protection(self, req: Request, owner: str, repo: str, branch: str) -> Reply:
        found = self._admin_repo(req, owner, repo)
        if found.git.ref_sha(f"refs/heads/{branch}") is None:
            raise ApiError(404, "Branch not found")
        held = p.parse_protection(branch, req.json_object())
        self.hub.protections.classic[(found.full_name.lower(), branch)] = held
        return Reply(200, p.protection_view(self.hub.base_url, found, held))

    def delete_protection(self, req: Request, owner: str, repo: str, branch: str) -> Reply:
        found = self._admin_repo(req, owner, repo)
        if self.hub.protections.classic.pop((found.full_name.lower(), branch), None) is None:
            raise ApiError(404, "Branch not protected", documentation_url=NOT_PROTECTED)
        return Reply(204)

    # -- rulesets -----------------------------------------------------------------------------

    def _view(self, ruleset: p.Ruleset) -> dict[str, object]:
        return p.ruleset_view(self.hub.base_url, self.hub.web_url, ruleset, can_bypass=False)

    def _create(self, req: Request, source_type: str, source: str) -> Reply:
        store = self.hub.protections
        ruleset = p.parse_ruleset(
            req.json_object(), source_type, source, store.next_id, self.hub.clock.now()
        )
        store.rulesets[ruleset.id] = ruleset
        store.next_id += 1
        return Reply(201, self._view(ruleset))

    def create_repo_ruleset(self, req: Request, owner: str, repo: str) -> Reply:
        found = self._admin_repo(req, owner, repo)
        return self._create(req, "Repository", found.full_name)

    def create_org_ruleset(self, req: Request, org: str) -> Reply:
        repos = self._org_repos(req, org)
        return self._create(req, "Organization", repos[0].owner)

    def list_repo_rulesets(self, req: Request, owner: str, repo: str) -> Reply:
        found = self.api.repo_for(req, owner, repo)
        held = [
            r
            for r in self.hub.protections.rulesets.values()
            if (r.source_type == "Repository" and r.source.lower() == found.full_name.lower())
            or (r.source_type == "Organization" and r.source.lower() == found.owner.lower())
        ]
        return Reply(200, [self._view(r) for r in held])

    def list_org_rulesets(self, req: Request, org: str) -> Reply:
        self._org_repos(req, org)
        held = [
            r
            for r in self.hub.protections.rulesets.values()
            if r.source_type == "Organization" and r.source.lower() == org.lower()
        ]
        return Reply(200, [self._view(r) for r in held])

    def _repo_ruleset(self, found: Repo, ruleset_id: str) -> p.Ruleset:
        held = self.hub.protections.rulesets.get(int(ruleset_id)) if ruleset_id.isdigit() else None
        if held is None or held.source.lower() not in (
            found.full_name.lower(),
            found.owner.lower(),
        ):
            raise not_found()
        return held

    def get_repo_ruleset(self, req: Request, owner: str, repo: str, ruleset_id: str) -> Reply:
        found = self.api.repo_for(req, owner, repo)
        return Reply(200, self._view(self._repo_ruleset(found, ruleset_id)))

    def delete_repo_ruleset(self, req: Request, owner: str, repo: str, ruleset_id: str) -> Reply:
        found = self._admin_repo(req, owner, repo)
        held = self._repo_ruleset(found, ruleset_id)
        if held.source_type != "Repository":
            raise not_found()
        del self.hub.protections.rulesets[held.id]
        return Reply(204)
