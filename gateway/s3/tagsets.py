"""S3 tag sets: the `Tagging` XML document, the `x-amz-tagging` header, and S3's limits.

Pure code (no I/O). A tag set is a `dict[str, str]`; S3 hands it back in key order.

Limits, as S3 states and answers them: up to 10 tags on an object (more is `BadRequest`
"Object tags cannot be greater than 10") and 50 on a bucket; keys of 1-128 and values of
0-256 characters counted in UTF-16 code units (S3 keeps tags as UTF-16); only Unicode
letters, digits, white space and `_ . : / = + - @`; unique keys; no `aws:` prefix (system
tags). Faults are `InvalidTag`, a document that does not follow the schema `MalformedXML`,
and a header that is not a URL query `InvalidArgument`.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from typing import Literal
from urllib.parse import unquote_plus
from xml.etree.ElementTree import Element, SubElement, tostring

from gateway.s3.errors import S3Error
from gateway.s3.xmlio import S3_NS, parse_untrusted

Kind = Literal["object", "bucket"]
MAX_OBJECT_TAGS = 10
MAX_BUCKET_TAGS = 50
MAX_KEY = 128
MAX_VALUE = 256
_SYMBOLS = frozenset("_.:/=+-@")
HEADER_ERROR = ("The header 'x-amz-tagging' shall be encoded as UTF-8 then URLEncoded URL "
                "query parameters without tag name duplicates.")


def utf16_len(text: str) -> int:
    """Length in UTF-16 code units: a character outside the BMP counts twice."""
    return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)


def allowed_text(text: str) -> bool:
    """Only Unicode letters (L*), separators (Z*), numbers (N*) and `_ . : / = + - @`."""
    for c in text:
        if c in _SYMBOLS:
            continue
        if unicodedata.category(c)[0] not in "LZN":
            return False
    return True


def validate_tags(pairs: list[tuple[str, str]], kind: Kind = "object") -> dict[str, str]:
    """Check a tag set given as (key, value) pairs in the order sent; returns it as a dict.
    Every fault is S3's error; nothing is normalised away (keys are case-sensitive)."""
    limit = MAX_OBJECT_TAGS if kind == "object" else MAX_BUCKET_TAGS
    if len(pairs) > limit:
        if kind == "object":
            raise S3Error("BadRequest", "Object tags cannot be greater than 10")
        raise S3Error("InvalidTag", "Bucket tag count cannot be greater than 50")
    out: dict[str, str] = {}
    for key, value in pairs:
        if key in out:
            raise S3Error("InvalidTag", "Cannot provide multiple Tags with the same key",
                          TagKey=key)
        if key.startswith("aws:"):
            raise S3Error("InvalidTag", "Your TagKey cannot be prefixed with aws:"
                          if kind == "object" else
                          "System tags cannot be added/updated by requester", TagKey=key)
        if not key or not allowed_text(key):
            raise S3Error("InvalidTag", "The TagKey you have provided is invalid", TagKey=key)
        if utf16_len(key) > MAX_KEY:
            raise S3Error("InvalidTag", f"The TagKey you have provided is too long, max "
                          f"{MAX_KEY}", TagKey=key)
        if not allowed_text(value):
            raise S3Error("InvalidTag", "The TagValue you have provided is invalid",
                          TagKey=key, TagValue=value)
        if utf16_len(value) > MAX_VALUE:
            raise S3Error("InvalidTag", f"The TagValue you have provided is too long, max "
                          f"{MAX_VALUE}", TagKey=key)
        out[key] = value
    return out


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _only(el: Element, name: str) -> Element | None:
    found = [c for c in el if _local(c.tag) == name]
    if len(found) > 1:
        raise S3Error("MalformedXML")
    return found[0] if found else None


def tag_elements(parent: Element) -> list[tuple[str, str]]:
    """The (Key, Value) of each `<Tag>` child of `parent` (a TagSet, or a lifecycle `And`).
    A Tag without exactly one Key and one Value, or with anything else in it, is
    MalformedXML. Text is kept exactly as sent (S3 does not trim tag text)."""
    pairs: list[tuple[str, str]] = []
    for tag in parent:
        if _local(tag.tag) != "Tag":
            continue
        pairs.append(one_tag(tag))
    return pairs


def one_tag(tag: Element) -> tuple[str, str]:
    names = [_local(c.tag) for c in tag]
    if sorted(names) != ["Key", "Value"]:
        raise S3Error("MalformedXML")
    key = _only(tag, "Key")
    value = _only(tag, "Value")
    assert key is not None and value is not None
    return key.text or "", value.text or ""


def parse_tagging(body: bytes, kind: Kind = "object") -> dict[str, str]:
    """A PutObjectTagging / PutBucketTagging body -> the validated tag set."""
    root = parse_untrusted(body)
    if _local(root.tag) != "Tagging":
        raise S3Error("MalformedXML")
    tagset = _only(root, "TagSet")
    if tagset is None or any(_local(c.tag) != "TagSet" for c in root):
        raise S3Error("MalformedXML")
    if any(_local(c.tag) != "Tag" for c in tagset):
        raise S3Error("MalformedXML")
    return validate_tags(tag_elements(tagset), kind)


def render_tagging(tags: Mapping[str, str]) -> bytes:
    """The `Tagging` document of GetObjectTagging / GetBucketTagging, keys in order."""
    root = Element("Tagging", xmlns=S3_NS)
    tagset = SubElement(root, "TagSet")
    for key in sorted(tags):
        t = SubElement(tagset, "Tag")
        SubElement(t, "Key").text = key
        SubElement(t, "Value").text = tags[key]
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + tostring(root, encoding="utf-8")


def parse_tagging_header(value: str) -> dict[str, str]:
    """`x-amz-tagging: k1=v1&k2=v2` (URL-query encoded UTF-8; `+` is a space; a key without
    `=` holds the empty value) -> the validated object tag set. A pair with a second raw
    `=`, a repeated key or bytes that are not UTF-8: InvalidArgument, as S3 answers."""
    if not value.strip():
        return {}
    try:
        # header text arrives as latin-1; raw UTF-8 bytes in it are read as UTF-8
        text = value.encode("latin-1").decode("utf-8") if not value.isascii() else value
    except UnicodeError:
        raise S3Error("InvalidArgument", HEADER_ERROR, ArgumentName="x-amz-tagging",
                      ArgumentValue=value) from None
    pairs: list[tuple[str, str]] = []
    seen: set[str] = set()
    for part in text.split("&"):
        if part == "":
            continue
        if part.count("=") > 1:
            raise S3Error("InvalidArgument", HEADER_ERROR, ArgumentName="x-amz-tagging",
                          ArgumentValue=value)
        k, _, v = part.partition("=")
        try:
            key = unquote_plus(k, encoding="utf-8", errors="strict")
            val = unquote_plus(v, encoding="utf-8", errors="strict")
        except UnicodeError:
            raise S3Error("InvalidArgument", HEADER_ERROR, ArgumentName="x-amz-tagging",
                          ArgumentValue=value) from None
        if key in seen:
            raise S3Error("InvalidArgument", HEADER_ERROR, ArgumentName="x-amz-tagging",
                          ArgumentValue=value)
        seen.add(key)
        pairs.append((key, val))
    return validate_tags(pairs, "object")
