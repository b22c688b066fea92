"""Lifecycle configuration (gateway/lifecycle/config.py) and rule matching
(gateway/lifecycle/rules.py), pure: every valid configuration round-trips through the normal
form and back to XML, bad rules get S3's codes, and the due times and matches follow S3's
rules (days rounded up to the day boundary, noncurrent versions kept N newest)."""

from __future__ import annotations

import math
from xml.sax.saxutils import escape

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.lifecycle import config, rules
from gateway.s3.errors import S3Error

_text = st.text(st.characters(categories=("Lu", "Ll", "Nd"), max_codepoint=0x2FF),
                max_size=12)
_tag = st.tuples(st.text(st.characters(categories=("Ll",), max_codepoint=0x7A), min_size=1,
                         max_size=6), _text)


@st.composite
def filters(draw):
    form = draw(st.sampled_from(["empty", "prefix", "tag", "gt", "lt", "and"]))
    if form == "empty":
        return "<Filter/>", {}
    if form == "prefix":
        p = draw(_text)
        return f"<Filter><Prefix>{escape(p)}</Prefix></Filter>", {"prefix": p}
    if form == "tag":
        k, v = draw(_tag)
        return (f"<Filter><Tag><Key>{k}</Key><Value>{escape(v)}</Value></Tag></Filter>",
                {"tags": {k: v}})
    if form == "gt":
        n = draw(st.integers(0, 10**9))
        return f"<Filter><ObjectSizeGreaterThan>{n}</ObjectSizeGreaterThan></Filter>", {"gt": n}
    if form == "lt":
        n = draw(st.integers(1, 10**9))
        return f"<Filter><ObjectSizeLessThan>{n}</ObjectSizeLessThan></Filter>", {"lt": n}
    p = draw(_text)
    tags = draw(st.dictionaries(_tag.map(lambda t: t[0]), _text, min_size=1, max_size=3))
    inner = f"<Prefix>{escape(p)}</Prefix>" + "".join(
        f"<Tag><Key>{k}</Key><Value>{escape(v)}</Value></Tag>" for k, v in tags.items())
    return f"<Filter><And>{inner}</And></Filter>", {"prefix": p, "tags": tags}


@st.composite
def rule_xml(draw, i):
    fxml, want = draw(filters())
    actions = []
    has_tags = "tags" in want
    has_size = "gt" in want or "lt" in want
    if draw(st.booleans()) or (has_tags or has_size):
        actions.append(f"<Expiration><Days>{draw(st.integers(1, 5000))}</Days></Expiration>")
    if draw(st.booleans()):
        newer = draw(st.one_of(st.none(), st.integers(1, 100)))
        nv = f"<NewerNoncurrentVersions>{newer}</NewerNoncurrentVersions>" if newer else ""
        actions.append(f"<NoncurrentVersionExpiration><NoncurrentDays>"
                       f"{draw(st.integers(1, 99))}</NoncurrentDays>{nv}"
                       f"</NoncurrentVersionExpiration>")
    if not (has_tags or has_size) and (draw(st.booleans()) or not actions):
        actions.append(f"<AbortIncompleteMultipartUpload><DaysAfterInitiation>"
                       f"{draw(st.integers(1, 30))}</DaysAfterInitiation>"
                       f"</AbortIncompleteMultipartUpload>")
    status = draw(st.sampled_from(["Enabled", "Disabled"]))
    return f"<Rule><ID>r{i}</ID>{fxml}<Status>{status}</Status>{''.join(actions)}</Rule>"


@st.composite
def configurations(draw):
    n = draw(st.integers(1, 5))
    rules_ = [draw(rule_xml(i)) for i in range(n)]
    ns = draw(st.booleans())
    attr = ' xmlns="http://s3.amazonaws.com/doc/2006-03-01/"' if ns else ""
    return f"<LifecycleConfiguration{attr}>{''.join(rules_)}</LifecycleConfiguration>".encode()


@given(configurations())
@settings(max_examples=300, deadline=None)
def test_valid_configurations_round_trip(body):
    doc = config.parse_lifecycle(body)
    assert config.load(config.dump(doc)) == doc
    again = config.parse_lifecycle(config.render_lifecycle(doc))
    assert again == doc


def test_rule_without_id_gets_one_and_legacy_prefix_stays():
    doc = config.parse_lifecycle(
        b"<LifecycleConfiguration><Rule><Prefix>logs/</Prefix><Status>Enabled</Status>"
        b"<Expiration><Date>2030-01-01T00:00:00Z</Date></Expiration></Rule>"
        b"</LifecycleConfiguration>")
    (r,) = doc["rules"]
    assert len(r["id"]) == 48 and r["prefix"] == "logs/" and "filter" not in r
    out = config.render_lifecycle(doc)
    assert b"<Prefix>logs/</Prefix>" in out and b"<Filter" not in out
    assert b"<Date>2030-01-01T00:00:00.000Z</Date>" in out


def _rule(inner: str, *, filt: str = "<Filter/>", rid: str = "r") -> str:
    return f"<Rule><ID>{rid}</ID>{filt}<Status>Enabled</Status>{inner}</Rule>"


def _doc(*rules_: str) -> bytes:
    return f"<LifecycleConfiguration>{''.join(rules_)}</LifecycleConfiguration>".encode()


EXP = "<Expiration><Days>1</Days></Expiration>"
BAD = [
    (b"<LifecycleConfiguration/>", "MalformedXML"),
    (b"<Lifecycle><Rule/></Lifecycle>", "MalformedXML"),
    (_doc(*[_rule(EXP, rid=f"r{i}") for i in range(1001)]), "InvalidRequest"),
    (_doc(_rule(EXP, rid="x" * 256)), "InvalidArgument"),
    (_doc(_rule(EXP, rid="a"), _rule(EXP, rid="a")), "InvalidArgument"),
    (_doc(f"<Rule><ID>a</ID><Filter/><Status>enabled</Status>{EXP}</Rule>"), "MalformedXML"),
    (_doc(f"<Rule><ID>a</ID><Filter/>{EXP}</Rule>"), "MalformedXML"),
    (_doc(f"<Rule><ID>a</ID><Status>Enabled</Status>{EXP}</Rule>"), "MalformedXML"),
    (_doc(_rule(EXP, filt="<Filter/><Prefix>a</Prefix>")), "MalformedXML"),
    (_doc(_rule(EXP, filt="<Filter><Prefix>a</Prefix><ObjectSizeGreaterThan>1"
                          "</ObjectSizeGreaterThan></Filter>")), "MalformedXML"),
    (_doc(_rule(EXP, filt="<Filter><And><Prefix>a</Prefix></And></Filter>")), "MalformedXML"),
    (_doc(_rule(EXP, filt="<Filter><And><Tag><Key>k</Key><Value>1</Value></Tag><Tag><Key>k"
                          "</Key><Value>2</Value></Tag></And></Filter>")), "InvalidRequest"),
    (_doc(_rule(EXP, filt="<Filter><Tag><Key>k</Key></Tag></Filter>")), "MalformedXML"),
    (_doc(_rule(EXP, filt="<Filter><ObjectSizeLessThan>0</ObjectSizeLessThan></Filter>")),
     "InvalidRequest"),
    (_doc(_rule(EXP, filt="<Filter><And><ObjectSizeGreaterThan>5</ObjectSizeGreaterThan>"
                          "<ObjectSizeLessThan>5</ObjectSizeLessThan></And></Filter>")),
     "InvalidRequest"),
    (_doc(_rule(EXP, filt="<Filter><ObjectSizeLessThan>x</ObjectSizeLessThan></Filter>")),
     "MalformedXML"),
    (_doc(_rule("")), "InvalidRequest"),
    (_doc(_rule("<Expiration><Days>0</Days></Expiration>")), "InvalidArgument"),
    (_doc(_rule("<Expiration><Days>-3</Days></Expiration>")), "InvalidArgument"),
    (_doc(_rule("<Expiration><Days>1.5</Days></Expiration>")), "MalformedXML"),
    (_doc(_rule("<Expiration/>")), "MalformedXML"),
    (_doc(_rule("<Expiration><Days>1</Days><ExpiredObjectDeleteMarker>true"
                "</ExpiredObjectDeleteMarker></Expiration>")), "MalformedXML"),
    (_doc(_rule("<Expiration><Date>2030-01-01T10:00:00Z</Date></Expiration>")),
     "InvalidArgument"),
    (_doc(_rule("<Expiration><Date>Fri, 01 Jan 2016 00:00:00 GMT</Date></Expiration>")),
     "MalformedXML"),
    (_doc(_rule("<Expiration><ExpiredObjectDeleteMarker>true</ExpiredObjectDeleteMarker>"
                "</Expiration>", filt="<Filter><Tag><Key>k</Key><Value>v</Value></Tag>"
                                      "</Filter>")), "InvalidRequest"),
    (_doc(_rule("<NoncurrentVersionExpiration/>")), "MalformedXML"),
    (_doc(_rule("<NoncurrentVersionExpiration><NoncurrentDays>0</NoncurrentDays>"
                "</NoncurrentVersionExpiration>")), "InvalidArgument"),
    (_doc("<Rule><ID>a</ID><Prefix>a</Prefix><Status>Enabled</Status>"
          "<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
          "<NewerNoncurrentVersions>2</NewerNoncurrentVersions>"
          "</NoncurrentVersionExpiration></Rule>"), "InvalidRequest"),
    (_doc(_rule("<AbortIncompleteMultipartUpload><DaysAfterInitiation>1</DaysAfterInitiation>"
                "</AbortIncompleteMultipartUpload>",
                filt="<Filter><Tag><Key>k</Key><Value>v</Value></Tag></Filter>")),
     "InvalidRequest"),
    (_doc(_rule("<AbortIncompleteMultipartUpload><DaysAfterInitiation>0</DaysAfterInitiation>"
                "</AbortIncompleteMultipartUpload>")), "InvalidArgument"),
    (_doc(_rule("<Transition><Days>30</Days><StorageClass>GLACIER</StorageClass>"
                "</Transition>")), "NotImplemented"),
    (_doc(_rule(EXP + "<NoncurrentVersionTransition><NoncurrentDays>3</NoncurrentDays>"
                "<StorageClass>GLACIER</StorageClass></NoncurrentVersionTransition>")),
     "NotImplemented"),
    (_doc(f"<Rule><ID>a</ID><Prefix>a</Prefix><Status>Enabled</Status>{EXP}</Rule>",
          _rule(EXP, rid="b")), "InvalidRequest"),
    (_doc(_rule(EXP, rid="b"),
          f"<Rule><ID>a</ID><Prefix>a</Prefix><Status>Enabled</Status>{EXP}</Rule>"),
     "InvalidRequest"),
    (_doc(f"<Rule><ID>a</ID><Prefix></Prefix><Status>Enabled</Status>{EXP}</Rule>",
          f"<Rule><ID>b</ID><Prefix>x</Prefix><Status>Enabled</Status>{EXP}</Rule>"),
     "InvalidRequest"),
    (_doc(_rule(EXP + "<Bogus/>")), "MalformedXML"),
    (b"<LifecycleConfiguration><Rule>", "MalformedXML"),
]


@pytest.mark.parametrize(("body", "want"), BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_configurations_get_s3s_codes(body, want):
    with pytest.raises(S3Error) as e:
        config.parse_lifecycle(body)
    assert e.value.code == want, e.value.message


@given(st.floats(0, 4e9), st.integers(1, 10000), st.sampled_from([1.0, 60.0, 86400.0]))
def test_due_times_round_up_to_the_day_boundary(start, days, day):
    due = rules.due_after(start, days, day)
    assert due >= start + days * day
    assert due < start + days * day + day
    assert math.isclose(due / day, round(due / day))


def test_s3s_worked_example():
    # created 2014-01-15 10:30 UTC, 3 days -> 2014-01-19 00:00 UTC
    import datetime as dt
    t = dt.datetime(2014, 1, 15, 10, 30, tzinfo=dt.UTC).timestamp()
    assert rules.due_after(t, 3) == dt.datetime(2014, 1, 19, tzinfo=dt.UTC).timestamp()


@given(st.text(max_size=8), st.dictionaries(st.sampled_from("abc"), st.sampled_from("xy")),
       st.integers(0, 100), filters())
def test_filters_match_as_their_predicates(key, tags, size, f):
    fxml, want = f
    doc = config.parse_lifecycle(_doc(_rule(EXP, filt=fxml)))
    expect = (key.startswith(want.get("prefix", ""))
              and all(tags.get(k) == v for k, v in want.get("tags", {}).items())
              and size > want.get("gt", -1) and size < want.get("lt", 10**12))
    assert rules.rule_matches(doc["rules"][0], key, size, tags) == expect


@given(st.integers(1, 8), st.integers(1, 20))
def test_newer_noncurrent_versions_keeps_the_newest_n(n, versions):
    doc = config.parse_lifecycle(_doc(_rule(
        f"<NoncurrentVersionExpiration><NoncurrentDays>1</NoncurrentDays>"
        f"<NewerNoncurrentVersions>{n}</NewerNoncurrentVersions>"
        f"</NoncurrentVersionExpiration>")))
    now = 10 * 86400.0
    kept = [i for i in range(versions)
            if rules.noncurrent_expires(doc, "k", 1, {}, 0.0, i, now) is None]
    assert kept == list(range(min(n, versions)))
    # not before NoncurrentDays have passed, however many newer ones exist
    assert rules.noncurrent_expires(doc, "k", 1, {}, now, 50, now) is None


def test_expiration_header_and_earliest_rule():
    doc = config.parse_lifecycle(_doc(
        _rule("<Expiration><Days>30</Days></Expiration>", rid="slow",
              filt="<Filter><Prefix>a</Prefix></Filter>"),
        _rule("<Expiration><Days>3</Days></Expiration>", rid="fast rule",
              filt="<Filter><Prefix>ab</Prefix></Filter>")))
    hit = rules.current_expiry(doc, "abc", 1, {}, 0.0)
    assert hit == (3 * 86400.0, "fast rule")
    assert rules.expiration_header(*hit) == \
        'expiry-date="Sun, 04 Jan 1970 00:00:00 GMT", rule-id="fast rule"'
    assert rules.current_expiry(doc, "b", 1, {}, 0.0) is None
    assert rules.upload_abort(doc, "abc", 0.0) is None
