"""What the cluster hands back for a written part, and what each fragment archive says about
itself.

`PartLayout` (JSON-serialisable) is what the gateway stores: where each fragment went and which
ones await repair. The archive metadata blob (JSON, trailing each archive's body on its node)
repeats the essentials — scheme, fragment index, part length and CRC32C, the caller's dict — so
that layouts and the gateway's metadata can be rebuilt by scanning the nodes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from erasure.codec import Scheme

ARCHIVE_RE = re.compile(r"^(?P<part>.+)\.f(?P<index>\d{2})$")
META_VERSION = 1


def archive_id(part_uid: str, index: int) -> str:
    """Record id of fragment archive `index` of a part on its node."""
    return f"{part_uid}.f{index:02d}"


def parse_archive_id(record_id: str) -> tuple[str, int] | None:
    m = ARCHIVE_RE.match(record_id)
    return (m["part"], int(m["index"])) if m else None


@dataclass(frozen=True)
class PartResult:
    """What `write_part`'s meta callable learns once the body has been consumed."""

    part_uid: str
    length: int
    crc32c: int
    scheme: Scheme


@dataclass
class PartLayout:
    part_uid: str
    length: int
    scheme: Scheme
    placement: dict[int, str]             # fragment index -> node id
    missing: list[int] = field(default_factory=list)  # indexes awaiting repair
    crc32c: int = 0                        # CRC32C of the part's bytes

    def archive_id(self, index: int) -> str:
        return archive_id(self.part_uid, index)

    def to_dict(self) -> dict[str, Any]:
        return {"part_uid": self.part_uid, "length": self.length, "scheme": self.scheme.to_dict(),
                "placement": {str(i): n for i, n in sorted(self.placement.items())},
                "missing": sorted(self.missing), "crc32c": self.crc32c}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PartLayout:
        return cls(part_uid=d["part_uid"], length=int(d["length"]),
                   scheme=Scheme.from_dict(d["scheme"]),
                   placement={int(i): n for i, n in d["placement"].items()},
                   missing=[int(i) for i in d.get("missing", [])], crc32c=int(d.get("crc32c", 0)))

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_json(cls, text: str | bytes) -> PartLayout:
        return cls.from_dict(json.loads(text))


def archive_meta(result: PartResult, index: int, caller: dict[str, Any], stream: str = ""
                 ) -> bytes:
    """The metadata blob stored after fragment archive `index`."""
    return archive_metas(result, [index], caller, stream)[0]


def archive_metas(result: PartResult, indexes: Iterable[int], caller: dict[str, Any],
                  stream: str = "") -> list[bytes]:
    """archive_meta for several indexes, serialising what they share once: the blobs differ
    only in "index", which sorts second of the keys (after "crc32c"), so each blob is that
    prefix and the one shared tail (compact JSON with sorted keys, as json.dumps would make)."""
    tail = json.dumps({"v": META_VERSION, "part_uid": result.part_uid, "stream": stream,
                       "scheme": result.scheme.to_dict(), "length": result.length,
                       "meta": caller}, separators=(",", ":"), sort_keys=True)
    head = '{"crc32c":' + json.dumps(result.crc32c) + ',"index":'
    return [(head + str(int(i)) + "," + tail[1:]).encode() for i in indexes]


def parse_archive_meta(blob: bytes) -> dict[str, Any]:
    """Inverse of archive_meta; ValueError if the blob is not one of ours."""
    try:
        d = json.loads(blob)
        if not isinstance(d, dict) or d.get("v") != META_VERSION:
            raise ValueError("not a ZoneGate archive metadata blob")
        d["scheme"] = Scheme.from_dict(d["scheme"])
        d["index"], d["length"] = int(d["index"]), int(d["length"])
        return d
    except (KeyError, TypeError, json.JSONDecodeError) as e:
        raise ValueError(f"bad archive metadata: {e}") from None


@dataclass
class ScannedPart:
    """A part as found on the nodes: what its archives' metadata say and where they are."""

    part_uid: str
    length: int
    scheme: Scheme
    crc32c: int
    meta: dict[str, Any]                      # the caller's dict given to write_part
    fragments: dict[int, list[str]] = field(default_factory=dict)  # index -> node ids

    def layout(self) -> PartLayout:
        placement = {i: nodes[0] for i, nodes in self.fragments.items()}
        missing = [i for i in range(self.scheme.n) if i not in placement]
        return PartLayout(self.part_uid, self.length, self.scheme, placement, missing, self.crc32c)
