"""Request heads for the node's lean PUT path (fastput.py): which heads it serves itself,
which it lends to aiohttp, which it hands over for good; and the header-line grammar its
chunked-body decoder checks trailers against. Regexes rather than a Python loop per line;
tests/zonestore/test_node_fast_put.py holds them to what aiohttp reads."""

from __future__ import annotations

import re
from typing import Any

from multidict import CIMultiDict

MAX_LINE = 8190  # the limits the node gives aiohttp (server.py): beyond them aiohttp refuses
MAX_HEADERS = 64

_QUERY_ITEM = rb"[A-Za-z0-9._~-]+=[A-Za-z0-9._~-]*"
_REQUEST_LINE = re.compile(
    rb"PUT (/v1/records/([A-Za-z0-9_:][A-Za-z0-9._:-]{0,199}))"
    rb"(?:\?(" + _QUERY_ITEM + rb"(?:&" + _QUERY_ITEM + rb")*))? HTTP/1\.1")
_OTHER_LINE = re.compile(rb"[A-Z]{1,16} /[\x21-\x7e]* HTTP/1\.1")
TOKEN_RE = re.compile(rb"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
VALUE_RE = re.compile(rb"[\x20-\x7e\t]*")
# A header line: a token, a colon, a value of printable ASCII without its surrounding blanks;
# at most MAX_LINE characters (obs-fold, bare CR or LF, other bytes: no match). Possessive
# and atomic parts keep a hostile line from making the match backtrack.
_PAIR = r"([!#$%&'*+.^_`|~0-9A-Za-z-]+):[ \t]*+((?:[\x20-\x7e\t]*[\x21-\x7e])?)[ \t]*+\r\n"
_HEADER_PAIR = re.compile(_PAIR)
_HEADER_BLOCK = re.compile(rf"(?:(?=[^\r\n]{{0,{MAX_LINE}}}\r\n)(?>{_PAIR}))*")
CHUNK_SIZE_RE = re.compile(rb"([0-9A-Fa-f]{1,15})(?:;[\x20-\x7e\t]*)?")
_DIGITS = re.compile(r"[0-9]{1,18}")


class LeanRequest:
    __slots__ = ("body", "declared", "headers", "keep_alive", "query", "raw_id", "raw_path")

    def __init__(self, raw_path: str, raw_id: str, query: list[tuple[str, str]],
                 headers: CIMultiDict[str], declared: int | None, keep_alive: bool) -> None:
        self.raw_path = raw_path
        self.raw_id = raw_id
        self.query = query
        self.headers = headers
        self.declared = declared  # Content-Length, None if chunked
        self.keep_alive = keep_alive
        self.body: Any = None  # a leanbody.LeanBody, once the head is accepted


def parse_head(head: bytes) -> LeanRequest | int | None:
    """What to do with a request head (without its final blank line): a `LeanRequest` to serve on
    the lean path; an int, the length of a request framed by Content-Length (or bodiless) to
    lend to aiohttp (`Delegate`); None to give aiohttp the connection for good (anything odd,
    see the module docstring)."""
    first, _, rest = head.partition(b"\r\n")
    if len(first) > MAX_LINE:
        return None
    m = _REQUEST_LINE.fullmatch(first)
    if m is None and _OTHER_LINE.fullmatch(first) is None:
        return None
    # The header lines checked and split by two regex passes rather than a Python loop.
    block = rest.decode("latin-1") + "\r\n" if rest else ""
    if _HEADER_BLOCK.fullmatch(block) is None:
        return None
    pairs = _HEADER_PAIR.findall(block)
    if len(pairs) > MAX_HEADERS:
        return None
    headers = CIMultiDict(pairs)
    # Headers given twice are read as aiohttp reads them (the first), except those framing the
    # request or the connection, which aiohttp may read otherwise.
    if "Upgrade" in headers or len(headers.getall("Content-Length", ())) > 1 \
            or len(headers.getall("Transfer-Encoding", ())) > 1 \
            or len(headers.getall("Connection", ())) > 1:
        return None
    conn = headers.get("Connection")
    if conn is None:
        keep_alive = True
    else:
        conn = conn.lower()
        if conn not in ("keep-alive", "close"):
            return None
        keep_alive = conn == "keep-alive"
    te = headers.get("Transfer-Encoding")
    cl = headers.get("Content-Length")
    if cl is not None and _DIGITS.fullmatch(cl) is None:
        return None
    if m is None or "Expect" in headers:
        # Another request: aiohttp answers it here if it ends where Content-Length says.
        return int(cl or 0) if te is None else None
    if te is not None:
        if cl is not None or te.lower() != "chunked":
            return None
        declared = None
    elif cl is not None:
        declared = int(cl)
    else:
        return None
    query = [] if m.group(3) is None else [
        tuple(item.split("=", 1)) for item in m.group(3).decode("ascii").split("&")]
    return LeanRequest(m.group(1).decode("ascii"), m.group(2).decode("ascii"), query, headers,
                    declared, keep_alive)


def bodiless_other(head: bytes) -> bool:
    """True if `head` (one whole request head, blank line included) is an HTTP/1.1 request
    that is not a lean PUT and has no body: nothing frames a body (or upgrades), and every line
    ends with CRLF, so aiohttp's parser too sees it end there. A quicker test than
    `parse_head` for the requests aiohttp answers in a row (what else it accepts, and how, is
    its parser's business)."""
    crlf = head.count(b"\r\n")
    if head.startswith(b"PUT /v1/records/") \
            or not head[:head.find(b"\r\n")].endswith(b" HTTP/1.1") \
            or head.count(b"\n") != crlf or head.count(b"\r") != crlf:
        return False
    low = head.lower()
    return not (b"\ncontent-length:" in low or b"\ntransfer-encoding:" in low
                or b"\nupgrade:" in low or b"\nexpect:" in low)
