"""Policy Condition blocks: the operators and the request-context keys they test.

A context maps a key name (case-insensitive: stored lower-cased up to its first `/`, so
`s3:ExistingObjectTag/Team` keeps the tag's case) to its values (a list; single-valued keys
have one). Rules, as IAM evaluates them: operators in a block AND, keys in an operator AND,
values of a key OR (NOR for a negated operator); a key missing from the context fails a
positive operator and passes a negated one; `...IfExists` passes on a missing key; `Null`
tests presence; `ForAnyValue:` / `ForAllValues:` compare each of a multi-valued key's values
(a missing key: ForAnyValue false, ForAllValues true).
"""

from __future__ import annotations

import ipaddress
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from gateway.access import wildcard

Context = Mapping[str, Sequence[str]]


class ConditionError(ValueError):
    """A condition the policy language does not allow (the message is S3's reason)."""


def norm_key(key: str) -> str:
    head, sep, tail = key.partition("/")
    return head.lower() + sep + tail


def _num(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _date(text: str) -> float | None:
    t = text.strip()
    if re.fullmatch(r"[0-9]+", t):
        return float(t)  # epoch seconds, as aws:EpochTime
    try:
        dt = datetime.fromisoformat(t.replace("Z", "+00:00"))
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    return dt.timestamp()


def _net(text: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        return None


def _ip_in(ctx_value: str, policy_value: str) -> bool:
    net = _net(policy_value)
    try:
        ip = ipaddress.ip_address(ctx_value)
    except ValueError:
        return False
    if net is None or ip.version != net.version:
        return False
    return ip in net


def _cmp_num(op: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def f(c: str, p: str) -> bool:
        a, b = _num(c), _num(p)
        return a is not None and b is not None and op(a, b)
    return f


def _cmp_date(op: Callable[[float, float], bool]) -> Callable[[str, str], bool]:
    def f(c: str, p: str) -> bool:
        a, b = _date(c), _date(p)
        return a is not None and b is not None and op(a, b)
    return f


def _eq(a: float, b: float) -> bool:
    return a == b


def _lt(a: float, b: float) -> bool:
    return a < b


def _le(a: float, b: float) -> bool:
    return a <= b


def _gt(a: float, b: float) -> bool:
    return a > b


def _ge(a: float, b: float) -> bool:
    return a >= b


def _bool(c: str, p: str) -> bool:
    return c.lower() == p.lower()


# base operator -> (matcher(context value, policy value), negated, value kind for validation,
# policy variables allowed in its values)
_OPS: dict[str, tuple[Callable[[str, str], bool], bool, str]] = {
    "StringEquals": (lambda c, p: c == p, False, "string"),
    "StringNotEquals": (lambda c, p: c == p, True, "string"),
    "StringEqualsIgnoreCase": (lambda c, p: c.lower() == p.lower(), False, "string"),
    "StringNotEqualsIgnoreCase": (lambda c, p: c.lower() == p.lower(), True, "string"),
    "StringLike": (lambda c, p: wildcard.match(p, c), False, "string"),
    "StringNotLike": (lambda c, p: wildcard.match(p, c), True, "string"),
    "NumericEquals": (_cmp_num(_eq), False, "number"),
    "NumericNotEquals": (_cmp_num(_eq), True, "number"),
    "NumericLessThan": (_cmp_num(_lt), False, "number"),
    "NumericLessThanEquals": (_cmp_num(_le), False, "number"),
    "NumericGreaterThan": (_cmp_num(_gt), False, "number"),
    "NumericGreaterThanEquals": (_cmp_num(_ge), False, "number"),
    "DateEquals": (_cmp_date(_eq), False, "date"),
    "DateNotEquals": (_cmp_date(_eq), True, "date"),
    "DateLessThan": (_cmp_date(_lt), False, "date"),
    "DateLessThanEquals": (_cmp_date(_le), False, "date"),
    "DateGreaterThan": (_cmp_date(_gt), False, "date"),
    "DateGreaterThanEquals": (_cmp_date(_ge), False, "date"),
    "Bool": (_bool, False, "bool"),
    "IpAddress": (_ip_in, False, "ip"),
    "NotIpAddress": (_ip_in, True, "ip"),
    "ArnEquals": (lambda c, p: c == p, False, "string"),
    "ArnNotEquals": (lambda c, p: c == p, True, "string"),
    "ArnLike": (lambda c, p: wildcard.match(p, c), False, "string"),
    "ArnNotLike": (lambda c, p: wildcard.match(p, c), True, "string"),
}
_VALID = {
    "string": lambda v: True,
    "number": lambda v: _num(v) is not None,
    "date": lambda v: _date(v) is not None,
    "bool": lambda v: v.lower() in ("true", "false"),
    "ip": lambda v: _net(v) is not None,
}
# Keys this gateway puts in the context (others are accepted and are simply never present,
# as for a key of a request that does not carry it). Prefixes end in "/".
KNOWN_KEYS = frozenset({
    "aws:sourceip", "aws:securetransport", "aws:username", "aws:userid", "aws:principaltype",
    "aws:principalarn", "aws:principalaccount", "aws:currenttime", "aws:epochtime",
    "aws:useragent", "aws:referer", "aws:sourcearn", "aws:sourceaccount", "aws:sourcevpc",
    "aws:sourcevpce", "aws:sourceowner", "aws:principalorgid", "aws:tagkeys",
    "aws:requestedregion", "aws:multifactorauthpresent", "aws:viaawsservice",
    "s3:prefix", "s3:delimiter", "s3:max-keys", "s3:x-amz-acl", "s3:x-amz-grant-read",
    "s3:x-amz-grant-write", "s3:x-amz-grant-read-acp", "s3:x-amz-grant-write-acp",
    "s3:x-amz-grant-full-control", "s3:versionid", "s3:x-amz-copy-source",
    "s3:x-amz-metadata-directive", "s3:x-amz-content-sha256", "s3:authtype",
    "s3:signatureversion", "s3:signatureage", "s3:tlsversion", "s3:x-amz-storage-class",
    "s3:x-amz-server-side-encryption", "s3:x-amz-server-side-encryption-aws-kms-key-id",
    "s3:requestobjecttagkeys", "s3:locationconstraint", "s3:x-amz-object-ownership",
    "s3:resourceaccount", "s3:object-lock-mode", "s3:object-lock-retain-until-date",
    "s3:object-lock-legal-hold", "s3:object-lock-remaining-retention-days",
    "s3:dataaccesspointarn", "s3:dataaccesspointaccount", "s3:accesspointnetworkorigin",
    "s3:checksumalgorithm", "s3:if-match", "s3:if-none-match",
})
KEY_PREFIXES = ("s3:existingobjecttag/", "s3:requestobjecttag/", "aws:principaltag/",
                "aws:requesttag/", "aws:resourcetag/")


def known_key(key: str) -> bool:
    k = norm_key(key)
    return k in KNOWN_KEYS or any(k.startswith(p) and len(k) > len(p) for p in KEY_PREFIXES)


@dataclass(frozen=True)
class Test:
    """One (operator, key, values) test of a Condition block."""

    op: str          # the operator as written, for error messages and public-ness checks
    base: str        # the operator without qualifier or IfExists
    key: str         # normalised key name
    values: tuple[str, ...]
    if_exists: bool
    qualifier: str   # "", "ForAnyValue" or "ForAllValues"

    def holds(self, ctx: Context, resolve: Callable[[str], str | None] | None = None) -> bool:
        present = ctx.get(self.key)
        have = list(present) if present else []
        if self.base == "Null":
            # "true": the key must be absent; "false": present.
            want_absent = self.values[0].lower() == "true"
            return (not have) == want_absent
        if not have:
            if self.qualifier == "ForAllValues":
                return True
            if self.qualifier == "ForAnyValue":
                return False
            if self.if_exists:
                return True
            return _OPS[self.base][1]  # negated operators pass on a missing key
        match, negated, _ = _OPS[self.base]
        values = self.values
        if resolve is not None and self.base.startswith(("String", "Arn")):
            values = tuple(v for v in (_subst(v, resolve) for v in values) if v is not None)

        def one(c: str) -> bool:
            hit = any(match(c, p) for p in values)
            return not hit if negated else hit

        if self.qualifier == "ForAllValues":
            return all(one(c) for c in have)
        if self.qualifier == "ForAnyValue":
            return any(one(c) for c in have)
        # An unqualified test over several values: a positive one needs any value to match,
        # a negated one that none matches.
        return all(one(c) for c in have) if negated else any(one(c) for c in have)


_VAR = re.compile(r"\$\{([^}]*)\}")


def _subst(value: str, resolve: Callable[[str], str | None]) -> str | None:
    """A value with its ${...} policy variables resolved; None if one has no value."""
    if "${" not in value:
        return value
    missing = False

    def rep(m: re.Match[str]) -> str:
        nonlocal missing
        name = m.group(1)
        if name in ("*", "?", "$"):
            return name
        v = resolve(name)
        if v is None:
            missing = True
            return ""
        return v
    out = _VAR.sub(rep, value)
    return None if missing else out


def _values(raw: object, op: str) -> tuple[str, ...]:
    items = raw if isinstance(raw, list) else [raw]
    out = []
    for v in items:
        if isinstance(v, bool):
            out.append("true" if v else "false")
        elif isinstance(v, int | float):
            out.append(str(v))
        elif isinstance(v, str):
            out.append(v)
        else:
            raise ConditionError(f"Invalid Condition value for {op}")
    if not out:
        raise ConditionError(f"Invalid Condition value for {op}")
    return tuple(out)


def parse_block(block: object) -> tuple[Test, ...]:
    """A statement's Condition object -> its tests; ConditionError with S3's reason."""
    if not isinstance(block, dict):
        raise ConditionError("Invalid Condition block")
    tests: list[Test] = []
    for op, keys in block.items():
        if not isinstance(op, str):
            raise ConditionError("Invalid Condition type")
        qualifier, base = "", op
        if ":" in op:
            qualifier, base = op.split(":", 1)
            if qualifier not in ("ForAnyValue", "ForAllValues"):
                raise ConditionError(f"Invalid Condition type : {op}")
        if_exists = base.endswith("IfExists") and base != "IfExists"
        if if_exists:
            base = base[: -len("IfExists")]
        if base != "Null" and base not in _OPS or (base == "Null" and (if_exists or qualifier)):
            raise ConditionError(f"Invalid Condition type : {op}")
        if not isinstance(keys, dict) or not keys:
            raise ConditionError(f"Invalid Condition block for {op}")
        for key, raw in keys.items():
            if not isinstance(key, str) or not known_key(key):
                raise ConditionError("Policy has an invalid condition key")
            values = _values(raw, op)
            kind = "bool" if base == "Null" else _OPS[base][2]
            if base == "Null" and len(values) != 1:
                raise ConditionError(f"Invalid Condition value for {op}")
            if not all(_VALID[kind](v) for v in values):
                raise ConditionError(f"Invalid Condition value for {op}: {key}")
            tests.append(Test(op, base, norm_key(key), values, if_exists, qualifier))
    return tuple(tests)
