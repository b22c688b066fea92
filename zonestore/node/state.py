"""What a node's request handlers share: its drives' store, settings and metrics."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from zonestore.node.metrics import NodeMetrics

GiB = 1 << 30
DEFAULT_MAX_RECORD_SIZE = 6 * GiB
MAX_META_SIZE = 64 * 1024  # the metadata blob limit of docs/design.md


@dataclass
class NodeState:
    node_id: str
    drive_paths: list[Path]
    metrics: NodeMetrics
    max_record_size: int = DEFAULT_MAX_RECORD_SIZE
    max_meta_size: int = MAX_META_SIZE
    pool: Any = None  # the DrivePool, once every drive's log is open
    logs: list[Any] = field(default_factory=list)
    started_at: float = field(default_factory=time.time)
    check_signature: Callable[[web.Request], str] | None = None  # for Expect: 100-continue
    auth: Any = None  # the AuthCheck (one replay cache) of both aiohttp and the lean PUT path
    draining: bool = False  # shutting down: in-flight requests finish, new ones get 503
    inflight: int = 0
    # the cluster layout as the gateways last told it (zonestore/node/drivelayout.py)
    layout_version: int = 0
    drive_states: dict[int, str] = field(default_factory=dict)  # drive index -> state
    identities: list[dict[str, Any] | None] = field(default_factory=list)  # per drive

    @property
    def ready(self) -> bool:
        return self.pool is not None


STATE: web.AppKey[NodeState] = web.AppKey("zg_node_state", NodeState)
