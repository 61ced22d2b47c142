"""Configuration: config/carry.yaml (validated at start-up) and secrets from the environment.

The YAML file describes *what* carry does (series, upstreams, runners, policies). Secrets never
live in it: they come from environment variables through `Settings`, held as `SecretStr` so
that they stay out of reprs, logs and error messages.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from bot.core.versions import version_key

DEFAULT_CONFIG_PATH = Path("config/carry.yaml")
DEFAULT_MAX_BODY_BYTES = 1024 * 1024
# GitHub does not deliver payloads over 25 MB, so a larger limit is meaningless.
GITHUB_MAX_PAYLOAD_BYTES = 25 * 1024 * 1024


class ConfigError(Exception):
    """A configuration problem; the message names the file, the key path and the reason."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


# --------------------------------------------------------------------------- field types

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
_REPO_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$")
_PR_REF_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100})#([1-9][0-9]*)$")
_ENV_NAME_RE = re.compile(r"^[A-Z_][A-Z0-9_]*$")


def _name(value: str) -> str:
    if not _NAME_RE.match(value):
        raise ValueError(f"{value!r} is not a valid name (expected [a-z0-9][a-z0-9._-]*)")
    return value


def _repo(value: str) -> str:
    if not _REPO_RE.match(value):
        raise ValueError(f"expected owner/name, got {value!r}")
    return value


def _pr_ref(value: str) -> str:
    if not _PR_REF_RE.match(value):
        raise ValueError(f"expected an upstream PR reference owner/repo#N, got {value!r}")
    return value


def _env_name(value: str) -> str:
    if not _ENV_NAME_RE.match(value):
        raise ValueError(f"expected an environment variable name like CARRY_X, got {value!r}")
    return value


def _relative_dir(value: str) -> str:
    parts = Path(value).parts
    if not value or Path(value).is_absolute() or ".." in parts:
        raise ValueError(f"expected a relative directory without '..', got {value!r}")
    return value


def _argv(value: list[str]) -> list[str]:
    if not value or not value[0]:
        raise ValueError("expected a non-empty command list, e.g. [python, -m, module]")
    return value


Name = Annotated[str, AfterValidator(_name)]
RepoName = Annotated[str, AfterValidator(_repo)]
PrRefStr = Annotated[str, AfterValidator(_pr_ref)]
EnvName = Annotated[str, AfterValidator(_env_name)]
RelativeDir = Annotated[str, AfterValidator(_relative_dir)]
Argv = Annotated[list[str], AfterValidator(_argv)]
PositiveInt = Annotated[int, Field(gt=0)]


def parse_pr_ref(ref: str) -> tuple[str, int]:
    """'owner/repo#12' -> ('owner/repo', 12)."""
    match = _PR_REF_RE.match(ref)
    if match is None:
        raise ValueError(f"expected owner/repo#N, got {ref!r}")
    return match.group(1), int(match.group(2))


# --------------------------------------------------------------------------- YAML models


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Downstream(_Model):
    repo: RepoName
    branch: str = "main"
    patches_dir: RelativeDir = "patches"


def _no_credentials(url: str) -> str:
    if re.match(r"^[a-z][a-z0-9+.-]*://[^/@]+@", url) and not url.startswith("ssh://"):
        raise ValueError(
            "the URL carries credentials; remove them and set GITHUB_TOKEN or a GitHub App "
            "in the environment (secrets never go in the config file)"
        )
    return url


def _not_an_option(url: str) -> str:
    # git would read "-u..." or "--upload-pack=..." as an option, not a repository.
    if url.lstrip().startswith("-"):
        raise ValueError(f"expected a repository URL or path, got {url!r} (starts with '-')")
    return url


class Upstream(_Model):
    url: Annotated[
        str, Field(min_length=1), AfterValidator(_not_an_option), AfterValidator(_no_credentials)
    ]
    repo: RepoName

    @property
    def web_host(self) -> str:
        """The web root the repository's pages live under (`https://github.com`, a GHE host,
        with any path before OWNER/NAME); "" for a local path or file:// URL, which has none."""
        scp = re.fullmatch(r"[\w.-]+@([\w.-]+):(?!//).*", self.url)
        if scp:
            return f"https://{scp[1]}"
        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https", "ssh", "git") or not parts.hostname:
            return ""
        web = parts.scheme in ("http", "https")
        # ssh:// and git:// name git's user and port; the pages are on https at the host.
        scheme, host = (parts.scheme, parts.netloc) if web else ("https", parts.hostname)
        prefix = "/".join(parts.path.strip("/").split("/")[:-2])
        return f"{scheme}://{host}" + (f"/{prefix}" if prefix else "")


BaseKind = Literal["branch", "tag", "tag_pattern", "pull"]
_BASE_KINDS: tuple[BaseKind, ...] = ("branch", "tag", "tag_pattern", "pull")


class BaseSpec(_Model):
    """Where a series sits upstream: exactly one of branch, tag, tag_pattern, pull."""

    branch: Annotated[str, Field(min_length=1)] | None = None
    tag: Annotated[str, Field(min_length=1)] | None = None
    tag_pattern: Annotated[str, Field(min_length=1)] | None = None
    pull: PositiveInt | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> BaseSpec:
        given = [kind for kind in _BASE_KINDS if getattr(self, kind) is not None]
        if len(given) != 1:
            got = _join_and(given) if given else "none"
            raise ValueError(f"expected exactly one of branch, tag, tag_pattern, pull (got {got})")
        return self

    @property
    def kind(self) -> BaseKind:
        return next(kind for kind in _BASE_KINDS if getattr(self, kind) is not None)

    @property
    def ref(self) -> str | None:
        """The full upstream ref to watch; None for tag_pattern (resolved from the tag list)."""
        if self.branch is not None:
            return f"refs/heads/{self.branch}"
        if self.tag is not None:
            return f"refs/tags/{self.tag}"
        if self.pull is not None:
            return f"refs/pull/{self.pull}/head"
        return None

    def newest_tag(self, tags: Iterable[str]) -> str | None:
        """The newest tag matching tag_pattern, by version order (v0.10.0 > v0.9.1)."""
        if self.tag_pattern is None:
            raise ValueError("newest_tag() needs a tag_pattern base")
        matching = [tag for tag in tags if fnmatchcase(tag, self.tag_pattern)]
        return max(matching, key=version_key, default=None)


class Policy(_Model):
    paused: bool = False
    auto_drop: bool = True


class Series(_Model):
    id: Name
    upstream: Name
    base: BaseSpec
    patches: RelativeDir
    links: dict[str, list[PrRefStr]] = Field(default_factory=dict)
    runners: list[Name] = Field(default_factory=list)
    checks: list[Name] = Field(default_factory=list)
    trusted_authors: list[Annotated[str, Field(min_length=1)]] = Field(default_factory=list)
    policy: Policy = Field(default_factory=Policy)
    version_scheme: Literal["date"] = "date"

    def linked_prs(self, patch_file: str) -> list[tuple[str, int]]:
        return [parse_pr_ref(ref) for ref in self.links.get(patch_file, [])]


class Budget(_Model):
    queued: Annotated[int, Field(ge=0)] = 2
    running: PositiveInt = 1


class Command(_Model):
    run: Argv
    timeout_s: PositiveInt = 3600
    env: dict[EnvName, str] = Field(default_factory=dict)
    # The host's network for this step (say, one that downloads a model or packages). Without it
    # a sandboxed step has only its own loopback: no route to the broker or anywhere else.
    network: bool = False


class SetupStep(Command):
    name: Name


class Runner(_Model):
    queue: Annotated[str, Field(min_length=1)]
    budget: Budget = Field(default_factory=Budget)
    workdir: Annotated[str, Field(min_length=1)]
    setup: list[SetupStep] = Field(default_factory=list)
    checks: dict[Name, Command] = Field(default_factory=dict)
    # How steps are isolated from the runner and the host (workers/runner/sandbox.py): auto uses
    # namespaces where the host gives them, namespaces insists on them, none runs steps bare.
    sandbox: Literal["auto", "namespaces", "none"] = "auto"

    def networked(self) -> frozenset[tuple[str, str]]:
        """(step kind, name) of the steps that get the host's network."""
        setup = {("setup", step.name) for step in self.setup if step.network}
        return frozenset(setup | {("check", n) for n, c in self.checks.items() if c.network})


class Polling(_Model):
    refs_every_s: PositiveInt = 60
    pr_state_every_s: PositiveInt = 300


class Web(_Model):
    max_body_bytes: Annotated[int, Field(gt=0, le=GITHUB_MAX_PAYLOAD_BYTES)] = (
        DEFAULT_MAX_BODY_BYTES
    )
    dashboard_token_env: EnvName = "CARRY_DASHBOARD_TOKEN"


class CarryConfig(_Model):
    downstream: Downstream
    upstreams: dict[Name, Upstream]
    series: list[Series]
    runners: dict[Name, Runner] = Field(default_factory=dict)
    polling: Polling = Field(default_factory=Polling)
    web: Web = Field(default_factory=Web)

    def series_by_id(self, series_id: str) -> Series:
        for series in self.series:
            if series.id == series_id:
                return series
        raise KeyError(series_id)


# --------------------------------------------------------------------------- loading


def load_config(
    path: str | Path,
    *,
    patches_root: Path | None = None,
    downstream_dir: Path | None = None,
    check_dirs: bool = True,
) -> CarryConfig:
    """Read, validate and cross-check the YAML config; raise ConfigError listing every problem.

    `patches_root` is the directory holding the series' patch directories; by default
    `downstream.patches_dir` relative to `downstream_dir` (the working directory if unset).
    """
    path = Path(path)
    label = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([f"{label}: cannot read config file: {exc.strerror or exc}"]) from exc
    return parse_config(
        text, label, patches_root=patches_root, downstream_dir=downstream_dir, check_dirs=check_dirs
    )


def parse_config(
    text: str,
    label: str,
    *,
    patches_root: Path | None = None,
    downstream_dir: Path | None = None,
    check_dirs: bool = True,
) -> CarryConfig:
    data, lines = _load_yaml(text, label)
    if not isinstance(data, dict):
        raise ConfigError([f"{label}: expected a mapping at the top level"])
    problems = [f"{label}: {where}: {why}" for where, why in _secret_problems(data)]
    if problems:
        raise ConfigError(problems)
    try:
        config = CarryConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_validation_problems(exc, label, lines)) from None
    root = patches_root or (downstream_dir or Path()) / config.downstream.patches_dir
    found = [*_cross_reference_problems(config)]
    if check_dirs:
        found += _patch_dir_problems(config, root)
    if found:
        raise ConfigError([_at(label, loc, why, lines) for loc, why in found])
    return config


Loc = tuple[str | int, ...]


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_StrictLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG,
    _construct_mapping,
)


def _load_yaml(text: str, label: str) -> tuple[Any, dict[Loc, int]]:
    """Parse YAML, returning the data and the 1-based line of every key path."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{label}:{mark.line + 1}:{mark.column + 1}" if mark else label
        reason = "; ".join(part for part in (exc.context, exc.problem) if part)
        raise ConfigError([f"{where}: YAML syntax error: {reason}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{label}: YAML error: {exc}"]) from None
    finally:
        loader.dispose()
    lines: dict[Loc, int] = {}
    if node is not None:
        _index_lines(node, (), lines)
    return data, lines


def _index_lines(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key_node, value_node in node.value:
            child = (*loc, str(key_node.value))
            _index_lines(value_node, child, lines)
            lines[child] = key_node.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            _index_lines(item, (*loc, index), lines)


def format_loc(loc: Iterable[str | int]) -> str:
    """('series', 1, 'base') -> 'series[1].base'."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _NAME_RE.match(part) or re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", part):
            out += f".{part}" if out else part
        else:
            out += f"[{part!r}]" if out else repr(part)
    return out or "(top level)"


def _at(label: str, loc: Loc, why: str, lines: Mapping[Loc, int]) -> str:
    line = None
    for end in range(len(loc), 0, -1):
        line = lines.get(loc[:end])
        if line is not None:
            break
    suffix = f" (line {line})" if line is not None else ""
    return f"{label}: {format_loc(loc)}: {why}{suffix}"


_PYDANTIC_REASONS = {
    "missing": "required key is missing",
    "list_type": "expected a list",
    "dict_type": "expected a mapping",
    "model_type": "expected a mapping",
    "model_attributes_type": "expected a mapping",
    "string_type": "expected a string",
    "int_type": "expected an integer",
    "int_parsing": "expected an integer",
    "bool_type": "expected true or false",
    "bool_parsing": "expected true or false",
}


def _validation_problems(exc: ValidationError, label: str, lines: Mapping[Loc, int]) -> list[str]:
    problems = []
    # include_input=False: values may be anything the user typed, secrets included.
    for error in exc.errors(include_input=False, include_url=False):
        loc: Loc = tuple(error["loc"])
        kind = error["type"]
        if kind == "extra_forbidden":
            why = _unknown_key(loc)
        elif kind in _PYDANTIC_REASONS:
            why = _PYDANTIC_REASONS[kind]
        else:
            why = error["msg"].removeprefix("Value error, ")
        if why.startswith("Input should"):
            why = "i" + why[1:]
        problems.append(_at(label, _drop_validator_frames(loc), why, lines))
    return problems


def _drop_validator_frames(loc: Loc) -> Loc:
    # pydantic adds pseudo-frames such as '[key]' (a bad mapping key) to the location.
    return tuple(part for part in loc if not (isinstance(part, str) and "[" in part))


def _unknown_key(loc: Loc) -> str:
    model = _model_at(loc[:-1])
    if model is None:
        return "unknown key"
    allowed = ", ".join(model.model_fields)
    return f"unknown key (allowed: {allowed})"


def _model_at(loc: Loc) -> type[BaseModel] | None:
    """The pydantic model that validates the mapping at `loc` (for 'allowed keys' hints)."""
    model: Any = CarryConfig
    parts = list(loc)
    while parts:
        part = parts.pop(0)
        if isinstance(part, int) or model is None:
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        model = _inner_model(field.annotation)
        if model is not None and _is_mapping_of_models(field.annotation) and parts:
            parts.pop(0)  # skip the free-form mapping key (runner name, check name, ...)
    return model if isinstance(model, type) and issubclass(model, BaseModel) else None


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in getattr(annotation, "__args__", ()):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _is_mapping_of_models(annotation: Any) -> bool:
    return getattr(annotation, "__origin__", None) is dict


# --------------------------------------------------------------------------- secrets in YAML

_SECRET_WORDS = {"token", "secret", "password", "passwd", "apikey", "credential", "credentials"}
_SECRET_PAIRS = {("private", "key"), ("api", "key"), ("access", "key")}
_SECRET_VALUE_RE = re.compile(
    r"^(gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})$"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
_ENV_HINTS = (
    ("private", "GITHUB_APP_PRIVATE_KEY or GITHUB_APP_PRIVATE_KEY_PATH"),
    ("secret", "CARRY_WEBHOOK_SECRET"),
    ("token", "GITHUB_TOKEN"),
)
# Mappings whose keys are names of things (patch files), not settings.
_FREE_KEY_PARENTS = {"links"}


def _looks_secret_key(key: str) -> bool:
    words = [w for w in re.split(r"[^a-z0-9]+", key.lower()) if w]
    if words and words[-1] == "env":  # e.g. dashboard_token_env names a variable
        return False
    pairs = set(itertools.pairwise(words))
    return bool(_SECRET_WORDS.intersection(words) or _SECRET_PAIRS & pairs)


def _env_hint(key: str) -> str:
    lowered = key.lower()
    for word, variable in _ENV_HINTS:
        if word in lowered:
            return f"set {variable} in the environment instead (see .env.example)"
    return "put it in the environment instead (see .env.example)"


def _secret_problems(data: Any, loc: Loc = ()) -> Iterator[tuple[str, str]]:
    if isinstance(data, dict):
        free_keys = bool(loc) and loc[-1] in _FREE_KEY_PARENTS
        for key, value in data.items():
            child = (*loc, str(key))
            if not free_keys and isinstance(key, str) and _looks_secret_key(key):
                yield (
                    format_loc(child),
                    (
                        f"looks like a secret; secrets are never read from the config file, "
                        f"{_env_hint(key)}"
                    ),
                )
            else:
                yield from _secret_problems(value, child)
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from _secret_problems(item, (*loc, index))
    elif isinstance(data, str) and _SECRET_VALUE_RE.search(data):
        yield (
            format_loc(loc),
            (
                "value looks like a credential; secrets are never read from the config file, "
                "put it in the environment instead (see .env.example)"
            ),
        )


# --------------------------------------------------------------------------- cross-references


def _cross_reference_problems(config: CarryConfig) -> Iterator[tuple[Loc, str]]:
    first_index: dict[str, int] = {}
    for index, series in enumerate(config.series):
        loc: Loc = ("series", index)
        if series.id in first_index:
            yield (
                (*loc, "id"),
                f"duplicate series id {series.id!r} (also series[{first_index[series.id]}])",
            )
        first_index.setdefault(series.id, index)
        if series.upstream not in config.upstreams:
            known = ", ".join(config.upstreams) or "none"
            yield (*loc, "upstream"), f"unknown upstream {series.upstream!r} (known: {known})"
        yield from _runner_problems(config, series, loc)


def _runner_problems(config: CarryConfig, series: Series, loc: Loc) -> Iterator[tuple[Loc, str]]:
    for index, runner in enumerate(series.runners):
        if runner not in config.runners:
            known = ", ".join(config.runners) or "none"
            yield (*loc, "runners", index), f"unknown runner {runner!r} (known: {known})"
    if series.checks and not series.runners:
        yield (*loc, "checks"), "checks need at least one runner in runners"
    for index, check in enumerate(series.checks):
        missing = [
            name
            for name in series.runners
            if name in config.runners and check not in config.runners[name].checks
        ]
        if missing:
            yield (
                (*loc, "checks", index),
                (
                    f"check {check!r} is not defined by runner {_join_and(missing)} "
                    f"(runners.<name>.checks)"
                ),
            )


def _patch_dir_problems(config: CarryConfig, root: Path) -> Iterator[tuple[Loc, str]]:
    for index, series in enumerate(config.series):
        loc: Loc = ("series", index)
        directory = root / series.patches
        if not directory.is_dir():
            yield (*loc, "patches"), f"patch directory {directory} does not exist"
            continue
        for patch_file in series.links:
            if not (directory / patch_file).is_file():
                yield (*loc, "links", patch_file), f"no patch file {patch_file!r} in {directory}"


def _join_and(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return f"{', '.join(items[:-1])} and {items[-1]}"


# --------------------------------------------------------------------------- environment


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"
_REDIS_SHAPES = "expected redis://HOST[:PORT][/DB], rediss://HOST[:PORT][/DB] or unix:///PATH"
# Variables whose values never appear in an error message (a Redis URL is shown redacted).
_SECRET_VARIABLES = frozenset(
    {"CARRY_WEBHOOK_SECRET", "GITHUB_TOKEN", "GITHUB_APP_PRIVATE_KEY", "REDIS_URL"}
)
_SHOWN_VALUE_CHARS = 60


def log_level(value: str) -> str:
    """A logging level name, any case ('info' -> 'INFO'); for argparse `type=` too."""
    name = value.strip().upper()
    if name not in LOG_LEVELS:
        raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
    return name


def redact_url(url: str) -> str:
    """The URL with its password, if it has one, replaced by ***."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")
    if not sep or not at or ":" not in userinfo:
        return url
    user = userinfo.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}{slash}{path}"


def _redis_url_problem(url: str) -> str | None:
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        return _REDIS_SHAPES
    if parts.scheme == "unix":
        return None if parts.path else "unix:// needs a socket path, e.g. unix:///run/redis.sock"
    if parts.scheme not in ("redis", "rediss"):
        return _REDIS_SHAPES
    if not parts.hostname:
        return f"{parts.scheme}:// needs a host, e.g. {parts.scheme}://127.0.0.1:6379/0"
    database = parts.path.removeprefix("/")
    if database and not database.isdigit():
        return "the database after the host must be a number, e.g. /0"
    return None


def _redis_url(value: SecretStr) -> SecretStr:
    url = value.get_secret_value().strip()
    problem = _redis_url_problem(url)
    if problem is None:
        return SecretStr(url)
    # Without a scheme the value may be a password pasted in the wrong place: not shown.
    shown = repr(redact_url(url)) if "://" in url else "a value with no scheme://"
    raise ValueError(f"{problem} (got {shown})")


def _non_empty_path(value: Path | None) -> Path | None:
    return value.expanduser() if value is not None else None


RedisUrl = Annotated[SecretStr, AfterValidator(_redis_url)]
Seconds = Annotated[float, Field(gt=0, allow_inf_nan=False)]
OptionalPath = Annotated[Path | None, AfterValidator(_non_empty_path)]
OptionalText = Annotated[str, Field(min_length=1)] | None


def _env_names(value: object) -> object:
    if isinstance(value, str):
        return tuple(name.strip() for name in value.split(",") if name.strip())
    return value


# "HF_TOKEN, HF_HOME" -> ("HF_TOKEN", "HF_HOME"); each must look like a variable name.
EnvNameList = Annotated[tuple[EnvName, ...], NoDecode, BeforeValidator(_env_names)]


class Settings(BaseSettings):
    """Secrets and deployment knobs, read only from the environment. Every variable carry
    reads is a field here (the dashboard token excepted: web.dashboard_token_env names it);
    .env.example documents each one (tests/unit/test_settings_env.py keeps them in step)."""

    model_config = SettingsConfigDict(
        env_file=None, env_ignore_empty=True, extra="ignore", populate_by_name=True, frozen=True
    )

    webhook_secret: SecretStr | None = Field(default=None, validation_alias="CARRY_WEBHOOK_SECRET")
    # A Redis URL may carry a password (redis://:pw@host), so it is treated as a secret too.
    redis_url: RedisUrl = Field(default=SecretStr(DEFAULT_REDIS_URL), validation_alias="REDIS_URL")
    github_token: SecretStr | None = Field(default=None, validation_alias="GITHUB_TOKEN")
    github_app_id: PositiveInt | None = Field(default=None, validation_alias="GITHUB_APP_ID")
    github_app_private_key: SecretStr | None = Field(
        default=None, validation_alias="GITHUB_APP_PRIVATE_KEY"
    )
    github_app_private_key_path: Path | None = Field(
        default=None, validation_alias="GITHUB_APP_PRIVATE_KEY_PATH"
    )
    github_installation_id: PositiveInt | None = Field(
        default=None, validation_alias="GITHUB_INSTALLATION_ID"
    )
    github_base_url: str = Field(
        default="https://api.github.com", validation_alias="GITHUB_BASE_URL"
    )
    bot_login: Annotated[str, Field(min_length=1)] = Field(
        default="carry[bot]", validation_alias="CARRY_BOT_LOGIN"
    )
    # GitHub asks for at least a second between mutative requests (REST best practices);
    # 0 sends writes back to back (tests, the demo's emulator).
    github_write_pause_s: Annotated[float, Field(ge=0, le=60, allow_inf_nan=False)] = Field(
        default=1.0, validation_alias="CARRY_GITHUB_WRITE_PAUSE_S"
    )
    config_path: Path = Field(default=DEFAULT_CONFIG_PATH, validation_alias="CARRY_CONFIG")
    cache_dir: Path = Field(
        default_factory=lambda: Path("~/.cache/carry").expanduser(),
        validation_alias="CARRY_CACHE_DIR",
    )
    downstream_dir: OptionalPath = Field(default=None, validation_alias="CARRY_DOWNSTREAM_DIR")
    downstream_git_url: OptionalText = Field(
        default=None, validation_alias="CARRY_DOWNSTREAM_GIT_URL"
    )
    max_body_bytes: Annotated[int, Field(gt=0, le=GITHUB_MAX_PAYLOAD_BYTES)] | None = Field(
        default=None, validation_alias="CARRY_MAX_BODY_BYTES"
    )
    # Longer than the longest job (hardware checks are bounded by their own timeouts), so
    # Redis does not hand a running job to a second worker.
    visibility_timeout_s: PositiveInt = Field(
        default=6 * 3600, validation_alias="CARRY_VISIBILITY_TIMEOUT_S"
    )
    lock_ttl_s: PositiveInt = Field(default=600, validation_alias="CARRY_LOCK_TTL_S")
    # A git fetch, ls-remote or push that gets no answer for this long is stopped: a hung
    # upstream or downstream is a visible failure, not a worker waiting forever.
    git_timeout_s: PositiveInt = Field(default=600, validation_alias="CARRY_GIT_TIMEOUT_S")
    # One slow series must not hold the others behind it: a rebase past this is stopped and
    # shown as timed out (hard limit: a minute more).
    rebase_time_limit_s: PositiveInt = Field(
        default=900, validation_alias="CARRY_REBASE_TIME_LIMIT_S"
    )
    # Checked before a rebase starts: a series over either is refused (shown as a problem of
    # the series), not checked for minutes while the others wait.
    max_patch_bytes: PositiveInt = Field(
        default=8 * 1024 * 1024, validation_alias="CARRY_MAX_PATCH_BYTES"
    )
    max_series_patches: PositiveInt = Field(
        default=1000, validation_alias="CARRY_MAX_SERIES_PATCHES"
    )
    busy_retry_s: Seconds = Field(default=2.0, validation_alias="CARRY_BUSY_RETRY_S")
    ci_debounce_s: Annotated[float, Field(ge=0, allow_inf_nan=False)] = Field(
        default=30.0, validation_alias="CARRY_CI_DEBOUNCE_S"
    )
    ci_lease_s: PositiveInt = Field(default=60, validation_alias="CARRY_CI_LEASE_S")
    runner_name: OptionalText = Field(default=None, validation_alias="CARRY_RUNNER_NAME")
    runner_workdir: OptionalPath = Field(default=None, validation_alias="CARRY_RUNNER_WORKDIR")
    heartbeat_s: Seconds = Field(default=15.0, validation_alias="CARRY_HEARTBEAT_S")
    runner_pass_env: EnvNameList = Field(default=(), validation_alias="CARRY_RUNNER_PASS_ENV")

    @field_validator("cache_dir", "github_app_private_key_path", "config_path")
    @classmethod
    def _expand_home(cls, value: Path | None) -> Path | None:
        return value.expanduser() if value is not None else None

    @model_validator(mode="after")
    def _github_auth_is_consistent(self) -> Settings:
        key_given = [
            name
            for name, value in (
                ("GITHUB_APP_PRIVATE_KEY", self.github_app_private_key),
                ("GITHUB_APP_PRIVATE_KEY_PATH", self.github_app_private_key_path),
            )
            if value is not None
        ]
        if len(key_given) > 1:
            raise ValueError(
                "set only one of GITHUB_APP_PRIVATE_KEY and GITHUB_APP_PRIVATE_KEY_PATH"
            )
        if self.github_app_id is not None and not key_given:
            raise ValueError(
                "GITHUB_APP_ID is set but neither GITHUB_APP_PRIVATE_KEY nor "
                "GITHUB_APP_PRIVATE_KEY_PATH is"
            )
        if key_given and self.github_app_id is None:
            raise ValueError(f"{key_given[0]} is set but GITHUB_APP_ID is not")
        return self

    @property
    def github_auth(self) -> Literal["app", "token", "none"]:
        if self.github_app_id is not None:
            return "app"
        return "token" if self.github_token is not None else "none"

    def app_private_key(self) -> SecretStr | None:
        """The App's PEM key: GITHUB_APP_PRIVATE_KEY, or the file at GITHUB_APP_PRIVATE_KEY_PATH."""
        if self.github_app_private_key is not None:
            return self.github_app_private_key
        if self.github_app_private_key_path is None:
            return None
        try:
            return SecretStr(self.github_app_private_key_path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(
                [f"environment: GITHUB_APP_PRIVATE_KEY_PATH: cannot read key file: {exc.strerror}"]
            ) from exc

    @property
    def tracks_github(self) -> bool:
        """With GitHub credentials and no local checkout given, the series come from GitHub."""
        return self.github_auth != "none" and self.downstream_dir is None

    def downstream_checkout(self) -> Path:
        """Where the downstream repository's series are read from, by workers and the
        dashboard alike: CARRY_DOWNSTREAM_DIR, else the copy exported from GitHub, else the
        working directory."""
        if self.downstream_dir is not None:
            return self.downstream_dir.resolve()
        if self.tracks_github:
            return self.cache_dir / "downstream-checkout"
        return Path().resolve()

    def effective_max_body_bytes(self, config: CarryConfig | None) -> int:
        """CARRY_MAX_BODY_BYTES wins over web.max_body_bytes in the YAML."""
        if self.max_body_bytes is not None:
            return self.max_body_bytes
        return config.web.max_body_bytes if config is not None else DEFAULT_MAX_BODY_BYTES

    @staticmethod
    def dashboard_token(config: CarryConfig) -> SecretStr | None:
        """The dashboard/API token, from the variable that web.dashboard_token_env names."""
        value = os.environ.get(config.web.dashboard_token_env)
        return SecretStr(value) if value else None


def load_settings(**overrides: Any) -> Settings:
    """Settings from the environment; ConfigError with one line per bad variable, naming it
    and (unless it may hold a secret) its value."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError(
            [_setting_problem(error) for error in exc.errors(include_url=False)]
        ) from None


_SETTING_REASONS = {
    "int_parsing": "expected a whole number",
    "int_from_float": "expected a whole number",
    "int_type": "expected a whole number",
    "float_parsing": "expected a number",
    "float_type": "expected a number",
    "finite_number": "expected a finite number",
    "greater_than": "expected a number greater than {gt}",
    "greater_than_equal": "expected a number of at least {ge}",
    "less_than_equal": "expected a number of at most {le}",
    "string_too_short": "expected a non-empty value",
}


def _setting_problem(error: Any) -> str:
    variable = ".".join(str(part) for part in error["loc"]) or "settings"
    template = _SETTING_REASONS.get(error["type"])
    if template is not None:
        why = template.format(**{k: _plain_number(v) for k, v in error.get("ctx", {}).items()})
    else:
        why = error["msg"].removeprefix("Value error, ")
    shown = _shown_value(variable, error.get("input"))
    return f"environment: {variable}: {why}{shown}"


def _plain_number(value: Any) -> Any:
    """0.0 -> 0 in messages ('greater than 0', not 'greater than 0.0')."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _shown_value(variable: str, value: Any) -> str:
    """' (got VALUE)' for a plain setting; nothing for one that may hold a secret."""
    if variable in _SECRET_VARIABLES or not isinstance(value, str):
        return ""
    if _SECRET_VALUE_RE.search(value) or len(value) > _SHOWN_VALUE_CHARS:
        return ""
    return f" (got {value!r})"
