"""REST endpoints that move a repository, as GitHub documents them: `PATCH /repos/{o}/{r}`
with a new `name` renames it ("Update a repository"), `POST /repos/{o}/{r}/transfer` gives it
to another account ("Transfer a repository"; 202, the new owner's acceptance taken as given).
Both need a repository admin (an App: `administration: write`). Afterwards the old name
redirects (bot/emulator/server.py) and webhooks carry the new name with the same id."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .api import Reply
from .errors import ApiError, validation_failed

if TYPE_CHECKING:
    from .api import Request, RestApi
    from .state import Repo

DOC_UPDATE = "https://docs.github.com/rest/repos/repos#update-a-repository"


class RepoMoves:
    def __init__(self, api: RestApi) -> None:
        self.api = api
        self.hub = api.hub
        r = "/repos/{owner}/{repo}"
        api.router.add("PATCH", r, self.update_repo)
        api.router.add("POST", r + "/transfer", self.transfer_repo)

    def update_repo(self, req: Request, owner: str, repo: str) -> Reply:
        found = self._admin_repo(req, owner, repo)
        data = req.json_object()
        description = data.get("description")
        if description is not None:
            if not isinstance(description, str):
                raise validation_failed("Repository", "description", "invalid")
            found.description = description
        name = data.get("name")
        if name is not None and name != found.name:
            if not isinstance(name, str):
                raise validation_failed("Repository", "name", "invalid")
            self.hub.rename_repo(found.owner, found.name, name, actor=req.actor)
        return Reply(200, self.hub.views.repository(found, viewer=req.identity.login))

    def transfer_repo(self, req: Request, owner: str, repo: str) -> Reply:
        found = self._admin_repo(req, owner, repo)
        data = req.json_object()
        new_owner, new_name = data.get("new_owner"), data.get("new_name")
        if not isinstance(new_owner, str) or not new_owner:
            raise validation_failed("Repository", "new_owner", "missing_field")
        if new_name is not None and not isinstance(new_name, str):
            raise validation_failed("Repository", "new_name", "invalid")
        self.hub.transfer_repo(
            found.owner, found.name, new_owner, new_name=new_name, actor=req.actor
        )
        return Reply(202, self.hub.views.repository(found, viewer=req.identity.login))

    def _admin_repo(self, req: Request, owner: str, repo: str) -> Repo:
        found = self.api.repo_for(req, owner, repo)
        ident = req.identity
        if ident.kind == "installation":
            app = self.hub.apps[self.hub.installations[ident.installation_id or 0].app_id]
            if app.permissions.get("administration") != "write":
                raise ApiError(403, "Resource not accessible by integration")
        elif self.hub.permission(found, req.actor) != "admin":
            raise ApiError(
                403, "Must have admin rights to Repository.", documentation_url=DOC_UPDATE
            )
        return found
