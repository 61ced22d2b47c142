"""The cheapest scenarios of bench/reliability.py (`make reliability`), so CI runs them too:
fuzzed patch files through the parser, fuzzed webhooks against the running web process.

The hand-picked edge cases that fail today are marked xfail(strict=True) with the fix they
need: when the fix lands the mark turns the test red, and the mark comes off.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from bench.reliability import (
    PARSER_EDGE_CASES,
    ParserFuzz,
    edge_cases,
    fuzz_parser,
    fuzz_webhooks,
    parse_one,
    post_webhook,
)
from tests.support.carry_env import CarryEnv
from tests.support.redis_server import PrivateRedis

SEED = 0
UNSAFE_JSON = "bot.web.webhooks.decode_payload lets RecursionError/ValueError of json.loads out"
TIMESTAMP = "bot.core.events.parse_timestamp lets OverflowError of datetime.fromtimestamp out"
SURROGATE = "a lone surrogate in a payload string reaches Redis (UnicodeEncodeError)"
MAIL_DATE = "bot.core.patchfile._parse_meta lets OverflowError of the email Date header out"
KNOWN_500S = {
    "deeply nested JSON": UNSAFE_JSON,
    "5000-digit integer": UNSAFE_JSON,
    "infinite timestamp": TIMESTAMP,
    "huge epoch timestamp": TIMESTAMP,
    "lone surrogate in repository name": SURROGATE,
    "lone surrogate in ref": SURROGATE,
}
KNOWN_PARSER_ESCAPES = {
    "Date with an overflowing hour": MAIL_DATE,
    "Date with a 20-digit day": MAIL_DATE,
}


def known(name: str, bugs: dict[str, str]) -> pytest.ParameterSet:
    marks = [pytest.mark.xfail(strict=True, reason=bugs[name])] if name in bugs else []
    return pytest.param(name, marks=marks, id=name)


# --------------------------------------------------------------------------- parser


def test_fuzzed_patch_files_only_ever_raise_patch_file_error() -> None:
    result = fuzz_parser(400, SEED, edge=False)
    assert result.examples == 400
    assert result.parsed > 0 and result.refused > 0  # both paths were exercised
    assert dict(result.unexpected) == {}, result.smallest


@pytest.mark.parametrize("name", [known(n, KNOWN_PARSER_ESCAPES) for n in PARSER_EDGE_CASES])
def test_parser_edge_case_is_refused_or_parsed(name: str) -> None:
    result = ParserFuzz()
    parse_one(result, PARSER_EDGE_CASES[name])
    assert dict(result.unexpected) == {}
    assert result.parsed + result.refused == 1


# --------------------------------------------------------------------------- webhooks


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    root = tmp_path_factory.mktemp("fuzz")
    server = PrivateRedis(root / "redis", appendonly=False).start()
    env = CarryEnv(root / "carry", server.url)
    env.carry_patches([{"mod.py": "value = 1\n"}])
    env.write_config()
    try:
        yield env.start_web()
    finally:
        env.stop()
        server.stop(kill=True)


def test_fuzzed_webhooks_never_get_a_500(web: str) -> None:
    result = fuzz_webhooks(web, 60, SEED, edge=False)
    assert result.sent >= 50  # a few generated requests cannot be sent over HTTP at all
    assert result.five_hundreds == 0, result.failures[:3]
    assert {202, 401}.issubset(result.statuses)  # signed ones got in, forged ones did not
    assert httpx.get(f"{web}/healthz", timeout=5).status_code == 200


@pytest.mark.parametrize("name", [known(n, KNOWN_500S) for n, _, _ in edge_cases()])
def test_webhook_edge_case_gets_a_4xx_or_2xx(web: str, name: str) -> None:
    headers, body = next((h, b) for n, h, b in edge_cases() if n == name)
    with httpx.Client(timeout=30) as http:
        status = post_webhook(http, web, headers, body)
    assert 200 <= status < 500


def test_edge_case_lists_are_what_the_marks_name() -> None:
    names = {n for n, _, _ in edge_cases()}
    assert set(KNOWN_500S) <= names
    assert set(KNOWN_PARSER_ESCAPES) <= set(PARSER_EDGE_CASES)
