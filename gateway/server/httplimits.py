"""What one HTTP connection to the gateway may cost: head sizes, timeouts, connections.

Read from the `[gateway]` table of the cluster config by `zonegate serve` and enforced by the
gateway's HTTP protocol (gateway/server/httpproto.py) before the S3 app sees a request:

| key | default | refused with |
|---|---|---|
| `max_header_bytes` | 8192 | 400 RequestHeaderSectionTooLarge (names + values + 4 bytes a line, as S3) |
| `max_header_count` | 100 | 400 RequestHeaderSectionTooLarge |
| `max_url_bytes` | 16384 | 400 RequestHeaderSectionTooLarge (a request line longer than this) |
| `header_timeout_seconds` | 20 | 400 RequestTimeout: the head must be complete this long after the connection opened or its first byte arrived (slowloris) |
| `body_timeout_seconds` | 30 | 400 RequestTimeout: a request body from which no byte arrived for this long, while the gateway was reading |
| `send_timeout_seconds` | 60 | the connection is cut: a client that reads nothing of a response for this long (its download holds node connections and memory) |
| `max_connections` | 512 | 503 SlowDown, per worker process, answered at accept |

A body declared longer than S3's 5 GiB limit (Content-Length or x-amz-decoded-content-length)
is refused with EntityTooLarge as soon as the head is read, without waiting for the body.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

GiB = 1 << 30
MAX_BODY_BYTES = 5 * GiB  # S3's largest PutObject / UploadPart


@dataclass(frozen=True)
class HttpLimits:
    max_header_bytes: int = 8192
    max_header_count: int = 100
    max_url_bytes: int = 16384
    header_timeout_seconds: float = 20.0
    body_timeout_seconds: float = 30.0
    send_timeout_seconds: float = 60.0
    max_connections: int = 512

    @classmethod
    def from_gateway(cls, gw: dict[str, Any] | None) -> HttpLimits:
        """The limits named in a `[gateway]` table (others keep their defaults); ValueError
        naming the key for a value that is not a positive number."""
        gw = gw or {}
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name not in gw:
                continue
            v = gw[f.name]
            kind = float if f.type == "float" else int
            if isinstance(v, bool) or not isinstance(v, int | float) or \
                    (kind is int and not isinstance(v, int)) or not v > 0:
                raise ValueError(f"gateway.{f.name} must be a positive "
                                 f"{'number' if kind is float else 'integer'}, not {v!r}")
            values[f.name] = kind(v)
        return cls(**values)
