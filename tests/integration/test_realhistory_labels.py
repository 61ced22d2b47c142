"""bench/realhistory.py's labels on a history built here, shaped like HabanaAI/vllm-fork's: a
main line that cherry-picks an upstream fix before merging the upstream commit itself, a title
main uses for several changes, a port of part of a change, and plain ports and non-ports."""

from __future__ import annotations

import pytest

from bench.realhistory import samples_for
from harness.gitrepo import RepoBuilder


def lines(prefix: str, count: int) -> str:
    return "".join(f"value_{prefix}_{i} = compute_{prefix}({i})\n" for i in range(count))


@pytest.fixture
def fork(make_repo) -> tuple[RepoBuilder, dict[str, str]]:
    repo = make_repo("vllm-fork")
    repo.commit(
        "Initial import",
        {
            "frob.py": lines("frob", 12),
            "OWNERS": "* @alice\n",
            "loader.py": lines("load", 6),
            "sched.py": lines("sched", 6),
        },
    )
    repo.git("checkout", "-q", "-B", "main")
    base = repo.head()
    # The upstream project fixes the frobnicator; the fork cherry-picks it before the release.
    repo.checkout(base, new_branch="upstream")
    fixed = {"frob.py": lines("frob", 12).replace("compute_frob(3)", "compute_frob_safely(3)")}
    shas = {"upstream fix": repo.commit("Fix the frobnicator (#17600)", fixed)}
    repo.checkout("main")
    repo.commit("Fix the frobnicator #17600 (#12)", fixed)
    repo.checkout("main", new_branch="releases/v1")  # the fork point
    repo.commit("Update CODEOWNERS", {"OWNERS": "* @alice @carol\n"})
    repo.commit("Tune the scheduler (#41)", {"sched.py": lines("sched", 6) + "sched_extra = 1\n"})
    loader = lines("load", 6) + lines("new_loader", 10)
    partial = lines("load", 6) + lines("new_loader", 3)
    repo.commit("Backport the first loader helpers (#99)", {"loader.py": partial})
    repo.commit("Cache the first lookups (#96)", {"cache.py": lines("cache", 2)})
    repo.commit("Cache the next lookups (#95)", {"cache.py": lines("cache", 4)})
    repo.commit("Widget fix for the release (#97)", {"widget.py": "widget = fixed()\n"})
    repo.checkout("main")
    repo.git("merge", "-q", "--no-ff", "-m", "Merge upstream", "upstream")
    shas["owners 1"] = repo.commit("Update CODEOWNERS", {"OWNERS": "* @alice @bob\n"})
    shas["owners 2"] = repo.commit("Update CODEOWNERS", {"OWNERS": "* @bob\n"})
    shas["tune"] = repo.commit(
        "Tune the scheduler (#40)", {"sched.py": lines("sched", 6) + "sched_extra = 1\n"}
    )
    shas["loader"] = repo.commit("Rework the widget loader (#50)", {"loader.py": loader})
    shas["docs"] = repo.commit("Add unrelated docs", {"docs/guide.md": "how to use it\n"})
    shas["cache"] = repo.commit("Rework the lookups (#61)", {"cache.py": lines("cache", 4)})
    shas["widget"] = repo.commit(
        "Bring the widget fix to main (#70)\n\nPort of https://github.com/o/r/pull/97",
        {"widget.py": "widget = fixed_on_main()\n"},
    )
    return repo, shas


def labels(repo: RepoBuilder, *, any_title: bool = False) -> dict[str, tuple[bool, bool, str]]:
    samples = samples_for(repo.path, "releases/v1", 25, "main", any_title)
    return {s.commit: (s.contained, s.partly, s.why) for s in samples}


def test_an_upstream_commit_the_branch_took_before_its_fork_is_contained(fork):
    repo, shas = fork
    contained, partly, why = labels(repo)[shas["upstream fix"]]
    port = repo.git("log", "-1", "--format=%H", "--grep=#17600 (#12)", "main")
    assert contained and not partly
    assert why == f"ported before the fork ({port[:10]})"


def test_a_title_main_used_for_several_changes_names_no_port(fork):
    repo, shas = fork
    found = labels(repo)
    assert not found[shas["owners 1"]][0] and not found[shas["owners 2"]][0]
    old = labels(repo, any_title=True)
    assert old[shas["owners 1"]][0] and old[shas["owners 2"]][0]


@pytest.mark.parametrize(
    ("change", "label"),
    [
        # a title main used once still names the port
        ("tune", (True, False, "ported")),
        # a main commit linking a release commit's PR (`Port of .../pull/97`) names its port
        ("widget", (True, False, "ported")),
        # the branch made every changed line under commits that name no port
        (
            "cache",
            (True, False, "not ported; held in full (4 of 4 changed lines brought by the branch)"),
        ),
        # ... or a part of them: not contained, but a review of it is about a change held in part
        (
            "loader",
            (False, True, "not ported; partly held (3 of 10 changed lines brought by the branch)"),
        ),
        # a change the branch never saw is neither
        ("docs", (False, False, "not ported")),
    ],
)
def test_each_main_commit_gets_the_label_its_history_shows(fork, change, label):
    repo, shas = fork
    assert labels(repo)[shas[change]] == label
