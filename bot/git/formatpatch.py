"""Regenerate patch files deterministically: the same content always gives the same bytes."""

from __future__ import annotations

from dataclasses import dataclass

from bot.core.patchfile import PatchMeta
from bot.git.runner import Git

# Fixed options: no signature (it carries the git version), zeroed From line, full blob ids
# (so a later 3-way apply always finds its pre-image), renames detected, binary included.
FORMAT_PATCH_ARGS = (
    "-c",
    "core.abbrev=12",
    "-c",
    "diff.noprefix=false",
    "-c",
    "diff.mnemonicPrefix=false",
    "-c",
    "diff.algorithm=myers",
    "-c",
    "diff.renames=true",
    "format-patch",
    "--stdout",
    "--no-signature",
    "--zero-commit",
    "--full-index",
    "--binary",
    "-M",
    "--no-numbered",
    "--no-thread",
    "--stat=80",
    "--no-attach",
    "--encode-email-headers",
)
FALLBACK_AUTHOR = ("carry", "carry@carry.invalid")
FALLBACK_DATE = "@0 +0000"


@dataclass(frozen=True)
class Identity:
    name: str
    email: str
    date: str  # a date git accepts, e.g. "@1767225600 +0000"


def identity_of(meta: PatchMeta) -> Identity:
    name = meta.author_name or FALLBACK_AUTHOR[0]
    mail = meta.author_email or FALLBACK_AUTHOR[1]
    return Identity(name, mail, _git_date(meta.date))


def _git_date(rfc2822: str | None) -> str:
    if not rfc2822:
        return FALLBACK_DATE
    import email.utils  # here: it is slow to import, and `carry check` rarely writes commits

    try:
        parsed = email.utils.parsedate_to_datetime(rfc2822)
    except (TypeError, ValueError):
        return FALLBACK_DATE
    offset = parsed.utcoffset()
    minutes = int(offset.total_seconds() // 60) if offset is not None else 0
    sign = "+" if minutes >= 0 else "-"
    hours, mins = divmod(abs(minutes), 60)
    return f"@{int(parsed.timestamp())} {sign}{hours:02d}{mins:02d}"


def commit_message(meta: PatchMeta) -> str:
    body = meta.body.strip("\n")
    return f"{meta.subject}\n\n{body}\n" if body else f"{meta.subject}\n"


def make_commit(git: Git, tree: str, parent: str, meta: PatchMeta) -> str:
    """A commit object for a patch: author from the patch, committer = author (deterministic)."""
    who = identity_of(meta)
    env = {
        "GIT_AUTHOR_NAME": who.name,
        "GIT_AUTHOR_EMAIL": who.email,
        "GIT_AUTHOR_DATE": who.date,
        "GIT_COMMITTER_NAME": who.name,
        "GIT_COMMITTER_EMAIL": who.email,
        "GIT_COMMITTER_DATE": who.date,
    }
    message = commit_message(meta).encode("utf-8", "surrogateescape")
    return git.run("commit-tree", tree, "-p", parent, input=message, env=env).text


def format_patch(git: Git, commit: str) -> bytes:
    return git.run(*FORMAT_PATCH_ARGS, "-1", commit).stdout
