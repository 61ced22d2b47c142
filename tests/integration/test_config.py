"""config/carry.yaml validation and environment settings."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from bot.config import (
    BaseSpec,
    ConfigError,
    Settings,
    Upstream,
    load_config,
    load_settings,
    parse_pr_ref,
)
from tests.support.paths import REPO_ROOT

EXAMPLE = REPO_ROOT / "config" / "carry.example.yaml"
PATCH = "0001-seed-decode-input-ids-before-async-scatter.patch"
# Every variable Settings reads, and the dashboard token (named by web.dashboard_token_env).
ENV_NAMES = sorted(
    {str(field.validation_alias) for field in Settings.model_fields.values()}
    | {"CARRY_DASHBOARD_TOKEN"}
)


@pytest.fixture
def patches_root(tmp_path: Path) -> Path:
    """The example's patch directories, built in tmp_path."""
    root = tmp_path / "patches"
    for series in yaml.safe_load(EXAMPLE.read_text())["series"]:
        directory = root / series["patches"]
        directory.mkdir(parents=True)
        (directory / "series").write_text("")
        for patch_file in series.get("links", {}):
            (directory / patch_file).write_text("")
    return root


@pytest.fixture
def write(tmp_path: Path) -> Callable[[Any], Path]:
    def write_config(data: Any) -> Path:
        path = tmp_path / "carry.yaml"
        text = data if isinstance(data, str) else yaml.safe_dump(data, sort_keys=False)
        path.write_text(text)
        return path

    return write_config


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    for name in ENV_NAMES:
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def example() -> dict[str, Any]:
    return copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))


def problems_of(path: Path, root: Path) -> list[str]:
    """ConfigError problems with the file name and the trailing '(line N)' removed."""
    with pytest.raises(ConfigError) as caught:
        load_config(path, patches_root=root)
    prefix = f"{path}: "
    assert all(problem.startswith(prefix) for problem in caught.value.problems)
    return [re.sub(r" \(line \d+\)$", "", p.removeprefix(prefix)) for p in caught.value.problems]


# --------------------------------------------------------------------------- valid


def test_example_config_loads(patches_root: Path) -> None:
    config = load_config(EXAMPLE, patches_root=patches_root)

    assert [s.id for s in config.series] == [
        "async-inputs-v0.26.0",
        "async-inputs-main",
        "ple-offload-pr53899",
    ]
    first, main, ple = config.series
    assert (first.base.kind, first.base.ref) == ("tag", "refs/tags/v0.26.0")
    assert (main.base.kind, main.base.ref) == ("branch", "refs/heads/main")
    assert (ple.base.kind, ple.base.ref) == ("pull", "refs/pull/53899/head")
    assert first.linked_prs(PATCH) == [("vllm-project/vllm-gaudi", 1919)]
    assert ple.runners == ["gb10"] and config.upstreams[ple.upstream].repo == "vllm-project/vllm"
    assert config.runners["gaudi"].checks["async-inputs"].timeout_s == 7200
    assert config.runners["gaudi"].budget.running == 1
    assert config.web.max_body_bytes == 1048576
    assert config.polling.refs_every_s == 60


def test_patch_names_with_secret_words_are_not_secrets(
    write: Callable[[Any], Path], patches_root: Path
) -> None:
    data = example()
    (patches_root / "async-inputs-main" / "0002-fix-token-refresh.patch").write_text("")
    data["series"][1]["links"]["0002-fix-token-refresh.patch"] = ["vllm-project/vllm#1"]

    config = load_config(write(data), patches_root=patches_root)

    assert config.series[1].linked_prs("0002-fix-token-refresh.patch") == [("vllm-project/vllm", 1)]


def test_publish_mode_is_force_unless_the_config_or_the_series_says_append(
    write: Callable[[Any], Path], patches_root: Path
) -> None:
    data = example()
    first, second = data["series"][0]["id"], data["series"][1]["id"]
    data.pop("publish", None)
    for series in data["series"]:
        series.pop("publish", None)
    config = load_config(write(data), patches_root=patches_root)
    assert {config.publish_of(s.id).mode for s in config.series} == {"force"}

    data["publish"] = {"mode": "append"}
    data["series"][1]["publish"] = {"mode": "force"}
    config = load_config(write(data), patches_root=patches_root)
    assert (config.publish_of(first).mode, config.publish_of(second).mode) == ("append", "force")


def test_tag_pattern_picks_newest_by_version_order() -> None:
    base = BaseSpec(tag_pattern="v0.*")
    tags = ["v0.9.0", "v0.26.0", "v0.30.0rc1", "v0.30.0", "v1.0.0", "nightly"]
    assert base.newest_tag(tags) == "v0.30.0"
    assert base.ref is None
    assert BaseSpec(tag_pattern="v2.*").newest_tag(tags) is None
    assert (
        BaseSpec(tag_pattern="v0.30.*").newest_tag(["v0.30.0rc2", "v0.30.0rc10"]) == "v0.30.0rc10"
    )


def test_pr_refs_parse() -> None:
    assert parse_pr_ref("vllm-project/vllm#53899") == ("vllm-project/vllm", 53899)
    with pytest.raises(ValueError, match="expected owner/repo#N"):
        parse_pr_ref("vllm#1")


# --------------------------------------------------------------------------- invalid


def _set(data: dict[str, Any], path: str, value: Any) -> None:
    *parents, last = path.split("/")
    node: Any = data
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    if value is _DELETE:
        del node[int(last) if last.isdigit() else last]
    else:
        node[int(last) if last.isdigit() else last] = value


_DELETE = object()
ALLOWED_SERIES_KEYS = "id, upstream, base, patches, links, drop_when, runners, checks, trusted_authors, policy, ci, publish, version_scheme"

BAD_CONFIGS: list[tuple[str, list[tuple[str, Any]], list[str]]] = [
    (
        "two bases",
        [("series/1/base", {"branch": "main", "tag": "v1"})],
        [
            "series[1].base: expected exactly one of branch, tag, tag_pattern, pull "
            "(got branch and tag)"
        ],
    ),
    (
        "no base",
        [("series/0/base", {})],
        ["series[0].base: expected exactly one of branch, tag, tag_pattern, pull (got none)"],
    ),
    (
        "three bases",
        [("series/0/base", {"branch": "main", "tag": "v1", "pull": 3})],
        [
            "series[0].base: expected exactly one of branch, tag, tag_pattern, pull "
            "(got branch, tag and pull)"
        ],
    ),
    (
        "pull is not a number",
        [("series/2/base", {"pull": "abc"})],
        ["series[2].base.pull: expected an integer"],
    ),
    (
        "bad series id",
        [("series/0/id", "Async_Inputs")],
        ["series[0].id: 'Async_Inputs' is not a valid name (expected [a-z0-9][a-z0-9._-]*)"],
    ),
    (
        "duplicate series id",
        [("series/1/id", "async-inputs-v0.26.0")],
        ["series[1].id: duplicate series id 'async-inputs-v0.26.0' (also series[0])"],
    ),
    (
        "unknown upstream",
        [("series/0/upstream", "nope")],
        ["series[0].upstream: unknown upstream 'nope' (known: vllm-gaudi, vllm)"],
    ),
    (
        "unknown runner",
        [("series/0/runners", ["tpu"])],
        [
            "series[0].runners[0]: unknown runner 'tpu' (known: gaudi, gb10)",
        ],
    ),
    (
        "check missing on a runner",
        [("series/2/checks", ["async-inputs"])],
        [
            "series[2].checks[0]: check 'async-inputs' is not defined by runner gb10 "
            "(runners.<name>.checks)"
        ],
    ),
    (
        "checks without runners",
        [("series/1/runners", [])],
        ["series[1].checks: checks need at least one runner in runners"],
    ),
    (
        "patch directory missing",
        [("series/0/patches", "missing-dir")],
        ["series[0].patches: patch directory {root}/missing-dir does not exist"],
    ),
    (
        "patches escapes the root",
        [("series/0/patches", "../etc")],
        ["series[0].patches: expected a relative directory without '..', got '../etc'"],
    ),
    (
        "link without owner/repo",
        [("series/0/links", {PATCH: ["vllm-gaudi#1919"]})],
        [
            f"series[0].links.{PATCH}[0]: expected an upstream PR reference owner/repo#N, "
            "got 'vllm-gaudi#1919'"
        ],
    ),
    (
        "link to a patch that does not exist",
        [("series/0/links", {"0009-nope.patch": ["vllm-project/vllm-gaudi#1"]})],
        [
            "series[0].links.0009-nope.patch: no patch file '0009-nope.patch' in {root}/"
            "async-inputs-v0.26.0"
        ],
    ),
    (
        "misspelled key",
        [("series/0/polcy", {"paused": True})],
        [f"series[0].polcy: unknown key (allowed: {ALLOWED_SERIES_KEYS})"],
    ),
    (
        "unknown step sandbox",
        [("runners/gaudi/sandbox", "docker")],
        ["runners.gaudi.sandbox.mode: input should be 'auto', 'namespaces', 'bwrap' or 'none'"],
    ),
    (
        "sandbox risk not named word for word",
        [("runners/gaudi/sandbox", {"mode": "none", "accept_risk": "sure"})],
        ["runners.gaudi.sandbox.accept_risk: input should be 'jobs can touch later jobs'"],
    ),
    (
        "step network not a boolean",
        [("runners/gaudi/checks/async-inputs/network", "maybe")],
        ["runners.gaudi.checks.async-inputs.network: expected true or false"],
    ),
    (
        "misspelled nested key",
        [("runners/gaudi/checks/async-inputs/timeout", 5)],
        [
            "runners.gaudi.checks.async-inputs.timeout: unknown key (allowed: run, timeout_s, env, network)"
        ],
    ),
    (
        "missing section",
        [("downstream", _DELETE)],
        ["downstream: required key is missing"],
    ),
    (
        "command given as a string",
        [("runners/gaudi/setup/0/run", "pip install -e .")],
        ["runners.gaudi.setup[0].run: expected a list"],
    ),
    (
        "empty command",
        [("runners/gb10/checks/ple-logprob-classes/run", [])],
        [
            "runners.gb10.checks.ple-logprob-classes.run: expected a non-empty command list, "
            "e.g. [python, -m, module]"
        ],
    ),
    (
        "zero timeout",
        [("runners/gaudi/setup/0/timeout_s", 0)],
        ["runners.gaudi.setup[0].timeout_s: input should be greater than 0"],
    ),
    (
        "unknown version scheme",
        [("series/0/version_scheme", "semver")],
        ["series[0].version_scheme: input should be 'date'"],
    ),
    (
        "body limit above GitHub's cap",
        [("web/max_body_bytes", 100 * 1024 * 1024)],
        ["web.max_body_bytes: input should be less than or equal to 26214400"],
    ),
    (
        "a dashboard URL that is not http(s)",
        [("web/public_url", "javascript:alert(1)")],
        [
            "web.public_url: expected an http(s) URL such as https://carry.example.com, "
            "got 'javascript:alert(1)'"
        ],
    ),
    (
        "a dashboard URL that would end the links carry posts",
        [("web/public_url", "https://carry.example.com/a)<img/src=x>")],
        [
            "web.public_url: expected an http(s) URL such as https://carry.example.com, "
            "got 'https://carry.example.com/a)<img/src=x>'"
        ],
    ),
    (
        "unknown publish mode",
        [("series/0/publish", {"mode": "rewrite"})],
        ["series[0].publish.mode: input should be 'force' or 'append'"],
    ),
    (
        "bad downstream repo",
        [("downstream/repo", "carry")],
        ["downstream.repo: expected owner/name, got 'carry'"],
    ),
    (
        "several problems at once",
        [("series/0/upstream", "nope"), ("series/1/runners", ["tpu"])],
        [
            "series[0].upstream: unknown upstream 'nope' (known: vllm-gaudi, vllm)",
            "series[1].runners[0]: unknown runner 'tpu' (known: gaudi, gb10)",
        ],
    ),
]


@pytest.mark.parametrize(
    ("edits", "expected"),
    [pytest.param(edits, expected, id=name) for name, edits, expected in BAD_CONFIGS],
)
def test_bad_config_gives_precise_message(
    write: Callable[[Any], Path],
    patches_root: Path,
    edits: list[tuple[str, Any]],
    expected: list[str],
) -> None:
    data = example()
    for path, value in edits:
        _set(data, path, value)

    problems = problems_of(write(data), patches_root)

    assert problems == [line.format(root=patches_root) for line in expected]


SECRET_CASES = [
    ("downstream/token", "ghp_x", "downstream.token", "set GITHUB_TOKEN in the environment"),
    ("web/webhook_secret", "s3cret", "web.webhook_secret", "set CARRY_WEBHOOK_SECRET"),
    ("github_app_private_key", "pem", "github_app_private_key", "GITHUB_APP_PRIVATE_KEY or"),
    ("upstreams/vllm/password", "pw", "upstreams.vllm.password", "put it in the environment"),
    (
        "runners/gaudi/checks/async-inputs/env",
        {"HF_TOKEN": "hf_abc"},
        "runners.gaudi.checks.async-inputs.env.HF_TOKEN",
        "set GITHUB_TOKEN",
    ),
    (
        "runners/gaudi/checks/async-inputs/env",
        {"HF_HOME": "ghp_" + "a" * 36},
        "runners.gaudi.checks.async-inputs.env.HF_HOME",
        "value looks like a credential",
    ),
]


@pytest.mark.parametrize(("path", "value", "where", "hint"), SECRET_CASES)
def test_secret_in_yaml_is_an_error(
    write: Callable[[Any], Path], patches_root: Path, path: str, value: Any, where: str, hint: str
) -> None:
    data = example()
    _set(data, path, value)

    problems = problems_of(write(data), patches_root)

    assert len(problems) == 1
    assert problems[0].startswith(f"{where}: ")
    assert "secrets are never read from the config file" in problems[0]
    assert hint in problems[0]
    assert "ghp_aaaa" not in problems[0] and "s3cret" not in problems[0]


def test_problem_names_the_line(write: Callable[[Any], Path], patches_root: Path) -> None:
    text = EXAMPLE.read_text().replace("base: {branch: main}", "base: {branch: main, tag: v1}")
    line = next(i for i, s in enumerate(text.splitlines(), 1) if "tag: v1}" in s)

    path = write(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, patches_root=patches_root)

    assert str(caught.value) == (
        f"{path}: series[1].base: expected exactly one of branch, tag, tag_pattern, pull "
        f"(got branch and tag) (line {line})"
    )


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "downstream: {repo: a/b\nseries: []\n",
            r":2:7: YAML syntax error: while parsing a flow mapping; expected ',' or '}'",
        ),
        ("upstreams:\n  x: [1, 2\n", r":3:1: YAML syntax error: while parsing a flow sequence"),
        ("series: []\nseries: []\n", r":2:1: YAML syntax error: duplicate key 'series'"),
        ("a:\n\tb: 1\n", r":2:1: YAML syntax error: .*found character '\\t'"),
    ],
)
def test_yaml_syntax_error_gives_file_line_column(
    write: Callable[[Any], Path], patches_root: Path, text: str, expected: str
) -> None:
    path = write(text)
    with pytest.raises(ConfigError) as caught:
        load_config(path, patches_root=patches_root)
    assert re.match(re.escape(str(path)) + expected, str(caught.value)), str(caught.value)


def test_missing_file_and_non_mapping(write: Callable[[Any], Path], tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.yaml: cannot read config file"):
        load_config(tmp_path / "nope.yaml")
    path = write("- just\n- a list\n")
    with pytest.raises(ConfigError, match=r"carry\.yaml: expected a mapping at the top level"):
        load_config(path)


# --------------------------------------------------------------------------- settings


def test_settings_read_env_and_hide_secrets(clean_env: pytest.MonkeyPatch, tmp_path: Path) -> None:
    key_file = tmp_path / "app.pem"
    key_file.write_text("-----BEGIN RSA PRIVATE KEY-----\nPEMBODY\n")
    clean_env.setenv("CARRY_WEBHOOK_SECRET", "hook-secret-value")
    clean_env.setenv("REDIS_URL", "redis://:redis-password@127.0.0.1:6379/3")
    clean_env.setenv("GITHUB_TOKEN", "ghp_tokenvalue")
    clean_env.setenv("GITHUB_APP_ID", "29310")
    clean_env.setenv("GITHUB_APP_PRIVATE_KEY_PATH", str(key_file))
    clean_env.setenv("GITHUB_INSTALLATION_ID", "957387")
    clean_env.setenv("GITHUB_BASE_URL", "http://127.0.0.1:9/api/v3")
    clean_env.setenv("CARRY_CONFIG", "/etc/carry/carry.yaml")
    clean_env.setenv("CARRY_MAX_BODY_BYTES", "4096")

    settings = load_settings()

    assert settings.webhook_secret is not None
    assert settings.webhook_secret.get_secret_value() == "hook-secret-value"
    assert settings.redis_url.get_secret_value().endswith("@127.0.0.1:6379/3")
    assert (settings.github_app_id, settings.github_installation_id) == (29310, 957387)
    assert settings.github_auth == "app"
    key = settings.app_private_key()
    assert key is not None and "PEMBODY" in key.get_secret_value()
    assert settings.github_base_url == "http://127.0.0.1:9/api/v3"
    assert settings.config_path == Path("/etc/carry/carry.yaml")
    assert settings.effective_max_body_bytes(None) == 4096
    for shown in (repr(settings), str(settings), settings.model_dump_json(), repr(key)):
        for secret in ("hook-secret-value", "redis-password", "ghp_tokenvalue", "PEMBODY"):
            assert secret not in shown


def test_settings_defaults(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("GITHUB_TOKEN", "")  # empty counts as unset

    settings = load_settings()

    assert settings.webhook_secret is None and settings.github_auth == "none"
    assert settings.config_path == Path("config/carry.yaml")
    assert settings.cache_dir == Path.home() / ".cache" / "carry"
    assert settings.github_base_url == "https://api.github.com"
    assert settings.effective_max_body_bytes(None) == 1024 * 1024


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {
                "GITHUB_APP_ID": "1",
                "GITHUB_APP_PRIVATE_KEY": "k-secret",
                "GITHUB_APP_PRIVATE_KEY_PATH": "/k",
            },
            "set only one of GITHUB_APP_PRIVATE_KEY and GITHUB_APP_PRIVATE_KEY_PATH",
        ),
        (
            {"GITHUB_APP_ID": "1"},
            "GITHUB_APP_ID is set but neither GITHUB_APP_PRIVATE_KEY nor "
            "GITHUB_APP_PRIVATE_KEY_PATH is",
        ),
        (
            {"GITHUB_APP_PRIVATE_KEY": "k-secret"},
            "GITHUB_APP_PRIVATE_KEY is set but GITHUB_APP_ID is not",
        ),
        ({"GITHUB_TOKEN": "k-secret", "REDIS_URL": "lots-secret"}, "REDIS_URL: expected redis://"),
        ({"REDIS_URL": "redis://:lots-secret@host:port/0"}, "(got 'redis://:***@host:port/0')"),
    ],
)
def test_bad_settings_name_the_variable_without_its_secret_value(
    clean_env: pytest.MonkeyPatch, env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        clean_env.setenv(name, value)

    with pytest.raises(ConfigError) as caught:
        load_settings()

    assert str(caught.value).startswith("environment: ")
    assert message in str(caught.value)
    assert "k-secret" not in str(caught.value) and "lots-secret" not in str(caught.value)


def test_dashboard_token_comes_from_the_named_variable(
    clean_env: pytest.MonkeyPatch, patches_root: Path
) -> None:
    config = load_config(EXAMPLE, patches_root=patches_root)
    assert Settings.dashboard_token(config) is None
    clean_env.setenv("CARRY_DASHBOARD_TOKEN", "dash-value")
    token = Settings.dashboard_token(config)
    assert token is not None and token.get_secret_value() == "dash-value"
    assert "dash-value" not in repr(token)


def test_secret_values_never_in_repr_of_settings_built_in_code(
    clean_env: pytest.MonkeyPatch,
) -> None:
    settings = Settings.model_validate(
        {"webhook_secret": "in-code-secret", "github_token": "in-code-token"}
    )
    assert "in-code-secret" not in repr(settings) and "in-code-token" not in repr(settings)
    assert settings.github_auth == "token"


def upstream_url_error(tmp_path, url: str) -> str:
    """The error a config whose one upstream has `url` gets."""
    from bot.config import ConfigError, parse_config

    (tmp_path / "s").mkdir()
    text = (
        "downstream: {repo: a/b}\n"
        f"upstreams: {{u: {{url: '{url}', repo: o/r}}}}\n"
        "series: [{id: s, upstream: u, base: {branch: main}, patches: s}]\n"
    )
    with pytest.raises(ConfigError) as err:
        parse_config(text, "carry.yaml", patches_root=tmp_path)
    assert "upstreams.u.url" in str(err.value)
    return str(err.value)


def test_credentials_in_an_upstream_url_are_refused(tmp_path):
    error = upstream_url_error(tmp_path, "https://user:hunter2token@github.com/o/r.git")
    assert "credentials" in error and "hunter2token" not in error


def test_an_upstream_url_git_would_read_as_an_option_is_refused(tmp_path):
    assert "starts with '-'" in upstream_url_error(tmp_path, "--upload-pack=touch /tmp/pwned")


@pytest.mark.parametrize(
    ("url", "host"),
    [
        ("https://github.com/vllm-project/vllm.git", "https://github.com"),
        ("https://github.com/vllm-project/vllm", "https://github.com"),
        ("git@github.com:vllm-project/vllm.git", "https://github.com"),
        ("ssh://git@ghe.corp.example:2222/ml/vllm.git", "https://ghe.corp.example"),
        ("https://ghe.corp.example/ml/vllm.git", "https://ghe.corp.example"),
        ("https://acme.ghe.com/ml/vllm.git", "https://acme.ghe.com"),
        ("https://git.corp.example/mirrors/ml/vllm.git", "https://git.corp.example/mirrors"),
        ("http://127.0.0.1:8765/upstream-org/engine.git", "http://127.0.0.1:8765"),
        ("/srv/git/vllm.git", ""),
        ("file:///srv/git/vllm.git", ""),
    ],
)
def test_an_upstreams_web_host_comes_from_its_url(url: str, host: str) -> None:
    """Where the dashboard links an upstream's commits and PRs (they were always github.com)."""
    assert Upstream(url=url, repo="ml/vllm").web_host == host


def test_ci_on_reads_as_a_name_and_defaults_to_every_head(
    write: Callable[[Any], Path], patches_root: Path
) -> None:
    """YAML 1.1 reads a bare `on:` key as the boolean true; carry reads keys as YAML 1.2 does."""
    text = EXAMPLE.read_text()
    assert "      on: every-head" in text
    config = load_config(
        write(text.replace("on: every-head", "on: proposed")), patches_root=patches_root
    )
    assert [s.ci.on for s in config.series] == ["proposed", "every-head", "every-head"]
    bad = write(text.replace("on: every-head", "on: sometimes"))
    (problem,) = problems_of(bad, patches_root)
    assert problem.startswith("series[0].ci.on: ") and "'every-head' or 'proposed'" in problem


@pytest.mark.parametrize(
    ("ci", "field", "said"),
    [
        ({"daily_budget": 0}, "daily_budget", "greater than 0"),
        ({"min_interval_s": -5}, "min_interval_s", "greater than or equal to 0"),
        ({"min_interval_s": "hourly"}, "min_interval_s", "expected an integer"),
    ],
)
def test_ci_pacing_refuses_what_could_never_run(
    write: Callable[[Any], Path], patches_root: Path, ci: dict[str, Any], field: str, said: str
) -> None:
    data = example()
    data["series"][0]["ci"] = ci
    (problem,) = problems_of(write(data), patches_root)
    assert problem.startswith(f"series[0].ci.{field}: ") and said in problem


def test_a_json_webhook_needs_the_variable_of_its_signing_secret(
    write: Callable[[Any], Path], patches_root: Path
) -> None:
    data = example()
    data["notify"] = {"webhooks": [{"url": "https://hooks.example.com/carry"}]}
    (problem,) = problems_of(write(data), patches_root)
    assert problem.startswith("notify.webhooks[0]: ") and "needs secret_env" in problem
    data["notify"] = {"webhooks": [{"url": "javascript:alert(1)", "format": "slack"}]}
    (problem,) = problems_of(write(data), patches_root)
    assert problem.startswith("notify.webhooks[0].url: expected an http(s) URL")
    data["notify"] = {
        "webhooks": [{"url": "https://h.example.com/x?a=1", "secret_env": "CARRY_NOTIFY_SECRET"}]
    }
    assert load_config(write(data), patches_root=patches_root).notify.webhooks[0].format == "json"
