"""The contract's schemas and the wire models are one: neither can change without the other.

syncserver/openapi.yaml is written for readers of the HTTP API; the models of
squirrel_mcp.storage.wire are what the client and the server run. Each
schema of the document, with its references resolved, must equal the JSON
schema pydantic derives from the model of that name: the same properties,
required fields, types, bounds, patterns, enums and additionalProperties.
Descriptions and titles are prose and are left out of the comparison.
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import BaseModel, ValidationError

from squirrel_mcp.storage import wire
from squirrel_mcp.syncserver import validation
from squirrel_mcp.syncserver.app import contract

PROSE = {"description", "title", "default"}


def document() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load(contract())
    return loaded


def resolve(node: Any, root: dict[str, Any]) -> Any:
    """`node` with every $ref inlined, allOf merged into its parent, and prose dropped."""
    if isinstance(node, list):
        return [resolve(item, root) for item in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        rest = {key: value for key, value in node.items() if key != "$ref"}
        return resolve({**target, **rest}, root)
    merged: dict[str, Any] = {}
    for part in node.get("allOf", []):
        merged.update(resolve(part, root))
    for key, value in node.items():
        if key not in PROSE and key != "allOf":
            merged[key] = resolve(value, root)
    if "required" in merged:
        merged["required"] = sorted(merged["required"])
    return merged


def model_schema(model: type[BaseModel]) -> Any:
    schema = model.model_json_schema()
    return resolve({key: value for key, value in schema.items() if key != "$defs"}, schema)


@pytest.mark.parametrize("name", sorted(wire.SCHEMAS))
def test_each_schema_of_the_document_is_its_wire_model(name: str) -> None:
    spec = document()
    assert resolve(spec["components"]["schemas"][name], spec) == model_schema(wire.SCHEMAS[name])


def test_every_object_schema_of_the_document_has_a_wire_model() -> None:
    schemas = document()["components"]["schemas"]
    objects = {name for name, schema in schemas.items() if schema.get("type") == "object"}
    assert objects == set(wire.SCHEMAS)


def test_the_request_bodies_and_answers_of_the_document_are_the_models() -> None:
    spec = document()
    used = set()
    for operation in (op for path in spec["paths"].values() for op in path.values()):
        for content in [operation.get("requestBody", {}), *operation["responses"].values()]:
            schema = content.get("content", {}).get("application/json", {}).get("schema", {})
            if "$ref" in schema:
                used.add(schema["$ref"].rsplit("/", 1)[1])
    for response in spec["components"]["responses"].values():
        used.add(response["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1])
    assert used == set(wire.SCHEMAS) - {"Kdf", "AccountKey", "NewRecord", "Record", "StoredRecord"}


def test_the_query_bounds_are_the_documents() -> None:
    parameters = {p["name"]: p for p in document()["paths"]["/v1/records"]["get"]["parameters"]}
    limit = parameters["limit"]["schema"]
    assert (limit["minimum"], limit["maximum"], limit["default"]) == (1, wire.MAX_PAGE, wire.DEFAULT_PAGE)


def test_problems_name_the_place_and_the_rule_never_the_value() -> None:
    secret = "plaintext-that-must-never-be-echoed"
    record = {"memoryId": "0" * 16, "revision": 1, "ciphertext": "QUJD" * 10}
    for body in (
        {"records": [{**record, secret: 1}]},
        {"records": [{**record, "memoryId": secret}]},
        {"records": [{**record, "ciphertext": secret * 4000}]},
        {"records": [record] * 501},
        {"records": secret},
        {secret: []},
        [secret],
    ):
        with pytest.raises(ValidationError) as caught:
            wire.AppendRequest.model_validate(body)
        problem = validation.validation_problem(caught.value)
        assert secret not in problem and "501" not in problem, problem
