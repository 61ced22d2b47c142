"""ForgePort: the part of `Forge` that carry's workers use, so that a unit test can hand them
`bot.github.fake.InMemoryForge` instead (tests/integration/test_forge_contract.py runs the same
scenarios on both)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from bot.github.forge import PullInfo, PullState

if TYPE_CHECKING:
    from bot.github.forge import Forge


class ForgePort(Protocol):
    @property
    def repo_name(self) -> str:
        """owner/name of carry's repository (the new one once a rename was followed)."""

    @property
    def renamed_from(self) -> str | None:
        """The configured name, once GitHub said the repository has a new one."""

    @property
    def token(self) -> str:
        """A token for git over HTTPS."""

    def find_open_pull(self, branch: str) -> PullInfo | None: ...

    def repository_id(self, repo: str) -> int:
        """GitHub's id of `repo` (kept through a rename or a transfer)."""

    def create_pull(
        self,
        base: str,
        branch: str,
        title: str,
        body: str,
        draft: bool,
        *,
        series: str | None = None,
    ) -> PullInfo: ...

    def update_pull(
        self,
        number: int,
        title: str,
        body: str,
        *,
        current: PullInfo | None = None,
        series: str | None = None,
    ) -> bool:
        """False when `current` already has this title and body (nothing sent)."""

    def add_labels(
        self, number: int, labels: list[str], *, current: PullInfo | None = None
    ) -> None: ...

    def remove_label(self, number: int, label: str) -> None: ...

    def upsert_comment(
        self,
        number: int,
        marker: str,
        body: str,
        *,
        only_existing: bool = False,
        series: str | None = None,
    ) -> int | None:
        """The id of the comment holding `marker`, edited or created; None when absent and
        `only_existing`."""

    def comment(self, number: int, body: str, *, series: str | None = None) -> int: ...

    def find_issue(self, label: str, creator: str) -> int | None: ...

    def create_issue(self, title: str, body: str, labels: list[str]) -> int: ...

    def edit_issue(self, number: int, body: str) -> bool:
        """False when GitHub has no such issue (any more)."""

    def permission(self, user: str) -> str:
        """admin, maintain, write, triage, read or none."""

    def issues_writable(self) -> bool | None:
        """Whether carry's credentials may write issues (None: GitHub did not say)."""

    def create_check_run(
        self,
        head_sha: str,
        name: str,
        status: str,
        conclusion: str | None,
        title: str,
        summary: str,
        *,
        series: str | None = None,
        external_id: str = "",
    ) -> int: ...

    def update_check_run(
        self,
        check_run_id: int,
        status: str,
        conclusion: str | None,
        title: str,
        summary: str,
        *,
        series: str | None = None,
    ) -> None: ...

    def find_check_run(self, head_sha: str, name: str, external_id: str) -> int | None:
        """The newest check run of `name` on the commit carrying `external_id`."""

    def create_status(
        self, sha: str, context: str, state: str, description: str, target_url: str = ""
    ) -> None: ...

    def pull_state(
        self, repo: str, number: int, etag: str | None
    ) -> tuple[PullState | None, str | None]:
        """(None, etag) when the PR is unchanged since `etag`."""

    def timeline(self, repo: str, number: int) -> list[dict[str, Any]]: ...


if TYPE_CHECKING:  # mypy checks that the real adapter has every member
    _forge_fits: type[ForgePort] = Forge
