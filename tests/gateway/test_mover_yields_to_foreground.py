"""The data mover yields to the foreground (issue 25): while the gateway handles an S3 request
its pacing drops to `[erasure] move_rate_busy` per node (the cluster-wide rate scaled alike),
and it is back at `move_rate` once the request is answered. A health check in flight is not
foreground. Checked on the computed pace (Throttle.rates / delay), never on wall time.

The gateway's own app (create_app: the metrics middleware counts requests, the app hands the
mover its callable) takes a request whose answer is held at the send, so it stays in flight.
"""

from __future__ import annotations

import asyncio

from erasure.config import ClusterConfig, write_config
from erasure.movetypes import Throttle
from gateway.server.app import create_app

MiB = 1024 * 1024


def test_throttle_paces_at_the_busy_rate_while_busy():
    busy = False
    t = Throttle(32 * MiB, 256 * MiB, burst=0.0, busy=lambda: busy, busy_rate=2 * MiB)
    assert t.rates() == (32 * MiB, 256 * MiB)
    idle = t.delay(["a", "b"], MiB, now=100.0)
    busy = True
    assert t.rates() == (2 * MiB, 16 * MiB)
    slow = Throttle(32 * MiB, 256 * MiB, burst=0.0, busy=lambda: busy, busy_rate=2 * MiB)
    assert slow.delay(["a", "b"], MiB, now=100.0) == 16 * idle  # 1 MiB at 2 vs 32 MiB/s
    # 0 = no slow-down; a busy rate above move_rate never speeds the mover up
    assert Throttle(32 * MiB, 0, busy=lambda: True, busy_rate=0).rates() == (32 * MiB, 0)
    assert Throttle(MiB, 0, busy=lambda: True, busy_rate=2 * MiB).rates() == (MiB, 0)


def gateway_config(tmp_path) -> ClusterConfig:
    path = tmp_path / "zonegate.toml"
    write_config(path, {
        "secret": "s" * 32,
        "erasure": {"k": 2, "m": 1, "state_dir": str(tmp_path / "erasure"),
                    "move_rate": 32 * MiB, "move_rate_busy": 2 * MiB},
        "gateway": {"listen": "127.0.0.1:1", "metadata": str(tmp_path / "meta.sqlite")},
        "users": [{"name": "alice", "access_key": "AKIAMOVERYIELDS00001",
                   "secret_key": "secret/0123456789abcdefghijklmnopqrstuv"}],
        # never contacted: the app is not started, only one request goes through it
        "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{9 + i}", "drives": ["d0"]}
                  for i in range(3)],
    })
    return ClusterConfig.load(path)


async def rates_during(app, path: str) -> tuple[float, float]:
    """The mover's pace while a GET of `path` is in the app, its answer held at the send."""
    throttle = app.state.gateway.mover.mover.throttle
    sending, release = asyncio.Event(), asyncio.Event()

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            sending.set()
            await release.wait()

    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
             "method": "GET", "scheme": "http", "path": path, "raw_path": path.encode(),
             "query_string": b"", "root_path": "", "headers": [(b"host", b"localhost")],
             "client": ("127.0.0.1", 5000), "server": ("127.0.0.1", 80), "app": app}
    task = asyncio.create_task(app(scope, receive, send))
    await asyncio.wait_for(sending.wait(), 30)
    during = throttle.rates()
    release.set()
    await task
    return during


def test_the_gateways_mover_slows_while_s3_requests_are_in_flight(tmp_path):
    app = create_app(gateway_config(tmp_path))
    throttle = app.state.gateway.mover.mover.throttle
    assert throttle.rates() == (32 * MiB, 256 * MiB)  # idle: move_rate

    async def main() -> None:
        assert await rates_during(app, "/bucket/key") == (2 * MiB, 16 * MiB)
        assert throttle.rates() == (32 * MiB, 256 * MiB)  # answered: full rate again
        assert await rates_during(app, "/health/live") == (32 * MiB, 256 * MiB)
    asyncio.run(main())
