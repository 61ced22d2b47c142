"""REST representations: every object is built with the REQUIRED properties of its schema in
GitHub's REST description (tests/data/github/rest), with absolute URLs that route back to this
emulator."""

from __future__ import annotations

import zlib
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from .gitops import CommitInfo, FileChange
from .state import LEGACY_PERMISSION, App, CheckRun, Comment, CommitStatus, Issue, Label, Repo
from .util import iso, legacy_node_id, node_id

if TYPE_CHECKING:
    from .hub import Hub


def repo_url_fields(api: str, html: str) -> dict[str, str]:
    """The *_url family of a repository (api = .../repos/o/r, html = .../o/r)."""
    return {
        "url": api,
        "html_url": html,
        "archive_url": api + "/{archive_format}{/ref}",
        "assignees_url": api + "/assignees{/user}",
        "blobs_url": api + "/git/blobs{/sha}",
        "branches_url": api + "/branches{/branch}",
        "collaborators_url": api + "/collaborators{/collaborator}",
        "comments_url": api + "/comments{/number}",
        "commits_url": api + "/commits{/sha}",
        "compare_url": api + "/compare/{base}...{head}",
        "contents_url": api + "/contents/{+path}",
        "contributors_url": api + "/contributors",
        "deployments_url": api + "/deployments",
        "downloads_url": api + "/downloads",
        "events_url": api + "/events",
        "forks_url": api + "/forks",
        "git_commits_url": api + "/git/commits{/sha}",
        "git_refs_url": api + "/git/refs{/sha}",
        "git_tags_url": api + "/git/tags{/sha}",
        "hooks_url": api + "/hooks",
        "issue_comment_url": api + "/issues/comments{/number}",
        "issue_events_url": api + "/issues/events{/number}",
        "issues_url": api + "/issues{/number}",
        "keys_url": api + "/keys{/key_id}",
        "labels_url": api + "/labels{/name}",
        "languages_url": api + "/languages",
        "merges_url": api + "/merges",
        "milestones_url": api + "/milestones{/number}",
        "notifications_url": api + "/notifications{?since,all,participating}",
        "pulls_url": api + "/pulls{/number}",
        "releases_url": api + "/releases{/id}",
        "stargazers_url": api + "/stargazers",
        "statuses_url": api + "/statuses/{sha}",
        "subscribers_url": api + "/subscribers",
        "subscription_url": api + "/subscription",
        "tags_url": api + "/tags",
        "teams_url": api + "/teams",
        "trees_url": api + "/git/trees{/sha}",
    }


class RestViews:
    """Builds REST response bodies from hub state."""

    def __init__(self, hub: Hub) -> None:
        self.hub = hub

    @property
    def base(self) -> str:
        return self.hub.base_url

    @property
    def web(self) -> str:
        return self.hub.web_url

    # -- URLs -----------------------------------------------------------------------------------

    def repo_api(self, repo: Repo) -> str:
        return f"{self.base}/repos/{repo.full_name}"

    def repo_html(self, repo: Repo) -> str:
        return f"{self.web}/{repo.full_name}"

    def clone_url(self, repo: Repo) -> str:
        return f"{self.web}/{repo.full_name}.git"

    # -- users ----------------------------------------------------------------------------------

    def user(self, login: str | None) -> dict[str, Any] | None:
        if login is None:
            return None
        u = self.hub.user(login)
        api = f"{self.base}/users/{quote(u.login)}"
        return {
            "login": u.login,
            "id": u.id,
            "node_id": legacy_node_id("User", u.id),
            "avatar_url": f"{self.web}/avatars/u/{u.id}?v=4",
            "gravatar_id": "",
            "url": api,
            "html_url": f"{self.web}/{quote(u.login)}",
            "followers_url": api + "/followers",
            "following_url": api + "/following{/other_user}",
            "gists_url": api + "/gists{/gist_id}",
            "starred_url": api + "/starred{/owner}{/repo}",
            "subscriptions_url": api + "/subscriptions",
            "organizations_url": api + "/orgs",
            "repos_url": api + "/repos",
            "events_url": api + "/events{/privacy}",
            "received_events_url": api + "/received_events",
            "type": u.type,
            "site_admin": False,
        }

    def owned_user(self, login: str) -> dict[str, Any]:
        data = self.user(login)
        assert data is not None
        return data

    # -- repositories ---------------------------------------------------------------------------

    def repository_core(self, repo: Repo) -> dict[str, Any]:
        """Fields common to every repository representation (REST and webhook)."""
        open_count = sum(1 for i in repo.issues.values() if i.state == "open")
        data: dict[str, Any] = {
            "id": repo.id,
            "node_id": node_id("R", repo.id),
            "name": repo.name,
            "full_name": repo.full_name,
            "private": repo.private,
            "owner": self.owned_user(repo.owner),
            "description": repo.description,
            "fork": False,
        }
        data.update(repo_url_fields(self.repo_api(repo), self.repo_html(repo)))
        data.update(
            {
                "git_url": f"{self.web.replace('http', 'git', 1)}/{repo.full_name}.git",
                "ssh_url": f"git@127.0.0.1:{repo.full_name}.git",
                "clone_url": self.clone_url(repo),
                "svn_url": self.repo_html(repo),
                "homepage": None,
                "size": 0,
                "stargazers_count": 0,
                "watchers_count": 0,
                "language": None,
                "has_issues": True,
                "has_projects": True,
                "has_downloads": True,
                "has_wiki": True,
                "has_pages": False,
                "has_discussions": False,
                "forks_count": 0,
                "mirror_url": None,
                "archived": False,
                "disabled": False,
                "open_issues_count": open_count,
                "license": None,
                "forks": 0,
                "open_issues": open_count,
                "watchers": 0,
                "default_branch": repo.default_branch,
                "is_template": False,
                "topics": [],
                "visibility": "private" if repo.private else "public",
                "web_commit_signoff_required": False,
            }
        )
        return data

    def repository(self, repo: Repo, viewer: str | None = None) -> dict[str, Any]:
        """Satisfies `full-repository`, `repository` and `minimal-repository` at once."""
        data = self.repository_core(repo)
        data.update(
            {
                "created_at": iso(repo.created_at),
                "updated_at": iso(repo.pushed_at),
                "pushed_at": iso(repo.pushed_at),
                "allow_squash_merge": True,
                "allow_merge_commit": True,
                "allow_rebase_merge": True,
                "allow_auto_merge": False,
                "delete_branch_on_merge": False,
                "allow_forking": True,
                "network_count": 0,
                "subscribers_count": 0,
            }
        )
        if viewer is not None:
            role = self.hub.permission(repo, viewer)
            data["permissions"] = {
                "admin": role == "admin",
                "maintain": role in ("admin", "maintain"),
                "push": role in ("admin", "maintain", "write"),
                "triage": role in ("admin", "maintain", "write", "triage"),
                "pull": role != "none",
            }
        return data

    # -- git refs and commits -------------------------------------------------------------------

    def git_ref(self, repo: Repo, ref: str, sha: str) -> dict[str, Any]:
        kind = repo.git.object_type(sha) or "commit"
        api = self.repo_api(repo)
        return {
            "ref": ref,
            "node_id": node_id("REF", zlib.crc32(f"{repo.id}:{ref}".encode())),
            "url": f"{api}/git/{ref}",
            "object": {"type": kind, "sha": sha, "url": f"{api}/git/{kind}s/{sha}"},
        }

    def git_user(self, person: Any) -> dict[str, Any]:
        return {"name": person.name, "email": person.email, "date": iso(person.epoch)}

    def commit(
        self, repo: Repo, info: CommitInfo, files: list[FileChange] | None = None
    ) -> dict[str, Any]:
        api, html = self.repo_api(repo), self.repo_html(repo)
        data: dict[str, Any] = {
            "url": f"{api}/commits/{info.sha}",
            "sha": info.sha,
            "node_id": node_id("C", int(info.sha[:12], 16)),
            "html_url": f"{html}/commit/{info.sha}",
            "comments_url": f"{api}/commits/{info.sha}/comments",
            "commit": {
                "url": f"{api}/git/commits/{info.sha}",
                "author": self.git_user(info.author),
                "committer": self.git_user(info.committer),
                "message": info.message,
                "tree": {"sha": info.tree, "url": f"{api}/git/trees/{info.tree}"},
                "comment_count": 0,
                "verification": {
                    "verified": False,
                    "reason": "unsigned",
                    "signature": None,
                    "payload": None,
                    "verified_at": None,
                },
            },
            "author": self.user(self.hub.login_for_email(info.author.email)),
            "committer": self.user(self.hub.login_for_email(info.committer.email)),
            "parents": [
                {"sha": p, "url": f"{api}/commits/{p}", "html_url": f"{html}/commit/{p}"}
                for p in info.parents
            ],
        }
        if files is not None:
            additions = sum(f.additions for f in files)
            deletions = sum(f.deletions for f in files)
            data["stats"] = {
                "additions": additions,
                "deletions": deletions,
                "total": additions + deletions,
            }
            data["files"] = [self.diff_entry(repo, info.sha, f) for f in files]
        return data

    def diff_entry(self, repo: Repo, ref: str, change: FileChange) -> dict[str, Any]:
        html, api = self.repo_html(repo), self.repo_api(repo)
        path = quote(change.filename)
        data: dict[str, Any] = {
            "sha": change.new_sha or change.old_sha,
            "filename": change.filename,
            "status": change.status,
            "additions": change.additions,
            "deletions": change.deletions,
            "changes": change.additions + change.deletions,
            "blob_url": f"{html}/blob/{ref}/{path}",
            "raw_url": f"{html}/raw/{ref}/{path}",
            "contents_url": f"{api}/contents/{path}?ref={ref}",
        }
        if change.patch is not None:
            data["patch"] = change.patch
        if change.previous_filename:
            data["previous_filename"] = change.previous_filename
        return data

    # -- issues, pulls, comments, labels ----------------------------------------------------------

    def label(self, repo: Repo, label: Label) -> dict[str, Any]:
        return {
            "id": label.id,
            "node_id": node_id("LA", label.id),
            "url": f"{self.repo_api(repo)}/labels/{quote(label.name)}",
            "name": label.name,
            "description": label.description,
            "color": label.color,
            "default": label.default,
        }

    def labels_of(self, repo: Repo, issue: Issue) -> list[dict[str, Any]]:
        return [self.label(repo, repo.labels[name]) for name in issue.labels]

    def reactions(self, url: str) -> dict[str, Any]:
        keys = ("+1", "-1", "laugh", "hooray", "confused", "heart", "rocket", "eyes")
        return {"url": url, "total_count": 0, **dict.fromkeys(keys, 0)}

    def issue(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        api = f"{self.repo_api(repo)}/issues/{issue.number}"
        kind = "pull" if issue.is_pull else "issues"
        data: dict[str, Any] = {
            "url": api,
            "repository_url": self.repo_api(repo),
            "labels_url": api + "/labels{/name}",
            "comments_url": api + "/comments",
            "events_url": api + "/events",
            "html_url": f"{self.repo_html(repo)}/{kind}/{issue.number}",
            "id": issue.id,
            "node_id": node_id("I", issue.id),
            "number": issue.number,
            "title": issue.title,
            "user": self.user(issue.user),
            "labels": self.labels_of(repo, issue),
            "state": issue.state,
            "locked": False,
            "assignee": self.user(issue.assignees[0]) if issue.assignees else None,
            "assignees": [self.owned_user(login) for login in issue.assignees],
            "milestone": None,
            "comments": len(self.hub.comments_of(repo, issue.number)),
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.updated_at),
            "closed_at": iso(issue.closed_at),
            "author_association": self.hub.association(repo, issue.user),
            "active_lock_reason": None,
            "body": issue.body,
            "reactions": self.reactions(api + "/reactions"),
            "timeline_url": api + "/timeline",
            "performed_via_github_app": (
                self.app(self.hub.apps[issue.via_app]) if issue.via_app is not None else None
            ),
            "state_reason": issue.state_reason,
        }
        if issue.pull is not None:
            data["draft"] = issue.pull.draft
            data["pull_request"] = self.issue_pull_link(repo, issue)
        return data

    def issue_pull_link(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        html = f"{self.repo_html(repo)}/pull/{issue.number}"
        assert issue.pull is not None
        return {
            "url": f"{self.repo_api(repo)}/pulls/{issue.number}",
            "html_url": html,
            "diff_url": html + ".diff",
            "patch_url": html + ".patch",
            "merged_at": iso(issue.pull.merged_at),
        }

    def comment(self, repo: Repo, comment: Comment) -> dict[str, Any]:
        api = f"{self.repo_api(repo)}/issues/comments/{comment.id}"
        issue = repo.issues[comment.issue_number]
        kind = "pull" if issue.is_pull else "issues"
        return {
            "id": comment.id,
            "node_id": node_id("IC", comment.id),
            "url": api,
            "html_url": f"{self.repo_html(repo)}/{kind}/{issue.number}#issuecomment-{comment.id}",
            "body": comment.body,
            "user": self.user(comment.user),
            "created_at": iso(comment.created_at),
            "updated_at": iso(comment.updated_at),
            "issue_url": f"{self.repo_api(repo)}/issues/{issue.number}",
            "author_association": self.hub.association(repo, comment.user),
            "performed_via_github_app": None,
            "reactions": self.reactions(api + "/reactions"),
        }

    def timeline(self, repo: Repo, issue: Issue) -> list[dict[str, Any]]:
        """The `commented` and `cross-referenced` events of an issue's timeline, oldest first
        (the emulator keeps no other timeline events)."""
        events: list[tuple[float, dict[str, Any]]] = []
        for comment in self.hub.comments_of(repo, issue.number):
            data = self.comment(repo, comment)
            events.append(
                (comment.created_at, {**data, "event": "commented", "actor": data["user"]})
            )
        for when, who, source in self.hub.cross_references(repo, issue.number):
            stamp = iso(when)
            reference = {
                "event": "cross-referenced",
                "actor": self.user(who),
                "created_at": stamp,
                "updated_at": stamp,
                "source": {"type": "issue", "issue": self.issue(repo, source)},
            }
            events.append((when, reference))
        return [event for _, event in sorted(events, key=lambda item: item[0])]

    def _branch(self, repo: Repo, ref: str, sha: str) -> dict[str, Any]:
        return {
            "label": f"{repo.owner}:{ref}",
            "ref": ref,
            "sha": sha,
            "user": self.owned_user(repo.owner),
            "repo": self.repository(repo),
        }

    def pull_simple(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        """`pull-request-simple`: what list endpoints return."""
        pr = issue.pull
        assert pr is not None
        n = issue.number
        api, html = self.repo_api(repo), self.repo_html(repo)
        links = {
            "self": f"{api}/pulls/{n}",
            "html": f"{html}/pull/{n}",
            "issue": f"{api}/issues/{n}",
            "comments": f"{api}/issues/{n}/comments",
            "review_comments": f"{api}/pulls/{n}/comments",
            "review_comment": f"{api}/pulls/comments{{/number}}",
            "commits": f"{api}/pulls/{n}/commits",
            "statuses": f"{api}/statuses/{pr.head_sha}",
        }
        return {
            "url": links["self"],
            "id": pr.id,
            "node_id": node_id("PR", pr.id),
            "html_url": links["html"],
            "diff_url": f"{html}/pull/{n}.diff",
            "patch_url": f"{html}/pull/{n}.patch",
            "issue_url": links["issue"],
            "commits_url": links["commits"],
            "review_comments_url": links["review_comments"],
            "review_comment_url": links["review_comment"],
            "comments_url": links["comments"],
            "statuses_url": links["statuses"],
            "number": n,
            "state": issue.state,
            "locked": False,
            "title": issue.title,
            "user": self.user(issue.user),
            "body": issue.body,
            "labels": self.labels_of(repo, issue),
            "milestone": None,
            "active_lock_reason": None,
            "created_at": iso(issue.created_at),
            "updated_at": iso(issue.updated_at),
            "closed_at": iso(issue.closed_at),
            "merged_at": iso(pr.merged_at),
            "merge_commit_sha": pr.merge_commit_sha or pr.test_merge_sha,
            "assignee": self.user(issue.assignees[0]) if issue.assignees else None,
            "assignees": [self.owned_user(login) for login in issue.assignees],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": self._branch(repo, pr.head_ref, pr.head_sha),
            "base": self._branch(repo, pr.base_ref, pr.base_sha),
            "_links": {k: {"href": v} for k, v in links.items()},
            "author_association": self.hub.association(repo, issue.user),
            "auto_merge": None,
            "draft": pr.draft,
        }

    def pull(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        """`pull-request`: the full object (single GET, create, update)."""
        pr = issue.pull
        assert pr is not None
        mergeable, state = self.hub.mergeability(repo, issue)
        stats = self.hub.pull_stats(repo, issue)
        data = self.pull_simple(repo, issue)
        data["merge_commit_sha"] = pr.merge_commit_sha or pr.test_merge_sha
        data.update(
            {
                "merged": pr.merged,
                "mergeable": mergeable,
                "rebaseable": mergeable,
                "mergeable_state": state,
                "merged_by": self.user(pr.merged_by),
                "comments": len(self.hub.comments_of(repo, issue.number)),
                "review_comments": 0,
                "maintainer_can_modify": pr.maintainer_can_modify,
                **stats,
            }
        )
        return data

    # -- checks and statuses --------------------------------------------------------------------

    def app(self, app: App) -> dict[str, Any]:
        return {
            "id": app.id,
            "slug": app.slug,
            "node_id": node_id("A", app.id),
            "client_id": f"Iv1.{app.id:016x}",
            "owner": self.user(app.owner),
            "name": app.name,
            "description": "",
            "external_url": f"{self.web}/apps/{app.slug}",
            "html_url": f"{self.web}/apps/{app.slug}",
            "created_at": iso(app.created_at),
            "updated_at": iso(app.created_at),
            "permissions": dict(app.permissions),
            "events": list(app.events),
        }

    def pull_minimal(self, repo: Repo, issue: Issue) -> dict[str, Any]:
        pr = issue.pull
        assert pr is not None
        ref = {"id": repo.id, "url": self.repo_api(repo), "name": repo.name}
        return {
            "id": pr.id,
            "number": issue.number,
            "url": f"{self.repo_api(repo)}/pulls/{issue.number}",
            "head": {"ref": pr.head_ref, "sha": pr.head_sha, "repo": ref},
            "base": {"ref": pr.base_ref, "sha": pr.base_sha, "repo": ref},
        }

    def check_run(self, repo: Repo, run: CheckRun) -> dict[str, Any]:
        url = f"{self.repo_api(repo)}/check-runs/{run.id}"
        output = run.output
        pulls = [
            self.pull_minimal(repo, i)
            for i in repo.issues.values()
            if i.pull is not None and i.state == "open" and i.pull.head_sha == run.head_sha
        ]
        return {
            "id": run.id,
            "node_id": node_id("CR", run.id),
            "head_sha": run.head_sha,
            "external_id": run.external_id,
            "url": url,
            "html_url": f"{self.repo_html(repo)}/runs/{run.id}",
            "details_url": run.details_url,
            "status": run.status,
            "conclusion": run.conclusion,
            "started_at": iso(run.started_at),
            "completed_at": iso(run.completed_at),
            "output": {
                "title": output.get("title"),
                "summary": output.get("summary"),
                "text": output.get("text"),
                "annotations_count": len(output.get("annotations") or []),
                "annotations_url": url + "/annotations",
            },
            "name": run.name,
            "check_suite": {"id": run.check_suite_id},
            "app": self.app(self.hub.apps[run.app_id]),
            "pull_requests": pulls,
        }

    def status(self, repo: Repo, status: CommitStatus) -> dict[str, Any]:
        return {
            "url": f"{self.repo_api(repo)}/statuses/{status.sha}",
            "avatar_url": f"{self.web}/avatars/u/{self.hub.user(status.creator).id}?v=4",
            "id": status.id,
            "node_id": node_id("SC", status.id),
            "state": status.state,
            "description": status.description,
            "target_url": status.target_url,
            "context": status.context,
            "created_at": iso(status.created_at),
            "updated_at": iso(status.updated_at),
            "creator": self.user(status.creator),
        }

    def combined_status(self, repo: Repo, sha: str, statuses: list[CommitStatus]) -> dict[str, Any]:
        states = {s.state for s in statuses}
        if states & {"error", "failure"}:
            state = "failure"
        elif "pending" in states or not statuses:
            state = "pending"
        else:
            state = "success"
        api = self.repo_api(repo)
        items = []
        for s in statuses:
            item = self.status(repo, s)
            item.pop("creator")
            items.append(item)
        return {
            "state": state,
            "sha": sha,
            "total_count": len(statuses),
            "statuses": items,
            "repository": self.repository(repo),
            "commit_url": f"{api}/commits/{sha}",
            "url": f"{api}/commits/{sha}/status",
        }

    # -- apps -----------------------------------------------------------------------------------

    def installation(self, installation_id: int) -> dict[str, Any]:
        inst = self.hub.installations[installation_id]
        app = self.hub.apps[inst.app_id]
        account = self.hub.user(inst.account)
        return {
            "id": inst.id,
            "account": self.user(account.login),
            "repository_selection": "all" if inst.repos is None else "selected",
            "access_tokens_url": f"{self.base}/app/installations/{inst.id}/access_tokens",
            "repositories_url": f"{self.base}/installation/repositories",
            "html_url": f"{self.web}/settings/installations/{inst.id}",
            "app_id": app.id,
            "app_slug": app.slug,
            "target_id": account.id,
            "target_type": account.type if account.type != "Bot" else "User",
            "permissions": dict(app.permissions),
            "events": list(app.events),
            "created_at": iso(inst.created_at),
            "updated_at": iso(inst.created_at),
            "single_file_name": None,
            "has_multiple_single_files": False,
            "single_file_paths": [],
            "suspended_by": None,
            "suspended_at": None,
        }

    def collaborator_permission(self, repo: Repo, login: str) -> dict[str, Any]:
        role = self.hub.permission(repo, login)
        user = self.owned_user(login)
        user["role_name"] = role
        user["permissions"] = {
            "admin": role == "admin",
            "maintain": role in ("admin", "maintain"),
            "push": role in ("admin", "maintain", "write"),
            "triage": role in ("admin", "maintain", "write", "triage"),
            "pull": role != "none",
        }
        return {"permission": LEGACY_PERMISSION[role], "role_name": role, "user": user}
