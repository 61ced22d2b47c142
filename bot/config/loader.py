"""Loading config/carry.yaml: strict YAML with line numbers, the schema's validation, secrets
refused, cross-references checked; every problem names the file, the key path and the reason."""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import (
    BaseModel,
    ValidationError,
)

from bot.config.schema import NAME_RE, CarryConfig, Series, join_and


class ConfigError(Exception):
    """A configuration problem; the message names the file, the key path and the reason."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


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
    """SafeLoader that rejects duplicate keys (PyYAML silently keeps the last one) and reads a
    key as YAML 1.2 does: `on:` (ci.on) is the name "on", not YAML 1.1's boolean."""


_BOOL_WORDS = frozenset({"yes", "no", "on", "off", "y", "n"})


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    mapping: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        if isinstance(key, bool) and str(key_node.value).lower() in _BOOL_WORDS:
            key = key_node.value
        if key in mapping:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        mapping[key] = loader.construct_object(value_node, deep=True)
    return mapping


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
        elif NAME_RE.match(part) or re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", part):
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
SECRET_VALUE_RE = re.compile(
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
    elif isinstance(data, str) and SECRET_VALUE_RE.search(data):
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
                    f"check {check!r} is not defined by runner {join_and(missing)} "
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
