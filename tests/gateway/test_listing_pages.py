"""Pages without a delimiter (one range query folded in one pass, ObjectWalk.feed) answer what
a brute-force model answers on both backends, every page size, following the markers; the
listed records (gateway/metadata/keys.py ListedObject) carry the fields get_object gives; and
the listing XML (gateway/ops/listing.py contents_xml) is byte for byte the per-field form."""

from __future__ import annotations

import random
import time
from urllib.parse import quote
from xml.sax.saxutils import escape

from gateway.metadata import BucketRecord, ObjectRecord
from gateway.metadata.keys import ListedObject, listed_object
from gateway.ops.common import iso8601, owner_xml
from gateway.ops.listing import contents_xml
from tests.support import storebackends
from tests.support.storebackends import Stores

pg_server, stores = storebackends.pg_server, storebackends.stores

ALPHABET = ["a", "b", "/", "\x01", "\x7f", "é", "\u20ac", "\uffff", "\U0001f600", "&", "<"]


def model(keys: list[str], prefix: str, after: str, limit: int) -> tuple[list[str], bool]:
    b = lambda s: s.encode("utf-8", "surrogatepass")  # noqa: E731
    out = [k for k in sorted(keys, key=b) if k.startswith(prefix) and b(k) > b(after)]
    return out[:limit], len(out) > limit


async def test_flat_pages_match_the_model_on_both_backends(stores: Stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", time.time()))
    await s.create_bucket(BucketRecord("other", "alice", time.time()))
    rnd = random.Random(7)
    keys = sorted({"".join(rnd.choices(ALPHABET, k=rnd.randint(1, 5))) for _ in range(300)})
    for k in keys:
        await s.put_object(ObjectRecord("b", k, 1, "e", 1.0, "alice", "v"))
    await s.put_object(ObjectRecord("other", "a", 1, "e", 1.0, "alice", "v"))
    afters = ["", "a", "b/", "\U0001f600", keys[-1], "\uffff\uffff"]
    for prefix in ["", "a", "/", "é", "\U0001f600", "zz"]:
        for after in afters:
            for limit in [0, 1, 2, 7, 1000]:
                page = await s.list_objects("b", prefix, "", after, limit)
                want, truncated = model(keys, prefix, after, limit)
                got = [o.key for o in page.items]
                assert (got, page.prefixes, page.truncated and limit > 0) == \
                    (want, [], truncated and limit > 0), (prefix, after, limit)
                if page.truncated and limit > 0:
                    assert page.next_marker == got[-1]
        seen: list[str] = []
        after = ""
        while True:  # following the markers three keys at a time visits each key once
            page = await s.list_objects("b", prefix, "", after, 3)
            seen += [o.key for o in page.items]
            if not page.truncated:
                break
            after = page.next_marker
        assert seen == model(keys, prefix, "", 10**6)[0]


async def test_listed_records_carry_what_get_object_gives(stores: Stores) -> None:
    s = await stores.open()
    await s.create_bucket(BucketRecord("b", "alice", time.time()))
    ck = {"algorithm": "CRC32", "value": "AAAAAA==", "type": "FULL_OBJECT"}
    await s.put_object(ObjectRecord("b", "plain", 3, "e1", 1.5, "alice", "v1",
                                    headers={"Content-Type": "text/plain"},
                                    user_meta={"a": "b"}, tags={"t": "1"},
                                    parts=[{"number": 1, "size": 3, "etag": "e1"}]))
    await s.put_object(ObjectRecord("b", "summed", 4, "e2", 2.25, "bob", "v2", checksum=ck))
    page = await s.list_objects("b", "", "", "", 10)
    assert [type(o) for o in page.items] == [ListedObject, ListedObject]
    for o in page.items:
        full = await s.get_object("b", o.key)
        for f in ListedObject.__slots__:
            assert getattr(o, f) == getattr(full, f), f
        # what a listing row does not carry reads as empty
        assert (o.headers, o.user_meta, o.tags, o.parts, o.acl, o.manifest) == \
            ({}, {}, {}, [], None, None)
    assert dict(page.items[1].checksum) == ck and dict(page.items[0].checksum) == {}


def _reference(o: ListedObject, enc, owner: bool) -> str:
    """The per-field form the listing used before contents_xml (el() of each value)."""
    def el(name: str, value: object) -> str:
        return f"<{name}>{escape(str(value))}</{name}>"
    ck = ""
    if o.checksum.get("algorithm"):
        ck = el("ChecksumAlgorithm", o.checksum["algorithm"])
        if o.checksum.get("type"):
            ck += el("ChecksumType", o.checksum["type"])
    return (f"<Contents>{el('Key', enc(o.key))}{el('LastModified', iso8601(o.last_modified))}"
            f"{el('ETag', chr(34) + o.etag + chr(34))}{ck}{el('Size', o.size)}"
            f"{owner_xml(o.owner) if owner else ''}<StorageClass>STANDARD</StorageClass>"
            f"</Contents>")


def test_contents_xml_is_the_per_field_form() -> None:
    rows = [("b", k.encode("utf-8", "surrogatepass"), size, etag, lm, owner, "v", ck, "null")
            for k, size, etag, lm, owner, ck in [
                ("plain/key", 0, "d41d8cd98f00b204e9800998ecf8427e", 1764660000.5, "alice", "{}"),
                ("a&b<c>d\"e'", 12, "abc-2", 1764660001.0, "bob", '{"algorithm": "CRC32C"}'),
                ("é \U0001f600\x01", 10**12, "e", 0.001, "a&b",
                 '{"algorithm": "SHA256", "value": "x", "type": "COMPOSITE"}'),
                ("plain/other", 5, "e<&>", 1764660000.999, "alice", "{}")]]
    objs = [listed_object(r) for r in rows]
    for enc in (lambda k: k, lambda k: quote(k, safe="/-_.~")):
        for owner in (False, True):
            assert contents_xml(objs, enc, owner) == \
                "".join(_reference(o, enc, owner) for o in objs)
    assert contents_xml([], lambda k: k, True) == ""
