"""Validators for the GitHub emulator's output against the contract data in tests/data/github.

Test-only: bot.emulator never needs them (nor jsonschema, nor tests/data).

RestSchemas: finds the operation by method + path template in rest/*.json, picks the
response by status code, resolves $refs inside that document, turns OpenAPI 3.0
`nullable: true` into JSON Schema and validates with jsonschema.

WebhookSchemas: registers every octokit schema file by its $id and validates a payload
against {"$ref": "<event>$<action>"} (or "<event>$event" for push/ping).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from jsonschema import Draft7Validator, FormatChecker
from referencing import Registry
from referencing.jsonschema import DRAFT7

from tests.support.paths import REST_SCHEMAS, WEBHOOK_EXAMPLES

FORMATS = FormatChecker()


@FORMATS.checks("date-time", raises=ValueError)
def _date_time(value: object) -> bool:
    if not isinstance(value, str):
        return True
    if not re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)", value):
        return False
    datetime.fromisoformat(value.replace("Z", "+00:00"))
    return True


@FORMATS.checks("uri")
def _uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parts = urlsplit(value)
    return bool(parts.scheme) and bool(parts.netloc or parts.path) and " " not in value


def openapi_to_jsonschema(node: Any) -> Any:
    """OpenAPI 3.0 schema objects -> JSON Schema: `nullable: true` becomes anyOf [..., null]."""
    if isinstance(node, list):
        return [openapi_to_jsonschema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out = {
        key: openapi_to_jsonschema(value)
        for key, value in node.items()
        if not (key == "nullable" and isinstance(value, bool))
    }
    if node.get("nullable") is True:
        return {"anyOf": [out, {"type": "null"}]}
    return out


class SchemaMismatch(AssertionError):
    pass


@dataclass(frozen=True)
class Checked:
    """What a response was validated against."""

    document: str
    operation: str
    status: int
    schema: str  # a JSON pointer into the document, or "no content"
    documented: bool  # False when an undocumented error status fell back to basic-error


def _template_regex(template: str) -> re.Pattern[str]:
    parts = re.split(r"(\{\w+\})", template)
    greedy = ("{ref}", "{basehead}")
    return re.compile(
        "".join(
            (".+" if p in greedy else "[^/]+") if p.startswith("{") else re.escape(p) for p in parts
        )
    )


def _pointer(*parts: str) -> str:
    return "/" + "/".join(p.replace("~", "~0").replace("/", "~1") for p in parts)


class RestSchemas:
    """The mini OpenAPI documents of rest/*.json, indexed by "METHOD template"."""

    def __init__(self, directory: Path = REST_SCHEMAS) -> None:
        self.directory = directory
        self.documents: dict[str, dict[str, Any]] = {}
        self.operations: dict[tuple[str, str], str] = {}
        index = json.loads((directory / "index.json").read_text())
        for group, operations in index.items():
            raw = json.loads((directory / f"{group}.json").read_text())
            self.documents[group] = openapi_to_jsonschema(raw)
            for operation in operations:
                method, template = operation.split(" ", 1)
                self.operations[(method.upper(), template)] = group
        self._registry = Registry().with_resources(
            (f"urn:rest:{group}", DRAFT7.create_resource(doc))
            for group, doc in self.documents.items()
        )
        fallback = next(
            g for g, d in self.documents.items() if "validation-error" in d["components"]["schemas"]
        )
        self._fallback_group = fallback

    def template_for(self, method: str, path: str) -> str | None:
        """The documented path template a concrete path matches (most literal text wins)."""
        candidates = [
            template
            for m, template in self.operations
            if m == method.upper() and _template_regex(template).fullmatch(path)
        ]
        return max(candidates, key=lambda t: len(re.sub(r"\{[^}]+\}", "", t)), default=None)

    def validate(self, method: str, template: str, status: int, body: Any) -> Checked:
        """Raises SchemaMismatch unless body fits the documented response for this status."""
        method = method.upper()
        group = self.operations.get((method, template))
        if group is None:
            raise SchemaMismatch(f"{method} {template} is not in rest/index.json")
        doc = self.documents[group]
        operation = doc["paths"][template][method.lower()]
        responses = operation["responses"]
        key = str(status)
        if key not in responses:
            if status < 400:
                raise SchemaMismatch(f"{method} {template}: status {status} is not documented")
            return self._fallback(group, method, template, status, body)
        response = responses[key]
        base = _pointer("paths", template, method.lower(), "responses", key)
        if "$ref" in response:
            name = response["$ref"].rsplit("/", 1)[-1]
            base = _pointer("components", "responses", name)
            response = doc["components"]["responses"][name]
        content = response.get("content", {}).get("application/json")
        if content is None:
            if body in (None, b"", ""):
                return Checked(group, f"{method} {template}", status, "no content", documented=True)
            if status < 400:
                raise SchemaMismatch(
                    f"{method} {template} {status}: no content documented, got {body!r}"
                )
            # Some error statuses are documented without a body; GitHub still sends error JSON.
            return self._fallback(group, method, template, status, body)
        pointer = base + _pointer("content", "application/json", "schema")
        self._check(group, pointer, body, f"{method} {template} {status}")
        return Checked(group, f"{method} {template}", status, pointer, documented=True)

    def _fallback(self, group: str, method: str, template: str, status: int, body: Any) -> Checked:
        """Undocumented error statuses must still be GitHub's basic-error / validation-error."""
        name = "validation-error" if status == 422 else "basic-error"
        pointer = _pointer("components", "schemas", name)
        self._check(self._fallback_group, pointer, body, f"{method} {template} {status}")
        return Checked(group, f"{method} {template}", status, pointer, documented=False)

    def validate_component(self, name: str, instance: Any) -> None:
        """Validates against #/components/schemas/<name> of the first document defining it."""
        group = next(g for g, d in self.documents.items() if name in d["components"]["schemas"])
        self._check(group, _pointer("components", "schemas", name), instance, name)

    def _check(self, group: str, pointer: str, instance: Any, what: str) -> None:
        validator = _validator(self, f"urn:rest:{group}#{quote(pointer, safe='/~')}")
        errors = sorted(validator.iter_errors(instance), key=lambda e: list(e.absolute_path))
        if errors:
            lines = [
                f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
                for e in errors[:10]
            ]
            raise SchemaMismatch(f"{what} does not match {pointer}:\n  " + "\n  ".join(lines))


@cache
def _validator(schemas: RestSchemas, ref: str) -> Draft7Validator:
    return Draft7Validator({"$ref": ref}, registry=schemas._registry, format_checker=FORMATS)


class WebhookSchemas:
    """octokit/webhooks payload schemas (Draft-07), registered by $id."""

    def __init__(self, directory: Path = WEBHOOK_EXAMPLES / "schemas" / "octokit") -> None:
        resources = []
        for path in sorted(directory.rglob("*.json")):
            contents = json.loads(path.read_text())
            resources.append((contents["$id"], DRAFT7.create_resource(contents)))
        self.ids = {uri for uri, _ in resources}
        self._registry = Registry().with_resources(resources)

    def schema_id(self, event: str, payload: dict[str, Any]) -> str:
        action = payload.get("action")
        return f"{event}${action}" if action and event not in ("push", "ping") else f"{event}$event"

    def validate(self, event: str, payload: dict[str, Any]) -> str:
        """Raises SchemaMismatch on any error; returns the schema id used."""
        schema_id = self.schema_id(event, payload)
        if schema_id not in self.ids:
            raise SchemaMismatch(f"no octokit schema {schema_id!r}")
        validator = Draft7Validator(
            {"$ref": schema_id}, registry=self._registry, format_checker=FORMATS
        )
        errors = list(validator.iter_errors(payload))
        if errors:
            lines = [
                f"{'/'.join(map(str, e.absolute_path)) or '<root>'}: {e.message[:300]}"
                for e in errors[:10]
            ]
            raise SchemaMismatch(f"{schema_id}:\n  " + "\n  ".join(lines))
        return schema_id
