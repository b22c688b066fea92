"""Access control lists: grants, canned ACLs, `x-amz-grant-*` headers, and the
AccessControlPolicy XML of Get/Put*Acl.

The stored (normalised) form is a list of {"id": <canonical id>} or {"uri": <group>}
grantees with a "permission". The owner is not part of it (the bucket or object record
names its owner)."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from xml.sax.saxutils import escape

from gateway.access.identity import Requester, canonical_id, is_canonical_id
from gateway.s3.errors import S3Error

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
XSI_NS = "http://www.w3.org/2001/XMLSchema-instance"
ALL_USERS = "http://acs.amazonaws.com/groups/global/AllUsers"
AUTHENTICATED_USERS = "http://acs.amazonaws.com/groups/global/AuthenticatedUsers"
LOG_DELIVERY = "http://acs.amazonaws.com/groups/s3/LogDelivery"
GROUPS = (ALL_USERS, AUTHENTICATED_USERS, LOG_DELIVERY)
PUBLIC_GROUPS = (ALL_USERS, AUTHENTICATED_USERS)
PERMISSIONS = ("FULL_CONTROL", "READ", "WRITE", "READ_ACP", "WRITE_ACP")
MAX_GRANTS = 100
GRANT_HEADERS = {"x-amz-grant-read": "READ", "x-amz-grant-write": "WRITE",
                 "x-amz-grant-read-acp": "READ_ACP", "x-amz-grant-write-acp": "WRITE_ACP",
                 "x-amz-grant-full-control": "FULL_CONTROL"}
CANNED = ("private", "public-read", "public-read-write", "authenticated-read",
          "bucket-owner-read", "bucket-owner-full-control", "log-delivery-write")

# Resolves a canonical id to the user's name (None: no such user).
IdLookup = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Grant:
    kind: str          # "id" (a user's canonical id) or "uri" (a group)
    value: str
    permission: str

    def to_dict(self) -> dict[str, str]:
        return {self.kind: self.value, "permission": self.permission}


def owner_grant(owner: str) -> Grant:
    return Grant("id", canonical_id(owner), "FULL_CONTROL")


def to_list(grants: Iterable[Grant]) -> list[dict[str, str]]:
    """The normalised form kept in BucketRecord.acl / ObjectRecord.acl."""
    return [g.to_dict() for g in grants]


def from_list(stored: list[dict[str, Any]] | None, owner: str) -> list[Grant]:
    """The stored grants; None means the default (the owner's FULL_CONTROL)."""
    if stored is None:
        return [owner_grant(owner)]
    return [g for g in map(_stored_grant, stored) if g is not None]


_GROUP_NAMES = {u.rsplit("/", 1)[1]: u for u in GROUPS}


def _stored_grant(d: Any) -> Grant | None:
    """One stored grant; an entry that cannot be read grants nothing (never an error).
    Also reads the {"grantee": {"type", "id" | "uri"}, "permission"} spelling."""
    if not isinstance(d, dict) or d.get("permission") not in PERMISSIONS:
        return None
    src = d.get("grantee") if isinstance(d.get("grantee"), dict) else d
    if isinstance(src.get("id"), str) and is_canonical_id(src["id"]):
        return Grant("id", src["id"], d["permission"])
    uri = src.get("uri")
    uri = _GROUP_NAMES.get(uri, uri) if isinstance(uri, str) else None
    if uri in GROUPS:
        return Grant("uri", uri, d["permission"])
    return None


def canned(name: str, owner: str, bucket_owner: str | None = None) -> list[Grant]:
    """A canned ACL's grants; `owner` is the resource's owner, `bucket_owner` the bucket's
    (for an object's bucket-owner-* ACLs). InvalidArgument for an unknown name."""
    bo = bucket_owner or owner
    grants = [owner_grant(owner)]
    if name == "private":
        pass
    elif name == "public-read":
        grants.append(Grant("uri", ALL_USERS, "READ"))
    elif name == "public-read-write":
        grants += [Grant("uri", ALL_USERS, "READ"), Grant("uri", ALL_USERS, "WRITE")]
    elif name == "authenticated-read":
        grants.append(Grant("uri", AUTHENTICATED_USERS, "READ"))
    elif name == "bucket-owner-read":
        if bo != owner:
            grants.append(Grant("id", canonical_id(bo), "READ"))
    elif name == "bucket-owner-full-control":
        if bo != owner:
            grants.append(owner_grant(bo))
    elif name == "log-delivery-write":
        grants += [Grant("uri", LOG_DELIVERY, "WRITE"), Grant("uri", LOG_DELIVERY, "READ_ACP")]
    else:
        raise S3Error("InvalidArgument", ArgumentName="x-amz-acl", ArgumentValue=name[:64])
    return grants


_PAIR = re.compile(r'\s*([A-Za-z]+)\s*=\s*(?:"([^"]*)"|([^,\s]*))\s*(?:,|$)')


def _grantee(kind: str, value: str, known_id: IdLookup) -> tuple[str, str]:
    if kind == "id":
        if not is_canonical_id(value) or known_id(value) is None:
            raise S3Error("InvalidArgument", "Invalid id", ArgumentName="CanonicalUser/ID",
                          ArgumentValue=value[:80])
        return "id", value
    if kind == "uri":
        if value not in GROUPS:
            raise S3Error("InvalidArgument", "Invalid group uri", ArgumentName="Group/URI",
                          ArgumentValue=value[:120])
        return "uri", value
    if kind.lower() == "emailaddress":
        raise S3Error("UnresolvableGrantByEmailAddress", Email=value[:120])
    raise S3Error("InvalidArgument", ArgumentName="x-amz-grant", ArgumentValue=kind[:40])


def from_headers(headers: Mapping[str, str], owner: str, known_id: IdLookup,
                 bucket_owner: str | None = None) -> list[Grant] | None:
    """The ACL a request's x-amz-acl or x-amz-grant-* headers ask for; None if it has none."""
    canned_name = headers.get("x-amz-acl")
    present = [h for h in GRANT_HEADERS if headers.get(h) is not None]
    if canned_name is not None and present:
        raise S3Error("InvalidRequest", "Specifying both Canned ACLs and Header Grants is "
                      "not allowed")
    if canned_name is not None:
        return canned(canned_name.strip(), owner, bucket_owner)
    if not present:
        return None
    grants: list[Grant] = []
    for h in present:
        text = headers[h]
        pos = 0
        while pos < len(text):
            m = _PAIR.match(text, pos)
            if not m or m.end() == pos:
                raise S3Error("InvalidArgument", ArgumentName=h, ArgumentValue=text[:120])
            kind, value = m.group(1), m.group(2) if m.group(2) is not None else m.group(3)
            kind, value = _grantee(kind.lower() if kind.lower() in ("id", "uri") else kind,
                                   value, known_id)
            grants.append(Grant(kind, value, GRANT_HEADERS[h]))
            pos = m.end()
    if not grants or len(grants) > MAX_GRANTS:
        raise S3Error("InvalidArgument", "Invalid grant headers", ArgumentName="x-amz-grant")
    return _dedupe(grants)


def _dedupe(grants: list[Grant]) -> list[Grant]:
    out: list[Grant] = []
    for g in grants:
        if g not in out:
            out.append(g)
    return out


def _local(tag: object) -> str:
    return str(tag).rsplit("}", 1)[-1]


def parse_xml(body: bytes, owner: str, known_id: IdLookup) -> list[Grant]:
    """An AccessControlPolicy document -> grants; MalformedACLError if it is not one (an
    Owner naming someone other than the resource's owner included)."""
    from gateway.s3.xmlio import parse_untrusted
    bad = S3Error("MalformedACLError")
    try:
        root = parse_untrusted(body)
    except S3Error:
        raise bad from None
    if _local(root.tag) != "AccessControlPolicy":
        raise bad
    kids = {_local(c.tag): c for c in root}
    if set(kids) - {"Owner", "AccessControlList"} or "AccessControlList" not in kids:
        raise bad
    if "Owner" in kids:
        oid = [c for c in kids["Owner"] if _local(c.tag) == "ID"]
        if len(oid) != 1 or (oid[0].text or "").strip() != canonical_id(owner):
            raise bad
    grants: list[Grant] = []
    for g in kids["AccessControlList"]:
        if _local(g.tag) != "Grant":
            raise bad
        parts = {_local(c.tag): c for c in g}
        if set(parts) != {"Grantee", "Permission"}:
            raise bad
        perm = (parts["Permission"].text or "").strip()
        if perm not in PERMISSIONS:
            raise bad
        gr = parts["Grantee"]
        xtype = gr.get(f"{{{XSI_NS}}}type") or ""
        fields = {_local(c.tag): (c.text or "").strip() for c in gr}
        if xtype == "CanonicalUser" and "ID" in fields:
            kind, value = _grantee("id", fields["ID"], known_id)
        elif xtype == "Group" and "URI" in fields:
            kind, value = _grantee("uri", fields["URI"], known_id)
        elif xtype == "AmazonCustomerByEmail" and "EmailAddress" in fields:
            raise S3Error("UnresolvableGrantByEmailAddress", Email=fields["EmailAddress"][:120])
        else:
            raise bad
        grants.append(Grant(kind, value, perm))
    if len(grants) > MAX_GRANTS:
        raise bad
    return _dedupe(grants)


def render(owner: str, grants: Iterable[Grant], display: IdLookup) -> str:
    """The AccessControlPolicy XML (no declaration) of an owner and grants; `display` names
    a canonical id's user for DisplayName."""
    out = [f'<AccessControlPolicy xmlns="{S3_NS}"><Owner><ID>{canonical_id(owner)}</ID>'
           f"<DisplayName>{escape(owner)}</DisplayName></Owner><AccessControlList>"]
    for g in grants:
        if g.kind == "id":
            name = display(g.value)
            dn = f"<DisplayName>{escape(name)}</DisplayName>" if name else ""
            gx = (f'<Grantee xmlns:xsi="{XSI_NS}" xsi:type="CanonicalUser">'
                  f"<ID>{escape(g.value)}</ID>{dn}</Grantee>")
        else:
            gx = (f'<Grantee xmlns:xsi="{XSI_NS}" xsi:type="Group">'
                  f"<URI>{escape(g.value)}</URI></Grantee>")
        out.append(f"<Grant>{gx}<Permission>{g.permission}</Permission></Grant>")
    out.append("</AccessControlList></AccessControlPolicy>")
    return "".join(out)


def grantee_matches(g: Grant, who: Requester) -> bool:
    if g.kind == "uri":
        if g.value == ALL_USERS:
            return True
        if g.value == AUTHENTICATED_USERS:
            return not who.anonymous
        return False  # LogDelivery: no such service here
    return who.name is not None and g.value == canonical_id(who.name)


def allows(grants: Iterable[Grant], who: Requester, permission: str, *,
           ignore_public: bool = False) -> bool:
    """Whether a grant gives `who` the permission (FULL_CONTROL gives every one)."""
    for g in grants:
        if ignore_public and g.kind == "uri" and g.value in PUBLIC_GROUPS:
            continue
        if g.permission in (permission, "FULL_CONTROL") and grantee_matches(g, who):
            return True
    return False


def is_public(grants: Iterable[Grant]) -> bool:
    return any(g.kind == "uri" and g.value in PUBLIC_GROUPS for g in grants)


def only_owner(grants: Iterable[Grant], owner: str) -> bool:
    """True when the grants give nothing to anyone but `owner` (all that BucketOwnerEnforced
    accepts)."""
    cid = canonical_id(owner)
    return all(g.kind == "id" and g.value == cid for g in grants)
