"""The plan format's JSON Schema (``plan.schema.json``, beside this module) and a validator for the
subset of JSON Schema 2020-12 it uses (the shared environment has no ``jsonschema``).  The schema is
what ``commlens.plan`` writes and ``frontends/PlanReader.cpp`` reads (tests/python/test_plan_schema.py
checks both against it); the field tables of ``docs/plan-format.md`` are generated from it
(``scripts/gen_plan_format_tables.py``)."""

import json
import pathlib
import re

SCHEMA_PATH = pathlib.Path(__file__).with_name("plan.schema.json")

# JSON Schema keywords the validator applies; a schema using any other is refused, so no keyword
# is silently ignored.
_ANNOTATIONS = {"$schema", "$defs", "title", "description"}
_KEYWORDS = {"$ref", "type", "const", "enum", "pattern", "minimum", "exclusiveMinimum", "items", "minItems", "maxItems",
             "properties", "required", "additionalProperties", "anyOf", "oneOf"}
_TYPES = {
    "object": lambda v: isinstance(v, dict),
    "array": lambda v: isinstance(v, list),
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: isinstance(v, int) and not isinstance(v, bool),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
}


def load_schema():
    with open(SCHEMA_PATH) as f:
        return json.load(f)


def _same(a, b):
    """JSON equality of scalars (true is not 1)."""
    return type(a) is type(b) and a == b


def _errors(value, schema, root, path):
    unknown = set(schema) - _KEYWORDS - _ANNOTATIONS
    if unknown:
        raise ValueError(f"schema at {path or '/'} uses unsupported keyword {sorted(unknown)[0]!r}")
    if "$ref" in schema:
        ref = schema["$ref"]
        if not ref.startswith("#/$defs/"):
            raise ValueError(f"unsupported $ref {ref!r}")
        yield from _errors(value, root["$defs"][ref[len("#/$defs/"):]], root, path)
    if "type" in schema:
        types = [schema["type"]] if isinstance(schema["type"], str) else schema["type"]
        if not any(_TYPES[t](value) for t in types):
            yield f"{path}: expected {' or '.join(types)}, got {json.dumps(value)}"
            return
    if "const" in schema and not _same(value, schema["const"]):
        yield f"{path}: expected {json.dumps(schema['const'])}, got {json.dumps(value)}"
    if "enum" in schema and not any(_same(value, e) for e in schema["enum"]):
        yield f"{path}: {json.dumps(value)} is not one of {json.dumps(schema['enum'])}"
    if isinstance(value, str) and "pattern" in schema and not re.search(schema["pattern"], value):
        yield f"{path}: {json.dumps(value)} does not match {schema['pattern']}"
    if _TYPES["integer"](value) and "minimum" in schema and value < schema["minimum"]:
        yield f"{path}: {value} is less than {schema['minimum']}"
    if _TYPES["number"](value) and "exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"]:
        yield f"{path}: {value} is not greater than {schema['exclusiveMinimum']}"
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            yield f"{path}: {len(value)} items, expected at least {schema['minItems']}"
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            yield f"{path}: {len(value)} items, expected at most {schema['maxItems']}"
        for i, item in enumerate(value):
            yield from _errors(item, schema.get("items", {}), root, f"{path}[{i}]")
    if isinstance(value, dict):
        for key in schema.get("required", ()):
            if key not in value:
                yield f"{path}: missing required key {key!r}"
        properties = schema.get("properties", {})
        extra = schema.get("additionalProperties", True)
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in properties:
                yield from _errors(item, properties[key], root, where)
            elif extra is False:
                yield f"{path or '/'}: unknown key {key!r}"
            elif extra is not True:
                yield from _errors(item, extra, root, where)
    for keyword in ("anyOf", "oneOf"):
        if keyword in schema:
            matching = sum(not any(True for _ in _errors(value, s, root, path)) for s in schema[keyword])
            if matching == 0 or (keyword == "oneOf" and matching > 1):
                yield f"{path or '/'}: matches {matching} of the {keyword} alternatives"


def schema_errors(document, schema=None):
    """Why ``document`` (a decoded plan JSON) is not valid under the plan schema: one line per
    problem, ``[]`` for a valid plan."""
    root = load_schema() if schema is None else schema
    return list(_errors(document, root, root, ""))
