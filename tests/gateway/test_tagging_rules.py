"""Tag sets (gateway/s3/tagsets.py): the Tagging document and the x-amz-tagging header round
trip for every valid tag set, and each of S3's limits is refused with S3's code."""

from __future__ import annotations

from urllib.parse import quote, urlencode

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3.errors import S3Error
from gateway.s3.tagsets import (
    parse_tagging,
    parse_tagging_header,
    render_tagging,
    utf16_len,
    validate_tags,
)

# Letters, digits, spaces and the allowed symbols (XML 1.0 can carry all of them).
_chars = st.one_of(
    st.characters(categories=("Lu", "Ll", "Lo", "Nd", "Zs"), exclude_characters="\x85"),
    st.sampled_from(list("_.:/=+-@")))
keys = st.text(_chars, min_size=1, max_size=40).filter(lambda k: not k.startswith("aws:"))
values = st.text(_chars, max_size=60)
tagsets = st.dictionaries(keys, values, max_size=10)


def _xml(pairs: list[tuple[str, str]]) -> bytes:
    from xml.sax.saxutils import escape
    inner = "".join(f"<Tag><Key>{escape(k)}</Key><Value>{escape(v)}</Value></Tag>"
                    for k, v in pairs)
    return f"<Tagging><TagSet>{inner}</TagSet></Tagging>".encode()


@given(tagsets)
@settings(max_examples=200, deadline=None)
def test_tagging_document_round_trips(tags):
    assert parse_tagging(render_tagging(tags)) == tags
    assert parse_tagging(_xml(list(tags.items()))) == tags


@given(tagsets)
@settings(max_examples=200, deadline=None)
def test_tagging_header_round_trips(tags):
    assert parse_tagging_header(urlencode(tags)) == tags
    assert parse_tagging_header(urlencode(tags, quote_via=quote)) == tags


def test_header_forms_as_s3_reads_them():
    assert parse_tagging_header("foo=bar&bar") == {"foo": "bar", "bar": ""}
    assert parse_tagging_header("a+b=c%20d") == {"a b": "c d"}
    # raw UTF-8 bytes arrive as latin-1 text
    assert parse_tagging_header("k=" + "é".encode().decode("latin-1")) == {"k": "é"}
    for bad in ("TagSet=[{Key=string,Value=string}]", "a=1&a=2", "k=%ff"):
        with pytest.raises(S3Error) as e:
            parse_tagging_header(bad)
        assert e.value.code == "InvalidArgument", bad
    with pytest.raises(S3Error) as e:
        parse_tagging_header("TagSet%3D%5B%7BKey%3Dstring%2CValue%3Dstring%7D%5D")
    assert (e.value.code, e.value.message) == ("InvalidTag",
                                               "The TagKey you have provided is invalid")


def _code(pairs, kind="object") -> str:
    with pytest.raises(S3Error) as e:
        validate_tags(pairs, kind)
    return e.value.code


def test_limits_are_refused_with_s3s_codes():
    ten = [(f"k{i}", "v") for i in range(10)]
    assert len(validate_tags(ten)) == 10
    assert _code(ten + [("k10", "v")]) == "BadRequest"
    assert len(validate_tags([(f"k{i}", "v") for i in range(50)], "bucket")) == 50
    assert _code([(f"k{i}", "v") for i in range(51)], "bucket") == "InvalidTag"
    assert validate_tags([("k" * 128, "v" * 256)]) == {"k" * 128: "v" * 256}
    assert _code([("k" * 129, "v")]) == "InvalidTag"
    assert _code([("k", "v" * 257)]) == "InvalidTag"
    # UTF-16 code units: a character outside the BMP takes two
    assert utf16_len("\U0001F600") == 2
    assert _code([("\U00010400" * 65, "v")]) == "InvalidTag"
    assert _code([("a", "1"), ("a", "2")]) == "InvalidTag"
    assert _code([("aws:x", "1")]) == "InvalidTag"
    assert _code([("aws:x", "1")], "bucket") == "InvalidTag"
    assert _code([("", "1")]) == "InvalidTag"
    assert _code([("a*b", "1")]) == "InvalidTag"
    assert _code([("a", "x\ty")]) == "InvalidTag"


@pytest.mark.parametrize("body", [
    b"<Tagging/>",
    b"<Tagging><TagSet><Tag><Key>a</Key></Tag></TagSet></Tagging>",
    b"<Tagging><TagSet><Tag><Value>a</Value></Tag></TagSet></Tagging>",
    b"<Tagging><TagSet><Tag><Key>a</Key><Key>b</Key><Value>a</Value></Tag></TagSet></Tagging>",
    b"<Tagging><TagSet><Tag><Key>a</Key><Value>1</Value><X/></Tag></TagSet></Tagging>",
    b"<Tagging><TagSet/><TagSet/></Tagging>",
    b"<Tags><TagSet/></Tags>",
    b"<Tagging><TagSet><Oops/></TagSet></Tagging>",
    b"not xml",
    b"",
])
def test_documents_off_the_schema_are_malformed(body):
    with pytest.raises(S3Error) as e:
        parse_tagging(body)
    assert e.value.code == "MalformedXML"


def test_namespaced_and_empty_documents():
    ns = b'<Tagging xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><TagSet><Tag><Key>a</Key>' \
         b'<Value></Value></Tag></TagSet></Tagging>'
    assert parse_tagging(ns) == {"a": ""}
    assert parse_tagging(b"<Tagging><TagSet/></Tagging>") == {}
