"""Bucket policies: parse and validate the JSON document (MalformedPolicy with S3's reason),
and match its statements against a request.

Principals: `"*"` or `{"AWS": "*"}` (everyone, anonymous requests too), `{"AWS":
"arn:aws:iam::<account>:user/<name>"}` (a ZoneGate user by name; any 12-digit account),
`{"CanonicalUser": "<64 hex>"}`. Resources: `arn:aws:s3:::<this bucket>` and
`arn:aws:s3:::<this bucket>/<key pattern>` with `*` / `?` and policy variables
(`${aws:username}`...). Actions: the S3 action names, case-insensitive, with wildcards.
"""

from __future__ import annotations

import ipaddress
import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from gateway.access import actions as act
from gateway.access import conditions, wildcard
from gateway.access.conditions import Context, Test
from gateway.access.identity import Requester, canonical_id, is_canonical_id
from gateway.s3.errors import S3Error

MAX_POLICY_BYTES = 20 * 1024
VERSIONS = ("2012-10-17", "2008-10-17")
_STATEMENT_FIELDS = {"Sid", "Effect", "Principal", "NotPrincipal", "Action", "NotAction",
                     "Resource", "NotResource", "Condition"}
_USER_ARN = re.compile(r"^arn:aws:iam::([0-9]{12})?:user/(?:[^/*?]+/)*([\w+=,.@-]+)$")
# Condition keys that, with a fixed value, make a statement for everyone non-public (S3's
# definition of a public policy).
_FIXING_KEYS = frozenset({"aws:sourceip", "aws:sourcearn", "aws:sourcevpc", "aws:sourcevpce",
                          "aws:sourceowner", "aws:sourceaccount", "aws:userid",
                          "aws:principalorgid", "aws:principalaccount", "aws:principalarn",
                          "aws:username", "s3:dataaccesspointarn",
                          "s3:dataaccesspointaccount"})
_FIXING_OPS = frozenset({"StringEquals", "StringEqualsIgnoreCase", "ArnEquals", "IpAddress",
                         "StringLike", "ArnLike"})


def malformed(reason: str) -> S3Error:
    return S3Error("MalformedPolicy", reason)


@dataclass(frozen=True)
class Principals:
    everyone: bool = False
    names: frozenset[str] = frozenset()
    ids: frozenset[str] = frozenset()

    def matches(self, who: Requester) -> bool:
        if self.everyone:
            return True
        if who.name is None:
            return False
        return who.name in self.names or canonical_id(who.name) in self.ids


@dataclass(frozen=True)
class Statement:
    sid: str
    effect: str                      # "Allow" / "Deny"
    principals: Principals
    not_principal: bool
    actions: frozenset[str]          # the canonical action names it covers (NotAction undone)
    resources: tuple[str, ...]
    not_resource: bool
    tests: tuple[Test, ...]

    def applies(self, who: Requester, action: str, arn: str, ctx: Context) -> bool:
        if action not in self.actions:
            return False
        p = self.principals.matches(who)
        if p == self.not_principal:
            return False
        resolve = _resolver(ctx)
        hit = any(_resource_match(r, arn, resolve) for r in self.resources)
        if hit == self.not_resource:
            return False
        return all(t.holds(ctx, resolve) for t in self.tests)

    def is_public(self) -> bool:
        """An Allow for everyone (or NotPrincipal) not pinned down by a fixed-value condition
        on one of S3's fixing keys."""
        if self.effect != "Allow":
            return False
        if not (self.principals.everyone or self.not_principal):
            return False
        for t in self.tests:
            if t.key in _FIXING_KEYS and t.base in _FIXING_OPS and not t.qualifier \
                    and not t.if_exists and all(_fixed(t, v) for v in t.values):
                return False
        return True


def _fixed(t: Test, value: str) -> bool:
    if t.base == "IpAddress":
        net = ipaddress.ip_network(value, strict=False)
        # A range this wide is as good as anyone (S3 calls 0.0.0.0/1 public).
        return net.prefixlen >= (8 if net.version == 4 else 32)
    return "*" not in value and "?" not in value and "${" not in value


def _resolver(ctx: Context) -> Callable[[str], str | None]:
    def resolve(name: str) -> str | None:
        v = ctx.get(conditions.norm_key(name))
        return v[0] if v else None
    return resolve


def _resource_match(pattern: str, arn: str, resolve: Callable[[str], str | None]) -> bool:
    if "${" not in pattern:
        return wildcard.match(pattern, arn)
    # Variables resolve to literal text; ${*} ${?} ${$} are the literal characters.
    out: list[str] = []
    pos = 0
    for m in re.finditer(r"\$\{([^}]*)\}", pattern):
        out.append(_glob_regex(pattern[pos:m.start()]))
        name = m.group(1)
        v = name if name in ("*", "?", "$") else resolve(name)
        if v is None:
            return False
        out.append(re.escape(v))
        pos = m.end()
    out.append(_glob_regex(pattern[pos:]))
    return re.fullmatch("".join(out), arn, re.DOTALL) is not None


def _glob_regex(text: str) -> str:
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in text)


@dataclass(frozen=True)
class Policy:
    version: str
    statements: tuple[Statement, ...]
    text: str                         # the normalised document (compact JSON)

    def allows_and_denies(self, who: Requester, action: str, arn: str, ctx: Context
                          ) -> tuple[list[Statement], list[Statement]]:
        allow: list[Statement] = []
        deny: list[Statement] = []
        for s in self.statements:
            if s.applies(who, action, arn, ctx):
                (deny if s.effect == "Deny" else allow).append(s)
        return allow, deny

    def is_public(self) -> bool:
        return any(s.is_public() for s in self.statements)

    def uses_key_prefix(self, prefix: str) -> bool:
        return any(t.key.startswith(prefix) for s in self.statements for t in s.tests)


def _strings(value: object, field: str) -> list[str]:
    items = value if isinstance(value, list) else [value]
    if not items or not all(isinstance(v, str) and v for v in items):
        raise malformed(f"Invalid {field}")
    return items  # type: ignore[return-value]


def _principals(value: object, known_user: Callable[[str], bool] | None) -> Principals:
    if value == "*":
        return Principals(everyone=True)
    if not isinstance(value, dict) or not value:
        raise malformed("Invalid principal in policy")
    names: set[str] = set()
    ids: set[str] = set()
    everyone = False
    for kind, raw in value.items():
        try:
            items = _strings(raw, "principal in policy")
        except S3Error:
            raise malformed("Invalid principal in policy") from None
        for p in items:
            if kind == "AWS":
                if p == "*":
                    everyone = True
                    continue
                m = _USER_ARN.match(p)
                if not m or (known_user is not None and not known_user(m.group(2))):
                    raise malformed("Invalid principal in policy")
                names.add(m.group(2))
            elif kind == "CanonicalUser":
                if not is_canonical_id(p):
                    raise malformed("Invalid principal in policy")
                ids.add(p)
            else:
                raise malformed("Invalid principal in policy")
    return Principals(everyone, frozenset(names), frozenset(ids))


def _resources(items: list[str], bucket: str) -> tuple[str, ...]:
    base = "arn:aws:s3:::" + bucket
    for r in items:
        if r != base and not r.startswith(base + "/"):
            raise malformed("Policy has invalid resource")
    return tuple(items)


def _statement(raw: object, bucket: str, known_user: Callable[[str], bool] | None
               ) -> Statement:
    if not isinstance(raw, dict):
        raise malformed("Statement is not an object")
    for k in raw:
        if k not in _STATEMENT_FIELDS:
            raise malformed(f"Unknown field {k}")
    effect = raw.get("Effect")
    if effect is None:
        raise malformed("Missing required field Effect")
    if effect not in ("Allow", "Deny"):
        raise malformed(f"Invalid effect: {effect}")
    sid = raw.get("Sid", "")
    if not isinstance(sid, str) or (sid and not re.fullmatch(r"[A-Za-z0-9 _.-]*", sid)):
        raise malformed("Statement IDs (SID) must be alpha-numeric")
    if ("Principal" in raw) == ("NotPrincipal" in raw):
        raise malformed("Missing required field Principal" if "Principal" not in raw else
                        "Principal and NotPrincipal cannot both be specified")
    not_principal = "NotPrincipal" in raw
    principals = _principals(raw["NotPrincipal" if not_principal else "Principal"],
                             known_user)
    if ("Action" in raw) == ("NotAction" in raw):
        raise malformed("Missing required field Action" if "Action" not in raw else
                        "Action and NotAction cannot both be specified")
    not_action = "NotAction" in raw
    try:
        patterns = _strings(raw["NotAction" if not_action else "Action"], "action")
    except S3Error:
        raise malformed("Policy has invalid action") from None
    named: set[str] = set()
    for p in patterns:
        got = act.expand(p)
        if not got:
            raise malformed("Policy has invalid action")
        named |= got
    covered = frozenset(act.ALL_ACTIONS - named) if not_action else frozenset(named)
    if ("Resource" in raw) == ("NotResource" in raw):
        raise malformed("Missing required field Resource" if "Resource" not in raw else
                        "Resource and NotResource cannot both be specified")
    not_resource = "NotResource" in raw
    try:
        res = _strings(raw["NotResource" if not_resource else "Resource"], "resource")
    except S3Error:
        raise malformed("Policy has invalid resource") from None
    resources = _resources(res, bucket)
    if not not_action and not not_resource:
        # Each named action must have a resource of its kind (object ARNs for object
        # actions, the bucket's for bucket actions), as S3 refuses the common slip.
        has_obj = any("/" in r[len("arn:aws:s3:::"):] for r in resources)
        has_bucket = any("/" not in r[len("arn:aws:s3:::"):] for r in resources)
        usable = {a for a in covered if (act.is_object_action(a) and has_obj)
                  or (a in act.BUCKET_ACTIONS and has_bucket)}
        if not usable:
            raise malformed("Action does not apply to any resource(s) in statement")
    tests: tuple[Test, ...] = ()
    if "Condition" in raw:
        try:
            tests = conditions.parse_block(raw["Condition"])
        except conditions.ConditionError as e:
            raise malformed(str(e)) from None
    return Statement(sid, effect, principals, not_principal, covered, resources,
                     not_resource, tests)


def parse_policy(text: str | bytes, bucket: str,
                 known_user: Callable[[str], bool] | None = None) -> Policy:
    """Validate a bucket policy for `bucket`; MalformedPolicy (S3's reason) if it is not one.
    `known_user(name)`: whether a user ARN names a user (unknown ones are refused, as S3
    refuses principals that do not exist)."""
    raw = text.encode("utf-8") if isinstance(text, str) else text
    if len(raw) > MAX_POLICY_BYTES:
        raise malformed("Policies must be smaller than 20 KB")
    if not raw.lstrip().startswith(b"{"):
        raise malformed("Policies must be valid JSON and the first byte must be '{'")
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (ValueError, UnicodeDecodeError):
        raise malformed("This policy contains invalid Json") from None
    if not isinstance(doc, dict):
        raise malformed("This policy contains invalid Json")
    for k in doc:
        if k not in ("Version", "Id", "Statement"):
            raise malformed(f"Unknown field {k}")
    version = doc.get("Version", "2008-10-17")
    if version not in VERSIONS:
        raise malformed("The policy must contain a valid version string")
    if "Statement" not in doc:
        raise malformed("Missing required field Statement")
    raw_statements = doc["Statement"]
    if isinstance(raw_statements, dict):
        raw_statements = [raw_statements]
    if not isinstance(raw_statements, list) or not raw_statements:
        raise malformed("Missing required field Statement")
    statements = tuple(_statement(s, bucket, known_user) for s in raw_statements)
    sids = [s.sid for s in statements if s.sid]
    if len(sids) != len(set(sids)):
        raise malformed("Statement IDs (SID) in a single policy must be unique")
    if version == "2008-10-17":
        # Variables are plain text in the old language version.
        statements = tuple(_literal(s) for s in statements)
    return Policy(version, statements, json.dumps(doc, separators=(",", ":")))


def _literal(s: Statement) -> Statement:
    if not any("${" in r for r in s.resources):
        return s
    esc = tuple(r.replace("${", "${$}{") for r in s.resources)
    return Statement(s.sid, s.effect, s.principals, s.not_principal, s.actions, esc,
                     s.not_resource, s.tests)


def _no_duplicates(pairs: Iterable[tuple[str, object]]) -> dict[str, object]:
    out: dict[str, object] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"duplicate key {k}")
        out[k] = v
    return out
