"""S3 action names: which exist (a policy naming another is malformed), which act on a bucket
and which on an object (so which ARN a statement's Resource must match), and which ACL
permission grants each."""

from __future__ import annotations

from functools import lru_cache

from gateway.access import wildcard

# Actions whose resource is an object, arn:aws:s3:::bucket/key.
OBJECT_ACTIONS = frozenset({
    "AbortMultipartUpload", "BypassGovernanceRetention", "DeleteObject",
    "DeleteObjectTagging", "DeleteObjectVersion", "DeleteObjectVersionTagging", "GetObject",
    "GetObjectAcl", "GetObjectAttributes", "GetObjectLegalHold", "GetObjectRetention",
    "GetObjectTagging", "GetObjectTorrent", "GetObjectVersion", "GetObjectVersionAcl",
    "GetObjectVersionAttributes", "GetObjectVersionForReplication", "GetObjectVersionTagging",
    "GetObjectVersionTorrent", "ListMultipartUploadParts", "ObjectOwnerOverrideToBucketOwner",
    "PutObject", "PutObjectAcl", "PutObjectLegalHold", "PutObjectRetention",
    "PutObjectTagging", "PutObjectVersionAcl", "PutObjectVersionTagging", "ReplicateDelete",
    "ReplicateObject", "ReplicateTags", "RestoreObject",
})
# Actions whose resource is the bucket, arn:aws:s3:::bucket.
BUCKET_ACTIONS = frozenset({
    "CreateBucket", "DeleteBucket", "DeleteBucketPolicy", "DeleteBucketWebsite",
    "GetAccelerateConfiguration", "GetAnalyticsConfiguration", "GetBucketAcl", "GetBucketCORS",
    "GetBucketLocation", "GetBucketLogging", "GetBucketNotification",
    "GetBucketObjectLockConfiguration", "GetBucketOwnershipControls", "GetBucketPolicy",
    "GetBucketPolicyStatus", "GetBucketPublicAccessBlock", "GetBucketRequestPayment",
    "GetBucketTagging", "GetBucketVersioning", "GetBucketWebsite",
    "GetEncryptionConfiguration", "GetIntelligentTieringConfiguration",
    "GetInventoryConfiguration", "GetLifecycleConfiguration", "GetMetricsConfiguration",
    "GetReplicationConfiguration", "ListBucket", "ListBucketMultipartUploads",
    "ListBucketVersions", "PutAccelerateConfiguration", "PutAnalyticsConfiguration",
    "PutBucketAcl", "PutBucketCORS", "PutBucketLogging", "PutBucketNotification",
    "PutBucketObjectLockConfiguration", "PutBucketOwnershipControls", "PutBucketPolicy",
    "PutBucketPublicAccessBlock", "PutBucketRequestPayment", "PutBucketTagging",
    "PutBucketVersioning", "PutBucketWebsite", "PutEncryptionConfiguration",
    "PutIntelligentTieringConfiguration", "PutInventoryConfiguration",
    "PutLifecycleConfiguration", "PutMetricsConfiguration", "PutReplicationConfiguration",
})
# Account-level actions: known (a policy may name them in a wildcard) but never on a bucket.
OTHER_ACTIONS = frozenset({"ListAllMyBuckets", "GetAccountPublicAccessBlock",
                           "PutAccountPublicAccessBlock"})
ALL_ACTIONS = OBJECT_ACTIONS | BUCKET_ACTIONS | OTHER_ACTIONS
_BY_LOWER = {a.lower(): a for a in ALL_ACTIONS}

# Which ACL permission allows an action, on the bucket's ACL or the object's (S3's mapping of
# ACL permissions to policy actions). FULL_CONTROL allows all of them.
BUCKET_ACL_PERMISSION = {
    "ListBucket": "READ", "ListBucketVersions": "READ", "ListBucketMultipartUploads": "READ",
    "PutObject": "WRITE", "DeleteObject": "WRITE", "AbortMultipartUpload": "WRITE",
    "ListMultipartUploadParts": "READ",
    "GetBucketAcl": "READ_ACP", "PutBucketAcl": "WRITE_ACP",
}
OBJECT_ACL_PERMISSION = {
    "GetObject": "READ", "GetObjectVersion": "READ", "GetObjectTorrent": "READ",
    "GetObjectAttributes": "READ", "GetObjectVersionAttributes": "READ",
    "GetObjectAcl": "READ_ACP", "GetObjectVersionAcl": "READ_ACP",
    "PutObjectAcl": "WRITE_ACP", "PutObjectVersionAcl": "WRITE_ACP",
}
# Object actions the bucket governs (the bucket's WRITE/READ, or its owner), whoever owns the
# object: writing or deleting a key, an upload's parts.
BUCKET_GOVERNED = frozenset({"PutObject", "DeleteObject", "DeleteObjectVersion",
                             "AbortMultipartUpload", "ListMultipartUploadParts"})
# The bucket owner may always do these, whatever the policy says: a policy that denies
# everything cannot lock its owner out (as S3 lets the owning account's root user do).
OWNER_LOCKOUT_PROOF = frozenset({"GetBucketPolicy", "PutBucketPolicy", "DeleteBucketPolicy"})


def canonical(name: str) -> str | None:
    """The S3 action's canonical spelling (case-insensitive, "s3:" optional), None if unknown."""
    if name.lower().startswith("s3:"):
        name = name[3:]
    return _BY_LOWER.get(name.lower())


def is_object_action(action: str) -> bool:
    return action in OBJECT_ACTIONS


@lru_cache(maxsize=2048)
def expand(pattern: str) -> frozenset[str]:
    """The known actions an Action entry ("s3:Get*", "*", "s3:getobject") names; empty if it
    names none (or another service's)."""
    if pattern == "*":
        return frozenset(ALL_ACTIONS)
    if not pattern.lower().startswith("s3:"):
        return frozenset()
    pat = pattern[3:]
    return frozenset(a for a in ALL_ACTIONS if wildcard.match(pat, a, ignore_case=True))
