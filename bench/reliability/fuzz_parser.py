"""8. fuzzed patches: mutated patch files through carry's patch parser."""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from hypothesis import given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from bench.reliability.common import ROOT, Row, Scale, _fuzz_settings
from bot.core.patchfile import PatchFileError, parse_patch


def patch_seeds() -> list[bytes]:
    found = [p.read_bytes() for p in sorted((ROOT / "patches").glob("*/*.patch"))]
    synthetic = (
        b"From 1234567890123456789012345678901234567890 Mon Sep 17 00:00:00 2001\n"
        b"From: A <a@example.com>\nSubject: [PATCH 1/2] two files\n\nbody\n---\n"
        b"diff --git a/x.py b/y.py\nsimilarity index 90%\nrename from x.py\nrename to y.py\n"
        b"index 1111111..2222222 100644\n--- a/x.py\n+++ b/y.py\n@@ -1,3 +1,3 @@ def f():\n"
        b" a\r\n-b\n+c\n d\n\\ No newline at end of file\n"
        b"diff --git a/bin b/bin\nnew file mode 100755\nindex 0000000..3333333\n"
        b"GIT binary patch\nliteral 5\nMcmZQzU|?ix0000\n\nliteral 0\nHcmV?d00001\n\n"
        b"--\n2.39.5\n"
    )
    plain = b"--- a/f\n+++ b/f\n@@ -1 +1,2 @@\n-x\n+y\n+z\n"
    return [*found, synthetic, plain]


@st.composite
def mutated_patches(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    lines = draw(st.sampled_from(seeds)).splitlines(keepends=True) or [b""]
    for _ in range(draw(st.integers(1, 6))):
        i = draw(st.integers(0, max(0, len(lines) - 1)))
        op = draw(st.sampled_from(["drop", "dup", "junk", "flip", "numbers", "swap", "cut"]))
        lines = _mutate(lines, i, op, draw)
    return b"".join(lines)


def _mutate(lines: list[bytes], i: int, op: str, draw: st.DrawFn) -> list[bytes]:
    if not lines:
        return [draw(st.binary(max_size=40))]
    line = lines[i]
    if op == "drop":
        return lines[:i] + lines[i + 1 :]
    if op == "dup":
        return lines[: i + 1] + lines[i:]
    if op == "junk":
        return [*lines[:i], draw(st.binary(max_size=60)), *lines[i + 1 :]]
    if op == "flip" and line:
        j = draw(st.integers(0, len(line) - 1))
        return [
            *lines[:i],
            line[:j] + bytes([draw(st.integers(0, 255))]) + line[j + 1 :],
            *lines[i + 1 :],
        ]
    if op == "numbers":
        number = str(draw(st.integers(-5, 10**30))).encode()
        return [*lines[:i], _renumber(line, number), *lines[i + 1 :]]
    if op == "swap":
        j = draw(st.integers(0, len(lines) - 1))
        lines = lines[:]
        lines[i], lines[j] = lines[j], lines[i]
        return lines
    return lines[:i]  # cut


def _renumber(line: bytes, number: bytes) -> bytes:
    digits = [k for k, c in enumerate(line) if chr(c).isdigit()]
    if not digits:
        return b"@@ -" + number + b" +1," + number + b" @@\n"
    k = digits[len(digits) // 2]
    return line[:k] + number + line[k + 1 :]


DIFF_LINES = [
    b"diff --git a/f b/f\n",
    b"--- a/f\n",
    b"+++ b/f\n",
    b"@@ -1,2 +1,2 @@\n",
    b" c\n",
    b"-o\n",
    b"+n\n",
    b"\\ No newline at end of file\n",
    b"GIT binary patch\n",
    b"literal 3\n",
    b"new file mode 100644\n",
    b"rename from a\n",
    b"Subject: x\n",
]
PATCH_INPUTS = st.one_of(
    st.binary(max_size=2000),
    st.lists(st.sampled_from(DIFF_LINES), max_size=30).map(b"".join),
)


_MAIL = (
    b"From: a <a@b.c>\nDate: Tue, 1 Sep 2026 00:00:00 +0000\nSubject: [PATCH] x\n\n---\n"
    b"diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n"
)
PARSER_EDGE_CASES = {
    "Date with an overflowing hour": _MAIL.replace(b"00:00:00", b"00:30391819020:00"),
    "Date with a 20-digit day": _MAIL.replace(b"Tue, 1 Sep", b"Tue, 99999999999999999999 Sep"),
    "encoded-word garbage in Subject": _MAIL.replace(b"[PATCH] x", b"=?utf-8?q?=ff?= =?x?b?!?="),
    "unparsable From": _MAIL.replace(b"a <a@b.c>", b'<<<@@@>>> "unterminated'),
    "hunk length of 23 digits": _MAIL.replace(b"@@ -1 +1 @@", b"@@ -1," + b"9" * 23 + b" +1 @@"),
    "NUL bytes in a hunk": _MAIL.replace(b"-a\n", b"-\x00\n"),
}


@dataclass
class ParserFuzz:
    examples: int = 0
    parsed: int = 0
    refused: int = 0
    unexpected: Counter[str] = field(default_factory=Counter)
    smallest: dict[str, bytes] = field(default_factory=dict)


def fuzz_parser(
    examples: int, seed: int, *, edge: bool = True, deadline_s: float = 120
) -> ParserFuzz:
    """parse_patch on generated and mutated patch files: it may only raise PatchFileError."""
    result = ParserFuzz()
    deadline = time.monotonic() + deadline_s
    seeds = patch_seeds()
    for data in PARSER_EDGE_CASES.values() if edge else []:
        parse_one(result, data)

    @hypothesis_seed(seed)
    @settings(_fuzz_settings(examples))
    @given(mutated_patches(seeds) | PATCH_INPUTS)
    def parse(data: bytes) -> None:
        if time.monotonic() <= deadline:
            parse_one(result, data)

    parse()
    return result


def parse_one(result: ParserFuzz, data: bytes) -> None:
    result.examples += 1
    try:
        parse_patch(data, name="fuzzed.patch")
    except PatchFileError:
        result.refused += 1
        return
    except Exception as err:  # counting what escapes is the point
        kind = f"{type(err).__name__}: {str(err)[:60]}"
        result.unexpected[kind] += 1
        if kind not in result.smallest or len(data) < len(result.smallest[kind]):
            result.smallest[kind] = data
        return
    result.parsed += 1


def scenario_fuzz_parser(_root: Path, scale: Scale, seed: int) -> Row:
    result = fuzz_parser(scale.fuzz_parser, seed)
    escaped = sum(result.unexpected.values())
    detail = "; ".join(
        f"{kind} x{n} (smallest input {result.smallest[kind][:80]!r})"
        for kind, n in result.unexpected.most_common(3)
    )
    return Row(
        "fuzzed patch files -> parse_patch",
        f"{result.examples} inputs (hypothesis, seed {seed}): mutations of the real series' "
        f"patches and of synthetic ones (dropped, doubled, swapped, cut lines, flipped bytes, "
        f"huge hunk numbers), random bytes, random diff-line soups, "
        f"{len(PARSER_EDGE_CASES)} hand-picked mail-header and hunk edge cases",
        "-",
        "-",
        f"{result.parsed} parsed, {result.refused} refused with PatchFileError (naming the "
        f"line), {escaped} other exceptions (expected 0)" + (f": {detail}" if detail else ""),
        ok=escaped == 0,
    )
