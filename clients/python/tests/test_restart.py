"""A run's event stream followed through its server's restart: the server
stopped by SIGTERM sends its last `shutdown` frame, the iterator picks the
stream up again from the restarted server (same address, same data
directory) with `Last-Event-ID`, and the run, resumed on boot, is followed
to its end with no event twice and none missing."""

from __future__ import annotations

from conftest import Served, flow
from leasehold_client import Event
from support.scripted_model import ScriptedModel
from test_client import status_becomes, until, whole_log


def test_a_stream_survives_its_servers_restart(
    model: ScriptedModel, workdir, name: str
) -> None:
    data = workdir / name
    data.mkdir()
    served = Served(model, data)
    try:
        with served.client(reconnect_patience=30) as client:
            run_id = client.start_run(flow(name, task=f"wait at gate:{name}")).run_id
            stream = client.events(run_id)
            seen = until(stream, "model_call_started")

            served.terminate()
            served.start(served.addr)
            # Resumed on boot, the run calls the model again: let it answer.
            model.open(name)
            seen += [item for item in stream if isinstance(item, Event)]

            whole_log(seen)
            assert stream.reconnects >= 1 and stream.end.status == "completed"
            assert seen[-1].kind == "run_completed"
            status_becomes(client, run_id, "completed")
    finally:
        served.kill()
