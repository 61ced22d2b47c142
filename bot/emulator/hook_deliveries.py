"""A hook's deliveries over REST: list them and ask for a redelivery, for a repository hook
(`/repos/{owner}/{repo}/hooks/{hook_id}/deliveries`) and for an App's hook (`/app/hook/...`,
App JWT only), as GitHub's REST docs describe them.

GitHub does not redeliver a failed delivery on its own; these endpoints are how a receiver
(or the documented scheduled script) finds failed deliveries and asks for them again. The list
is newest first and paged with an opaque `cursor` (the Link header's `rel="next"`); each item
is one attempt, and `status=success|failure` keeps those answered 200-399 or not. A redelivery is a new attempt with the same `guid` and `redelivery: true`,
answered 202; one of a delivery older than the retention (3 days) is refused with 422.
Listing needs admin access to the repository (anyone else gets 404, as GitHub hides hooks),
or an installation whose App has the `repository_hooks` permission (403 otherwise); asking
for a redelivery needs `repository_hooks: write`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlencode

from .api import Reply
from .errors import ApiError, custom_validation, not_found, validation_failed
from .issues import integration_refused

if TYPE_CHECKING:
    from .api import Request, RestApi
    from .webhooks import Delivery, Dispatcher, Hook

RETENTION_S = (
    3 * 24 * 3600
)  # "You can only redeliver webhooks that were delivered in the past 3 days."
DOCS_REPO = "https://docs.github.com/rest/repos/webhooks"
DOCS_APP = "https://docs.github.com/rest/apps/webhooks"
CURSOR_PREFIX = "v1_"


class HookDeliveries:
    def __init__(self, api: RestApi, dispatcher: Dispatcher) -> None:
        self.api = api
        self.dispatcher = dispatcher
        r = "/repos/{owner}/{repo}/hooks/{hook_id}/deliveries"
        add = api.router.add
        add("GET", r, self.list_repo)
        add("POST", r + "/{delivery_id}/attempts", self.redeliver_repo)
        add("GET", "/app/hook/deliveries", self.list_app, app_auth=True)
        add(
            "POST", "/app/hook/deliveries/{delivery_id}/attempts", self.redeliver_app, app_auth=True
        )

    # -- routes ---------------------------------------------------------------------------------

    def list_repo(self, req: Request, owner: str, repo: str, hook_id: str) -> Reply:
        hook = self._repo_hook(req, owner, repo, hook_id, "read")
        return self._list(req, hook)

    def redeliver_repo(
        self, req: Request, owner: str, repo: str, hook_id: str, delivery_id: str
    ) -> Reply:
        hook = self._repo_hook(req, owner, repo, hook_id, "write")
        return self._redeliver(hook, delivery_id)

    def list_app(self, req: Request) -> Reply:
        return self._list(req, self._app_hook(req))

    def redeliver_app(self, req: Request, delivery_id: str) -> Reply:
        return self._redeliver(self._app_hook(req), delivery_id)

    # -- who may -------------------------------------------------------------------------------

    def _repo_hook(self, req: Request, owner: str, repo: str, hook_id: str, need: str) -> Hook:
        found = self.api.repo_for(req, owner, repo)
        ident = req.identity
        if ident.kind == "installation":
            granted = self.api.hub.apps[ident.app_id or 0].permissions.get("repository_hooks")
            if granted not in (need, "write"):
                raise integration_refused(DOCS_REPO)
        elif ident.login is None:
            raise ApiError(401, "Requires authentication")
        elif self.api.hub.permission(found, ident.login) != "admin":
            raise not_found()
        hook = self.dispatcher.hooks.get(int(hook_id))
        if hook is None or (hook.repo or "").lower() != found.full_name.lower():
            raise not_found()
        return hook

    def _app_hook(self, req: Request) -> Hook:
        hooks = [h for h in self.dispatcher.hooks.values() if h.app_id == req.identity.app_id]
        if not hooks:
            raise not_found()
        return hooks[0]

    # -- list and redeliver --------------------------------------------------------------------

    def _list(self, req: Request, hook: Hook) -> Reply:
        try:
            per_page = min(max(int(req.arg("per_page") or 30), 1), 100)
        except ValueError:
            per_page = 30
        attempts = self.dispatcher.attempted(hook.id)
        wanted = req.arg("status")  # success: status_code 200-399, failure: 400-599
        if wanted is not None:
            if wanted not in ("success", "failure"):
                raise validation_failed("Hook", "status")
            success = wanted == "success"
            attempts = [d for d in attempts if (200 <= d.item()["status_code"] < 400) == success]
        cursor = req.arg("cursor")
        if cursor:
            start = _cursor_id(cursor)
            attempts = [d for d in attempts if d.id <= start]
        page, rest = attempts[:per_page], attempts[per_page:]
        headers = {}
        if rest:
            query = {k: v[-1] for k, v in req.query.items() if k != "cursor"}
            query["cursor"] = f"{CURSOR_PREFIX}{rest[0].id}"
            headers["Link"] = f'<{req.base_url}{req.path}?{urlencode(query)}>; rel="next"'
        return Reply(200, [d.item() for d in page], headers)

    def _redeliver(self, hook: Hook, delivery_id: str) -> Reply:
        original = self._delivery(hook, int(delivery_id))
        first = min(
            (d for d in self.dispatcher.attempted(hook.id) if d.guid == original.guid),
            key=lambda d: d.id,
        )
        if self.dispatcher.now() - (first.delivered_at or 0.0) > RETENTION_S:
            raise custom_validation("Hook", "Cannot redeliver deliveries older than 3 days")
        self.dispatcher.redeliver(original)
        return Reply(202, {})

    def _delivery(self, hook: Hook, delivery_id: int) -> Delivery:
        for delivery in self.dispatcher.attempted(hook.id):
            if delivery.id == delivery_id:
                return delivery
        raise not_found()


def _cursor_id(cursor: str) -> int:
    digits = cursor.removeprefix(CURSOR_PREFIX)
    if not cursor.startswith(CURSOR_PREFIX) or not digits.isdigit():
        raise ApiError(400, "Bad Request")
    return int(digits)
