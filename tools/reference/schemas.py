"""JSON Schema, as msgspec and the OpenAPI document write it, told in a few words: the
type column of the events' and the HTTP API's tables."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from tools.reference.markdown import code

REF = "#/components/schemas/"
_FORMATS = {"date-time": "datetime", "date": "date", "uri": "URL", "email": "email"}


def _bounds(schema: Mapping[str, Any], unit: str = "") -> str:
    low = schema.get("minimum", schema.get("minLength", schema.get("minItems")))
    high = schema.get("maximum", schema.get("maxLength", schema.get("maxItems")))
    if low is not None and high is not None:
        return f", {low} to {high}{unit}"
    if low is not None:
        return f", at least {low}{unit}"
    if high is not None:
        return f", at most {high}{unit}"
    return ""


def kind(schema: Mapping[str, Any], link: Callable[[str], str]) -> str:
    """``schema`` in words: "string, 1 to 256 characters", "list of [Rule](#rule)"...;
    ``link`` makes the link to a named schema."""
    if "$ref" in schema:
        return link(str(schema["$ref"]).removeprefix(REF))
    for either in ("anyOf", "oneOf"):
        if either in schema:
            return " or ".join(kind(option, link) for option in schema[either])
    if "const" in schema:
        return code(str(schema["const"]))
    if "enum" in schema:
        return "one of " + ", ".join(code(str(value)) for value in schema["enum"])
    named = schema.get("type")
    if isinstance(named, list):
        return " or ".join(kind({**schema, "type": one}, link) for one in named)
    return _typed(str(named or "any"), schema, link)


def _typed(named: str, schema: Mapping[str, Any], link: Callable[[str], str]) -> str:
    if named == "string":
        text = _FORMATS.get(str(schema.get("format")), "string")
        text += _bounds(schema, " characters")
        if "pattern" in schema:
            text += f", matching {code(schema['pattern'])}"
        return text
    if named in ("integer", "number"):
        return f"{named}{_bounds(schema)}"
    if named == "array":
        items = schema.get("items", {})
        return f"list of {kind(items, link)}{_bounds(schema, ' items')}"
    if named == "object" and isinstance(schema.get("additionalProperties"), Mapping):
        return f"map of string to {kind(schema['additionalProperties'], link)}"
    return named
