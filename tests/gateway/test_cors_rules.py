"""gateway/s3/corsrules.py: the CORSConfiguration document (parse, check, store, render) and the rule
matching of preflight and actual requests, against S3's documented behaviour and, with
hypothesis, against a small reference model (regular expressions, first rule wins)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.s3 import corsrules as cors
from gateway.s3.corsrules import CorsRule
from gateway.s3.errors import S3Error

NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MINIMAL = "<AllowedOrigin>https://example.com</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"


def doc(*rules: str, ns: bool = True) -> bytes:
    xmlns = f' xmlns="{NS}"' if ns else ""
    body = "".join(f"<CORSRule>{r}</CORSRule>" for r in rules)
    return f"<CORSConfiguration{xmlns}>{body}</CORSConfiguration>".encode()


def error_of(body: bytes) -> tuple[str, str]:
    with pytest.raises(S3Error) as e:
        cors.parse_configuration(body)
    return e.value.code, e.value.message


# ---- parsing ---------------------------------------------------------------------------------


def test_parse_reads_every_element_and_keeps_values_as_sent() -> None:
    body = doc("<ID>rule-1</ID><AllowedOrigin>https://*.example.org</AllowedOrigin>"
               "<AllowedOrigin>http://localhost:3000</AllowedOrigin>"
               "<AllowedMethod>GET</AllowedMethod><AllowedMethod>HEAD</AllowedMethod>"
               "<AllowedHeader>X-Amz-*</AllowedHeader><ExposeHeader>ETag</ExposeHeader>"
               "<MaxAgeSeconds>0042</MaxAgeSeconds>",
               "<AllowedOrigin>*</AllowedOrigin><AllowedMethod>PUT</AllowedMethod>")
    assert cors.parse_configuration(body) == [
        CorsRule(("https://*.example.org", "http://localhost:3000"), ("GET", "HEAD"),
                 ("X-Amz-*",), ("ETag",), "rule-1", 42),
        CorsRule(("*",), ("PUT",)),
    ]


@pytest.mark.parametrize("body", [
    doc(MINIMAL, ns=False),
    b'<?xml version="1.0" encoding="UTF-8"?>\n' + doc(MINIMAL),
    f'<s3:CORSConfiguration xmlns:s3="{NS}"><s3:CORSRule><s3:AllowedOrigin>https://example.com'
    '</s3:AllowedOrigin><s3:AllowedMethod>GET</s3:AllowedMethod></s3:CORSRule>'
    '</s3:CORSConfiguration>'.encode(),
    doc("<!-- a comment --><AllowedOrigin><![CDATA[https://example.com]]></AllowedOrigin>\n"
        "  <AllowedMethod>GET</AllowedMethod>\n"),
], ids=["no-namespace", "declaration", "prefix", "comments-cdata-whitespace"])
def test_parse_accepts_the_forms_of_one_document(body: bytes) -> None:
    assert cors.parse_configuration(body) == [CorsRule(("https://example.com",), ("GET",))]


def test_parse_accepts_100_rules_and_an_id_of_255() -> None:
    rules = cors.parse_configuration(doc(*[MINIMAL + f"<ID>{'a' * 255}</ID>"] * 100))
    assert len(rules) == 100 and rules[0].id == "a" * 255


@pytest.mark.parametrize("body", [
    b"", b"   ", b"AllowedOrigin: *", b"<CORSConfiguration><CORSRule>",
    b"<!DOCTYPE x>" + doc(MINIMAL),
    b'<!DOCTYPE x [<!ENTITY a "b">]><CORSConfiguration>&a;</CORSConfiguration>',
    f"<CORSRules><CORSRule>{MINIMAL}</CORSRule></CORSRules>".encode(),
    f"<corsconfiguration><CORSRule>{MINIMAL}</CORSRule></corsconfiguration>".encode(),
    f"<CORSRule>{MINIMAL}</CORSRule>".encode(),
    doc(), f"<CORSConfiguration>{MINIMAL}</CORSConfiguration>".encode(),
    doc(*[MINIMAL] * 101),
    f"<CORSConfiguration>text<CORSRule>{MINIMAL}</CORSRule></CORSConfiguration>".encode(),
    f"<CORSConfiguration><CORSRule>{MINIMAL}</CORSRule><Owner/></CORSConfiguration>".encode(),
    doc(""), doc("<AllowedMethod>GET</AllowedMethod>"),
    doc("<AllowedOrigin>*</AllowedOrigin>"), doc(MINIMAL, "<AllowedMethod>GET</AllowedMethod>"),
    doc(MINIMAL + "text"), doc(MINIMAL + "<AllowedHeaders>*</AllowedHeaders>"),
    doc(MINIMAL + "<allowedheader>*</allowedheader>"),
    doc("<AllowedOrigin><O>*</O></AllowedOrigin><AllowedMethod>GET</AllowedMethod>"),
    doc(MINIMAL + "<MaxAgeSeconds></MaxAgeSeconds>"), doc(MINIMAL + "<MaxAgeSeconds>-1</MaxAgeSeconds>"),
    doc(MINIMAL + "<MaxAgeSeconds>1.5</MaxAgeSeconds>"),
    doc(MINIMAL + "<MaxAgeSeconds>\u0661</MaxAgeSeconds>"),  # a digit, but not ASCII
    doc(MINIMAL + "<MaxAgeSeconds>2147483648</MaxAgeSeconds>"),
    doc(MINIMAL + "<MaxAgeSeconds>1</MaxAgeSeconds><MaxAgeSeconds>1</MaxAgeSeconds>"),
    doc(MINIMAL + f"<ID>{'a' * 256}</ID>"), doc(MINIMAL + "<ID>a</ID><ID>b</ID>"),
    # structure is checked before values: a bad method does not hide a missing origin
    doc("<AllowedMethod>PATCH</AllowedMethod>"),
    doc("<AllowedOrigin>*.*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>", MINIMAL + "<X/>"),
])
def test_parse_refuses_a_malformed_document(body: bytes) -> None:
    assert error_of(body)[0] == "MalformedXML"


@pytest.mark.parametrize(("rule", "message"), [
    ("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
     "<AllowedMethod>PATCH</AllowedMethod>",
     "Found unsupported HTTP method in CORS config. Unsupported method is PATCH"),
    ("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>get</AllowedMethod>",
     "Found unsupported HTTP method in CORS config. Unsupported method is get"),
    ("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>OPTIONS</AllowedMethod>",
     "Found unsupported HTTP method in CORS config. Unsupported method is OPTIONS"),
    ("<AllowedOrigin>http://*.*.com</AllowedOrigin><AllowedMethod>GET</AllowedMethod>",
     'AllowedOrigin "http://*.*.com" can not have more than one wildcard.'),
    (MINIMAL + "<AllowedHeader>x-*-*</AllowedHeader>",
     'AllowedHeader "x-*-*" can not have more than one wildcard.'),
    (MINIMAL + "<ExposeHeader>x-amz-*</ExposeHeader>",
     'ExposeHeader "x-amz-*" contains wildcard. We currently do not support wildcard for '
     "ExposeHeader."),
    # per rule, methods are checked first, then origins, headers, expose headers
    ("<ExposeHeader>*</ExposeHeader><AllowedHeader>**</AllowedHeader>"
     "<AllowedOrigin>**</AllowedOrigin><AllowedMethod>TRACE</AllowedMethod>",
     "Found unsupported HTTP method in CORS config. Unsupported method is TRACE"),
    ("<ExposeHeader>*</ExposeHeader><AllowedHeader>**</AllowedHeader>" + MINIMAL,
     'AllowedHeader "**" can not have more than one wildcard.'),
])
def test_parse_refuses_a_bad_value_with_s3s_invalid_request(rule: str, message: str) -> None:
    assert error_of(doc(MINIMAL, rule)) == ("InvalidRequest", message)


# ---- round trips -----------------------------------------------------------------------------

# Text an XML 1.0 document can carry: no other control characters, surrogates, U+FFFE/FFFF.
xml_text = st.text(st.characters(blacklist_categories=("Cs", "Cc", "Cn"))
                   | st.sampled_from("\t\n\r&<>\"']]>"), max_size=12)


def one_wildcard(text: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    return st.one_of(text.map(lambda s: s.replace("*", "")),
                     st.tuples(text, text).map(lambda p: p[0].replace("*", "") + "*" +
                                               p[1].replace("*", "")))


rules_st = st.builds(
    CorsRule,
    origins=st.lists(one_wildcard(xml_text), min_size=1, max_size=3).map(tuple),
    methods=st.lists(st.sampled_from(cors.METHODS), min_size=1, max_size=5).map(tuple),
    headers=st.lists(one_wildcard(xml_text), max_size=3).map(tuple),
    expose=st.lists(xml_text.map(lambda s: s.replace("*", "")), max_size=3).map(tuple),
    id=st.none() | xml_text,
    max_age=st.none() | st.integers(0, cors.MAX_AGE),
)
configs = st.lists(rules_st, min_size=1, max_size=6)


@settings(max_examples=150)
@given(configs)
def test_render_then_parse_gives_the_same_rules(rules: list[CorsRule]) -> None:
    assert cors.parse_configuration(cors.render_configuration(rules)) == rules


@settings(max_examples=150)
@given(configs)
def test_the_stored_document_gives_the_same_rules(rules: list[CorsRule]) -> None:
    assert cors.from_doc(cors.to_doc(rules)) == rules


def test_render_writes_s3s_element_order() -> None:
    out = cors.render_configuration([CorsRule(("*",), ("GET", "PUT"), ("a",), ("ETag",),
                                              "r&1", 30)])
    assert out == (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<CORSConfiguration xmlns="{NS}"><CORSRule>'
        "<ID>r&amp;1</ID><AllowedMethod>GET</AllowedMethod><AllowedMethod>PUT</AllowedMethod>"
        "<AllowedOrigin>*</AllowedOrigin><AllowedHeader>a</AllowedHeader>"
        "<MaxAgeSeconds>30</MaxAgeSeconds><ExposeHeader>ETag</ExposeHeader>"
        "</CORSRule></CORSConfiguration>").encode()


# ---- matching --------------------------------------------------------------------------------

# s3-tests' test_cors_origin_response configuration and expectations (origin -> allowed?)
S3TESTS = [CorsRule(("*suffix",), ("GET",)), CorsRule(("start*end",), ("GET",)),
           CorsRule(("prefix*",), ("GET",)), CorsRule(("*.put",), ("PUT",))]


@pytest.mark.parametrize(("origin", "method", "allowed"), [
    ("foo.suffix", "GET", True), ("foo.bar", "GET", False), ("foo.suffix.get", "GET", False),
    ("startend", "GET", True), ("start1end", "GET", True), ("start12end", "GET", True),
    ("0start12end", "GET", False), ("prefix", "GET", True), ("prefix.suffix", "GET", True),
    ("bla.prefix", "GET", False), ("foo.put", "GET", False), ("foo.put", "PUT", True),
    ("foo.suffix", "PUT", False), ("FOO.SUFFIX", "GET", False),
])
def test_origin_patterns_as_s3_tests_expect(origin: str, method: str, allowed: bool) -> None:
    m = cors.match(S3TESTS, origin, method)
    assert (m is not None) == allowed
    if m:
        assert m.allow_origin == origin


def test_preflight_headers_of_a_specific_origin() -> None:
    rules = [CorsRule(("https://app.example.com",), ("GET", "PUT"), ("Content-Type", "x-amz-*"),
                      ("ETag", "x-amz-request-id"), None, 3000),
             CorsRule(("*",), ("GET", "HEAD"))]
    got = cors.preflight(rules, "https://app.example.com", "PUT",
                         "Content-Type, X-Amz-Date ,, x-amz-meta-Name", "OBJECT")
    assert got == [
        ("Access-Control-Allow-Origin", "https://app.example.com"),
        ("Access-Control-Allow-Methods", "GET, PUT"),
        ("Access-Control-Allow-Headers", "content-type, x-amz-date, x-amz-meta-name"),
        ("Access-Control-Expose-Headers", "ETag, x-amz-request-id"),
        ("Access-Control-Max-Age", "3000"),
        ("Access-Control-Allow-Credentials", "true"),
        ("Vary", cors.VARY),
    ]
    # an origin only the second rule's "*" allows: "*" and no credentials
    assert cors.preflight(rules, "https://other.example", "GET", None, "OBJECT") == [
        ("Access-Control-Allow-Origin", "*"), ("Access-Control-Allow-Methods", "GET, HEAD"),
        ("Vary", cors.VARY)]


@pytest.mark.parametrize(("rules", "origin", "method", "headers", "code", "status", "message"), [
    (S3TESTS, None, "GET", None, "BadRequest", 400, cors.NO_ORIGIN),
    (S3TESTS, "", "GET", None, "BadRequest", 400, cors.NO_ORIGIN),
    (None, None, None, None, "BadRequest", 400, cors.NO_ORIGIN),
    (S3TESTS, "foo.suffix", None, None, "BadRequest", 400,
     "Invalid Access-Control-Request-Method: null"),
    (S3TESTS, "foo.suffix", "PATCH", None, "BadRequest", 400,
     "Invalid Access-Control-Request-Method: PATCH"),
    (None, "foo.suffix", "GET", None, "AccessForbidden", 403, cors.NOT_ENABLED),
    (S3TESTS, "foo.bar", "GET", None, "AccessForbidden", 403, cors.NOT_ALLOWED),
    # a rule without AllowedHeader allows no requested header
    (S3TESTS, "foo.suffix", "GET", "x-amz-date", "AccessForbidden", 403, cors.NOT_ALLOWED),
])
def test_preflight_refusals(rules: list[CorsRule] | None, origin: str | None,
                            method: str | None, headers: str | None, code: str, status: int,
                            message: str) -> None:
    with pytest.raises(S3Error) as e:
        cors.preflight(rules, origin, method, headers, "OBJECT")
    assert (e.value.code, e.value.status, e.value.message) == (code, status, message)
    if status == 403:
        assert e.value.extra == {"Method": method, "ResourceType": "OBJECT"}


def test_actual_response_headers_leave_out_allow_headers() -> None:
    rules = [CorsRule(("https://*.example.com",), ("GET",), ("*",), ("ETag",))]
    assert cors.response_headers(rules, "https://a.example.com", "GET") == [
        ("Access-Control-Allow-Origin", "https://a.example.com"),
        ("Access-Control-Allow-Methods", "GET"),
        ("Access-Control-Expose-Headers", "ETag"),
        ("Access-Control-Allow-Credentials", "true"),
        ("Vary", cors.VARY)]
    assert cors.response_headers(rules, "https://a.example.com", "PUT") == []
    assert cors.response_headers(None, "https://a.example.com", "GET") == []
    assert cors.response_headers(rules, "", "GET") == []


# The reference model: a rule allows what its regular expressions match; the first one wins.
def ref_pattern(p: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in p.split("*")), flags | re.S)


def ref_match(rules: list[CorsRule], origin: str, method: str,
              headers: list[str] | None) -> tuple[int, str] | None:
    for i, r in enumerate(rules):
        origin_ok = any(ref_pattern(o).fullmatch(origin) for o in r.origins)
        headers_ok = all(any(ref_pattern(a, re.I).fullmatch(h) for a in r.headers)
                         for h in headers or [])
        if origin_ok and method in r.methods and headers_ok:
            return i, "*" if "*" in r.origins else origin
    return None


small = st.text(st.sampled_from("ab.:-"), max_size=5)
small_rules = st.lists(st.builds(
    CorsRule,
    origins=st.lists(one_wildcard(small) | st.just("*"), min_size=1, max_size=3).map(tuple),
    methods=st.lists(st.sampled_from(cors.METHODS), min_size=1, max_size=3).map(tuple),
    headers=st.lists(one_wildcard(st.text(st.sampled_from("aB-"), max_size=4)),
                     max_size=3).map(tuple)), min_size=1, max_size=5)


@settings(max_examples=300)
@given(small_rules, small, st.sampled_from(cors.METHODS),
       st.none() | st.lists(st.text(st.sampled_from("Ab-"), min_size=1, max_size=4),
                            max_size=3))
def test_match_agrees_with_the_reference_model(rules: list[CorsRule], origin: str,
                                               method: str, headers: list[str] | None) -> None:
    lowered = [h.lower() for h in headers] if headers is not None else None
    got = cors.match(rules, origin, method, lowered)
    want = ref_match(rules, origin, method, lowered)
    # equal rules match alike, so index() finds the first that matches
    assert (None if got is None else (rules.index(got.rule), got.allow_origin)) == want


def test_expose_headers_that_cannot_be_header_text_are_left_out() -> None:
    body = doc("<AllowedOrigin>*</AllowedOrigin><AllowedMethod>GET</AllowedMethod>"
               "<ExposeHeader>ETag</ExposeHeader><ExposeHeader>a&#13;&#10;Set-Cookie: x"
               "</ExposeHeader><ExposeHeader>\u65e5\u672c</ExposeHeader>")
    rules = cors.parse_configuration(body)
    assert rules[0].expose == ("ETag", "a\r\nSet-Cookie: x", "\u65e5\u672c")  # kept as sent
    got = dict(cors.response_headers(rules, "https://x.test", "GET"))
    assert got["Access-Control-Expose-Headers"] == "ETag"


@settings(max_examples=100)
@given(configs, st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF), max_size=10),
       st.sampled_from(cors.METHODS))
def test_every_header_value_is_latin1_without_line_breaks(rules: list[CorsRule], origin: str,
                                                          method: str) -> None:
    for _, value in cors.response_headers(rules, origin, method):
        value.encode("latin-1")
        assert "\r" not in value and "\n" not in value
