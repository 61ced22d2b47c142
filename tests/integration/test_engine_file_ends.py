"""A hunk that adds lines at the end of a file has only context as its pre-image, and that
context is also the start of its post-image. On vllm-gaudi main, the release line's Kimi fix
(a45a0368a1, landed as c0eda121 "#1636") appends an import at the end of
`models/__init__.py`; the head has the import and more after it, yet the hunk counted as
"both images found (duplicated code in the head)", so a landing with the very diff went to
review as `partial`. The context means "still to do" only at the end of the head's file."""

from __future__ import annotations

from bot.core.classify import Decision, Status
from bot.git.engine import PatchInput
from tests.support.engine import check

IMPORTS = [f"    import pkg.models.{name}  # noqa: F401\n" for name in ("alpha", "beta", "gamma")]
KIMI = "    import pkg.models.kimi  # noqa: F401\n"
LATER = "    import pkg.models.minimax  # noqa: F401\n"
REGISTRY = "def register_model():\n" + "".join(IMPORTS)
KIMI_MODULE = "class KimiForGeneration:\n    warmup_inputs = dummy_inputs_without_corruption()\n"


def landed(make_repo, tmp_path, *later: dict[str, str]):
    down = make_repo("downstream")
    down.commit("Registry", {"pkg/models/__init__.py": REGISTRY})
    down.commit(
        "Fix Kimi multimodal warmup corruption (#1636)",
        {"pkg/models/__init__.py": REGISTRY + KIMI, "pkg/models/kimi.py": KIMI_MODULE},
    )
    patches = [
        PatchInput(str(p), p.read_bytes())
        for p in down.format_patch("HEAD~1..HEAD", tmp_path / "patches")
    ]
    up = make_repo("upstream")
    up.commit("Registry", {"pkg/models/__init__.py": REGISTRY})
    base = up.head("main")
    landing = up.commit(
        "Fix Kimi multimodal warmup corruption (#1636)",
        {"pkg/models/__init__.py": REGISTRY + KIMI, "pkg/models/kimi.py": KIMI_MODULE},
    )
    for n, files in enumerate(later):
        up.commit(f"Later upstream work {n} (#{1700 + n})", files)
    return up, patches, base, landing


def test_a_landing_whose_end_of_file_addition_has_more_after_it_is_dropped(make_repo, tmp_path):
    up, patches, base, landing = landed(
        make_repo, tmp_path, {"pkg/models/__init__.py": REGISTRY + KIMI + LATER}
    )
    p = check(up, patches, tmp_path, base=base)
    assert {e["signal"]: e for e in p.evidence}["patch-id-match"]["commit"] == landing
    assert (p.status, p.decision) == (Status.CONTAINED, Decision.DROP), p.reason
    hunks = [h for e in p.evidence for h in e.get("hunks", [])]
    assert [h["state"] for h in hunks if h["file"] == "pkg/models/__init__.py"] == ["applied"]


def test_the_added_line_gone_from_the_end_keeps_the_landing_a_review(make_repo, tmp_path):
    """Upstream later took the import out and appended other code: the context is no longer
    at the end, the added line is nowhere, and the landing was undone in part."""
    up, patches, base, landing = landed(
        make_repo, tmp_path, {"pkg/models/__init__.py": REGISTRY + "    load_plugins()\n"}
    )
    p = check(up, patches, tmp_path, base=base)
    assert {e["signal"]: e for e in p.evidence}["patch-id-match"]["commit"] == landing
    assert p.decision == Decision.REVIEW, p.reason
    hunks = [h for e in p.evidence for h in e.get("hunks", [])]
    assert [h["state"] for h in hunks if h["file"] == "pkg/models/__init__.py"] == ["absent"]
