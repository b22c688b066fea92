"""Reed-Solomon coding of parts into fragment archives (pyeclib, ISA-L by default).

A part is cut into fixed-size segments (the last one shorter); each segment is encoded into k+m
fragments (pyeclib prepends an 80-byte header to each). Fragment archive `i` of a part is the
concatenation of fragment `i` of every segment, so all full segments give fragments of one size
and only the tail segment differs: any client byte range maps to a contiguous byte range of
every archive. pyeclib's own `get_segment_info` merges a short tail into the previous segment,
which needs the part length up front; ours does not, so it is only used for fragment sizes.

A 0-byte part has no segments: pyeclib cannot encode 0 bytes, so its archives are empty
(0 payload bytes; only their metadata blob says what they belong to).
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache

from pyeclib.ec_iface import ECDriver

from erasure.fastencode import HEADER_SIZE, Fragment, ParityEncoder

DEFAULT_BACKEND = "isa_l_rs_vand"
DEFAULT_SEGMENT = 1024 * 1024


class CodecError(Exception):
    """Fragments could not be decoded (too few, inconsistent, or corrupt headers)."""


@dataclass(frozen=True)
class Scheme:
    """An erasure-coding scheme; recorded with every part so it can always be decoded."""

    k: int = 8
    m: int = 2
    segment_size: int = DEFAULT_SEGMENT
    backend: str = DEFAULT_BACKEND

    def __post_init__(self) -> None:
        if self.k < 1 or self.m < 1:
            raise ValueError(f"k and m must be >= 1 (got k={self.k}, m={self.m})")
        if self.segment_size < 1:
            raise ValueError(f"segment_size must be >= 1 (got {self.segment_size})")

    @property
    def n(self) -> int:
        return self.k + self.m

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Scheme:
        return cls(k=int(d["k"]), m=int(d["m"]), segment_size=int(d["segment_size"]),
                   backend=str(d["backend"]))


@dataclass(frozen=True)
class RangePlan:
    """Which segments a client byte range touches and which archive bytes hold them."""

    first_segment: int
    last_segment: int      # inclusive
    archive_start: int     # byte offset in every archive
    archive_end: int       # exclusive
    skip: int              # bytes to drop from the first decoded segment
    length: int            # client bytes to return

    @property
    def empty(self) -> bool:
        return self.length == 0


@lru_cache(maxsize=16)
def _driver(k: int, m: int, backend: str) -> ECDriver:
    return ECDriver(k=k, m=m, ec_type=backend)


class Codec:
    """Encode/decode segments of one scheme, and the segment/archive arithmetic around them."""

    def __init__(self, scheme: Scheme | None = None, *, warm_up: bool = True) -> None:
        self.scheme = scheme or Scheme()
        s = self.scheme
        try:
            self.driver = _driver(s.k, s.m, s.backend)
        except Exception as e:  # pyeclib raises several unrelated types here
            raise ValueError(f"erasure backend {s.backend!r} cannot do k={s.k} m={s.m}: {e}") from e
        self._frag_sizes: dict[int, int] = {}
        self._parity = (ParityEncoder(s.k, s.m, s.segment_size, self.driver.encode)
                        if s.backend == "isa_l_rs_vand" else None)
        if warm_up:
            # The first encode/decode call of a process is slow (table set-up): pay it now.
            frags = self.encode(bytes(min(s.segment_size, 64 * 1024)))
            self.decode(frags[s.m:])
        self.systematic = self._is_systematic()

    def _is_systematic(self) -> bool:
        """Whether data fragment j holds segment bytes [j*P, (j+1)*P) right after its header
        (true of the Reed-Solomon backends): then small ranges can be read without decoding."""
        n = min(self.scheme.segment_size, self.scheme.k * 61 + 3)
        sample = bytes((i * 7 + 3) % 251 for i in range(n))
        frags = self.encode(sample)
        p = self.fragment_size(n) - HEADER_SIZE
        return all(frags[j][HEADER_SIZE:HEADER_SIZE + max(0, min(p, n - j * p))]
                   == sample[j * p:(j + 1) * p] for j in range(self.scheme.k))

    # -- sizes -------------------------------------------------------------------------------

    def fragment_size(self, segment_length: int) -> int:
        """Bytes of one fragment (header included) of a segment of this many bytes."""
        size = self._frag_sizes.get(segment_length)
        if size is None:
            if segment_length <= 0:
                raise ValueError("segments are never empty")
            info = self.driver.get_segment_info(segment_length, segment_length)
            size = self._frag_sizes[segment_length] = int(info["fragment_size"])
        return size

    def segment_count(self, part_length: int) -> int:
        return -(-part_length // self.scheme.segment_size)

    def segment_length(self, part_length: int, index: int) -> int:
        seg = self.scheme.segment_size
        return min(seg, part_length - index * seg)

    def archive_offset(self, part_length: int, segment: int) -> int:
        """Offset in every archive of fragment `segment` (only the last segment is short)."""
        if segment == 0:
            return 0
        return segment * self.fragment_size(self.scheme.segment_size)

    def archive_length(self, part_length: int) -> int:
        n = self.segment_count(part_length)
        if n == 0:
            return 0
        return self.archive_offset(part_length, n - 1) + self.fragment_size(
            self.segment_length(part_length, n - 1))

    def plan_range(self, part_length: int, offset: int = 0, length: int | None = None) -> RangePlan:
        """Map the client range [offset, offset+length) to segments and archive bytes."""
        if offset < 0 or (length is not None and length < 0):
            raise ValueError("negative range")
        if offset > part_length:
            raise ValueError(f"range starts at {offset}, past the part's {part_length} bytes")
        end = part_length if length is None else min(part_length, offset + length)
        if end <= offset:
            return RangePlan(0, -1, 0, 0, 0, 0)
        seg = self.scheme.segment_size
        first, last = offset // seg, (end - 1) // seg
        start = self.archive_offset(part_length, first)
        stop = self.archive_offset(part_length, last) + self.fragment_size(
            self.segment_length(part_length, last))
        return RangePlan(first, last, start, stop, offset - first * seg, end - offset)

    def direct_pieces(self, part_length: int, offset: int, length: int | None,
                      max_pieces: int = 2) -> list[tuple[int, int, int]] | None:
        """For a systematic code, the (data fragment index, archive start, archive end) pieces
        that hold the client range verbatim; None if the code is not systematic or the range
        needs more than `max_pieces` pieces (then decoding whole segments is cheaper)."""
        if not self.systematic:
            return None
        plan = self.plan_range(part_length, offset, length)
        seg_size = self.scheme.segment_size
        pieces: list[tuple[int, int, int]] = []
        pos, end = offset, offset + plan.length
        while pos < end:
            seg = pos // seg_size
            seg_len = self.segment_length(part_length, seg)
            p = self.fragment_size(seg_len) - HEADER_SIZE
            in_seg = pos - seg * seg_size
            j = in_seg // p
            stop = min(end - seg * seg_size, seg_len, (j + 1) * p)
            base = self.archive_offset(part_length, seg) + HEADER_SIZE - j * p
            pieces.append((j, base + in_seg, base + stop))
            if len(pieces) > max_pieces:
                return None
            pos = seg * seg_size + stop
        return pieces

    # -- coding ------------------------------------------------------------------------------

    def encode_pieces(self, segment: bytes | memoryview) -> list[Fragment]:
        """k+m fragments of one segment, index order, each a list of buffers that joined are
        what `encode` gives. Where erasure/fastencode.py can, data fragments hold views of
        `segment` (no copy): it must not change while they are held, as `segments` yields."""
        if self._parity is not None:
            frags = self._parity.encode(segment)
            if frags is not None:
                return frags
        return [[f] for f in self.encode(segment)]

    def encode(self, segment: bytes | bytearray | memoryview) -> list[bytes]:
        """k+m fragments of one segment, index order."""
        if len(segment) == 0:
            raise ValueError("cannot encode an empty segment")
        return self.driver.encode(bytes(segment))

    def decode(self, fragments: Sequence[bytes]) -> bytes:
        """The segment from any k of its fragments (each carries its index in its header)."""
        try:
            return self.driver.decode(list(fragments))
        except Exception as e:
            raise CodecError(f"cannot decode segment: {e}") from e

    def reconstruct(self, fragments: Sequence[bytes], indexes: Sequence[int]) -> list[bytes]:
        """Rebuild the fragments with these indexes from any k others."""
        try:
            return self.driver.reconstruct(list(fragments), list(indexes))
        except Exception as e:
            raise CodecError(f"cannot reconstruct fragments {list(indexes)}: {e}") from e

    def fragment_index(self, fragment: bytes) -> int:
        """The index recorded in a fragment's header (checks the header's checksum)."""
        try:
            return int(self.driver.get_metadata(fragment[:HEADER_SIZE + 1], formatted=True)["index"])
        except Exception as e:
            raise CodecError(f"bad fragment header: {e}") from e

    def check_fragment(self, header: bytes | memoryview, index: int, segment_length: int
                       ) -> None:
        """CodecError unless `header` (a fragment's first HEADER_SIZE + 1 bytes) is intact
        (pyeclib checks its checksum) and describes fragment `index` of a segment of
        `segment_length` bytes: what decoding from the data fragments would check, for
        readers that take a systematic code's data straight from the fragments."""
        try:
            meta = self.driver.get_metadata(bytes(header), formatted=True)
        except Exception as e:
            raise CodecError(f"bad fragment header: {e}") from e
        want = self.fragment_size(segment_length) - HEADER_SIZE
        if (int(meta["index"]) != index or int(meta["orig_data_size"]) != segment_length
                or int(meta["size"]) != want):
            raise CodecError(f"fragment header says index {meta['index']}, "
                             f"{meta['orig_data_size']} segment bytes, {meta['size']} fragment "
                             f"bytes; expected {index}, {segment_length}, {want}")

    def split_archive_range(self, part_length: int, plan: RangePlan, data: bytes | memoryview
                            ) -> list[memoryview]:
        """Cut the archive bytes of a plan into one fragment per segment."""
        mv = memoryview(data)
        out, pos = [], 0
        for s in range(plan.first_segment, plan.last_segment + 1):
            size = self.fragment_size(self.segment_length(part_length, s))
            out.append(mv[pos:pos + size])
            pos += size
        if pos != len(mv):
            raise CodecError(f"archive range has {len(mv)} bytes, expected {pos}")
        return out


async def segments(body: AsyncIterable[bytes], segment_size: int) -> AsyncIterator[bytes]:
    """Re-chunk a byte stream into segments of exactly segment_size bytes (last one shorter):
    `bytes`, or read-only memoryviews passed on as they came. Holds at most one segment plus
    one incoming chunk.

    Each segment is built with one copy (a join of views of the incoming chunks; a chunk that
    already is one whole segment, `bytes` or a read-only memoryview (the gateway's segment
    pool: never written while held), is passed on as is): regrouping used to copy every
    byte four times (append, slice, bytes(), shift), a measurable share of the gateway's CPU
    per byte."""
    pieces: list[bytes | memoryview] = []
    have = 0
    async for chunk in body:
        n = len(chunk)
        if not n:
            continue
        if not have and n == segment_size and (type(chunk) is bytes or (
                type(chunk) is memoryview and chunk.readonly)):
            yield chunk  # a read-only view is one nobody writes while it is held
            continue
        if type(chunk) is not bytes:
            chunk = bytes(chunk)  # a caller may reuse its buffer once we hand control back
        view = memoryview(chunk)
        pos = 0
        while have + (n - pos) >= segment_size:
            take = segment_size - have
            pieces.append(view[pos:pos + take])
            pos += take
            yield b"".join(pieces)
            pieces.clear()
            have = 0
        if pos < n:
            pieces.append(view[pos:] if pos else chunk)
            have += n - pos
    if pieces:
        yield b"".join(pieces)


def encode_to_archives(codec: Codec, data: bytes) -> list[bytes]:
    """Whole-buffer helper (tests, small parts): the k+m archives of `data`."""
    seg = codec.scheme.segment_size
    archives = [bytearray() for _ in range(codec.scheme.n)]
    for off in range(0, len(data), seg):
        for i, frag in enumerate(codec.encode(data[off:off + seg])):
            archives[i] += frag
    return [bytes(a) for a in archives]


def decode_from_archives(codec: Codec, part_length: int, archives: dict[int, bytes],
                         offset: int = 0, length: int | None = None) -> bytes:
    """Whole-buffer helper: decode a client range from any k archives (index -> full archive)."""
    plan = codec.plan_range(part_length, offset, length)
    if plan.empty:
        return b""
    if len(archives) < codec.scheme.k:
        raise CodecError(f"need {codec.scheme.k} archives, have {len(archives)}")
    chosen = sorted(archives)[:codec.scheme.k]
    per_archive = [codec.split_archive_range(part_length, plan,
                                             archives[i][plan.archive_start:plan.archive_end])
                   for i in chosen]
    out = bytearray()
    for j in range(plan.last_segment - plan.first_segment + 1):
        out += codec.decode([bytes(frags[j]) for frags in per_archive])
    return bytes(out[plan.skip:plan.skip + plan.length])
