"""The API explains itself: every operation and every field a trainer sends or reads has words.

The OpenAPI schema is what /docs renders and what the reference pages are generated from, so a
field or route without a description is a hole in the documentation a trainer reads.

A property that only points at another schema (a ``$ref``, alone or inside ``allOf``/``anyOf``)
counts as described when either the property or every schema it points at carries a
description: pydantic puts a model's docstring on the model's schema, and repeating it on every
use would say the same thing twice.
"""

from __future__ import annotations

import inspect
from typing import Any

from pydantic import BaseModel

from rewardserve import protocol
from rewardserve.service.app import create_app

HTTP_METHODS = {"get", "post", "put", "patch", "delete"}


def referenced(node: dict[str, Any]) -> list[str]:
    """The schema names a property points at, through allOf/anyOf/oneOf and array items."""
    if "$ref" in node:
        return [node["$ref"].rsplit("/", 1)[-1]]
    names: list[str] = []
    for key in ("allOf", "anyOf", "oneOf"):
        for part in node.get(key, []):
            names += referenced(part)
    if "items" in node and isinstance(node["items"], dict):
        names += referenced(node["items"])
    return names


def undescribed_properties(schemas: dict[str, Any]) -> list[str]:
    missing = []
    for name, schema in schemas.items():
        for prop, node in schema.get("properties", {}).items():
            if node.get("description"):
                continue
            refs = referenced(node)
            if refs and all(schemas.get(ref, {}).get("description") for ref in refs):
                continue
            missing.append(f"{name}.{prop}")
    return missing


def test_every_operation_has_a_summary_and_a_description() -> None:
    paths = create_app().openapi()["paths"]
    missing = [
        f"{method.upper()} {path} ({', '.join(k for k in ('summary', 'description') if not op.get(k))})"
        for path, ops in paths.items()
        for method, op in ops.items()
        if method in HTTP_METHODS and not (op.get("summary") and op.get("description"))
    ]
    assert not missing, "operations without a summary or description:\n" + "\n".join(missing)


def test_every_schema_property_has_a_description() -> None:
    schemas = create_app().openapi()["components"]["schemas"]
    missing = undescribed_properties(schemas)
    assert not missing, "schema properties without a description:\n" + "\n".join(missing)


def test_every_protocol_model_field_has_a_description() -> None:
    models = {
        name: obj
        for name in dir(protocol)
        if inspect.isclass(obj := getattr(protocol, name)) and issubclass(obj, BaseModel)
    }
    assert models
    missing = [
        f"{name}.{field}"
        for name, model in sorted(models.items())
        for field, info in model.model_fields.items()
        if not info.description
    ]
    assert not missing, "protocol fields without a description:\n" + "\n".join(missing)


def test_a_missing_description_is_named() -> None:
    """The walk itself: a bare property is reported, a $ref to a described schema is not."""
    schemas = {
        "Outer": {"properties": {"bare": {"type": "integer"}, "inner": {"$ref": "#/components/schemas/Inner"}}},
        "Inner": {"description": "An inner part.", "properties": {"x": {"type": "integer", "description": "X."}}},
        "Plain": {"properties": {"other": {"anyOf": [{"$ref": "#/components/schemas/Plain"}, {"type": "null"}]}}},
    }
    assert undescribed_properties(schemas) == ["Outer.bare", "Plain.other"]
