"""The downstream copy is replaced in one step (issue 37): every rebase re-exports the series
into the directory the host's other processes read, and the export removed the old copy before
renaming the new one in. With two git workers (or a worker, beat and runner starting together
on one cache) a reader found series directories missing ("patch directory ... does not exist",
at 200 series in bench/scale.py). Exports of one copy take turns."""

from __future__ import annotations

import contextlib
import subprocess
import sys
from pathlib import Path

from bot.git.downstream import Downstream
from bot.git.host_lock import host_lock
from bot.git.swap import replace_dir
from harness.gitrepo import git
from harness.scale_world import Size, World
from tests.support.paths import REPO_ROOT

SERIES = 200
# Checks every series' `series` file until the stop file exists; prints each one missing, then
# how many passes it made.
READER = """
import os, sys
target, stop, names = sys.argv[1], sys.argv[2], sys.argv[3:]
passes = 0
while not os.path.exists(stop):
    for name in names:
        if not os.path.isfile(os.path.join(target, name, "series")):
            print(name, flush=True)
    passes += 1
print(f"passes {passes}")
"""


def test_a_reader_never_finds_a_series_missing_while_the_copy_is_replaced(tmp_path: Path) -> None:
    world = World(tmp_path / "world", Size(series=SERIES, patches=1), per_upstream=50)
    world.build()
    downstream = Downstream(str(world.downstream), tmp_path / "cache")
    head = downstream.fetch("main")["main"]
    target = tmp_path / "checkout" / "patches"
    target.parent.mkdir()
    downstream.export(head, "patches", target)
    names = sorted(world.series)
    # Another process reads, as a worker, beat or runner does: a thread here would fight the
    # exporter for the GIL (a busy reader made every export's system calls wait their turn).
    stop = tmp_path / "stop"
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(target), str(stop), *names],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        for _ in range(15):
            (target.parent / ".patches.exported").unlink(missing_ok=True)  # the branch moved
            downstream.export(head, "patches", target)
    finally:
        stop.touch()
        out, _ = reader.communicate(timeout=60)
    *missing, passes = out.splitlines()
    assert missing == [], f"{len(missing)} reads found a series missing, e.g. {missing[:3]}"
    assert int(passes.removeprefix("passes ")) >= 15, out  # it read all along
    assert sorted(p.name for p in target.iterdir()) == names
    assert sorted(p.name for p in target.parent.iterdir()) == [
        ".patches.exported",
        ".patches.lock",
        "patches",
    ]


def test_replace_dir_puts_the_new_copy_in_place_and_removes_the_old(tmp_path: Path) -> None:
    target = tmp_path / "target"
    first = tmp_path / "first"
    first.mkdir()
    (first / "a").write_text("one")
    replace_dir(first, target)  # no target yet
    second = tmp_path / "second"
    second.mkdir()
    (second / "b").write_text("two")
    replace_dir(second, target)
    assert [p.name for p in target.iterdir()] == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["target"]


def test_a_copy_of_the_same_commit_is_not_written_again(tmp_path: Path) -> None:
    world = World(tmp_path / "world", Size(series=3, patches=1), per_upstream=3)
    world.build()
    downstream = Downstream(str(world.downstream), tmp_path / "cache")
    first = downstream.fetch("main")["main"]
    target = tmp_path / "checkout" / "patches"
    target.parent.mkdir()
    downstream.export(first, "patches", target)
    inode = target.stat().st_ino
    downstream.export(first, "patches", target)  # as the next rebase does
    assert target.stat().st_ino == inode
    # The downstream branch moves: the copy follows.
    (world.downstream / "patches" / "s000" / "series").write_text("")
    git(world.downstream, "commit", "-q", "-am", "empty s000")
    second = downstream.fetch("main")["main"]
    downstream.export(second, "patches", target)
    assert target.stat().st_ino != inode
    assert (target / "s000" / "series").read_text() == ""
    assert sorted(p.name for p in target.parent.iterdir()) == [
        ".patches.exported",
        ".patches.lock",
        "patches",
    ]


# Exports `patches` of the downstream's main into the target, as another worker's would.
EXPORTER = """
import sys
from pathlib import Path
from bot.git.downstream import Downstream
source, cache, target = sys.argv[1:]
downstream = Downstream(source, Path(cache))
downstream.export(downstream.fetch("main")["main"], "patches", Path(target))
"""


def test_exports_of_one_copy_take_turns(tmp_path: Path) -> None:
    """The stamp naming the commit in place is written after the swap: two workers exporting
    two commits at once could leave the older tree under the newer commit's stamp, and every
    later export of that commit would keep it. So an export waits while another holds the
    copy's lock."""
    world = World(tmp_path / "world", Size(series=2, patches=1), per_upstream=2)
    world.build()
    target = tmp_path / "checkout" / "patches"
    target.parent.mkdir()
    argv = [
        sys.executable,
        "-c",
        EXPORTER,
        str(world.downstream),
        str(tmp_path / "cache"),
        str(target),
    ]
    with host_lock(target.parent / ".patches.lock"):  # an export in progress
        exporter = subprocess.Popen(argv, cwd=REPO_ROOT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            exporter.wait(timeout=5)
        finished_while_held = exporter.returncode is not None
    assert exporter.wait(timeout=60) == 0
    assert not finished_while_held, "an export ran while another held the copy"
    assert sorted(p.name for p in target.iterdir()) == sorted(world.series)
