"""Object ownership controls and the public access block: parse the XML, the stored JSON,
and the defaults.

Defaults follow current AWS (new buckets since April 2023): a bucket without a stored
document has ObjectOwnership BucketOwnerEnforced (ACLs disabled) and every public access
block setting on. DeleteBucketOwnershipControls / DeletePublicAccessBlock store an explicit
"none" document: the bucket then behaves as ObjectWriter / blocks nothing, and the Get
operations answer OwnershipControlsNotFoundError / NoSuchPublicAccessBlockConfiguration."""

from __future__ import annotations

import json
from dataclasses import dataclass

from gateway.s3.errors import S3Error

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
OWNERSHIPS = ("BucketOwnerEnforced", "BucketOwnerPreferred", "ObjectWriter")
DEFAULT_OWNERSHIP = "BucketOwnerEnforced"
PAB_FIELDS = ("BlockPublicAcls", "IgnorePublicAcls", "BlockPublicPolicy",
              "RestrictPublicBuckets")


def _local(tag: object) -> str:
    return str(tag).rsplit("}", 1)[-1]


# ---- ownership ---------------------------------------------------------------------------

def ownership_from_doc(doc: str | None) -> tuple[str, bool]:
    """(effective ObjectOwnership, whether controls exist) of the stored document."""
    if doc is None:
        return DEFAULT_OWNERSHIP, True
    value = json.loads(doc).get("ObjectOwnership")
    return (value, True) if value else ("ObjectWriter", False)


def ownership_doc(value: str | None) -> str:
    return json.dumps({"ObjectOwnership": value}, separators=(",", ":"))


def check_ownership(value: str) -> str:
    if value not in OWNERSHIPS:
        raise S3Error("InvalidArgument", "Invalid x-amz-object-ownership header",
                      ArgumentName="x-amz-object-ownership", ArgumentValue=value[:64])
    return value


def parse_ownership_xml(body: bytes) -> str:
    from gateway.s3.xmlio import parse_untrusted
    root = parse_untrusted(body)
    if _local(root.tag) != "OwnershipControls":
        raise S3Error("MalformedXML")
    rules = list(root)
    if len(rules) != 1 or _local(rules[0].tag) != "Rule":
        raise S3Error("MalformedXML")
    fields = list(rules[0])
    if len(fields) != 1 or _local(fields[0].tag) != "ObjectOwnership":
        raise S3Error("MalformedXML")
    value = (fields[0].text or "").strip()
    if value not in OWNERSHIPS:
        raise S3Error("MalformedXML")
    return value


def ownership_xml(value: str) -> str:
    return (f'<OwnershipControls xmlns="{S3_NS}"><Rule><ObjectOwnership>{value}'
            "</ObjectOwnership></Rule></OwnershipControls>")


# ---- public access block -------------------------------------------------------------------

@dataclass(frozen=True)
class PublicAccessBlock:
    block_public_acls: bool = False
    ignore_public_acls: bool = False
    block_public_policy: bool = False
    restrict_public_buckets: bool = False

    def to_dict(self) -> dict[str, bool]:
        return dict(zip(PAB_FIELDS, (self.block_public_acls, self.ignore_public_acls,
                                     self.block_public_policy, self.restrict_public_buckets),
                        strict=True))


ALL_BLOCKED = PublicAccessBlock(True, True, True, True)
NOTHING_BLOCKED = PublicAccessBlock()


def pab_from_doc(doc: str | None) -> tuple[PublicAccessBlock, bool]:
    """(effective settings, whether a configuration exists) of the stored document."""
    if doc is None:
        return ALL_BLOCKED, True
    d = json.loads(doc)
    if d.get("none"):
        return NOTHING_BLOCKED, False
    return PublicAccessBlock(*(bool(d.get(f)) for f in PAB_FIELDS)), True


def pab_doc(pab: PublicAccessBlock | None) -> str:
    return json.dumps({"none": True} if pab is None else pab.to_dict(), separators=(",", ":"))


def parse_pab_xml(body: bytes) -> PublicAccessBlock:
    from gateway.s3.xmlio import parse_untrusted
    root = parse_untrusted(body)
    if _local(root.tag) != "PublicAccessBlockConfiguration":
        raise S3Error("MalformedXML")
    got: dict[str, bool] = {}
    for c in root:
        name = _local(c.tag)
        text = (c.text or "").strip().lower()
        if name not in PAB_FIELDS or name in got or text not in ("true", "false"):
            raise S3Error("MalformedXML")
        got[name] = text == "true"
    return PublicAccessBlock(*(got.get(f, False) for f in PAB_FIELDS))


def pab_xml(pab: PublicAccessBlock) -> str:
    body = "".join(f"<{k}>{'true' if v else 'false'}</{k}>" for k, v in pab.to_dict().items())
    return f'<PublicAccessBlockConfiguration xmlns="{S3_NS}">{body}</PublicAccessBlockConfiguration>'
