"""CORS as S3 does it: the bucket's CORSConfiguration parsed and checked, stored as JSON,
rendered back, and the rule matching of preflight (OPTIONS) and actual requests.

Pure code, no I/O. The rules, as Amazon S3 applies them:
- a configuration holds 1..100 `CORSRule`s, each with 1+ `AllowedOrigin` and 1+
  `AllowedMethod` (GET, PUT, POST, DELETE, HEAD, case as written), any `AllowedHeader` and
  `ExposeHeader`, an optional `ID` (<= 255 characters) and `MaxAgeSeconds`; values are kept as
  sent. Structure errors are MalformedXML and come before the InvalidRequest of a value (an
  unsupported method, two wildcards in an origin or header, a wildcard in an ExposeHeader);
- the first rule whose origin, method and (on a preflight) every requested header match is
  used. An origin pattern holds at most one `*`, matching any text (also none), compared
  case-sensitively; header patterns compare case-insensitively;
- a rule naming the origin `*` answers `Access-Control-Allow-Origin: *` without credentials,
  any other answers with the request's origin and `Access-Control-Allow-Credentials: true`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any
from xml.etree.ElementTree import Element

from gateway.s3.errors import S3Error
from gateway.s3.xmlio import S3_NS, parse_untrusted

METHODS = ("GET", "PUT", "POST", "DELETE", "HEAD")
MAX_RULES = 100
MAX_ID = 255
MAX_BODY = 64 * 1024  # S3's limit on the PutBucketCors document
MAX_AGE = 2**31 - 1
VARY = "Origin, Access-Control-Request-Headers, Access-Control-Request-Method"
NOT_ALLOWED = ("CORSResponse: This CORS request is not allowed. This is usually because the "
               "evalution of Origin, request method / Access-Control-Request-Method or "
               "Access-Control-Request-Headers are not whitelisted by the resource's CORS "
               "spec.")  # S3's wording, its typo included: clients and suites compare it
NOT_ENABLED = "CORSResponse: CORS is not enabled for this bucket."
NO_BUCKET = "CORSResponse: Bucket not found"
NO_ORIGIN = "Insufficient information. Origin request header needed."


@dataclass(frozen=True)
class CorsRule:
    """One CORSRule, values as the client sent them."""

    origins: tuple[str, ...]
    methods: tuple[str, ...]
    headers: tuple[str, ...] = ()
    expose: tuple[str, ...] = ()
    id: str | None = None
    max_age: int | None = None


# ---- the document: XML in, JSON stored, XML out ----------------------------------------------

_RULE_FIELDS = {"ID", "AllowedOrigin", "AllowedMethod", "AllowedHeader", "ExposeHeader",
                "MaxAgeSeconds"}


def _local(tag: Any) -> str | None:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else None


def _blank(text: str | None) -> bool:
    return text is None or not text.strip()


def _value(el: Element) -> str:
    if len(el):  # an element inside a value
        raise S3Error("MalformedXML")
    return el.text or ""


def _parse_rule(el: Element) -> tuple[dict[str, list[str]], int | None]:
    if not _blank(el.text):
        raise S3Error("MalformedXML")
    fields: dict[str, list[str]] = {name: [] for name in _RULE_FIELDS}
    for child in el:
        name = _local(child.tag)
        if name not in _RULE_FIELDS or not _blank(child.tail):
            raise S3Error("MalformedXML")
        fields[name].append(_value(child))
    if not fields["AllowedOrigin"] or not fields["AllowedMethod"]:
        raise S3Error("MalformedXML")
    if len(fields["ID"]) > 1 or len(fields["MaxAgeSeconds"]) > 1:
        raise S3Error("MalformedXML")
    if fields["ID"] and len(fields["ID"][0]) > MAX_ID:
        raise S3Error("MalformedXML")
    max_age = None
    if fields["MaxAgeSeconds"]:
        text = fields["MaxAgeSeconds"][0].strip()
        if not text.isascii() or not text.isdigit() or int(text) > MAX_AGE:
            raise S3Error("MalformedXML")
        max_age = int(text)
    return fields, max_age


def _check_values(rule: CorsRule) -> None:
    for m in rule.methods:
        if m not in METHODS:
            raise S3Error("InvalidRequest", "Found unsupported HTTP method in CORS config. "
                          f"Unsupported method is {m}")
    for o in rule.origins:
        if o.count("*") > 1:
            raise S3Error("InvalidRequest",
                          f'AllowedOrigin "{o}" can not have more than one wildcard.')
    for h in rule.headers:
        if h.count("*") > 1:
            raise S3Error("InvalidRequest",
                          f'AllowedHeader "{h}" can not have more than one wildcard.')
    for h in rule.expose:
        if "*" in h:
            raise S3Error("InvalidRequest", f'ExposeHeader "{h}" contains wildcard. We '
                          "currently do not support wildcard for ExposeHeader.")


def parse_configuration(body: bytes) -> list[CorsRule]:
    """The rules of a PutBucketCors body; S3Error MalformedXML / InvalidRequest as S3
    answers (the whole structure is checked before any value)."""
    root = parse_untrusted(body)
    if _local(root.tag) != "CORSConfiguration" or not _blank(root.text):
        raise S3Error("MalformedXML")
    parsed: list[tuple[dict[str, list[str]], int | None]] = []
    for child in root:
        if _local(child.tag) != "CORSRule" or not _blank(child.tail):
            raise S3Error("MalformedXML")
        parsed.append(_parse_rule(child))
    if not 1 <= len(parsed) <= MAX_RULES:
        raise S3Error("MalformedXML")
    rules = [CorsRule(origins=tuple(f["AllowedOrigin"]), methods=tuple(f["AllowedMethod"]),
                      headers=tuple(f["AllowedHeader"]), expose=tuple(f["ExposeHeader"]),
                      id=f["ID"][0] if f["ID"] else None, max_age=max_age)
             for f, max_age in parsed]
    for rule in rules:
        _check_values(rule)
    return rules


def to_doc(rules: Sequence[CorsRule]) -> str:
    """The normalised document kept in the metadata store (kind `cors`)."""
    out = []
    for r in rules:
        d: dict[str, Any] = {"origins": list(r.origins), "methods": list(r.methods)}
        if r.headers:
            d["headers"] = list(r.headers)
        if r.expose:
            d["expose"] = list(r.expose)
        if r.id is not None:
            d["id"] = r.id
        if r.max_age is not None:
            d["max_age"] = r.max_age
        out.append(d)
    return json.dumps({"rules": out}, separators=(",", ":"), ensure_ascii=False)


def from_doc(doc: str) -> list[CorsRule]:
    """The rules of a stored document (written by `to_doc`)."""
    data = json.loads(doc)
    return [CorsRule(origins=tuple(d["origins"]), methods=tuple(d["methods"]),
                     headers=tuple(d.get("headers", ())), expose=tuple(d.get("expose", ())),
                     id=d.get("id"), max_age=d.get("max_age"))
            for d in data["rules"]]


def _esc(text: str) -> str:
    # \r survives a parse only as a character reference (XML normalises line ends).
    return (text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace("\r", "&#13;"))


def render_configuration(rules: Sequence[CorsRule]) -> bytes:
    """GetBucketCors' body, elements in S3's order."""
    parts = ['<?xml version="1.0" encoding="UTF-8"?>\n', f'<CORSConfiguration xmlns="{S3_NS}">']
    for r in rules:
        parts.append("<CORSRule>")
        if r.id is not None:
            parts.append(f"<ID>{_esc(r.id)}</ID>")
        parts += [f"<AllowedMethod>{_esc(m)}</AllowedMethod>" for m in r.methods]
        parts += [f"<AllowedOrigin>{_esc(o)}</AllowedOrigin>" for o in r.origins]
        parts += [f"<AllowedHeader>{_esc(h)}</AllowedHeader>" for h in r.headers]
        if r.max_age is not None:
            parts.append(f"<MaxAgeSeconds>{r.max_age}</MaxAgeSeconds>")
        parts += [f"<ExposeHeader>{_esc(h)}</ExposeHeader>" for h in r.expose]
        parts.append("</CORSRule>")
    parts.append("</CORSConfiguration>")
    return "".join(parts).encode("utf-8")


# ---- matching --------------------------------------------------------------------------------


def wildcard_match(pattern: str, text: str) -> bool:
    """`pattern` with at most one `*` (any text, also none) against `text`, exactly."""
    head, star, tail = pattern.partition("*")
    if not star:
        return pattern == text
    return len(text) >= len(head) + len(tail) and text.startswith(head) and \
        text.endswith(tail)


def requested_headers(value: str | None) -> list[str]:
    """Access-Control-Request-Headers as names: trimmed, lowercased, empty items dropped."""
    if not value:
        return []
    return [h.strip().lower() for h in value.split(",") if h.strip()]


@dataclass(frozen=True)
class Match:
    rule: CorsRule
    allow_origin: str  # "*" or the request's origin


def match(rules: Iterable[CorsRule], origin: str, method: str,
          headers: Sequence[str] | None = None) -> Match | None:
    """The first rule allowing `origin` and `method` (and, for a preflight, every one of the
    lowercased `headers`); None when no rule does."""
    for r in rules:
        if method not in r.methods:
            continue
        if not any(wildcard_match(o, origin) for o in r.origins):
            continue
        if headers:
            allowed = [h.lower() for h in r.headers]
            if not all(any(wildcard_match(a, h) for a in allowed) for h in headers):
                continue
        return Match(r, "*" if "*" in r.origins else origin)
    return None


def _common_headers(m: Match) -> list[tuple[str, str]]:
    return [("Access-Control-Allow-Origin", m.allow_origin),
            ("Access-Control-Allow-Methods", ", ".join(m.rule.methods))]


def header_safe(text: str) -> bool:
    """Whether a configured value can go into a response header as is (printable ASCII): a
    document may hold anything XML can, line breaks included, and none may reach the wire."""
    return all(" " <= ch <= "~" for ch in text)


def _tail_headers(m: Match) -> list[tuple[str, str]]:
    out = []
    expose = [h for h in m.rule.expose if header_safe(h)]
    if expose:
        out.append(("Access-Control-Expose-Headers", ", ".join(expose)))
    if m.rule.max_age is not None:
        out.append(("Access-Control-Max-Age", str(m.rule.max_age)))
    if m.allow_origin != "*":
        out.append(("Access-Control-Allow-Credentials", "true"))
    out.append(("Vary", VARY))
    return out


def preflight(rules: Sequence[CorsRule] | None, origin: str | None, method: str | None,
              request_headers: str | None, resource_type: str) -> list[tuple[str, str]]:
    """The headers of a 200 answer to a preflight, or the S3Error S3 answers it with.
    `rules` None: the bucket has no CORS configuration. resource_type: BUCKET or OBJECT."""
    if not origin:
        raise S3Error("BadRequest", NO_ORIGIN, status=400)
    if method not in METHODS:
        raise S3Error("BadRequest", f"Invalid Access-Control-Request-Method: "
                      f"{'null' if method is None else method}", status=400)
    if rules is None:
        raise S3Error("AccessForbidden", NOT_ENABLED, status=403, Method=method,
                      ResourceType=resource_type)
    wanted = requested_headers(request_headers)
    m = match(rules, origin, method, wanted)
    if m is None:
        raise S3Error("AccessForbidden", NOT_ALLOWED, status=403, Method=method,
                      ResourceType=resource_type)
    out = _common_headers(m)
    if wanted:
        out.append(("Access-Control-Allow-Headers", ", ".join(wanted)))
    return out + _tail_headers(m)


def response_headers(rules: Sequence[CorsRule] | None, origin: str | None,
                     method: str) -> list[tuple[str, str]]:
    """The Access-Control-* headers S3 adds to an actual request's answer (success or error)
    from `origin`; none when no rule matches."""
    if not rules or not origin:
        return []
    m = match(rules, origin, method)
    if m is None:
        return []
    return _common_headers(m) + _tail_headers(m)
