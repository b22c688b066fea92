"""What the zone log answers about a record (RecordInfo) and about itself (LogStats)."""

from __future__ import annotations

from dataclasses import dataclass, field

from zonestore.histogram import HistogramSnapshot
from zonestore.index import Entry


@dataclass(frozen=True)
class RecordInfo:
    id: str
    length: int
    meta: bytes
    stream: str
    seq: int
    crc32c: int


@dataclass
class LogStats:
    user_bytes_written: int = 0
    device_bytes_written: int = 0
    gc_bytes_copied: int = 0
    zones_by_condition: dict[str, int] = field(default_factory=dict)
    free_bytes: int = 0
    used_bytes: int = 0
    live_bytes: int = 0
    write_amplification: float = 0.0
    flushes: int = 0
    flush_bytes: int = 0
    flush_seconds: HistogramSnapshot | None = None  # latency of write + sync, per durable flush
    flush_sizes: HistogramSnapshot | None = None  # bytes per device write
    records: int = 0
    crc_failures: int = 0
    read_errors: int = 0
    open_zones: int = 0
    max_open_zones: int = 0
    max_active_zones: int = 0
    # Space accounting (space.py): live + garbage + stranded + writable + reserve = capacity.
    writable_bytes: int = 0  # what puts can still write (= free_bytes)
    stranded_bytes: int = 0  # unwritten room of finished zones, unusable until a reset
    garbage_bytes: int = 0  # written bytes no live record points at
    reserve_bytes: int = 0  # held back for reclaim and deletes
    empty_zones: int = 0
    seq_zones: int = 0  # the sequential zones (empty_zones == seq_zones: the drive is empty)
    reclaiming_zone: int = -1  # the zone reclaim is evacuating, -1 if none


def _info(e: Entry) -> RecordInfo:
    return RecordInfo(e.id, e.length, e.meta, e.stream, e.seq, e.crc)
