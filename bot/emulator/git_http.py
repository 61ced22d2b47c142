"""Smart HTTP git through `git http-backend` (CGI): clone, fetch (any ref, refs/pull/N/head
included) and push. Receive-pack is enabled per repository (http.receivepack=true)."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from .gitops import git_env

GIT_PATH = re.compile(r"^/(?P<owner>[^/]+)/(?P<name>[^/]+?)\.git(?P<rest>/.*)?$")


@dataclass
class CgiResult:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def is_git_path(path: str) -> bool:
    return GIT_PATH.match(path) is not None


def is_push(path: str, query: str) -> bool:
    return path.endswith("/git-receive-pack") or "service=git-receive-pack" in query


def run_backend(
    root: Path,
    path_info: str,
    *,
    method: str,
    query: str,
    headers: dict[str, str],
    body: bytes,
    remote_user: str | None,
    extra_env: dict[str, str] | None = None,
) -> CgiResult:
    """Runs one request through git http-backend and parses its CGI response."""
    env = git_env(
        {
            "GIT_PROJECT_ROOT": str(root),
            "GIT_HTTP_EXPORT_ALL": "1",
            "GATEWAY_INTERFACE": "CGI/1.1",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "REQUEST_METHOD": method,
            "PATH_INFO": path_info,
            "QUERY_STRING": query,
            "CONTENT_TYPE": headers.get("content-type", ""),
            "CONTENT_LENGTH": str(len(body)),
            "REMOTE_ADDR": "127.0.0.1",
            **(extra_env or {}),
        }
    )
    if remote_user:
        env["REMOTE_USER"] = remote_user
    if "content-encoding" in headers:
        env["HTTP_CONTENT_ENCODING"] = headers["content-encoding"]
    if "git-protocol" in headers:
        env["GIT_PROTOCOL"] = headers["git-protocol"]
    proc = subprocess.run(
        ["git", "http-backend"], input=body, capture_output=True, env=env, check=False
    )
    return _parse_cgi(proc.stdout, proc.stderr)


def _parse_cgi(output: bytes, stderr: bytes) -> CgiResult:
    head, sep, body = output.partition(b"\r\n\r\n")
    if not sep:
        head, sep, body = output.partition(b"\n\n")
    if not sep:
        return CgiResult(
            500, [("Content-Type", "text/plain")], stderr or b"git http-backend failed"
        )
    status = 200
    headers = []
    for line in head.decode("latin-1").splitlines():
        name, _, value = line.partition(":")
        if name.lower() == "status":
            status = int(value.strip().split(" ", 1)[0])
        elif name:
            headers.append((name.strip(), value.strip()))
    return CgiResult(status, headers, body)
