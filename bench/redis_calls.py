"""Redis commands and round trips of one rebase, as the worker runs it (issue 13's figure).

Builds an upstream and a downstream series of --patches patches in a temporary directory, starts
a private redis-server, and runs carry's rebase of the series on a new upstream head in this
process (workers.rebase.rebase_series, then the planner and dispatcher for its result, as the
`carry.rebase` task does). Every Redis call goes through a connection that counts what it sends:
a round trip is one write to the socket (a pipeline or MULTI/EXEC block is one), a command is
one Redis command as the client sends it (a script's EVALSHA is one, whatever it runs inside
Redis). Prints both, per command name, for the first rebase (the series' first check, on a new
connection: its handshake and the commit script's first load count there) and for a second one
on a newer head, on the same connection, as a worker process runs them.

Usage: python bench/redis_calls.py [--patches 3]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import redis

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bot.local_redis import LocalRedis
from harness.carry_env import BODY, SERIES, CarryEnv
from harness.gitrepo import git
from workers import runtime as runtime_module
from workers.tasks import handle_event


class Counted:
    round_trips: ClassVar[int] = 0
    commands: ClassVar[Counter[str]] = Counter()


class CountingConnection(redis.Connection):
    """A connection that counts the writes (round trips) and the commands it sends."""

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        Counted.round_trips += 1
        super().send_packed_command(command, check_health)

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        Counted.commands[_name(args[0])] += 1
        super().send_command(*args, **kwargs)

    def pack_commands(self, commands: Any) -> list[bytes]:
        for command in commands:
            Counted.commands[_name(command[0])] += 1
        return super().pack_commands(commands)


def _name(word: Any) -> str:
    return (word.decode() if isinstance(word, bytes) else str(word)).upper()


@contextlib.contextmanager
def environment(root: Path, url: str, patches: int) -> Iterator[CarryEnv]:
    env = CarryEnv(root, url)
    changes = [
        {"mod.py": BODY.replace(f"compute({n * 10})", f"compute({n * 10}, safe=True)")}
        for n in range(1, patches + 1)
    ]
    env.carry_patches(changes)
    git(env.downstream, "init", "-q", "-b", "main")
    env.write_config()
    saved = dict(os.environ)
    os.environ.update({k: v for k, v in env.env.items() if k != "GITHUB_TOKEN"})
    os.environ.pop("GITHUB_TOKEN", None)
    runtime_module.reset()
    try:
        yield env
    finally:
        os.environ.clear()
        os.environ.update(saved)
        runtime_module.reset()


def measured_rebase(
    env: CarryEnv, pool: redis.ConnectionPool, message: str
) -> tuple[int, Counter[str]]:
    from workers.rebase import rebase_series

    head = env.upstream.commit(message, {"other.py": f"# {message}\n"})
    rt = runtime_module.runtime()
    counted = runtime_module.Runtime(
        rt.config, rt.settings, redis.Redis(connection_pool=pool), rt.downstream_dir, rt.bot_login
    )
    Counted.round_trips, Counted.commands = 0, Counter()
    finished = rebase_series(counted, SERIES, head, "refs/heads/main")
    if finished is not None:
        handle_event(counted, finished)
    return Counted.round_trips, Counted.commands


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--patches", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        server = LocalRedis(Path(tmp) / "redis").start()
        try:
            with environment(Path(tmp) / "env", server.url, args.patches) as env:
                pool = redis.ConnectionPool.from_url(
                    env.redis_url, connection_class=CountingConnection
                )
                rows = [measured_rebase(env, pool, m) for m in ("first head", "second head")]
        finally:
            server.stop()
    print(f"one rebase of {args.patches} patches, in this process against a private redis-server")
    print(f"{'rebase':<32}{'commands':>9}{'round trips':>13}   by command")
    for label, (trips, commands) in zip(
        ("first (new connection)", "second (a newer head)"), rows, strict=True
    ):
        by_name = ", ".join(f"{n} {c}" for n, c in commands.most_common())
        print(f"{label:<32}{sum(commands.values()):>9}{trips:>13}   {by_name}")


if __name__ == "__main__":
    main()
