"""MkDocs hook: the HTTP reference page, written at build time from the FastAPI app's own OpenAPI document.

The page (``reference/http.md``) lists every path and method with its parameters, request body and responses, then
every schema with its fields, so it cannot drift from the API: nothing is fetched, nothing is kept in the repository.
"""

from __future__ import annotations

from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

PAGE = "reference/http.md"
_METHODS = ("get", "post", "put", "patch", "delete")
_SCHEMA_PREFIX = "#/components/schemas/"


def openapi_document() -> dict[str, Any]:
    """The app's OpenAPI document, as `compassmem openapi` writes it."""
    from compassmem.query_api.openapi import openapi_document as document

    return document()


def _cell(text: object) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _schema_link(ref: str) -> str:
    name = ref.removeprefix(_SCHEMA_PREFIX)
    return f"[`{name}`](#schema-{name.lower()})"


def _type(schema: dict[str, Any]) -> str:
    if "$ref" in schema:
        return _schema_link(schema["$ref"])
    for union in ("anyOf", "oneOf", "allOf"):
        if union in schema:
            return " or ".join(_type(part) for part in schema[union])
    if "enum" in schema:
        return "one of " + ", ".join(f"`{value}`" for value in schema["enum"])
    if "const" in schema:
        return f"`{schema['const']}`"
    kind = schema.get("type", "any")
    if kind == "array":
        return f"array of {_type(schema.get('items', {}))}"
    if kind == "object" and isinstance(schema.get("additionalProperties"), dict):
        return f"object of {_type(schema['additionalProperties'])}"
    return f"`{kind}`" + (f" ({schema['format']})" if "format" in schema else "")


def _rules(schema: dict[str, Any]) -> str:
    rules = [f"{key} {schema[key]}" for key in ("minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum",
                                                 "exclusiveMaximum", "minItems", "maxItems") if key in schema]
    if "pattern" in schema:
        rules.append(f"pattern `{schema['pattern']}`")
    if "default" in schema:
        rules.append(f"default `{schema['default']}`")
    return _cell("; ".join(rules))


def _operation(path: str, method: str, operation: dict[str, Any]) -> list[str]:
    lines = [f"### {method.upper()} {path}", ""]
    if operation.get("summary"):
        lines += [f"**{operation['summary']}**", ""]
    if operation.get("description"):
        lines += [operation["description"].strip(), ""]
    parameters = operation.get("parameters", [])
    if parameters:
        lines += ["| parameter | in | required | type | rules | description |", "|---|---|---|---|---|---|"]
        for parameter in parameters:
            schema = parameter.get("schema", {})
            lines.append(f"| `{parameter['name']}` | {parameter['in']} | {'yes' if parameter.get('required') else 'no'}"
                         f" | {_type(schema)} | {_rules(schema)} | {_cell(parameter.get('description', ''))} |")
        lines.append("")
    body = operation.get("requestBody")
    if body:
        for media, content in body.get("content", {}).items():
            required = "required" if body.get("required") else "optional"
            lines += [f"Request body ({required}, `{media}`): {_type(content.get('schema', {}))}", ""]
    lines += ["| status | meaning | body |", "|---|---|---|"]
    for status, response in operation.get("responses", {}).items():
        bodies = ", ".join(f"{_type(content.get('schema', {}))} (`{media}`)"
                           for media, content in response.get("content", {}).items())
        lines.append(f"| {status} | {_cell(response.get('description', ''))} | {bodies} |")
    return lines + [""]


def _schema(name: str, schema: dict[str, Any]) -> list[str]:
    lines = [f"### {name} {{#schema-{name.lower()}}}", ""]
    if schema.get("description"):
        lines += [schema["description"].strip(), ""]
    properties = schema.get("properties", {})
    if not properties:
        return lines + [f"Type: {_type(schema)}", ""]
    required = set(schema.get("required", []))
    lines += ["| field | type | required | rules | description |", "|---|---|---|---|---|"]
    for field, field_schema in properties.items():
        lines.append(f"| `{field}` | {_type(field_schema)} | {'yes' if field in required else 'no'} | "
                     f"{_rules(field_schema)} | {_cell(field_schema.get('description', ''))} |")
    return lines + [""]


def render(document: dict[str, Any]) -> str:
    info = document.get("info", {})
    about = (f"{info.get('title', 'compassmem')} {info.get('version', '')}, OpenAPI {document.get('openapi', '')}. "
             "Generated when the site is built from the FastAPI app itself (`docs/hooks/http_reference.py`); a "
             "running API serves the same document at `/openapi.json` and an interactive page at `/docs`. How to "
             "use it: [Querying memory](../querying.md).")
    lines = ["# HTTP reference", "", about, "", "## Paths", ""]
    for path, item in document.get("paths", {}).items():
        for method in _METHODS:
            if method in item:
                lines += _operation(path, method, item[method])
    lines += ["## Schemas", ""]
    for name, schema in document.get("components", {}).get("schemas", {}).items():
        lines += _schema(name, schema)
    return "\n".join(lines)


def on_files(files: Files, config: MkDocsConfig) -> Files:
    # The repository holds a placeholder of the page (so that links to it resolve outside the site): replaced here.
    placeholder = files.get_file_from_path(PAGE)
    if placeholder is not None:
        files.remove(placeholder)
    files.append(File.generated(config, PAGE, content=render(openapi_document())))
    return files
