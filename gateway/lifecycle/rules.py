"""Which lifecycle action applies to an object, a noncurrent version or an upload, and when.

Pure code over the normal form of gateway/lifecycle/config.py. Times are epoch seconds.
`day` is the length of a lifecycle day (86400; `[gateway] lifecycle_day_seconds` shortens
it for tests, as Ceph's rgw_lc_debug_interval does). As S3: an action of N days falls due
N days after the object's creation (or, for a noncurrent version, after its successor's),
rounded up to the next day boundary (midnight UTC for real days).
"""

from __future__ import annotations

import email.utils
import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import quote

DAY = 86400.0


def due_after(start: float, days: int, day: float = DAY) -> float:
    """start + days, rounded up to the next boundary of `day`."""
    return math.ceil((start + days * day) / day) * day


def _prefix(rule: Mapping[str, Any]) -> str:
    if "filter" in rule:
        return rule["filter"].get("prefix") or ""
    return rule.get("prefix") or ""


def rule_matches(rule: Mapping[str, Any], key: str, size: int | None = None,
                 tags: Mapping[str, str] | None = None) -> bool:
    """Does an Enabled rule's filter take this object? Every predicate must hold: the
    prefix, each tag (key and value exactly; other tags on the object do not matter), size
    strictly above ObjectSizeGreaterThan and strictly below ObjectSizeLessThan. `size` None
    (an upload, whose size is not known) never passes a size predicate."""
    if rule.get("status") != "Enabled":
        return False
    if not key.startswith(_prefix(rule)):
        return False
    f = rule.get("filter") or {}
    for k, v in f.get("tags") or ():
        if tags is None or tags.get(k) != v:
            return False
    if f.get("gt") is not None and (size is None or not size > f["gt"]):
        return False
    return not (f.get("lt") is not None and (size is None or not size < f["lt"]))


def needs_tags(doc: Mapping[str, Any]) -> bool:
    """Whether any rule filters by tag (then a worker must read each object's tags)."""
    return any((r.get("filter") or {}).get("tags") for r in doc.get("rules", ()))


def current_expiry(doc: Mapping[str, Any], key: str, size: int, tags: Mapping[str, str],
                   last_modified: float, day: float = DAY) -> tuple[float, str] | None:
    """(when the current version expires, the rule's ID) by the earliest Expiration (Days or
    Date) that matches; the first listed wins a tie. None if no rule expires it."""
    best: tuple[float, str] | None = None
    for r in doc.get("rules", ()):
        exp = r.get("expiration") or {}
        if not rule_matches(r, key, size, tags):
            continue
        if "days" in exp:
            when = due_after(last_modified, int(exp["days"]), day)
        elif "date" in exp:
            when = float(exp["date"])
        else:
            continue
        if best is None or when < best[0]:
            best = (when, r["id"])
    return best


def expiration_header(when: float, rule_id: str) -> str:
    """The `x-amz-expiration` value: `expiry-date="<HTTP date>", rule-id="<id>"`. The ID is
    sent as it is when a header can carry it (S3 sends spaces as spaces), else URL-encoded."""
    date = email.utils.formatdate(when, usegmt=True)
    shown = rule_id if all(" " <= c <= "~" and c != '"' for c in rule_id) else quote(rule_id)
    return f'expiry-date="{date}", rule-id="{shown}"'


def marker_expires(doc: Mapping[str, Any], key: str, created: float, now: float,
                   day: float = DAY) -> str | None:
    """A delete marker that is the only version left of its key: the ID of the rule that
    removes it now (ExpiredObjectDeleteMarker true, or an Expiration by Days it is old enough
    for, as S3 does), else None."""
    for r in doc.get("rules", ()):
        exp = r.get("expiration") or {}
        if not rule_matches(r, key, 0, {}):
            continue
        if exp.get("delete_marker") is True:
            return r["id"]
        if "days" in exp and due_after(created, int(exp["days"]), day) <= now:
            return r["id"]
    return None


def noncurrent_expires(doc: Mapping[str, Any], key: str, size: int,
                       tags: Mapping[str, str], noncurrent_since: float, newer: int,
                       now: float, day: float = DAY) -> str | None:
    """A noncurrent version (one that became noncurrent at `noncurrent_since`, with `newer`
    noncurrent versions newer than itself): the ID of the rule that deletes it now, else
    None. Both NoncurrentDays and NewerNoncurrentVersions must be exceeded: the version goes
    once at least N newer noncurrent versions exist (so N are kept)."""
    for r in doc.get("rules", ()):
        nve = r.get("noncurrent")
        if not nve or not rule_matches(r, key, size, tags):
            continue
        if nve.get("newer") is not None and newer < int(nve["newer"]):
            continue
        if due_after(noncurrent_since, int(nve["days"]), day) <= now:
            return r["id"]
    return None


def upload_abort(doc: Mapping[str, Any], key: str, initiated: float,
                 day: float = DAY) -> tuple[float, str] | None:
    """(when an incomplete multipart upload is aborted, the rule's ID), the earliest of the
    AbortIncompleteMultipartUpload rules whose prefix takes the key."""
    best: tuple[float, str] | None = None
    for r in doc.get("rules", ()):
        ab = r.get("abort")
        if not ab or r.get("status") != "Enabled" or not key.startswith(_prefix(r)):
            continue
        when = due_after(initiated, int(ab["days"]), day)
        if best is None or when < best[0]:
            best = (when, r["id"])
    return best


def has_action(doc: Mapping[str, Any], action: str) -> bool:
    """Whether an Enabled rule has this action ("expiration", "noncurrent", "abort")."""
    return any(r.get("status") == "Enabled" and r.get(action) for r in doc.get("rules", ()))
