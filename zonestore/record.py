"""The on-device record format of the zone log: self-describing, checksummed records.

Every record is a fixed little-endian header, the record id, a header CRC32C, then the payload:

    magic "ZGLR" | version u8 | type u8 | flags u16 | seq u64 | arg u64 | gen u32 |
    payload_len u32 | id_len u16 | reserved u16 | payload_crc32c u32 | id bytes | header_crc32c u32

`arg` is the chunk's offset inside its record for DATA, the record's total length for COMMIT.
`gen` is the copy generation: reclaim rewrites a record with gen + 1, so a scan that finds two
copies picks the newest deterministically. A put is DATA chunks (at most `MAX_CHUNK` payload
each, so a small ranged read only verifies the chunk it touches) followed by one COMMIT whose
payload lists the chunks' extents; small bodies ride inside the COMMIT itself (INLINE). DATA
without a COMMIT (a killed put) is garbage. Records are packed back to back; the space between
the last record of a flush and the next physical block is zero fill, which the scanner skips.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

import crc32c as _crc32c

from zonestore.errors import CorruptRecord

MAGIC = b"ZGLR"
FORMAT_VERSION = 1
MAX_CHUNK = 1024 * 1024  # payload bytes per DATA record
INLINE_MAX = 64 * 1024  # bodies up to this size are stored inside their COMMIT record
MAX_META = 64 * 1024
MAX_ID_BYTES = 200

_FIXED = struct.Struct("<4sBBHQQIIHHI")
FIXED_SIZE = _FIXED.size  # 40
_U32 = struct.Struct("<I")
# COMMIT payload: total_length u64, nr_extents u32, whole crc u32, meta_len u32, stream_len u16,
# reserved u16; then stream, meta, extents, inline data.
_COMMIT = struct.Struct("<QIIIHH")
_EXTENT = struct.Struct("<QII")  # payload device offset, length, crc32c of that chunk

FLAG_INLINE = 0x1


class RecordType(IntEnum):
    DATA = 1
    COMMIT = 2
    TOMBSTONE = 3


def crc32c(data: bytes | bytearray | memoryview, value: int = 0) -> int:
    return _crc32c.crc32c(data, value=value)


def header_size(id_len: int) -> int:
    return FIXED_SIZE + id_len + 4


@dataclass(frozen=True, slots=True)
class Header:
    type: RecordType
    flags: int
    seq: int
    arg: int
    gen: int
    payload_len: int
    payload_crc: int
    id: str
    size: int  # header bytes (fixed + id + header crc)

    @property
    def record_size(self) -> int:
        return self.size + self.payload_len


def encode_header(rtype: RecordType, record_id: str, *, seq: int, gen: int = 0, arg: int = 0,
                  flags: int = 0, payload_len: int, payload_crc: int) -> bytes:
    rid = record_id.encode("ascii")
    fixed = _FIXED.pack(MAGIC, FORMAT_VERSION, rtype, flags, seq, arg, gen, payload_len,
                        len(rid), 0, payload_crc)
    body = fixed + rid
    return body + _U32.pack(crc32c(body))


def encode_record(rtype: RecordType, record_id: str, payload: bytes = b"", *, seq: int,
                  gen: int = 0, arg: int = 0, flags: int = 0) -> bytes:
    return encode_header(rtype, record_id, seq=seq, gen=gen, arg=arg, flags=flags,
                         payload_len=len(payload), payload_crc=crc32c(payload)) + payload


def decode_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> Header | None:
    """Parse the header at `pos`. None if `buf` ends before the header does; CorruptRecord if
    the bytes there are not a valid header (bad magic, version, type or header CRC)."""
    view = memoryview(buf)
    if len(view) - pos < FIXED_SIZE:
        if bytes(view[pos:pos + 4]) != MAGIC[: len(view) - pos][:4]:
            raise CorruptRecord(f"no record header at {pos}")
        return None
    (magic, version, rtype, flags, seq, arg, gen, plen, id_len, _res,
     pcrc) = _FIXED.unpack_from(view, pos)
    if magic != MAGIC:
        raise CorruptRecord(f"no record magic at {pos}")
    if id_len > MAX_ID_BYTES:
        raise CorruptRecord(f"record id length {id_len} at {pos} is out of range")
    end = pos + FIXED_SIZE + id_len + 4
    if end > len(view):
        return None
    (hcrc,) = _U32.unpack_from(view, end - 4)
    if crc32c(view[pos:end - 4]) != hcrc:
        raise CorruptRecord(f"record header CRC mismatch at {pos}")
    if version != FORMAT_VERSION:
        raise CorruptRecord(f"unsupported record format version {version} at {pos}")
    try:
        rtype = RecordType(rtype)
        rid = bytes(view[pos + FIXED_SIZE:end - 4]).decode("ascii")
    except (ValueError, UnicodeDecodeError):
        raise CorruptRecord(f"invalid record type or id at {pos}") from None
    return Header(rtype, flags, seq, arg, gen, plen, pcrc, rid, end - pos)


def check_payload(h: Header, payload: bytes | bytearray | memoryview) -> None:
    if len(payload) != h.payload_len or crc32c(payload) != h.payload_crc:
        raise CorruptRecord(f"payload CRC mismatch in {h.type.name} record {h.id!r} seq {h.seq}")


@dataclass(frozen=True, slots=True)
class Extent:
    """Where `length` payload bytes of a record live: `offset` is absolute on the device."""

    offset: int
    length: int
    crc: int


@dataclass(frozen=True, slots=True)
class Commit:
    length: int
    crc: int
    stream: str
    meta: bytes
    extents: tuple[Extent, ...]
    inline: bytes | None  # the body itself for INLINE commits


def encode_commit(*, length: int, crc: int, stream: str, meta: bytes,
                  extents: list[Extent] | tuple[Extent, ...], inline: bytes | None = None) -> bytes:
    s = stream.encode("utf-8")
    if len(s) > 0xFFFF:
        raise ValueError("stream hint longer than 65535 bytes")
    if len(meta) > MAX_META:
        raise ValueError(f"metadata blob of {len(meta)} bytes exceeds {MAX_META}")
    parts = [_COMMIT.pack(length, len(extents), crc, len(meta), len(s), 0), s, meta]
    parts.extend(_EXTENT.pack(e.offset, e.length, e.crc) for e in extents)
    if inline is not None:
        parts.append(inline)
    return b"".join(parts)


def inline_data_offset(stream: str, meta_len: int) -> int:
    """Offset of INLINE data inside a COMMIT payload (no extents are listed then)."""
    return _COMMIT.size + len(stream.encode("utf-8")) + meta_len


def decode_commit(payload: bytes | bytearray | memoryview, inline: bool) -> Commit:
    view = memoryview(payload)
    try:
        length, n, crc, mlen, slen, _ = _COMMIT.unpack_from(view, 0)
        p = _COMMIT.size
        stream = bytes(view[p:p + slen]).decode("utf-8")
        p += slen
        meta = bytes(view[p:p + mlen])
        p += mlen
        extents = []
        for _ in range(n):
            off, ln, c = _EXTENT.unpack_from(view, p)
            extents.append(Extent(off, ln, c))
            p += _EXTENT.size
        data = bytes(view[p:]) if inline else None
    except (struct.error, UnicodeDecodeError):
        raise CorruptRecord("malformed COMMIT payload") from None
    if len(meta) != mlen or (inline and len(data) != length) or (not inline and p != len(view)):
        raise CorruptRecord("malformed COMMIT payload")
    return Commit(length, crc, stream, meta, tuple(extents), data)


# CRC32C of a concatenation from the parts' CRCs (zlib's crc32_combine, for the Castagnoli
# polynomial): a put checksums each chunk once and derives the whole-body CRC from those,
# instead of a second pass over every byte.
_POLY = 0x82F63B78


def _gf2_times(mat: list[int], vec: int) -> int:
    s = 0
    i = 0
    while vec:
        if vec & 1:
            s ^= mat[i]
        vec >>= 1
        i += 1
    return s


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, mat[n]) for n in range(32)]


def _zero_operators() -> list[list[int]]:
    op = [_POLY] + [1 << n for n in range(31)]  # one zero bit
    op = _gf2_square(_gf2_square(_gf2_square(op)))  # eight zero bits: one byte
    ops = [op]
    for _ in range(63):
        op = _gf2_square(op)
        ops.append(op)
    return ops  # ops[k] appends 2**k zero bytes


_ZERO_OPS = _zero_operators()


def crc32c_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32C of A+B given crc(A), crc(B) and len(B)."""
    k = 0
    while len2:
        if len2 & 1:
            crc1 = _gf2_times(_ZERO_OPS[k], crc1)
        len2 >>= 1
        k += 1
    return crc1 ^ crc2
