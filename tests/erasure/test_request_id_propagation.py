"""The S3 request id reaches the nodes: the gateway's node client sends the id of the request
it serves (X-ZG-Request-Id), and a node's request handling puts it in its log lines' `rid=`."""

from __future__ import annotations

import contextvars
import logging

from multidict import CIMultiDict

from erasure.config import NodeSpec
from erasure.nodeclient import NodeClient
from zonestore.logsetup import REQUEST_ID, REQUEST_ID_HEADER, ContextFilter, take_request_id


def _client() -> NodeClient:
    spec = NodeSpec("node01", "http://127.0.0.1:1", "node01", ())
    return NodeClient(spec, "secret", session=None)  # type: ignore[arg-type]  # not used


def test_node_calls_carry_the_s3_request_id_being_served():
    def inside() -> dict[str, str]:
        REQUEST_ID.set("18C3F0A2B1D4E5F6")
        return _client()._headers("GET", "/v1/records/x", {}, b"")

    assert contextvars.copy_context().run(inside)[REQUEST_ID_HEADER] == "18C3F0A2B1D4E5F6"
    # outside any S3 request (health checks, background repair) there is none to send
    assert REQUEST_ID_HEADER not in contextvars.copy_context().run(
        lambda: _client()._headers("GET", "/health/ready", {}, b""))


def test_a_node_takes_a_short_token_as_the_request_id_and_nothing_else():
    record = logging.LogRecord("zonegate.node", logging.INFO, __file__, 1, "m", None, None)

    def rid_for(value: str | None) -> str:
        def run() -> str:
            take_request_id(CIMultiDict({} if value is None else {REQUEST_ID_HEADER: value}))
            ContextFilter("node").filter(record)
            return record.request_id
        return contextvars.copy_context().run(run)

    assert rid_for("18C3F0A2B1D4E5F6") == "18C3F0A2B1D4E5F6"
    for bad in (None, "", "a b", "x" * 65, "id\nforged line", "é"):
        assert rid_for(bad) == "-", bad
