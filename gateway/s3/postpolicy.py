"""POST object's policy document and form signature, as pure rules (S3's "browser-based
uploads using POST"): the base64 JSON policy with its `expiration` and `conditions`, every
form field checked against them, and the SigV4 (x-amz-signature over the policy with the
credential's signing key) or SigV2 (`signature`, HMAC-SHA1 of the policy) form signature.

Condition forms: {"field": "value"} and ["eq", "$field", "value"] (exact match),
["starts-with", "$field", "prefix"] ("" matches anything; for Content-Type each comma-separated
value must start so), ["content-length-range", min, max] (the file's size). Field names are
case-insensitive. Every form field but the signature fields, `file`, `policy` and `x-ignore-*`
ones must be named by a condition. Failures are AccessDenied with S3's "Invalid according to
Policy" messages; a malformed document is InvalidPolicyDocument."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from gateway.s3.auth import sigv2, sigv4
from gateway.s3.errors import S3Error

# Form fields that no condition needs to name.
EXEMPT = {"policy", "signature", "x-amz-signature", "awsaccesskeyid", "file"}


@dataclass
class Policy:
    expiration: float
    conditions: list[Any]
    length_range: tuple[int, int] | None


def _bad(msg: str) -> S3Error:
    return S3Error("InvalidPolicyDocument", f"Invalid Policy: {msg}")


def _denied(msg: str) -> S3Error:
    return S3Error("AccessDenied", f"Invalid according to Policy: {msg}")


def parse_time(text: Any) -> float | None:
    if not isinstance(text, str) or not text[:1].isdigit():
        return None
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def decode(policy_b64: str) -> Policy:
    """The policy document of the form's `policy` field (InvalidPolicyDocument when it is not
    base64 JSON with an expiration and a list of conditions, each of a known form)."""
    try:
        raw = base64.b64decode(policy_b64.strip(), validate=True)
        doc = json.loads(raw)
    except (binascii.Error, ValueError, UnicodeDecodeError):
        raise _bad("Invalid JSON.") from None
    if not isinstance(doc, dict):
        raise _bad("Invalid JSON.")
    if "expiration" not in doc:
        raise _bad("Policy missing expiration.")
    exp = parse_time(doc["expiration"])
    if exp is None:
        raise _bad("Invalid 'expiration' value: '" + str(doc["expiration"])[:100] + "'")
    conds = doc.get("conditions")
    if not isinstance(conds, list):
        raise _bad("Policy missing conditions.")
    rng: tuple[int, int] | None = None
    for c in conds:
        if isinstance(c, dict):
            if len(c) != 1 or not all(isinstance(v, str) for v in c.values()):
                raise _bad("Invalid Simple-Condition: Simple-Conditions must have exactly one "
                           "property specified.")
        elif isinstance(c, list) and c and isinstance(c[0], str):
            op = c[0].lower()
            if op == "content-length-range":
                if len(c) != 3 or not all(isinstance(v, int) and not isinstance(v, bool)
                                          and v >= 0 for v in c[1:]):
                    raise _bad("Invalid content-length-range condition.")
                rng = (int(c[1]), int(c[2]))
            elif op in ("eq", "starts-with"):
                if len(c) != 3 or not all(isinstance(v, str) for v in c[1:]) or \
                        not c[1].startswith("$"):
                    raise _bad(f"Invalid {op} condition: {json.dumps(c)[:200]}")
            else:
                raise _bad(f"Invalid condition operator: {c[0][:50]}")
        else:
            raise _bad("Invalid condition.")
    return Policy(exp, conds, rng)


def check(policy: Policy, fields: dict[str, str], bucket: str, now: float) -> None:
    """The policy allows this form (fields: lower-cased names, the key with ${filename}
    already replaced) for this bucket, now; AccessDenied as S3 otherwise."""
    if policy.expiration <= now:
        raise _denied("Policy expired.")
    have = {**fields, "bucket": bucket}
    named: set[str] = set()
    for c in policy.conditions:
        if isinstance(c, dict):
            (name, want), = c.items()
            op, name = "eq", name.lower()
        else:
            op = c[0].lower()
            if op == "content-length-range":
                continue
            name, want = c[1][1:].lower(), c[2]
        named.add(name)
        value = have.get(name)
        if op == "eq":
            ok = value == want
        elif name == "content-type" and value is not None:
            ok = all(v.strip().startswith(want) for v in value.split(","))
        else:
            ok = value is not None and value.startswith(want)
        if not ok:
            raise _denied("Policy Condition failed: " + json.dumps(c if isinstance(c, list)
                                                                   else ["eq", "$" + name, want]))
    extra = sorted(n for n in fields if n not in named and n not in EXEMPT
                   and not n.startswith("x-ignore-"))
    if extra:
        raise _denied("Extra input fields: " + ", ".join(extra))


def check_length(policy: Policy | None, size: int) -> None:
    """The file's size against content-length-range (EntityTooSmall / EntityTooLarge)."""
    if policy is None or policy.length_range is None:
        return
    lo, hi = policy.length_range
    if size < lo:
        raise S3Error("EntityTooSmall", MinSizeAllowed=lo, ProposedSize=size)
    if size > hi:
        raise S3Error("EntityTooLarge", MaxSizeAllowed=hi, ProposedSize=size)


def signer(fields: dict[str, str]) -> tuple[str, str] | None:
    """("v4" | "v2", access key) of a signed form; None for an anonymous one. A partly signed
    form is InvalidArgument, as S3 answers it."""
    if "x-amz-signature" in fields or "x-amz-credential" in fields or \
            "x-amz-algorithm" in fields:
        for f in ("x-amz-algorithm", "x-amz-credential", "x-amz-date", "x-amz-signature",
                  "policy"):
            if f not in fields:
                raise S3Error("InvalidArgument", f"Bucket POST must contain a field named "
                              f"'{f}'.  If it is specified, please check the order of the "
                              f"fields.", ArgumentName=f, ArgumentValue="")
        if fields["x-amz-algorithm"] != "AWS4-HMAC-SHA256":
            raise S3Error("InvalidArgument", "POST form: unsupported x-amz-algorithm",
                          ArgumentName="x-amz-algorithm",
                          ArgumentValue=fields["x-amz-algorithm"][:64])
        key = sigv4._parse_credential(fields["x-amz-credential"], "InvalidArgument")[0]
        return "v4", key
    if "awsaccesskeyid" in fields or "signature" in fields:
        for f in ("awsaccesskeyid", "signature", "policy"):
            if f not in fields:
                name = {"awsaccesskeyid": "AWSAccessKeyId", "signature": "Signature"}.get(f, f)
                raise S3Error("InvalidArgument", f"Bucket POST must contain a field named "
                              f"'{name}'.  If it is specified, please check the order of the "
                              f"fields.", ArgumentName=name, ArgumentValue="")
        return "v2", fields["awsaccesskeyid"]
    return None


def verify(kind: str, fields: dict[str, str], secret: str) -> None:
    """The form's signature over its policy field, with the signer's secret;
    SignatureDoesNotMatch otherwise."""
    policy = fields["policy"]
    if kind == "v4":
        _, date, region, service = sigv4._parse_credential(fields["x-amz-credential"],
                                                           "InvalidArgument")
        if not fields["x-amz-date"].startswith(date):
            raise S3Error("InvalidArgument", "The x-amz-date field does not match the date "
                          "of the credential scope.", ArgumentName="x-amz-date",
                          ArgumentValue=fields["x-amz-date"][:32])
        want = sigv4.sign(sigv4.signing_key(secret, date, region, service), policy)
        got = fields["x-amz-signature"]
    else:
        want, got = sigv2.sign(secret, policy), fields["signature"]
    if not hmac.compare_digest(want.encode("utf-8", "replace"), got.encode("utf-8", "replace")):
        raise S3Error("SignatureDoesNotMatch", "The request signature we calculated does not "
                      "match the signature you provided. Check your key and signing method.")
