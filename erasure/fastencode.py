"""Parity-only encoding of whole segments with ISA-L: byte for byte pyeclib's `isa_l_rs_vand`.

Why: pyeclib's encode copies the segment into fresh fragment buffers and then each fragment
into a new `bytes` (the writer added a `bytes()` of the segment's view): ~3.5 bytes of memory
traffic and 2.5 MiB of fresh memory per MiB encoded; 0.27 CPU-s/GiB in a loop, where the
coding itself is 0.04. Reed-Solomon on ISA-L is systematic: data fragment j is its 80-byte
header and then bytes [j*P, (j+1)*P) of the segment. So here a data fragment is [header, a view
of the segment] and only the m parity blocks are computed, by ISA-L's `ec_encode_data` (the
library pyeclib's wheel ships) with pointers into the segment.

A fragment header does not depend on the segment's bytes (pyeclib is given no checksum type):
the headers come from pyeclib's encode of the first segment, which the fast encode must match
byte for byte. Any difference, a segment size that does not split evenly (pyeclib pads it),
a part's shorter last segment, another backend or no libisal: pyeclib encodes, as before.
The segment must not change while its fragments are held: `codec.segments` yields `bytes` or
read-only views that nobody writes while they are held.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)
HEADER_SIZE = 80  # pyeclib/liberasurecode fragment header (erasure/codec.py uses this one)


class _PyBuffer(ctypes.Structure):  # CPython's Py_buffer
    _fields_ = [("buf", ctypes.c_void_p), ("obj", ctypes.py_object), ("len", ctypes.c_ssize_t),
                ("itemsize", ctypes.c_ssize_t), ("readonly", ctypes.c_int),
                ("ndim", ctypes.c_int), ("format", ctypes.c_char_p),
                ("shape", ctypes.c_void_p), ("strides", ctypes.c_void_p),
                ("suboffsets", ctypes.c_void_p), ("internal", ctypes.c_void_p)]


_get_buffer = ctypes.pythonapi.PyObject_GetBuffer
_get_buffer.argtypes = [ctypes.py_object, ctypes.POINTER(_PyBuffer), ctypes.c_int]
_release = ctypes.pythonapi.PyBuffer_Release
_release.argtypes = [ctypes.POINTER(_PyBuffer)]


def _find_isal() -> ctypes.CDLL | None:
    try:
        import pyeclib
        libs = Path(pyeclib.__file__).resolve().parent.parent / "pyeclib.libs"
        found = sorted(libs.glob("libisal*.so*")) if libs.is_dir() else []
        path = str(found[0]) if found else ctypes.util.find_library("isal")
        if path is None:
            return None
        lib = ctypes.CDLL(path)
        lib.ec_encode_data.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int,
                                       ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
        lib.ec_encode_data.restype = None
        return lib
    except (OSError, AttributeError, ImportError) as e:
        log.info("ISA-L not loadable (%s): pyeclib encodes every segment", e)
        return None


_ISAL = _find_isal()

Fragment = list[Any]  # buffers (bytes, memoryview, bytearray) that joined are one fragment


class ParityEncoder:
    """`encode(segment)` -> k+m fragments as lists of buffers, or None where pyeclib must:
    a segment of another length than the scheme's (a part's last one), or no ISA-L."""

    def __init__(self, k: int, m: int, segment_size: int,
                 reference: Callable[[bytes], list[bytes]]) -> None:
        self.k, self.m, self.segment_size = k, m, segment_size
        self._reference = reference  # pyeclib's encode, for headers and the first check
        # [] until the first segment, then its headers, or None: pyeclib encodes
        self._headers: list[bytes] | None = [] if segment_size % k == 0 else None
        self._tables = None
        if _ISAL is not None:
            n = k + m
            matrix = (ctypes.c_ubyte * (n * k))()
            _ISAL.gf_gen_rs_matrix(matrix, n, k)
            self._tables = (ctypes.c_ubyte * (k * m * 32))()
            _ISAL.ec_init_tables(k, m, ctypes.byref(matrix, k * k), self._tables)
        self._data_ptrs = ctypes.c_void_p * k
        self._parity_ptrs = ctypes.c_void_p * m

    def encode(self, segment: bytes | memoryview) -> list[Fragment] | None:
        headers = self._headers
        if headers is None or self._tables is None or len(segment) != self.segment_size:
            return None
        if not headers:
            return self._first(segment)
        return self._encode(segment, headers)

    def _encode(self, segment: bytes | memoryview, headers: list[bytes]) -> list[Fragment]:
        k, p = self.k, len(segment) // self.k
        parity = [bytearray(HEADER_SIZE + p) for _ in range(self.m)]
        outs = []
        for h, buf in zip(headers[k:], parity, strict=True):
            buf[:HEADER_SIZE] = h
            outs.append(ctypes.addressof((ctypes.c_char * len(buf)).from_buffer(buf)) + HEADER_SIZE)
        view = _PyBuffer()
        _get_buffer(segment, ctypes.byref(view), 0)
        try:
            base = view.buf
            _ISAL.ec_encode_data(p, k, self.m, self._tables,  # type: ignore[union-attr]
                                 self._data_ptrs(*(base + j * p for j in range(k))),
                                 self._parity_ptrs(*outs))
        finally:
            _release(ctypes.byref(view))
        mv = memoryview(segment)
        return [[headers[j], mv[j * p:(j + 1) * p]] for j in range(k)] + [[b] for b in parity]

    def _first(self, segment: bytes | memoryview) -> list[Fragment]:
        """The first segment: headers from pyeclib, and its answer compared."""
        want = self._reference(bytes(segment))
        p = len(segment) // self.k
        ok = all(len(f) == HEADER_SIZE + p for f in want)
        headers = [f[:HEADER_SIZE] for f in want] if ok else None
        if headers is not None:
            got = self._encode(segment, headers)
            if [b"".join(f) for f in got] == want:
                self._headers = headers
                return got
            log.warning("ISA-L parity differs from pyeclib's for %d-byte segments: pyeclib "
                        "encodes them", len(segment))
        self._headers = None
        return [[f] for f in want]
