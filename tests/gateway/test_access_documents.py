"""Access documents from clients (bucket policies, AccessControlPolicy XML, x-amz-grant-*
headers, ownership controls, public access block): random and mutated input gets S3's error
code and nothing else (never another exception), and valid documents round-trip."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from gateway.access import acl, controls
from gateway.access.identity import canonical_id
from gateway.access.policy import parse_policy
from gateway.s3.errors import S3Error

USERS = {canonical_id(n): n for n in ("alice", "bob")}
VALID = {"Version": "2012-10-17", "Statement": [
    {"Sid": "A", "Effect": "Allow", "Principal": {"AWS": "arn:aws:iam::000000000000:user/bob"},
     "Action": ["s3:GetObject", "s3:ListBucket"],
     "Resource": ["arn:aws:s3:::b", "arn:aws:s3:::b/*"],
     "Condition": {"IpAddress": {"aws:SourceIp": "10.0.0.0/8"},
                   "StringLike": {"s3:prefix": ["data/*"]}}}]}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8)
    | st.sampled_from(["*", "Allow", "Deny", "s3:*", "arn:aws:s3:::b/*", "2012-10-17"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["Version", "Statement", "Effect", "Principal", "Action", "Resource",
                         "Condition", "NotAction", "AWS", "Sid", "StringEquals", "x"]),
        inner, max_size=4),
    max_leaves=12)


def _policy_outcome(doc: bytes) -> None:
    try:
        parse_policy(doc, "b", {"alice", "bob"}.__contains__)
    except S3Error as e:
        assert e.code == "MalformedPolicy" and e.message


@settings(max_examples=150, deadline=None)
@given(json_values)
def test_random_policy_json_is_malformed_policy_or_valid(doc):
    _policy_outcome(json.dumps(doc).encode())


@settings(max_examples=150, deadline=None)
@given(st.data())
def test_mutated_valid_policies_are_malformed_policy_or_valid(data):
    doc = json.loads(json.dumps(VALID))
    st0 = doc["Statement"][0]
    field = data.draw(st.sampled_from(sorted(st0) + ["Version"]))
    value = data.draw(json_values)
    if field == "Version":
        doc["Version"] = value
    else:
        st0[field] = value
    _policy_outcome(json.dumps(doc).encode())


@settings(max_examples=80, deadline=None)
@given(st.binary(max_size=64))
def test_policy_bytes_never_escape_as_another_error(raw):
    _policy_outcome(raw)


def test_a_valid_policy_parses_and_normalises():
    p = parse_policy(json.dumps(VALID, indent=4), "b")
    assert json.loads(p.text) == VALID and not p.is_public()


GRANTS = st.lists(st.builds(
    acl.Grant, st.just("id"), st.sampled_from(sorted(USERS)),
    st.sampled_from(acl.PERMISSIONS)) | st.builds(
    acl.Grant, st.just("uri"), st.sampled_from(acl.GROUPS), st.sampled_from(acl.PERMISSIONS)),
    max_size=6, unique=True)


@settings(max_examples=80, deadline=None)
@given(GRANTS)
def test_acl_xml_round_trips(grants):
    xml = acl.render("alice", grants, USERS.get).encode()
    assert acl.parse_xml(xml, "alice", USERS.get) == grants


ACL_CODES = {"MalformedACLError", "InvalidArgument", "UnresolvableGrantByEmailAddress"}


@settings(max_examples=120, deadline=None)
@given(st.data())
def test_mangled_acl_xml_gets_an_acl_error(data):
    xml = acl.render("alice", data.draw(GRANTS), USERS.get)
    i = data.draw(st.integers(0, len(xml)))
    j = data.draw(st.integers(i, min(len(xml), i + 20)))
    bad = xml[:i] + data.draw(st.text(max_size=10)) + xml[j:]
    try:
        acl.parse_xml(bad.encode("utf-8", "surrogatepass"), "alice", USERS.get)
    except S3Error as e:
        assert e.code in ACL_CODES


@settings(max_examples=120, deadline=None)
@given(st.sampled_from(sorted(acl.GRANT_HEADERS)),
       st.text(alphabet='id=uri"emailAddress, \t0123456789abcdef/:.', max_size=80))
def test_grant_headers_get_an_acl_error_or_parse(header, value):
    try:
        got = acl.from_headers({header: value}, "alice", USERS.get)
    except S3Error as e:
        assert e.code in ACL_CODES | {"InvalidRequest"}
    else:
        assert got and all(g.permission == acl.GRANT_HEADERS[header] for g in got)


def test_grant_headers_and_canned_acls():
    bob = canonical_id("bob")
    got = acl.from_headers({"x-amz-grant-read": f'id="{bob}", uri="{acl.ALL_USERS}"',
                            "x-amz-grant-write-acp": f"id={bob}"}, "alice", USERS.get)
    assert got == [acl.Grant("id", bob, "READ"), acl.Grant("uri", acl.ALL_USERS, "READ"),
                   acl.Grant("id", bob, "WRITE_ACP")]
    assert acl.is_public(acl.canned("public-read", "alice"))
    assert acl.is_public(acl.canned("authenticated-read", "alice"))
    assert acl.only_owner(acl.canned("private", "alice"), "alice")
    assert acl.only_owner(acl.canned("bucket-owner-full-control", "bob", "alice"), "alice") \
        is False
    assert acl.canned("bucket-owner-full-control", "alice", "alice") == [acl.owner_grant("alice")]
    assert acl.canned("bucket-owner-read", "bob", "alice")[1] == acl.Grant(
        "id", canonical_id("alice"), "READ")


@settings(max_examples=80, deadline=None)
@given(st.data())
def test_ownership_and_public_access_block_xml(data):
    for value in controls.OWNERSHIPS:
        assert controls.parse_ownership_xml(controls.ownership_xml(value).encode()) == value
    pab = controls.PublicAccessBlock(*data.draw(st.tuples(*[st.booleans()] * 4)))
    assert controls.parse_pab_xml(controls.pab_xml(pab).encode()) == pab
    assert controls.pab_from_doc(controls.pab_doc(pab)) == (pab, True)
    xml = data.draw(st.sampled_from([controls.pab_xml(pab), controls.ownership_xml(
        "ObjectWriter")]))
    i = data.draw(st.integers(0, len(xml)))
    bad = xml[:i] + data.draw(st.text(max_size=6)) + xml[i + 3:]
    for parse in (controls.parse_pab_xml, controls.parse_ownership_xml):
        try:
            parse(bad.encode("utf-8", "surrogatepass"))
        except S3Error as e:
            assert e.code == "MalformedXML"


@settings(max_examples=100, deadline=None)
@given(st.lists(json_values, max_size=4))
def test_stored_grants_that_cannot_be_read_grant_nothing(stored):
    """A stored ACL (from a marker, an older or newer gateway) is never an error: entries
    that are not grants are ignored."""
    got = acl.from_list(stored, "alice")
    assert all(g.kind in ("id", "uri") and g.permission in acl.PERMISSIONS for g in got)


def test_stored_grants_round_trip_and_other_spellings():
    grants = [acl.owner_grant("alice"), acl.Grant("uri", acl.ALL_USERS, "READ")]
    assert acl.from_list(acl.to_list(grants), "alice") == grants
    assert acl.from_list([{"grantee": {"type": "Group", "uri": "AllUsers"},
                           "permission": "READ"}], "alice") == [grants[1]]
    assert acl.from_list(None, "alice") == [acl.owner_grant("alice")]
