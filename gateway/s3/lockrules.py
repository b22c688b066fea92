"""S3 Object Lock as pure rules: the lock request headers and XML documents parsed and
rendered, and the decisions (may this version be deleted? may its retention change?).

A version's lock lives in its stored headers (`ObjectRecord.headers`) under the names S3
answers them with on GET/HEAD, so it travels with the object's self-description on the nodes
(gateway/store/tagarchives.py records later changes) and comes back with recover-metadata:

    x-amz-object-lock-mode                GOVERNANCE | COMPLIANCE
    x-amz-object-lock-retain-until-date   ISO 8601, UTC, milliseconds ("...T00:00:00.000Z")
    x-amz-object-lock-legal-hold          ON | OFF

A bucket's lock is its `object-lock` configuration document (JSON): {"enabled": true} and,
with a default retention, {"rule": {"mode": ..., "days": N} or {"mode": ..., "years": N}}.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from xml.etree.ElementTree import Element
from xml.sax.saxutils import escape

from gateway.s3.errors import S3Error
from gateway.s3.xmlio import parse_untrusted

MODE = "x-amz-object-lock-mode"
UNTIL = "x-amz-object-lock-retain-until-date"
HOLD = "x-amz-object-lock-legal-hold"
LOCK_HEADERS = (MODE, UNTIL, HOLD)
BYPASS = "x-amz-bypass-governance-retention"
MODES = ("GOVERNANCE", "COMPLIANCE")
CONFIG_KIND = "object-lock"
S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
DAY = 86400.0
MAX_DAYS = 36500          # S3 accepts up to 100 years of default retention
MAX_YEARS = 100

MISSING_CONFIG = "Bucket is missing Object Lock Configuration"


# ---- dates -------------------------------------------------------------------------------

def iso_ms(ts: float) -> str:
    """The form S3 answers dates in: UTC with milliseconds."""
    dt = datetime.fromtimestamp(ts, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.") + f"{dt.microsecond // 1000:03d}Z"


def parse_date(text: str) -> float | None:
    """An ISO 8601 timestamp (a missing zone is UTC) as epoch seconds; None if malformed."""
    t = text.strip()
    if not t or not t[0].isdigit() or not t.isascii():
        return None
    try:
        dt = datetime.fromisoformat(t)
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=UTC)
    try:
        return dt.timestamp()
    except (OverflowError, OSError, ValueError):
        return None


# ---- a version's lock (in its headers) ----------------------------------------------------

def lock_of(headers: Mapping[str, str] | None) -> dict[str, str]:
    """The lock entries of a version's stored headers ({} when it has none)."""
    return {k: v for k, v in (headers or {}).items() if k in LOCK_HEADERS}


def with_lock(headers: Mapping[str, str], lock: Mapping[str, str]) -> dict[str, str]:
    """headers with their lock entries replaced by `lock`'s."""
    out = {k: v for k, v in headers.items() if k not in LOCK_HEADERS}
    out.update({k: v for k, v in lock.items() if k in LOCK_HEADERS})
    return out


def retention(headers: Mapping[str, str] | None) -> tuple[str | None, float | None]:
    """(mode, retain-until epoch seconds) of a version; (None, None) without retention."""
    h = headers or {}
    mode, until = h.get(MODE), h.get(UNTIL)
    if mode not in MODES or until is None:
        return None, None
    return mode, parse_date(until)


def hold_on(headers: Mapping[str, str] | None) -> bool:
    return (headers or {}).get(HOLD) == "ON"


def blocks_delete(headers: Mapping[str, str] | None, now: float,
                  bypass_governance: bool = False) -> bool:
    """Whether a version with these headers may not be deleted (nor its data freed) now: a
    legal hold, an unexpired COMPLIANCE retention, or an unexpired GOVERNANCE retention
    unless the caller bypasses it."""
    if not headers:
        return False
    if hold_on(headers):
        return True
    mode, until = retention(headers)
    if mode is None or until is None or until <= now:
        return False
    return mode == "COMPLIANCE" or not bypass_governance


# ---- writes: headers and the bucket default ----------------------------------------------

def has_lock_headers(headers: Mapping[str, str]) -> bool:
    return any(headers.get(h) is not None for h in LOCK_HEADERS)


def _checked_mode(value: str) -> str:
    if value not in MODES:
        raise S3Error("InvalidArgument", "Unknown wormMode directive.", ArgumentName=MODE,
                      ArgumentValue=value[:256])
    return value


def parse_write_headers(headers: Mapping[str, str], now: float) -> dict[str, str]:
    """The lock a PutObject / CreateMultipartUpload / CopyObject asks for with its
    x-amz-object-lock-* headers, validated ({} when none); InvalidArgument as S3 answers."""
    mode, until, hold = (headers.get(h) for h in LOCK_HEADERS)
    out: dict[str, str] = {}
    if (mode is None) != (until is None):
        raise S3Error("InvalidArgument", "x-amz-object-lock-retain-until-date and "
                      "x-amz-object-lock-mode must both be supplied")
    if mode is not None and until is not None:
        out[MODE] = _checked_mode(mode.strip())
        ts = parse_date(until)
        if ts is None:
            raise S3Error("InvalidArgument", "The retain until date must be provided in ISO "
                          "8601 format", ArgumentName=UNTIL, ArgumentValue=until[:256])
        if ts <= now:
            raise S3Error("InvalidArgument", "The retain until date must be in the future!",
                          ArgumentName=UNTIL, ArgumentValue=until[:256])
        out[UNTIL] = iso_ms(ts)
    if hold is not None:
        h = hold.strip()
        if h not in ("ON", "OFF"):
            raise S3Error("InvalidArgument", "Legal Hold must be either of 'ON' or 'OFF'",
                          ArgumentName=HOLD, ArgumentValue=hold[:256])
        out[HOLD] = h
    return out


def config_from_doc(doc: str | None) -> dict[str, Any] | None:
    """A bucket's stored object-lock document; None when the bucket has no lock."""
    if not doc:
        return None
    try:
        d = json.loads(doc)
    except ValueError:
        return None
    return d if isinstance(d, dict) and d.get("enabled") else None


def default_lock(config: dict[str, Any] | None, now: float) -> dict[str, str]:
    """The retention the bucket's default rule gives a new version ({} without a rule)."""
    rule = (config or {}).get("rule")
    if not rule:
        return {}
    span = float(rule["days"]) * DAY if "days" in rule else float(rule["years"]) * 365 * DAY
    return {MODE: rule["mode"], UNTIL: iso_ms(now + span)}


def write_lock(headers: Mapping[str, str], config: dict[str, Any] | None,
               now: float) -> dict[str, str]:
    """The lock a new version gets: its headers' (a mode and date both given replace the
    bucket's default retention), else the bucket's default. Lock headers on a bucket
    without lock: InvalidRequest, as S3."""
    asked = parse_write_headers(headers, now)
    if config is None:
        if asked:
            raise S3Error("InvalidRequest", MISSING_CONFIG)
        return {}
    if MODE not in asked:
        asked = {**default_lock(config, now), **asked}
    return asked


# ---- XML documents -------------------------------------------------------------------------

def _root(body: bytes, tag: str) -> Element:
    root = parse_untrusted(body)
    for e in root.iter():
        if isinstance(e.tag, str) and "}" in e.tag:
            e.tag = e.tag.split("}", 1)[1]
    if root.tag != tag:
        raise S3Error("MalformedXML")
    return root


def _only(parent: Element, allowed: set[str]) -> None:
    for child in parent:
        if child.tag not in allowed:
            raise S3Error("MalformedXML")


def _positive(text: str | None, name: str, hi: int) -> int:
    t = (text or "").strip()
    if not t.lstrip("-").isdigit() or not t.isascii():
        raise S3Error("MalformedXML")
    n = int(t)
    if n <= 0:
        raise S3Error("InvalidArgument", "Default retention period must be a positive "
                      "integer value", ArgumentName=name, ArgumentValue=t[:32])
    if n > hi:
        raise S3Error("InvalidArgument", f"Default retention period is too large: {name}",
                      ArgumentName=name, ArgumentValue=t[:32])
    return n


def parse_lock_config(body: bytes) -> dict[str, Any]:
    """PutObjectLockConfiguration's document -> the stored form (see the module doc)."""
    root = _root(body, "ObjectLockConfiguration")
    _only(root, {"ObjectLockEnabled", "Rule"})
    if (root.findtext("ObjectLockEnabled") or "").strip() != "Enabled":
        raise S3Error("MalformedXML")
    out: dict[str, Any] = {"enabled": True}
    rule = root.find("Rule")
    if rule is None:
        return out
    _only(rule, {"DefaultRetention"})
    dr = rule.find("DefaultRetention")
    if dr is None:
        raise S3Error("MalformedXML")
    _only(dr, {"Mode", "Days", "Years"})
    mode = (dr.findtext("Mode") or "").strip()
    if mode not in MODES:
        raise S3Error("MalformedXML")
    days, years = dr.find("Days"), dr.find("Years")
    if (days is None) == (years is None):
        raise S3Error("MalformedXML")
    r: dict[str, Any] = {"mode": mode}
    if days is not None:
        r["days"] = _positive(days.text, "Days", MAX_DAYS)
    else:
        r["years"] = _positive(years.text if years is not None else None, "Years", MAX_YEARS)
    out["rule"] = r
    return out


def render_lock_config(config: dict[str, Any]) -> str:
    inner = "<ObjectLockEnabled>Enabled</ObjectLockEnabled>"
    rule = config.get("rule")
    if rule:
        span = (f"<Days>{int(rule['days'])}</Days>" if "days" in rule
                else f"<Years>{int(rule['years'])}</Years>")
        inner += (f"<Rule><DefaultRetention><Mode>{escape(rule['mode'])}</Mode>{span}"
                  f"</DefaultRetention></Rule>")
    return f'<ObjectLockConfiguration xmlns="{S3_NS}">{inner}</ObjectLockConfiguration>'


def parse_retention(body: bytes) -> tuple[str | None, float | None]:
    """PutObjectRetention's document: (mode, retain-until epoch seconds), (None, None) to
    remove the retention (an empty <Retention/>)."""
    root = _root(body, "Retention")
    _only(root, {"Mode", "RetainUntilDate"})
    mode_e, until_e = root.find("Mode"), root.find("RetainUntilDate")
    if mode_e is None and until_e is None:
        return None, None
    if mode_e is None or until_e is None:
        raise S3Error("MalformedXML")
    mode = (mode_e.text or "").strip()
    if mode not in MODES:
        raise S3Error("MalformedXML")
    ts = parse_date(until_e.text or "")
    if ts is None:
        raise S3Error("MalformedXML")
    return mode, ts


def render_retention(headers: Mapping[str, str]) -> str:
    return (f'<Retention xmlns="{S3_NS}"><Mode>{escape(headers[MODE])}</Mode>'
            f'<RetainUntilDate>{escape(headers[UNTIL])}</RetainUntilDate></Retention>')


def parse_legal_hold(body: bytes) -> str:
    """PutObjectLegalHold's document: "ON" or "OFF"."""
    root = _root(body, "LegalHold")
    _only(root, {"Status"})
    status = (root.findtext("Status") or "").strip()
    if status not in ("ON", "OFF"):
        raise S3Error("MalformedXML")
    return status


def render_legal_hold(status: str) -> str:
    return f'<LegalHold xmlns="{S3_NS}"><Status>{escape(status)}</Status></LegalHold>'


# ---- retention changes ---------------------------------------------------------------------

def check_retention_change(current: Mapping[str, str] | None, mode: str | None,
                           until: float | None, now: float, bypass: bool) -> None:
    """May a version's retention become (mode, until)? Extending (same or later date) is
    always allowed, and GOVERNANCE may become COMPLIANCE; COMPLIANCE can never be shortened,
    weakened or removed while it lasts; GOVERNANCE only with the bypass (header and
    permission). AccessDenied otherwise, as S3. A new date must be in the future."""
    if until is not None and until <= now:
        raise S3Error("InvalidArgument", "The retain until date must be in the future!")
    cur_mode, cur_until = retention(current)
    if cur_mode is None or cur_until is None or cur_until <= now:
        return  # no retention in force: anything goes
    extends = until is not None and until >= cur_until
    if cur_mode == "COMPLIANCE":
        if mode == "COMPLIANCE" and extends:
            return
        raise S3Error("AccessDenied", "Access Denied because object protected by object lock.")
    if extends and mode in MODES:
        return
    if not bypass:
        raise S3Error("AccessDenied", "Access Denied because object protected by object lock.")
