"""`carry check --head A --head B ...`: the presence table across release lines, on real
repositories. One upstream with three lines: release/1.0 took the fix as a cherry-pick (another
commit), release/2.0 merged the downstream commit itself, main has neither and rewrote the line
the second patch edits."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bot.core.presence import Presence, build_table
from bot.git.engine import Engine, PatchInput
from bot.git.mirror import Mirror
from tests.support.carry_cli import carry

BODY = "".join(f"value_{i} = compute({i})\n" for i in range(1, 41))
HELPER = "".join(f"def helper_{i}():\n    return {i}\n\n" for i in range(1, 21))
FIXED = BODY.replace("compute(7)", "compute(7, safe=True)")


@pytest.fixture
def lines(make_repo, tmp_path):
    """(upstream, patch files, own commits, the cherry-pick on release/1.0)."""
    up = make_repo("upstream")
    base = up.commit("base", {"mod.py": BODY, "helpers.py": HELPER})
    up.checkout("main", new_branch="carried")
    fix = up.commit("Make value 7 safe", {"mod.py": FIXED})
    helper = up.commit(
        "Helper 3 returns thirty", {"helpers.py": HELPER.replace("return 3\n", "return 30\n")}
    )
    patches = up.format_patch("main..carried", tmp_path / "patches")
    # release/2.0 merged the downstream commit as it is: the same SHA.
    up.checkout(fix, new_branch="release/2.0")
    up.commit("2.0: unrelated", {"README": "2.0\n"})
    # release/1.0 took the fix as a cherry-pick: the same change as another commit.
    up.checkout(base, new_branch="release/1.0")
    up.commit("1.0: unrelated", {"README": "1.0\n"})
    up.git("cherry-pick", "-x", fix)
    picked = up.head()
    up.commit("1.0: later work", {"NEWS": "1.0.1\n"})
    # main has neither, and rewrote the line the helper patch edits: it conflicts there.
    up.checkout("main")
    up.commit("main: rework helper 3", {"helpers.py": HELPER.replace("return 3\n", "return 3.5\n")})
    up.git("branch", "-D", "carried")  # downstream commits upstream does not have
    assert picked != fix
    return up, patches, (fix, helper), picked


def check_args(up, patches, tmp_path, *heads: str) -> list[str]:
    args = ["check", "--repo", str(up.path), "--cache-dir", str(tmp_path / "cache")]
    for head in heads:
        args += ["--head", head]
    for patch in patches:
        args += ["--patch", str(patch)]
    return args


HEADS = ("release/1.0", "release/2.0", "main")


@pytest.mark.parametrize("with_base", [False, True])
def test_json_names_each_cell_and_sha(lines, tmp_path, with_base):
    """With a base the engine reads no range per commit: the own commits are asked of git."""
    up, patches, (fix, _), picked = lines
    base = ["--base", up.head("main~1")] if with_base else []
    result = carry(*check_args(up, patches, tmp_path, *HEADS), "--json", *base)
    assert result.returncode == 0, result.stderr
    table = json.loads(result.stdout)
    assert [h["name"] for h in table["heads"]] == list(HEADS)
    assert [h["head"] for h in table["heads"]] == [up.head(h) for h in HEADS]
    fix_row, helper_row = table["patches"]
    assert fix_row["commit"] == fix and fix_row["subject"] == "Make value 7 safe"
    cells = {c["head"]: (c["presence"], c["sha"]) for c in fix_row["cells"]}
    assert cells == {
        "release/1.0": ("other", picked),  # the cherry-pick, by patch id
        "release/2.0": ("same", fix),
        "main": ("absent", None),
    }
    assert [c["presence"] for c in helper_row["cells"]] == ["absent", "absent", "conflict"]
    assert helper_row["cells"][2]["status"] == "conflict"


def test_text_table_is_aligned_and_names_the_other_commit(lines, tmp_path):
    up, patches, _, picked = lines
    result = carry(*check_args(up, patches, tmp_path, *HEADS))
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    assert out[0] == f"presence of 2 patches on 3 heads of {up.path}"
    header, fix_line, helper_line = out[1:]
    for name in HEADS:
        assert f"{name} ({up.head(name)[:12]})" in header
    assert fix_line.split()[0] == str(patches[0])
    assert f"present (different SHA: {picked[:12]})" in fix_line
    assert "present (same SHA)" in fix_line
    # Columns line up: each head's cell starts where its header does.
    starts = [header.index(f"{name} (") for name in HEADS]
    assert fix_line[starts[0] :].startswith("present (different SHA")
    assert fix_line[starts[1] :].startswith("present (same SHA)")
    assert fix_line[starts[2] :].startswith("absent")
    assert helper_line[starts[2] :].startswith("conflict")


def test_exit_code_counts_every_head(lines, tmp_path):
    up, patches, _, _ = lines
    # release/2.0 alone: the fix is there as is (dropped), the helper applies: nothing to do.
    calm = carry(*check_args(up, patches, tmp_path, "release/1.0", "release/2.0"), "--exit-code")
    assert calm.returncode == 0, calm.stderr
    stuck = carry(*check_args(up, patches, tmp_path, "release/2.0", "main"), "--exit-code")
    assert stuck.returncode == 1, stuck.stderr
    assert "conflict" in stuck.stdout


def test_one_head_keeps_the_single_head_output(lines, tmp_path):
    up, patches, _, _ = lines
    result = carry(*check_args(up, patches, tmp_path, "release/1.0"), "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["head"] == up.head("release/1.0") and "heads" not in report
    text = carry(*check_args(up, patches, tmp_path, "release/1.0"))
    assert text.stdout.startswith(f"head {up.head('release/1.0')} (refs/heads/release/1.0)")


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (["--head", "main", "--head", "main"], "--head main is given twice"),
        (["--head", "main", "--head", "release/1.0", "--write-refreshed"], "takes one --head"),
    ],
)
def test_refused_head_lists(lines, tmp_path, extra, said):
    up, patches, _, _ = lines
    args = ["check", "--repo", str(up.path), "--cache-dir", str(tmp_path / "c"), *extra]
    result = carry(*args, "--patch", str(patches[0]))
    assert result.returncode == 2 and said in result.stderr, result.stderr


def test_unknown_head_is_named(lines, tmp_path):
    up, patches, _, _ = lines
    result = carry(*check_args(up, patches, tmp_path, "main", "release/9.9"))
    assert result.returncode == 2
    assert "release/9.9" in result.stderr and "Traceback" not in result.stderr


def test_check_heads_matches_one_check_per_head(lines, tmp_path):
    """The shared pass decides exactly as separate checks do, head by head."""
    up, patch_files, _, _ = lines
    patches = [PatchInput(str(p), Path(p).read_bytes()) for p in patch_files]
    engine = Engine(Mirror(str(up.path), tmp_path / "shared"))
    evidence = engine.check_heads(list(HEADS), patches)
    for head, report in zip(HEADS, evidence.reports, strict=True):
        alone = Engine(Mirror(str(up.path), tmp_path / f"alone-{head.replace('/', '-')}"))
        single = alone.check(head, patches)
        assert report.head == single.head
        assert [(p.status, p.decision) for p in report.patches] == [
            (p.status, p.decision) for p in single.patches
        ]
    table = build_table(evidence, HEADS)
    assert [c.presence for c in table.rows[0].cells] == [
        Presence.OTHER,
        Presence.SAME,
        Presence.ABSENT,
    ]


def test_resolve_all_answers_as_resolve_does(lines, tmp_path):
    up, _, (fix, _), picked = lines
    revs = ["main", "release/1.0~1", "refs/heads/release/2.0", fix[:10], picked, "release/1.0"]
    together = Mirror(str(up.path), tmp_path / "all").resolve_all(revs)
    apart = [Mirror(str(up.path), tmp_path / f"one-{n}").resolve(r) for n, r in enumerate(revs)]
    assert together == apart
    assert [h.sha for h in together] == [up.head(r) for r in revs]
    assert together[0].ref == "refs/heads/main" and together[1].ref is None


def test_partial_names_the_commit_that_brought_part(make_repo, tmp_path):
    """release/1.0 took one of the patch's two hunks in a commit of its own: partial there,
    naming that commit; main has neither."""
    up = make_repo("partial-up")
    base = up.commit("base", {"mod.py": BODY})
    up.checkout("main", new_branch="carried")
    both = BODY.replace("compute(3)", "compute(3, fast=True)").replace(
        "compute(35)", "compute(35, fast=True)"
    )
    up.commit("Fast 3 and 35", {"mod.py": both})
    patches = up.format_patch("main..carried", tmp_path / "partial-patches")
    up.checkout(base, new_branch="release/1.0")
    half = up.commit(
        "Fast 3 (#12)", {"mod.py": BODY.replace("compute(3)", "compute(3, fast=True)")}
    )
    up.commit("1.0: later work", {"NEWS": "1.0.1\n"})
    up.checkout("main")
    up.git("branch", "-D", "carried")
    args = check_args(up, patches, tmp_path, "release/1.0", "main")
    table = json.loads(carry(*args, "--json").stdout)
    cells = [(c["presence"], c["sha"], c["status"]) for c in table["patches"][0]["cells"]]
    assert cells == [("partial", half, "partial"), ("absent", None, "applies")]
    text = carry(*args).stdout
    assert f"partial ({half[:12]})" in text
