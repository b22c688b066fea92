"""The access decision, in S3's order:

1. The bucket owner may always get, put and delete the bucket policy (no lock-out).
2. An explicit Deny in the bucket policy wins over everything.
3. An Allow in the policy grants (under RestrictPublicBuckets, a public policy grants only
   the bucket owner).
4. Otherwise ownership and ACLs: the bucket owner may do every bucket action and write or
   delete any key; with ACLs disabled (BucketOwnerEnforced) the bucket owner owns every object
   and ACLs grant nothing. With ACLs enabled the object's owner may act on it, and the
   bucket's ACL (bucket actions, writes) or the object's ACL (reads, ACP) may grant the
   permission that the action maps to (IgnorePublicAcls drops grants to the public groups).
5. Default deny.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from gateway.access import acl
from gateway.access import actions as act
from gateway.access.conditions import Context
from gateway.access.controls import NOTHING_BLOCKED, PublicAccessBlock
from gateway.access.identity import Requester
from gateway.access.policy import Policy


class Decision(enum.Enum):
    ALLOW = "allow"
    DENY = "deny"                   # explicit Deny in the policy
    IMPLICIT_DENY = "implicit"      # nothing allows it
    NEED_OBJECT = "need-object"     # the object's owner and ACL decide: call again with them

    @property
    def allowed(self) -> bool:
        return self is Decision.ALLOW


@dataclass(frozen=True)
class BucketAccess:
    """What the decision needs about a bucket."""

    name: str
    owner: str
    grants: tuple[acl.Grant, ...] = ()
    policy: Policy | None = None
    ownership: str = "BucketOwnerEnforced"
    pab: PublicAccessBlock = NOTHING_BLOCKED

    @property
    def acls_enabled(self) -> bool:
        return self.ownership != "BucketOwnerEnforced"


@dataclass(frozen=True)
class ObjectAccess:
    owner: str
    grants: tuple[acl.Grant, ...] = ()


def resource_arn(bucket: str, key: str | None) -> str:
    return "arn:aws:s3:::" + bucket + ("" if key is None else "/" + key)


def decide(who: Requester, action: str, bucket: BucketAccess, key: str | None,
           ctx: Context, obj: ObjectAccess | None = None) -> Decision:
    """May `who` do `action` (canonical name, no "s3:") on the bucket, or on `key` in it for
    object actions? `obj`: the object's owner and grants, when the answer needs them."""
    is_owner = who.name is not None and who.name == bucket.owner
    if is_owner and action in act.OWNER_LOCKOUT_PROOF:
        return Decision.ALLOW
    object_action = act.is_object_action(action)
    arn = resource_arn(bucket.name, key if object_action else None)
    if bucket.policy is not None:
        allow, deny = bucket.policy.allows_and_denies(who, action, arn, ctx)
        if deny:
            return Decision.DENY
        if allow and (is_owner or not (bucket.pab.restrict_public_buckets
                                       and bucket.policy.is_public())):
            return Decision.ALLOW
    ignore = bucket.pab.ignore_public_acls
    if not object_action or action in act.BUCKET_GOVERNED:
        if is_owner:
            return Decision.ALLOW
        perm = act.BUCKET_ACL_PERMISSION.get(action)
        if bucket.acls_enabled and perm and acl.allows(bucket.grants, who, perm,
                                                       ignore_public=ignore):
            return Decision.ALLOW
        return Decision.IMPLICIT_DENY
    if not bucket.acls_enabled:
        return Decision.ALLOW if is_owner else Decision.IMPLICIT_DENY
    if obj is None:
        return Decision.NEED_OBJECT
    if who.name is not None and who.name == obj.owner:
        return Decision.ALLOW
    perm = act.OBJECT_ACL_PERMISSION.get(action)
    if perm and acl.allows(obj.grants, who, perm, ignore_public=ignore):
        return Decision.ALLOW
    return Decision.IMPLICIT_DENY


def policy_status_public(policy: Policy | None) -> bool:
    """GetBucketPolicyStatus's IsPublic."""
    return policy is not None and policy.is_public()
