"""The dashboard loads each series directory once while its files stay the same (issue 37: the
overview parsed every patch file of every series on each request, seconds at 200 series of 30
patches), and loads it again as soon as a file changes, appears or goes; carry's own copy exported
from GitHub, only ever replaced whole, by the directory's identity alone (statting every file was
then half of the overview's time)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from bot.config import CarryConfig
from bot.git.swap import replace_dir
from bot.series_loader import LoadedSeries
from bot.web.views import FixPages
from harness.scale_world import Size, World


def pages(tmp_path: Path, *, exported: bool = False) -> tuple[FixPages, Path]:
    world = World(tmp_path, Size(series=2, patches=3), per_upstream=1)
    world.build()
    config = CarryConfig.model_validate(
        {
            "downstream": {"repo": "downstream-org/carry", "branch": "main"},
            "upstreams": {"up0": {"url": "/nowhere", "repo": "upstream-org/up0"}},
            "series": [
                {"id": sid, "upstream": "up0", "base": {"branch": "main"}, "patches": sid}
                for sid in world.series
            ],
        }
    )
    root = world.downstream / "patches"
    return FixPages.from_config(config, root, exported=exported), root


def test_an_unchanged_directory_is_loaded_once(tmp_path: Path) -> None:
    fix_pages, _ = pages(tmp_path)
    first = fix_pages._load("s000")
    assert isinstance(first, LoadedSeries), first
    assert fix_pages._load("s000") is first
    assert fix_pages.patch_files("s001") == [
        "0001-make-value-10-safe.patch",
        "0002-make-value-10-safe.patch",
        "0003-make-value-10-safe.patch",
    ]


def test_a_changed_file_or_a_new_one_is_seen_at_once(tmp_path: Path) -> None:
    fix_pages, root = pages(tmp_path)
    before = fix_pages.pages_of("s000")
    assert set(before) == {f"000{k}-make-value-10-safe.patch" for k in (1, 2, 3)}
    series_file = root / "s000" / "series"
    series_file.write_text("0001-make-value-10-safe.patch\n")  # two patches left unlisted
    assert fix_pages.patch_files("s000") is None
    assert "0002-make-value-10-safe.patch: patch file is not listed in series" in str(
        fix_pages._load("s000")
    )
    # Same size, same names: a rewrite is told by its mtime.
    page = root / "s001" / "the-fix.md"
    loaded = fix_pages._load("s001")
    text = page.read_text()
    page.write_text(text.replace("Make value 10 safe.", "Make value 10 SAFE."))
    stat = page.stat()
    os.utime(page, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    again = fix_pages._load("s001")
    assert again is not loaded
    assert fix_pages._load("s001") is again
    # A directory that goes says so.
    for child in (root / "s001").iterdir():
        child.unlink()
    (root / "s001").rmdir()
    assert "no directory" in str(fix_pages._load("s001"))


def test_an_exported_copy_is_loaded_again_when_it_is_replaced_not_file_by_file(
    tmp_path: Path,
) -> None:
    fix_pages, root = pages(tmp_path, exported=True)
    first = fix_pages._load("s001")
    assert isinstance(first, LoadedSeries), first
    page = root / "s001" / "the-fix.md"
    with page.open("r+") as f:  # rewritten in place, what carry's export never does
        f.write(page.read_text().replace("Make value 10 safe.", "Make value 10 SAFE."))
    assert fix_pages._load("s001") is first, "the exported copy's files were looked at"

    export = tmp_path / "export"  # a new export, put in place whole as Downstream.export does
    shutil.copytree(root, export)
    replace_dir(export, root)

    again = fix_pages._load("s001")
    assert again is not first
    assert (
        "Make value 10 SAFE." in fix_pages.pages_of("s001")["0001-make-value-10-safe.patch"].summary
    )
