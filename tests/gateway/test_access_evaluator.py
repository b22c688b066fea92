"""The access evaluator (gateway/access) against a small reference model of S3's rules,
with hypothesis: random policies, ACLs, ownership settings, public access blocks and
requests. The model is written from the rules (Deny wins, then Allow from the policy, then
ownership and ACLs, default deny), with fnmatch and plain loops instead of the evaluator's
compiled patterns and precomputed action sets; the two must agree on every request."""

from __future__ import annotations

import fnmatch
import ipaddress
import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gateway.access import acl as aclmod
from gateway.access.controls import PublicAccessBlock
from gateway.access.evaluate import BucketAccess, Decision, ObjectAccess, decide
from gateway.access.identity import Requester, canonical_id
from gateway.access.policy import parse_policy
from gateway.s3.errors import S3Error

BUCKET = "data"
OWNER = "alice"
USERS = ["alice", "bob", "carol"]
ACTIONS = ["GetObject", "PutObject", "DeleteObject", "ListBucket", "GetObjectAcl",
           "PutObjectAcl", "GetBucketAcl", "PutBucketAcl", "GetBucketPolicy",
           "PutBucketPolicy", "GetObjectTagging", "DeleteBucket", "ListBucketVersions"]
OBJECT_ACTIONS = {"GetObject", "PutObject", "DeleteObject", "GetObjectAcl", "PutObjectAcl",
                  "GetObjectTagging"}
ACTION_PATTERNS = ["s3:GetObject", "s3:getobject", "s3:Get*", "s3:*", "*", "s3:PutObject",
                   "s3:List*", "s3:*Acl", "s3:*Object", "s3:DeleteObject", "s3:ListBucket",
                   "s3:Put*", "s3:?etObject"]
RESOURCES = ["arn:aws:s3:::data", "arn:aws:s3:::data/*", "arn:aws:s3:::data/a/*",
             "arn:aws:s3:::data/?", "arn:aws:s3:::data/a/x", "arn:aws:s3:::data/a*",
             "arn:aws:s3:::data/${aws:username}/*"]
KEYS = ["a/x", "a/y", "b/z", "k", "bob/f"]
IPS = ["10.0.0.5", "10.1.2.3", "192.168.1.9", "2001:db8::1"]
CIDRS = ["10.0.0.0/8", "10.0.0.0/24", "192.168.0.0/16", "2001:db8::/32", "0.0.0.0/0"]

# ---- the reference model ------------------------------------------------------------------

ALL_MODEL_ACTIONS = None  # filled lazily from the evaluator's known-action list


def model_action_match(pattern: str, action: str) -> bool:
    if pattern == "*":
        return True
    if not pattern.lower().startswith("s3:"):
        return False
    return fnmatch.fnmatchcase(action.lower(), pattern[3:].lower())


def model_resource_match(pattern: str, arn: str, user: str | None) -> bool:
    if "${aws:username}" in pattern:
        if user is None:
            return False
        pattern = pattern.replace("${aws:username}", user)
    return fnmatch.fnmatchcase(arn, pattern)


def model_principal(p: object, who: str | None) -> bool:
    if p == "*":
        return True
    assert isinstance(p, dict)
    aws = p.get("AWS", [])
    aws = aws if isinstance(aws, list) else [aws]
    if "*" in aws:
        return True
    if who is None:
        return False
    names = {a.rsplit("/", 1)[1] for a in aws}
    ids = set(p.get("CanonicalUser", []))
    return who in names or canonical_id(who) in ids


def model_test(op: str, key: str, values: list[str], ctx: dict[str, list[str]]) -> bool:
    if_exists = op.endswith("IfExists")
    base = op[: -len("IfExists")] if if_exists else op
    have = ctx.get(key.lower(), [])
    if base == "Null":
        return (len(have) == 0) == (values[0] == "true")
    negated = base in ("StringNotEquals", "NotIpAddress", "StringNotLike")
    if not have:
        return True if if_exists else negated
    c = have[0]
    if base in ("StringEquals", "StringNotEquals"):
        hit = c in values
    elif base in ("StringLike", "StringNotLike"):
        hit = any(fnmatch.fnmatchcase(c, v) for v in values)
    elif base in ("IpAddress", "NotIpAddress"):
        ip = ipaddress.ip_address(c)
        hit = any(ip.version == ipaddress.ip_network(v).version
                  and ip in ipaddress.ip_network(v) for v in values)
    elif base == "Bool":
        hit = c.lower() == values[0].lower()
    elif base == "NumericLessThan":
        hit = any(float(c) < float(v) for v in values)
    else:
        raise AssertionError(base)
    return not hit if negated else hit


def model_statement_applies(s: dict, who: str | None, action: str, arn: str,
                            ctx: dict[str, list[str]]) -> bool:
    pkey = "NotPrincipal" if "NotPrincipal" in s else "Principal"
    if model_principal(s[pkey], who) == (pkey == "NotPrincipal"):
        return False
    akey = "NotAction" if "NotAction" in s else "Action"
    if any(model_action_match(p, action) for p in s[akey]) == (akey == "NotAction"):
        return False
    rkey = "NotResource" if "NotResource" in s else "Resource"
    if any(model_resource_match(r, arn, who) for r in s[rkey]) == (rkey == "NotResource"):
        return False
    for op, keys in s.get("Condition", {}).items():
        for key, values in keys.items():
            if not model_test(op, key, values if isinstance(values, list) else [values], ctx):
                return False
    return True


def model_policy_public(statements: list[dict]) -> bool:
    for s in statements:
        if s["Effect"] != "Allow":
            continue
        p = s.get("Principal")
        everyone = "NotPrincipal" in s or p == "*" or (isinstance(p, dict) and "*" in (
            p["AWS"] if isinstance(p.get("AWS"), list) else [p.get("AWS")]))
        if not everyone:
            continue
        fixed = False
        for op, keys in s.get("Condition", {}).items():
            for key, values in keys.items():
                vals = values if isinstance(values, list) else [values]
                if op == "IpAddress" and key == "aws:SourceIp" and all(
                        ipaddress.ip_network(v).prefixlen >= (
                            8 if ipaddress.ip_network(v).version == 4 else 32) for v in vals):
                    fixed = True
                if op in ("StringEquals", "StringLike") and key == "aws:username" and all(
                        "*" not in v and "?" not in v for v in vals):
                    fixed = True
        if not fixed:
            return True
    return False


def model_grants(grants: list[tuple[str, str, str]], who: str | None, perm: str,
                 ignore_public: bool) -> bool:
    for kind, value, p in grants:
        if p != perm and p != "FULL_CONTROL":
            continue
        if kind == "group":
            if value == "all" and not ignore_public:
                return True
            if value == "auth" and who is not None and not ignore_public:
                return True
        elif who is not None and value == who:
            return True
    return False


BUCKET_PERM = {"ListBucket": "READ", "ListBucketVersions": "READ", "PutObject": "WRITE",
               "DeleteObject": "WRITE", "GetBucketAcl": "READ_ACP", "PutBucketAcl": "WRITE_ACP"}
OBJECT_PERM = {"GetObject": "READ", "GetObjectAcl": "READ_ACP", "PutObjectAcl": "WRITE_ACP"}


def model(who: str | None, action: str, key: str, statements: list[dict] | None,
          ctx: dict[str, list[str]], bucket_grants: list, obj_owner: str, obj_grants: list,
          ownership: str, pab: PublicAccessBlock) -> bool:
    is_owner = who == OWNER
    if is_owner and action in ("GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy"):
        return True
    arn = f"arn:aws:s3:::{BUCKET}/{key}" if action in OBJECT_ACTIONS else f"arn:aws:s3:::{BUCKET}"
    if statements is not None:
        hits = [s for s in statements if model_statement_applies(s, who, action, arn, ctx)]
        if any(s["Effect"] == "Deny" for s in hits):
            return False
        if any(s["Effect"] == "Allow" for s in hits):
            if is_owner or not (pab.restrict_public_buckets and model_policy_public(statements)):
                return True
    acls = ownership != "BucketOwnerEnforced"
    if action in ("PutObject", "DeleteObject") or action not in OBJECT_ACTIONS:
        if is_owner:
            return True
        return acls and action in BUCKET_PERM and model_grants(
            bucket_grants, who, BUCKET_PERM[action], pab.ignore_public_acls)
    if not acls:
        return is_owner
    if who is not None and who == obj_owner:
        return True
    return action in OBJECT_PERM and model_grants(obj_grants, who, OBJECT_PERM[action],
                                                  pab.ignore_public_acls)


# ---- strategies ----------------------------------------------------------------------------

def _principal() -> st.SearchStrategy:
    return st.one_of(
        st.just("*"),
        st.just({"AWS": "*"}),
        st.lists(st.sampled_from(USERS), min_size=1, max_size=2, unique=True).map(
            lambda us: {"AWS": [f"arn:aws:iam::000000000000:user/{u}" for u in us]}),
        st.sampled_from(USERS).map(lambda u: {"CanonicalUser": [canonical_id(u)]}),
    )


_CONDITIONS = st.one_of(
    st.sampled_from(CIDRS).map(lambda c: {"IpAddress": {"aws:SourceIp": [c]}}),
    st.sampled_from(CIDRS).map(lambda c: {"NotIpAddress": {"aws:SourceIp": [c]}}),
    st.sampled_from(["true", "false"]).map(lambda b: {"Bool": {"aws:SecureTransport": b}}),
    st.sampled_from(["a/", "b/", ""]).map(lambda p: {"StringEquals": {"s3:prefix": [p]}}),
    st.sampled_from(["a/", "b/"]).map(lambda p: {"StringNotEquals": {"s3:prefix": [p]}}),
    st.sampled_from(["a/", "b/"]).map(
        lambda p: {"StringEqualsIfExists": {"s3:prefix": [p]}}),
    st.sampled_from(["bo*", "?arol", "alice"]).map(
        lambda p: {"StringLike": {"aws:username": [p]}}),
    st.sampled_from(["bo*", "alice"]).map(lambda p: {"StringNotLike": {"aws:username": [p]}}),
    st.sampled_from(["bob", "carol"]).map(lambda p: {"StringEquals": {"aws:username": [p]}}),
    st.sampled_from(["true", "false"]).map(lambda v: {"Null": {"aws:username": v}}),
    st.sampled_from(["10", "500"]).map(lambda v: {"NumericLessThan": {"s3:max-keys": [v]}}),
)


@st.composite
def statements(draw: st.DrawFn) -> dict:
    s: dict = {"Effect": draw(st.sampled_from(["Allow", "Deny"]))}
    s["NotPrincipal" if draw(st.integers(0, 9)) == 0 else "Principal"] = draw(_principal())
    s["NotAction" if draw(st.integers(0, 7)) == 0 else "Action"] = draw(
        st.lists(st.sampled_from(ACTION_PATTERNS), min_size=1, max_size=3, unique=True))
    s["NotResource" if draw(st.integers(0, 7)) == 0 else "Resource"] = draw(
        st.lists(st.sampled_from(RESOURCES), min_size=1, max_size=3, unique=True))
    if draw(st.booleans()):
        s["Condition"] = draw(_CONDITIONS)
    return s


GRANT = st.tuples(st.sampled_from(["user", "group"]),
                  st.sampled_from(USERS + ["all", "auth"]),
                  st.sampled_from(["READ", "WRITE", "READ_ACP", "WRITE_ACP", "FULL_CONTROL"])
                  ).filter(lambda g: (g[0] == "group") == (g[1] in ("all", "auth")))


def real_grants(grants: list[tuple[str, str, str]]) -> tuple[aclmod.Grant, ...]:
    out = []
    for kind, value, perm in grants:
        if kind == "group":
            uri = aclmod.ALL_USERS if value == "all" else aclmod.AUTHENTICATED_USERS
            out.append(aclmod.Grant("uri", uri, perm))
        else:
            out.append(aclmod.Grant("id", canonical_id(value), perm))
    return tuple(out)


@st.composite
def contexts(draw: st.DrawFn, who: str | None) -> dict[str, list[str]]:
    ctx = {"aws:sourceip": [draw(st.sampled_from(IPS))],
           "aws:securetransport": [draw(st.sampled_from(["true", "false"]))]}
    if who is not None:
        ctx["aws:username"] = [who]
    if draw(st.booleans()):
        ctx["s3:prefix"] = [draw(st.sampled_from(["a/", "b/", ""]))]
    if draw(st.booleans()):
        ctx["s3:max-keys"] = [draw(st.sampled_from(["5", "100", "1000"]))]
    return ctx


def evaluate(who: str | None, action: str, key: str, policy_doc: list[dict] | None,
             ctx: dict, bucket_grants: list, obj_owner: str, obj_grants: list,
             ownership: str, pab: PublicAccessBlock) -> bool | None:
    policy = None
    if policy_doc is not None:
        text = json.dumps({"Version": "2012-10-17", "Statement": policy_doc})
        try:
            policy = parse_policy(text, BUCKET)
        except S3Error as e:
            assert e.code == "MalformedPolicy"
            # Only the "action does not apply to any resource" refusal can come from these
            # generated statements.
            assert "does not apply" in e.message, e.message
            return None
    b = BucketAccess(BUCKET, OWNER, real_grants(bucket_grants), policy, ownership, pab)
    requester = Requester(who)
    d = decide(requester, action, b, key, ctx)
    if d is Decision.NEED_OBJECT:
        d = decide(requester, action, b, key, ctx, ObjectAccess(obj_owner,
                                                                real_grants(obj_grants)))
        assert d is not Decision.NEED_OBJECT
    return d.allowed


def _agrees(data: st.DataObject) -> None:
    who = data.draw(st.sampled_from(USERS + [None]))
    action = data.draw(st.sampled_from(ACTIONS))
    key = data.draw(st.sampled_from(KEYS))
    policy_doc = data.draw(st.none() | st.lists(statements(), min_size=1, max_size=4))
    ctx = data.draw(contexts(who))
    bucket_grants = data.draw(st.lists(GRANT, max_size=3))
    obj_owner = data.draw(st.sampled_from(USERS))
    obj_grants = data.draw(st.lists(GRANT, max_size=3))
    ownership = data.draw(st.sampled_from(["BucketOwnerEnforced", "BucketOwnerPreferred",
                                           "ObjectWriter"]))
    pab = PublicAccessBlock(*data.draw(st.tuples(*[st.booleans()] * 4)))
    got = evaluate(who, action, key, policy_doc, ctx, bucket_grants, obj_owner, obj_grants,
                   ownership, pab)
    assume(got is not None)
    want = model(who, action, key, policy_doc, ctx, bucket_grants, obj_owner, obj_grants,
                 ownership, pab)
    assert got == want


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_evaluator_agrees_with_the_reference_model(data: st.DataObject) -> None:
    _agrees(data)


@pytest.mark.soak
@settings(max_examples=50_000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_evaluator_agrees_with_the_reference_model_long(data: st.DataObject) -> None:
    _agrees(data)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_a_deny_for_everyone_never_lets_anything_through(data: st.DataObject) -> None:
    """Adding `Deny * s3:* on everything` to any policy denies every request except the
    owner's policy management (which S3 keeps so an owner cannot lock themselves out)."""
    who = data.draw(st.sampled_from(USERS + [None]))
    action = data.draw(st.sampled_from(ACTIONS))
    key = data.draw(st.sampled_from(KEYS))
    policy_doc = data.draw(st.lists(statements(), max_size=3))
    policy_doc.append({"Effect": "Deny", "Principal": "*", "Action": "s3:*",
                       "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"]})
    got = evaluate(who, action, key, policy_doc, data.draw(contexts(who)),
                   data.draw(st.lists(GRANT, max_size=3)), data.draw(st.sampled_from(USERS)),
                   data.draw(st.lists(GRANT, max_size=3)),
                   data.draw(st.sampled_from(["BucketOwnerEnforced", "ObjectWriter"])),
                   PublicAccessBlock())
    assume(got is not None)
    assert got == (who == OWNER and action in ("GetBucketPolicy", "PutBucketPolicy"))


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_anonymous_is_allowed_only_through_a_public_grant(data: st.DataObject) -> None:
    """Without a statement for everyone and without a grant to AllUsers, an unsigned request
    is never allowed."""
    action = data.draw(st.sampled_from(ACTIONS))
    key = data.draw(st.sampled_from(KEYS))
    policy_doc = [s for s in data.draw(st.lists(statements(), max_size=4))
                  if s.get("Principal") not in ("*", {"AWS": "*"}) and "NotPrincipal" not in s]
    grants = [g for g in data.draw(st.lists(GRANT, max_size=3)) if g[1] != "all"]
    got = evaluate(None, action, key, policy_doc or None, data.draw(contexts(None)), grants,
                   data.draw(st.sampled_from(USERS)), grants, "ObjectWriter",
                   PublicAccessBlock())
    assume(got is not None)
    assert got is False


# ---- operators the model does not draw ----------------------------------------------------

def _one(condition: dict, ctx: dict, who: str | None = "bob", action: str = "GetObject",
         key: str = "bob/f") -> bool:
    doc = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Allow", "Principal": "*", "Action": "s3:*",
         "Resource": ["arn:aws:s3:::data", "arn:aws:s3:::data/*"], "Condition": condition}]}
    b = BucketAccess(BUCKET, OWNER, (), parse_policy(json.dumps(doc), BUCKET))
    return decide(Requester(who), action, b, key, ctx).allowed


def test_set_operators_dates_numbers_and_variables():
    tags = {"s3:requestobjecttagkeys": ["team", "run"]}
    assert _one({"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["team", "run",
                                                                             "x"]}}, tags)
    assert not _one({"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["team"]}}, tags)
    assert _one({"ForAllValues:StringEquals": {"s3:RequestObjectTagKeys": ["team"]}}, {})
    assert _one({"ForAnyValue:StringLike": {"s3:RequestObjectTagKeys": ["ru?"]}}, tags)
    assert not _one({"ForAnyValue:StringEquals": {"s3:RequestObjectTagKeys": ["z"]}}, {})
    now = {"aws:currenttime": ["2026-06-01T00:00:00Z"], "aws:epochtime": ["1780272000"]}
    assert _one({"DateLessThan": {"aws:CurrentTime": "2027-01-01T00:00:00Z"}}, now)
    assert not _one({"DateGreaterThan": {"aws:CurrentTime": "2027-01-01T00:00:00Z"}}, now)
    assert _one({"DateGreaterThanEquals": {"aws:EpochTime": "1780272000"}}, now)
    assert _one({"NumericGreaterThanEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": ["10"]})
    assert not _one({"NumericEquals": {"s3:max-keys": "10"}}, {"s3:max-keys": ["ten"]})
    assert _one({"StringEqualsIgnoreCase": {"aws:username": "BOB"}}, {"aws:username": ["bob"]})
    # ${aws:username} in a condition value, and in a resource.
    assert _one({"StringLike": {"s3:prefix": "home/${aws:username}/*"}},
                {"aws:username": ["bob"], "s3:prefix": ["home/bob/x"]}, action="ListBucket")
    assert not _one({"StringLike": {"s3:prefix": "home/${aws:username}/*"}},
                    {"s3:prefix": ["home/bob/x"]}, who=None, action="ListBucket")
    # Null, IfExists, and a missing key under a negated operator.
    assert _one({"Null": {"s3:x-amz-acl": "true"}}, {})
    assert _one({"StringEqualsIfExists": {"s3:x-amz-acl": "private"}}, {})
    assert not _one({"StringEqualsIfExists": {"s3:x-amz-acl": "private"}},
                    {"s3:x-amz-acl": ["public-read"]})
    assert _one({"StringNotEquals": {"s3:x-amz-acl": "public-read"}}, {})


def test_not_principal_and_ownership_of_missing_objects():
    doc = {"Version": "2012-10-17", "Statement": [
        {"Effect": "Deny", "NotPrincipal": {"AWS": "arn:aws:iam::000000000000:user/alice"},
         "Action": "s3:*", "Resource": "arn:aws:s3:::data/*"}]}
    b = BucketAccess(BUCKET, "carol", (), parse_policy(json.dumps(doc), BUCKET),
                     "ObjectWriter")
    assert decide(Requester("carol"), "PutObject", b, "k", {}) is Decision.DENY
    assert decide(Requester("alice"), "PutObject", b, "k", {}) is Decision.IMPLICIT_DENY
    # With ACLs on, reading asks for the object; the writer owns what it wrote.
    assert decide(Requester("carol"), "GetObject", b, "k", {"aws:username": ["carol"]}) is \
        Decision.DENY
    b2 = BucketAccess(BUCKET, "carol", (), None, "ObjectWriter")
    assert decide(Requester("carol"), "GetObject", b2, "k", {}) is Decision.NEED_OBJECT
    assert decide(Requester("carol"), "GetObject", b2, "k", {},
                  ObjectAccess("bob")) is Decision.IMPLICIT_DENY
    assert decide(Requester("bob"), "GetObject", b2, "k", {},
                  ObjectAccess("bob")) is Decision.ALLOW
    assert decide(Requester("carol"), "DeleteObject", b2, "k", {}) is Decision.ALLOW


def test_public_policy_rules():
    def public(cond: dict | None, principal: object = "*") -> bool:
        st_ = {"Effect": "Allow", "Principal": principal, "Action": "s3:GetObject",
               "Resource": "arn:aws:s3:::data/*"}
        if cond:
            st_["Condition"] = cond
        return parse_policy(json.dumps({"Version": "2012-10-17", "Statement": [st_]}),
                            BUCKET).is_public()
    assert public(None)
    assert public(None, {"AWS": "*"})
    assert not public(None, {"AWS": "arn:aws:iam::000000000000:user/bob"})
    assert not public({"IpAddress": {"aws:SourceIp": "10.0.0.0/8"}})
    assert public({"IpAddress": {"aws:SourceIp": "0.0.0.0/1"}})
    assert public({"StringLike": {"aws:username": "*"}})
    assert public({"StringEquals": {"s3:prefix": "a/"}})
