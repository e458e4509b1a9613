"""Refusals raised as exceptions carrying the API's code, status and
message; answers that are not the API's raised as such; API keys made,
listed, used and revoked."""

from __future__ import annotations

import httpx
import pytest

from conftest import Served, flow
from leasehold_client import (
    ApiError,
    BadRequest,
    Client,
    Conflict,
    Forbidden,
    LeaseholdError,
    MalformedResponse,
    NotFound,
    ServerError,
    TransportError,
    Unauthorized,
    Unprocessable,
)


def test_an_unknown_run_is_not_found(client: Client) -> None:
    for read in (client.get_run, client.trace, lambda id: list(client.events(id))):
        with pytest.raises(NotFound) as refused:
            read("run-that-never-was")
        error = refused.value
        assert (error.status, error.code) == (404, "not_found")
        assert "no run run-that-never-was" in error.message
        assert isinstance(error, ApiError) and isinstance(error, LeaseholdError)


def test_a_bad_flow_is_refused_with_its_code(client: Client, tmp_path) -> None:
    with pytest.raises(Unprocessable) as refused:
        client.start_run({"name": "no task"})
    assert (refused.value.status, refused.value.code) == (422, "invalid_flow")
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(Unprocessable) as refused:
        client.start_run_file(broken)
    assert refused.value.code == "invalid_flow" and "JSON" in refused.value.message
    with pytest.raises(Forbidden) as refused:
        client.start_run(
            {"name": "x", "task": "y", "max_steps": 2, "tools": [{"name": "t", "command": ["sh"]}]}
        )
    assert (refused.value.status, refused.value.code) == (403, "flow_tools_forbidden")


def test_a_bad_request_is_400_naming_what_is_wrong(client: Client, name: str) -> None:
    with pytest.raises(BadRequest) as refused:
        client.start_run(flow(name), idempotency_key="two words")
    assert (refused.value.status, refused.value.code) == (400, "bad_idempotency_key")
    with pytest.raises(BadRequest) as refused:
        client.list_runs(limit=0)
    assert refused.value.code == "bad_request" and "`limit`" in refused.value.message


def test_a_control_of_an_ended_run_is_a_conflict(client: Client, name: str) -> None:
    run_id = client.start_run(flow(name)).run_id
    list(client.events(run_id))
    with pytest.raises(Conflict) as refused:
        client.resume(run_id)
    assert (refused.value.status, refused.value.code) == (409, "conflict")
    with pytest.raises(ValueError):
        client.reconcile(run_id, "k", "mark_done")


def test_keys_are_made_listed_used_and_revoked(served: Served, client: Client, name: str) -> None:
    reader = client.create_key("read", tenant=name, name="reader")
    operator = client.create_key("operate", tenant=name)
    assert reader.secret.startswith("lh_") and (reader.tenant, reader.scope) == (name, "read")
    listed = client.list_keys(tenant=name)
    assert {key.id for key in listed} == {reader.id, operator.id}
    assert all(key.revoked_at_ms is None for key in listed)

    with served.client(token=operator.secret) as operating:
        run_id = operating.start_run(flow(name)).run_id
        list(operating.events(run_id))
    with served.client(token=reader.secret) as reading:
        assert [run.run_id for run in reading.list_runs().runs] == [run_id]
        with pytest.raises(Forbidden) as refused:
            reading.start_run(flow(name))
        assert (refused.value.status, refused.value.code) == (403, "forbidden_scope")
        assert "operate" in refused.value.message
        # Another tenant's run is not there for this one.
        other = client.start_run(flow(name)).run_id
        with pytest.raises(NotFound):
            reading.get_run(other)

        revoked = client.revoke_key(reader.id)
        assert revoked.id == reader.id and revoked.revoked_at_ms is not None
        with pytest.raises(Unauthorized) as refused:
            reading.get_run(run_id)
        assert (refused.value.status, refused.value.code) == (401, "unauthorized")
    list(client.events(other))


def test_a_wrong_token_is_unauthorized(served: Served) -> None:
    with served.client(token="not-the-token") as stranger:
        with pytest.raises(Unauthorized) as refused:
            stranger.list_runs()
    assert refused.value.status == 401 and refused.value.code == "unauthorized"


def _answering(status: int, body: bytes, content_type: str) -> Client:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body, headers={"content-type": content_type})

    return Client("http://leasehold.test", transport=httpx.MockTransport(answer))


def test_an_answer_that_is_not_the_apis_is_said_to_be_malformed() -> None:
    with _answering(200, b"<html>a proxy's page</html>", "text/html") as client:
        with pytest.raises(MalformedResponse) as malformed:
            client.get_run("run-1")
    assert malformed.value.status == 200 and "not JSON" in str(malformed.value)
    assert "a proxy's page" in malformed.value.body

    with _answering(200, b'{"run_id": "run-1"}', "application/json") as client:
        with pytest.raises(MalformedResponse) as malformed:
            client.get_run("run-1")
    assert "RunView" in str(malformed.value)

    with _answering(502, b"Bad Gateway", "text/plain") as client:
        with pytest.raises(MalformedResponse) as malformed:
            client.list_runs()
    assert malformed.value.status == 502 and "error body" in str(malformed.value)

    body = b'{"error": {"code": "internal", "message": "the store failed"}}'
    with _answering(500, body, "application/json") as client:
        with pytest.raises(ServerError) as failed:
            client.list_runs()
    assert (failed.value.status, failed.value.code) == (500, "internal")


def test_a_server_away_is_a_transport_error(served: Served) -> None:
    with Client("http://127.0.0.1:9", timeout=5) as client:
        with pytest.raises(TransportError):
            client.health()
