"""Run the emulator standalone: python -m bot.emulator --port 8765 --root DIR"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from .emulator import GitHubEmulator


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bot.emulator")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--root", type=Path, help="where bare repositories live (default: a temp dir)"
    )
    parser.add_argument(
        "--token", action="append", default=[], metavar="TOKEN=LOGIN", help="accept a token"
    )
    parser.add_argument(
        "--repo", action="append", default=[], metavar="OWNER/NAME[=PATH]", help="create a repo"
    )
    parser.add_argument(
        "--webhook", action="append", default=[], metavar="URL[=SECRET]", help="add a webhook"
    )
    parser.add_argument(
        "--enterprise", action="store_true", help="an Enterprise Server: the API under /api/v3"
    )
    args = parser.parse_args(argv)
    root = args.root or Path(tempfile.mkdtemp(prefix="github-emulator-"))
    gh = GitHubEmulator(root, host=args.host, port=args.port, enterprise=args.enterprise)
    for item in args.token:
        token, _, login = item.partition("=")
        gh.add_token(token, login or "octocat")
    for item in args.repo:
        full, _, source = item.partition("=")
        owner, _, name = full.partition("/")
        gh.create_repo(owner, name, from_path=Path(source) if source else None)
    for item in args.webhook:
        url, _, secret = item.partition("=")
        gh.add_webhook(url, secret or None)
    print(f"GitHub emulator on {gh.base_url} (repositories under {root})", flush=True)
    try:
        gh.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        gh.stop()


if __name__ == "__main__":
    main()
