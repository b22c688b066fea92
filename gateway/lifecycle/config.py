"""LifecycleConfiguration documents: parse and validate S3's XML, normalise it to the JSON
kept as the bucket's `lifecycle` config document, and render it back.

Pure code. The normal form keeps how each rule was written (a rule-level `Prefix`, or a
`Filter` with one predicate or an `And`), so GetBucketLifecycleConfiguration answers the
rules as sent, as S3 does. Faults answer S3's codes as S3 gives them (MalformedXML for a
document off the schema, InvalidArgument for bad values, InvalidRequest for rules that do
not go together); transitions answer NotImplemented: there is one storage class.

    doc = parse_lifecycle(body)        # -> dict (JSON-able); raises S3Error
    text = dump(doc); doc = load(text)
    xml = render_lifecycle(doc)
"""

from __future__ import annotations

import base64
import datetime as _dt
import json
import re
import uuid
from typing import Any
from xml.etree.ElementTree import Element, SubElement, tostring

from gateway.s3.errors import S3Error
from gateway.s3.numbers import INT32_MAX, parse_uint
from gateway.s3.tagsets import one_tag
from gateway.s3.xmlio import S3_NS, parse_untrusted

MAX_RULES = 1000
MAX_ID = 255
MAX_SIZE = 1099511627776000  # S3's bound on the size filters (1000 TiB)
_INT = re.compile(r"-?[0-9]+")
_RULE_CHILDREN = {"ID", "Status", "Filter", "Prefix", "Expiration", "Transition",
                  "NoncurrentVersionTransition", "NoncurrentVersionExpiration",
                  "AbortIncompleteMultipartUpload"}
_PREDICATES = ("Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan", "And")


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def _kids(el: Element, name: str) -> list[Element]:
    return [c for c in el if _local(c.tag) == name]


def _one(el: Element, name: str) -> Element | None:
    found = _kids(el, name)
    if len(found) > 1:
        raise S3Error("MalformedXML")
    return found[0] if found else None


def _only_children(el: Element, allowed: set[str]) -> None:
    for c in el:
        if _local(c.tag) not in allowed:
            raise S3Error("MalformedXML")


def _int(el: Element | None, *, hi: int = INT32_MAX) -> int | None:
    """An integer element: digits with an optional minus (a negative is a value fault the
    caller reports), anything else MalformedXML."""
    if el is None:
        return None
    text = (el.text or "").strip()
    if not _INT.fullmatch(text):
        raise S3Error("MalformedXML")
    if text.startswith("-"):
        return -1 if text.strip("-0") else 0
    try:
        return parse_uint(text, hi=hi)
    except ValueError:
        raise S3Error("MalformedXML") from None


def _positive(el: Element | None, what: str, action: str) -> int | None:
    v = _int(el)
    if v is not None and v <= 0:
        raise S3Error("InvalidArgument", f"'{what}' for {action} action must be a positive "
                      f"integer", ArgumentName=what, ArgumentValue=(el.text or "").strip()
                      if el is not None else "")
    return v


def _bool(el: Element | None) -> bool | None:
    if el is None:
        return None
    text = (el.text or "").strip()
    if text not in ("true", "false"):
        raise S3Error("MalformedXML")
    return text == "true"


def parse_date(text: str) -> float:
    """An Expiration Date: ISO 8601, which must be midnight UTC (InvalidArgument otherwise;
    a date in another form, e.g. RFC 1123, is MalformedXML). Returns epoch seconds."""
    t = text.strip()
    try:
        if re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}", t):
            d = _dt.datetime.fromisoformat(t)
        elif re.fullmatch(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:.]+(Z|[+-][0-9:]+)?", t):
            d = _dt.datetime.fromisoformat(t.replace("Z", "+00:00"))
        else:
            raise ValueError(t)
    except ValueError:
        raise S3Error("MalformedXML") from None
    if d.tzinfo is None:
        d = d.replace(tzinfo=_dt.UTC)
    d = d.astimezone(_dt.UTC)
    if (d.hour, d.minute, d.second, d.microsecond) != (0, 0, 0, 0):
        raise S3Error("InvalidArgument", "'Date' must be at midnight GMT",
                      ArgumentName="Date", ArgumentValue=t)
    return d.timestamp()


def iso_date(ts: float) -> str:
    return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def new_rule_id() -> str:
    """What S3 names a rule sent without an ID: base64 of a lowercase uuid4 (48 chars)."""
    return base64.b64encode(str(uuid.uuid4()).encode()).decode()


# ---- filters ----------------------------------------------------------------------------


def _sizes(gt: int | None, lt: int | None) -> None:
    if gt is not None and not 0 <= gt < MAX_SIZE:
        raise S3Error("InvalidRequest", f"'ObjectSizeGreaterThan' should be between 0 and "
                      f"{MAX_SIZE - 1}.")
    if lt is not None and not 1 <= lt <= MAX_SIZE:
        raise S3Error("InvalidRequest", f"'ObjectSizeLessThan' should be between 1 and "
                      f"{MAX_SIZE}.")
    if gt is not None and lt is not None and lt <= gt:
        raise S3Error("InvalidRequest", "'ObjectSizeLessThan' has to be a value greater than "
                      "'ObjectSizeGreaterThan'.")


def _size(el: Element | None) -> int | None:
    v = _int(el, hi=2**63 - 1)
    return v


def parse_filter(el: Element) -> dict[str, Any]:
    """A `<Filter>`: empty, or exactly one of Prefix, Tag, ObjectSizeGreaterThan,
    ObjectSizeLessThan, And (two or more predicates, one Prefix at most, unique tag keys).
    -> {"form": "empty"|"prefix"|"tag"|"gt"|"lt"|"and", "prefix", "tags", "gt", "lt"}"""
    _only_children(el, set(_PREDICATES))
    present = [_local(c.tag) for c in el]
    out: dict[str, Any] = {"form": "empty", "prefix": "", "tags": [], "gt": None, "lt": None}
    if not present:
        return out
    if len(present) > 1:
        raise S3Error("MalformedXML")
    (name,) = present
    node = el[0]
    if name == "Prefix":
        out.update(form="prefix", prefix=node.text or "")
    elif name == "Tag":
        out.update(form="tag", tags=[list(one_tag(node))])
    elif name == "ObjectSizeGreaterThan":
        out.update(form="gt", gt=_size(node))
    elif name == "ObjectSizeLessThan":
        out.update(form="lt", lt=_size(node))
    else:
        _only_children(node, {"Prefix", "Tag", "ObjectSizeGreaterThan", "ObjectSizeLessThan"})
        if len(node) < 2:
            raise S3Error("MalformedXML")
        prefix = _one(node, "Prefix")
        tags = [list(one_tag(t)) for t in _kids(node, "Tag")]
        keys = [k for k, _ in tags]
        if len(set(keys)) != len(keys):
            raise S3Error("InvalidRequest", "Duplicate Tag Keys are not allowed.")
        out.update(form="and", prefix=(prefix.text or "") if prefix is not None else None,
                   tags=tags, gt=_size(_one(node, "ObjectSizeGreaterThan")),
                   lt=_size(_one(node, "ObjectSizeLessThan")))
    _sizes(out["gt"], out["lt"])
    return out


# ---- rules ------------------------------------------------------------------------------


def parse_rule(el: Element) -> dict[str, Any]:
    _only_children(el, _RULE_CHILDREN)
    for name in _RULE_CHILDREN - {"Transition", "NoncurrentVersionTransition"}:
        _one(el, name)  # each at most once
    rid_el = _one(el, "ID")
    rid = rid_el.text or "" if rid_el is not None else ""
    if len(rid) > MAX_ID:
        raise S3Error("InvalidArgument", f"ID length should not exceed allowed limit of {MAX_ID}",
                      ArgumentName="ID", ArgumentValue=rid[:300])
    status_el = _one(el, "Status")
    status = (status_el.text or "").strip() if status_el is not None else None
    if status not in ("Enabled", "Disabled"):
        raise S3Error("MalformedXML")
    filt_el, prefix_el = _one(el, "Filter"), _one(el, "Prefix")
    if (filt_el is None) == (prefix_el is None):
        raise S3Error("MalformedXML")
    rule: dict[str, Any] = {"id": rid, "status": status}
    if filt_el is not None:
        rule["filter"] = parse_filter(filt_el)
    else:
        assert prefix_el is not None
        rule["prefix"] = prefix_el.text or ""
    if _kids(el, "Transition") or _kids(el, "NoncurrentVersionTransition"):
        raise S3Error("NotImplemented", "Transition and NoncurrentVersionTransition actions "
                      "are not supported: ZoneGate has one storage class (STANDARD). Use "
                      "Expiration, NoncurrentVersionExpiration or "
                      "AbortIncompleteMultipartUpload.")
    f = rule.get("filter") or {}
    has_tags, has_size = bool(f.get("tags")), f.get("gt") is not None or f.get("lt") is not None
    exp = _one(el, "Expiration")
    if exp is not None:
        _only_children(exp, {"Days", "Date", "ExpiredObjectDeleteMarker"})
        days = _positive(_one(exp, "Days"), "Days", "Expiration")
        date_el = _one(exp, "Date")
        edm = _bool(_one(exp, "ExpiredObjectDeleteMarker"))
        if sum(x is not None for x in (days, date_el, edm)) != 1:
            raise S3Error("MalformedXML")
        if days is not None:
            rule["expiration"] = {"days": days}
        elif date_el is not None:
            rule["expiration"] = {"date": parse_date(date_el.text or "")}
        else:
            if has_tags:
                raise S3Error("InvalidRequest", "ExpiredObjectDeleteMarker cannot be specified "
                              "with Tags.")
            if has_size:
                raise S3Error("InvalidRequest", "ExpiredObjectDeleteMarker cannot be specified "
                              "with Object Size.")
            rule["expiration"] = {"delete_marker": edm}
    nve = _one(el, "NoncurrentVersionExpiration")
    if nve is not None:
        _only_children(nve, {"NoncurrentDays", "NewerNoncurrentVersions"})
        nd_el = _one(nve, "NoncurrentDays")
        if nd_el is None:
            raise S3Error("MalformedXML")
        nd = _positive(nd_el, "NoncurrentDays", "NoncurrentVersionExpiration")
        newer = _positive(_one(nve, "NewerNoncurrentVersions"), "NewerNoncurrentVersions",
                          "NoncurrentVersionExpiration")
        rule["noncurrent"] = {"days": nd, "newer": newer}
    abort = _one(el, "AbortIncompleteMultipartUpload")
    if abort is not None:
        _only_children(abort, {"DaysAfterInitiation"})
        dai_el = _one(abort, "DaysAfterInitiation")
        if dai_el is None:
            raise S3Error("MalformedXML")
        if has_tags:
            raise S3Error("InvalidRequest", "AbortIncompleteMultipartUpload cannot be specified "
                          "with Tags.")
        if has_size:
            raise S3Error("InvalidRequest", "AbortIncompleteMultipartUpload cannot be specified "
                          "with Object Size.")
        rule["abort"] = {"days": _positive(dai_el, "DaysAfterInitiation",
                                           "AbortIncompleteMultipartUpload")}
    if not any(k in rule for k in ("expiration", "noncurrent", "abort")):
        raise S3Error("InvalidRequest", "At least one action needs to be specified in a rule")
    return rule


def _check_v1_overlaps(rules: list[dict[str, Any]]) -> None:
    """Rule-level prefixes (Lifecycle V1) may not overlap for one action type."""
    for action, name in (("expiration", "Expiration"), ("noncurrent",
                                                        "NoncurrentVersionExpiration"),
                         ("abort", "AbortIncompleteMultipartUpload")):
        prefixes = sorted(r["prefix"] for r in rules if action in r)
        for a, b in zip(prefixes, prefixes[1:], strict=False):
            if b.startswith(a):
                raise S3Error("InvalidRequest", f"Found overlapping prefixes '{a}' and '{b}' "
                              f"for same action type '{name}'")


def parse_lifecycle(body: bytes) -> dict[str, Any]:
    """A PutBucketLifecycleConfiguration body -> the normal form {"rules": [...]}."""
    root = parse_untrusted(body)
    if _local(root.tag) != "LifecycleConfiguration":
        raise S3Error("MalformedXML")
    _only_children(root, {"Rule"})
    els = _kids(root, "Rule")
    if not els:
        raise S3Error("MalformedXML")
    if len(els) > MAX_RULES:
        raise S3Error("InvalidRequest", f"The number of lifecycle rules must not exceed the "
                      f"allowed limit of {MAX_RULES} rules.")
    rules: list[dict[str, Any]] = []
    for el in els:
        rule = parse_rule(el)
        if rules and ("filter" in rule) != ("filter" in rules[0]):
            if "filter" in rule:
                raise S3Error("InvalidRequest", "Filter element can only be used in "
                              "Lifecycle V2.")
            raise S3Error("InvalidRequest", "Base level prefix cannot be used in Lifecycle "
                          "V2, prefixes are only supported in the Filter.")
        rules.append(rule)
    v1 = "prefix" in rules[0]
    if v1:
        if any((r.get("noncurrent") or {}).get("newer") is not None for r in rules):
            raise S3Error("InvalidRequest", "NewerNoncurrentVersions element can only be used "
                          "in Lifecycle V2.")
        _check_v1_overlaps(rules)
    ids = [r["id"] for r in rules if r["id"]]
    if len(set(ids)) != len(ids):
        raise S3Error("InvalidArgument", "Rule ID must be unique. Found same ID for more than "
                      "one rule", ArgumentName="ID")
    for r in rules:
        if not r["id"]:
            r["id"] = new_rule_id()
    return {"rules": rules}


def dump(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


def load(text: str | None) -> dict[str, Any] | None:
    return json.loads(text) if text else None


# ---- rendering --------------------------------------------------------------------------


def _sub(parent: Element, name: str, text: object) -> Element:
    e = SubElement(parent, name)
    e.text = str(text)
    return e


def _tag(parent: Element, kv: list[str]) -> None:
    t = SubElement(parent, "Tag")
    _sub(t, "Key", kv[0])
    _sub(t, "Value", kv[1])


def _render_filter(parent: Element, f: dict[str, Any]) -> None:
    el = SubElement(parent, "Filter")
    form = f["form"]
    if form == "prefix":
        _sub(el, "Prefix", f["prefix"])
    elif form == "tag":
        _tag(el, f["tags"][0])
    elif form == "gt":
        _sub(el, "ObjectSizeGreaterThan", f["gt"])
    elif form == "lt":
        _sub(el, "ObjectSizeLessThan", f["lt"])
    elif form == "and":
        a = SubElement(el, "And")
        if f["prefix"] is not None:
            _sub(a, "Prefix", f["prefix"])
        for kv in f["tags"]:
            _tag(a, kv)
        if f["gt"] is not None:
            _sub(a, "ObjectSizeGreaterThan", f["gt"])
        if f["lt"] is not None:
            _sub(a, "ObjectSizeLessThan", f["lt"])


def render_lifecycle(doc: dict[str, Any]) -> bytes:
    """GetBucketLifecycleConfiguration's body: each rule as ID, Filter (or Prefix), Status,
    then its actions, as S3 writes them."""
    root = Element("LifecycleConfiguration", xmlns=S3_NS)
    for r in doc["rules"]:
        el = SubElement(root, "Rule")
        _sub(el, "ID", r["id"])
        if "filter" in r:
            _render_filter(el, r["filter"])
        else:
            _sub(el, "Prefix", r["prefix"])
        _sub(el, "Status", r["status"])
        exp = r.get("expiration")
        if exp:
            e = SubElement(el, "Expiration")
            if "days" in exp:
                _sub(e, "Days", exp["days"])
            elif "date" in exp:
                _sub(e, "Date", iso_date(exp["date"]))
            else:
                _sub(e, "ExpiredObjectDeleteMarker", "true" if exp["delete_marker"] else "false")
        nve = r.get("noncurrent")
        if nve:
            e = SubElement(el, "NoncurrentVersionExpiration")
            _sub(e, "NoncurrentDays", nve["days"])
            if nve.get("newer") is not None:
                _sub(e, "NewerNoncurrentVersions", nve["newer"])
        if r.get("abort"):
            e = SubElement(el, "AbortIncompleteMultipartUpload")
            _sub(e, "DaysAfterInitiation", r["abort"]["days"])
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + tostring(root, encoding="utf-8")
