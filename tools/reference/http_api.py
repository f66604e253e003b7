"""docs/reference/http-api.md: the OpenAPI document ``/openapi.json`` serves, as a page.

Rendered from the document the API builds (``build_document``, what ``GET
/openapi.json`` answers), so it says what the routes declare: operations grouped by
their tag, each with its authentication, parameters, request body and every answer
with its status, then the schemas they name. An operation without a summary or a tag
without a description stops generation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tools.reference.markdown import code, generated, page, prose, table
from tools.reference.schemas import REF, kind
from tools.reference.undocumented import Undocumented

PAGE = "http-api.md"
Doc = Mapping[str, Any]


def _link(name: str) -> str:
    return f"[{name}](#{name.lower()})"


def _auth(operation: Doc, schemes: Doc) -> str:
    if "security" not in operation:
        return "none"
    choices = []
    for requirement in operation["security"]:
        names = [f"{name} token ({schemes[name].get('description', '')})" for name in requirement]
        choices.append(" and ".join(names) or "none")
    return ", or ".join(choices)


def _parameters(operation: Doc) -> str:
    rows = (
        [
            code(p["name"]),
            p["in"],
            "yes" if p.get("required") else "no",
            kind(p.get("schema", {}), _link) + _default(p.get("schema", {})),
            prose(p.get("description", "")),
        ]
        for p in operation.get("parameters", ())
    )
    return table(["Parameter", "In", "Required", "Type", "Meaning"], rows)


def _default(schema: Doc) -> str:
    return f"; default {code(str(schema['default']))}" if "default" in schema else ""


def _body(content: Doc) -> str:
    return "; ".join(
        f"{code(media)}: {kind(spec.get('schema', {}), _link)}" for media, spec in content.items()
    )


def _responses(operation: Doc) -> str:
    rows = []
    for status, answer in operation["responses"].items():
        meaning = prose(answer.get("description", ""))
        for header, spec in answer.get("headers", {}).items():
            meaning += f"; header {code(header)}: {prose(spec.get('description', ''))}"
        rows.append([code(status), meaning, _body(answer.get("content", {}))])
    return table(["Status", "Meaning", "Body"], rows)


def _operation(path: str, method: str, operation: Doc, schemes: Doc) -> str:
    blocks = [
        f"### `{method.upper()} {path}`",
        prose(operation["summary"]) + ".",
    ]
    if operation.get("description"):
        blocks.append(prose(operation["description"]))
    blocks.append(f"Authentication: {prose(_auth(operation, schemes))}.")
    if operation.get("parameters"):
        blocks.append(_parameters(operation))
    if "requestBody" in operation:
        body = operation["requestBody"]
        needed = "required" if body.get("required") else "optional"
        blocks.append(f"Request body ({needed}): {_body(body.get('content', {}))}")
    blocks.append(_responses(operation))
    return "\n\n".join(blocks)


def _schema(name: str, schema: Doc) -> str:
    blocks = [f"### {name}"]
    if schema.get("description"):
        blocks.append(prose(" ".join(str(schema["description"]).split())))
    properties = schema.get("properties")
    if properties:
        required = set(schema.get("required", ()))
        rows = (
            [
                code(field),
                kind(spec, _link) + _default(spec),
                "yes" if field in required else "no",
                prose(spec.get("description", "")),
            ]
            for field, spec in properties.items()
        )
        blocks.append(table(["Field", "Type", "Required", "Meaning"], rows))
    else:
        blocks.append(f"A value of type {kind(schema, _link)}.")
    return "\n\n".join(blocks)


def _operations(document: Doc) -> Iterator[tuple[str, str, Doc]]:
    for path, item in document["paths"].items():
        for method, operation in item.items():
            yield path, method, operation


def _problems(document: Doc) -> Iterator[str]:
    described = {tag["name"] for tag in document.get("tags", ()) if tag.get("description")}
    for path, method, operation in _operations(document):
        where = f"{method.upper()} {path}"
        if not operation.get("summary"):
            yield f"{where} has no summary"
        for tag in operation.get("tags", ()) or ["(none)"]:
            if tag not in described:
                yield f"{where} is in group {tag!r}, which the document does not describe"


def render(document: Doc) -> str:
    """The page for ``document``; raises ``Undocumented`` naming every operation
    without a summary or outside the described groups."""
    problems = list(_problems(document))
    if problems:
        raise Undocumented(PAGE, problems)
    info = document["info"]
    schemes = document.get("components", {}).get("securitySchemes", {})
    blocks = [
        generated("the OpenAPI document of sluice/http (build_document, GET /openapi.json)"),
        f"# HTTP API\n\n{prose(info.get('description', ''))} OpenAPI"
        f" {document['openapi']}, version {info['version']}.",
        "A running sluice serves this document at `GET /openapi.json` and shows it at"
        ' `GET /docs` (Swagger UI, with "Try it out"). Errors are'
        " `application/problem+json` (RFC 9457); every operation may answer 503 when the"
        " database or Redis it needs is down.",
        table(
            ["Group", "What it holds"],
            ([f"[{t['name']}](#{t['name']})", prose(t["description"])] for t in document["tags"]),
        ),
    ]
    for tag in document["tags"]:
        blocks += [f"## {tag['name']}", prose(tag["description"]) + "."]
        blocks += [
            _operation(path, method, operation, schemes)
            for path, method, operation in _operations(document)
            if tag["name"] in operation.get("tags", ())
        ]
    blocks.append("## Schemas")
    schemas = document.get("components", {}).get("schemas", {})
    blocks += [_schema(name, schemas[name]) for name in sorted(schemas)]
    assert all(REF not in block for block in blocks)
    return page(*blocks)
