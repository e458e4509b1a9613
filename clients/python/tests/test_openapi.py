"""The client's models against the server's own description of its API,
`GET /openapi.json`: each model's field names, and which of them are
required, are those of the document's component schema of the same name
(`RunView`, `TraceView`, …).

A server without the document fails it, as does any difference. The end
frame of an event stream (`StreamEnd`) is the one model the document does
not describe: it is not a JSON schema of its own there.
"""

from __future__ import annotations

from typing import Any, Dict, Set, Tuple

import httpx
import pytest
from pydantic import BaseModel

import leasehold_client.models as models
from conftest import Served

#: Models named after a Rust type of the server: the document must have
#: each.
NAMED_AFTER_RUST_TYPES = [
    models.RunView,
    models.RunsPage,
    models.TraceView,
    models.TraceSummary,
    models.Event,
    models.PauseRecord,
    models.ToolCallRecord,
    models.ForkOrigin,
    models.TextDelta,
    models.ErrorBody,
    models.ErrorDetail,
    models.KeyView,
    models.NewKeyView,
    models.RunPosted,
    models.ControlAnswer,
    models.ForkStarted,
    models.RolledBack,
    models.RollbackOf,
]


@pytest.fixture(scope="module")
def document(served: Served) -> Dict[str, Any]:
    answer = httpx.get(
        served.base_url + "/openapi.json",
        headers={"authorization": f"Bearer {served.token}"},
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    return answer.json()


def _resolve(document: Dict[str, Any], schema: Dict[str, Any]) -> Dict[str, Any]:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = document["components"]["schemas"][name]
    return schema


def _fields(document: Dict[str, Any], schema: Dict[str, Any]) -> Tuple[Set[str], Set[str]]:
    """The property names of `schema` and the required ones, through
    `allOf` (all parts) and `oneOf`/`anyOf` (what every variant has: a
    flattened enum's tag, such as an event's `kind`)."""
    schema = _resolve(document, schema)
    names = set(schema.get("properties", {}))
    required = set(schema.get("required", []))
    for part in schema.get("allOf", []):
        more, more_required = _fields(document, part)
        names |= more
        required |= more_required
    for key in ("oneOf", "anyOf"):
        variants = [
            _fields(document, v)
            for v in schema.get(key, [])
            if _resolve(document, v).get("type") != "null"
        ]
        if variants:
            names |= set.intersection(*(v[0] for v in variants))
            required |= set.intersection(*(v[1] for v in variants))
    return names, required


def _model_fields(model: type) -> Tuple[Set[str], Set[str]]:
    fields = model.model_fields
    return set(fields), {name for name, field in fields.items() if field.is_required()}


def _compare(document: Dict[str, Any], model: type) -> None:
    assert issubclass(model, BaseModel)
    schema = document["components"]["schemas"][model.__name__]
    names, required = _fields(document, schema)
    ours, ours_required = _model_fields(model)
    assert ours == names, (
        f"{model.__name__}: the client lacks {sorted(names - ours)}, "
        f"the server has no {sorted(ours - names)}"
    )
    assert ours_required == required, (
        f"{model.__name__}: required by the server {sorted(required)}, "
        f"by the client {sorted(ours_required)}"
    )


@pytest.mark.parametrize("body", NAMED_AFTER_RUST_TYPES, ids=lambda body: body.__name__)
def test_a_model_named_after_a_rust_type_is_its_schema(document, body) -> None:
    schemas = document.get("components", {}).get("schemas", {})
    assert body.__name__ in schemas, f"the document has no schema {body.__name__}"
    _compare(document, body)


def test_the_comparison_holds_a_model_to_a_schema_and_sees_a_difference() -> None:
    # Checked now, before the server has a document: the models' own JSON
    # schemas, as an OpenAPI document would hold them.
    schemas: Dict[str, Any] = {}
    for body in NAMED_AFTER_RUST_TYPES:
        schema = body.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[body.__name__] = schema
    document = {"components": {"schemas": schemas}}
    for body in NAMED_AFTER_RUST_TYPES:
        _compare(document, body)

    schemas["RunView"] = dict(schemas["RunView"], required=["run_id"])
    with pytest.raises(AssertionError, match="required by the server"):
        _compare(document, models.RunView)
    properties = dict(schemas["TextDelta"]["properties"], made_by={"type": "string"})
    schemas["TextDelta"] = dict(schemas["TextDelta"], properties=properties)
    with pytest.raises(AssertionError, match=r"the client lacks \['made_by'\]"):
        _compare(document, models.TextDelta)
