"""Access checks for S3 operations: the bucket's policy, ACL, ownership controls and public
access block read from the store, the request context built from the request, and the pure
decision of gateway/access/evaluate.

`authorize(req, bucket_record, action)` is called by `require_bucket` for every bucket or
object operation (the action comes from the handler, see `ACTIONS`); an operation with no
action listed stays owner-only. Anonymous requests get here too: they are allowed exactly
where a policy or an ACL grants them."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from gateway.access import acl, proxies
from gateway.access.actions import is_object_action
from gateway.access.controls import ownership_from_doc, pab_from_doc
from gateway.access.evaluate import BucketAccess, Decision, ObjectAccess, decide
from gateway.access.identity import ACCOUNT, Requester, canonical_id, user_arn
from gateway.access.policy import Policy, parse_policy
from gateway.metadata import BucketRecord
from gateway.s3.errors import S3Error

if TYPE_CHECKING:
    from gateway.ops.common import S3Request

# Handler (module.function) -> S3 action. Other branches' handlers add their entries here.
ACTIONS: dict[str, str] = {
    "gateway.ops.buckets.head_bucket": "ListBucket",
    "gateway.ops.buckets.delete_bucket": "DeleteBucket",
    "gateway.ops.buckets.get_location": "GetBucketLocation",
    "gateway.ops.versioning.get_versioning": "GetBucketVersioning",
    "gateway.ops.versioning.put_versioning": "PutBucketVersioning",
    "gateway.ops.listing.list_objects": "ListBucket",
    "gateway.ops.listing.list_objects_v2": "ListBucket",
    "gateway.ops.listing.list_versions": "ListBucketVersions",
    "gateway.ops.multipart.list_uploads": "ListBucketMultipartUploads",
    "gateway.ops.multipart.create_upload": "PutObject",
    "gateway.ops.multipart.upload_part": "PutObject",
    "gateway.ops.multipart.upload_part_copy": "PutObject",
    "gateway.ops.multipart.complete_upload": "PutObject",
    "gateway.ops.multipart.abort_upload": "AbortMultipartUpload",
    "gateway.ops.multipart.list_parts": "ListMultipartUploadParts",
    "gateway.ops.objects.get_object": "GetObject",
    "gateway.ops.objects.head_object": "GetObject",
    "gateway.ops.objects.put_object": "PutObject",
    "gateway.ops.copy.copy_object": "PutObject",
    "gateway.ops.versioning.delete_object": "DeleteObject",
    "gateway.ops.versioning.delete_objects": "DeleteObject",
    "gateway.ops.tagging.get_object_tagging": "GetObjectTagging",
    "gateway.ops.tagging.put_object_tagging": "PutObjectTagging",
    "gateway.ops.tagging.delete_object_tagging": "DeleteObjectTagging",
    "gateway.ops.tagging.get_bucket_tagging": "GetBucketTagging",
    "gateway.ops.tagging.put_bucket_tagging": "PutBucketTagging",
    "gateway.ops.tagging.delete_bucket_tagging": "PutBucketTagging",
    "gateway.ops.lifecycle.get_bucket_lifecycle": "GetLifecycleConfiguration",
    "gateway.ops.lifecycle.put_bucket_lifecycle": "PutLifecycleConfiguration",
    "gateway.ops.lifecycle.delete_bucket_lifecycle": "PutLifecycleConfiguration",
    "gateway.ops.cors.get_bucket_cors": "GetBucketCORS",
    "gateway.ops.cors.put_bucket_cors": "PutBucketCORS",
    "gateway.ops.cors.delete_bucket_cors": "PutBucketCORS",
    "gateway.ops.acl_ops.get_bucket_acl": "GetBucketAcl",
    "gateway.ops.acl_ops.put_bucket_acl": "PutBucketAcl",
    "gateway.ops.acl_ops.get_object_acl": "GetObjectAcl",
    "gateway.ops.acl_ops.put_object_acl": "PutObjectAcl",
    "gateway.ops.policy_ops.get_policy": "GetBucketPolicy",
    "gateway.ops.policy_ops.put_policy": "PutBucketPolicy",
    "gateway.ops.policy_ops.delete_policy": "DeleteBucketPolicy",
    "gateway.ops.policy_ops.get_policy_status": "GetBucketPolicyStatus",
    "gateway.ops.policy_ops.get_ownership": "GetBucketOwnershipControls",
    "gateway.ops.policy_ops.put_ownership": "PutBucketOwnershipControls",
    "gateway.ops.policy_ops.delete_ownership": "PutBucketOwnershipControls",
    "gateway.ops.policy_ops.get_pab": "GetBucketPublicAccessBlock",
    "gateway.ops.policy_ops.put_pab": "PutBucketPublicAccessBlock",
    "gateway.ops.policy_ops.delete_pab": "PutBucketPublicAccessBlock",
    "gateway.ops.encryption.get_bucket_encryption": "GetEncryptionConfiguration",
    "gateway.ops.encryption.put_bucket_encryption": "PutEncryptionConfiguration",
    "gateway.ops.encryption.delete_bucket_encryption": "PutEncryptionConfiguration",
    "gateway.ops.objectlock.put_lock_config": "PutBucketObjectLockConfiguration",
    "gateway.ops.objectlock.get_lock_config": "GetBucketObjectLockConfiguration",
    "gateway.ops.objectlock.put_retention": "PutObjectRetention",
    "gateway.ops.objectlock.get_retention": "GetObjectRetention",
    "gateway.ops.objectlock.put_legal_hold": "PutObjectLegalHold",
    "gateway.ops.objectlock.get_legal_hold": "GetObjectLegalHold",
    "gateway.ops.attributes.get_object_attributes": "GetObjectAttributes",
    "gateway.ops.postobject.post_object": "PutObject",
}
# With ?versionId=, these act on a version (their own action names in policies).
VERSIONED = {"GetObject": "GetObjectVersion", "DeleteObject": "DeleteObjectVersion",
             "GetObjectAcl": "GetObjectVersionAcl", "PutObjectAcl": "PutObjectVersionAcl",
             "GetObjectTagging": "GetObjectVersionTagging",
             "PutObjectTagging": "PutObjectVersionTagging",
             "DeleteObjectTagging": "DeleteObjectVersionTagging",
             "GetObjectAttributes": "GetObjectVersionAttributes"}
LIST_ACTIONS = frozenset({"ListBucket", "ListBucketVersions", "ListBucketMultipartUploads"})


def action_for(req: S3Request, handler: Any) -> str | None:
    name = ACTIONS.get(f"{handler.__module__}.{handler.__name__}")
    if name and "versionId" in req.query and name in VERSIONED:
        name = VERSIONED[name]
    return name


def requester(req: S3Request) -> Requester:
    return Requester(req.user or None)


@lru_cache(maxsize=512)
def _policy(text: str, bucket: str) -> Policy:
    return parse_policy(text, bucket)


async def bucket_access(req: S3Request, b: BucketRecord) -> BucketAccess:
    """The bucket's access documents, read in one store call (or with the bucket's record by
    require_bucket, in the same request)."""
    seen = req.extra.setdefault("configs", {})
    configs = seen.get(b.name)
    if configs is None:
        # kept for the handler (versioning state, lifecycle rules): no second read per request
        configs = seen[b.name] = await req.gw.store.bucket_configs(b.name)
    doc = configs.get("policy")
    policy = _policy(doc, b.name) if doc else None
    ownership, _ = ownership_from_doc(configs.get("ownership"))
    pab, _ = pab_from_doc(configs.get("public-access-block"))
    return BucketAccess(b.name, b.owner, tuple(acl.from_list(b.acl, b.owner)), policy,
                        ownership, pab)


def context(req: S3Request, action: str) -> dict[str, list[str]]:
    """The request context keys of gateway/access/conditions.py."""
    h = req.headers
    request = req.request
    now = time.time()
    client, scheme = proxies.from_request(req.gw.proxies, request)
    ctx: dict[str, list[str]] = {
        "aws:sourceip": [client] if client else [],
        "aws:securetransport": ["true" if scheme == "https" else "false"],
        "aws:currenttime": [datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")],
        "aws:epochtime": [str(int(now))],
        "aws:principaltype": ["User" if req.user else "Anonymous"],
        "aws:userid": [canonical_id(req.user) if req.user else "anonymous"],
    }
    if req.user:
        ctx["aws:username"] = [req.user]
        ctx["aws:principalarn"] = [user_arn(req.user)]
        ctx["aws:principalaccount"] = [ACCOUNT]
    for name, key in (("user-agent", "aws:useragent"), ("referer", "aws:referer"),
                      ("x-amz-acl", "s3:x-amz-acl"),
                      ("x-amz-copy-source", "s3:x-amz-copy-source"),
                      ("x-amz-metadata-directive", "s3:x-amz-metadata-directive"),
                      ("x-amz-content-sha256", "s3:x-amz-content-sha256"),
                      ("x-amz-storage-class", "s3:x-amz-storage-class"),
                      # as sent (a bucket default does not set it, as on AWS)
                      ("x-amz-server-side-encryption", "s3:x-amz-server-side-encryption"),
                      ("x-amz-server-side-encryption-aws-kms-key-id",
                       "s3:x-amz-server-side-encryption-aws-kms-key-id"),
                      ("x-amz-object-ownership", "s3:x-amz-object-ownership")):
        v = h.get(name)
        if v is not None:
            ctx[key] = [v]
    for name in acl.GRANT_HEADERS:
        v = h.get(name)
        if v is not None:
            ctx["s3:" + name] = [v]
    if action in LIST_ACTIONS:
        for q in ("prefix", "delimiter", "max-keys"):
            if q in req.query:
                ctx["s3:" + q] = [req.query[q]]
    if "versionId" in req.query:
        ctx["s3:versionid"] = [req.query["versionId"]]
    tagging = h.get("x-amz-tagging")
    if tagging:
        pairs = parse_qsl(tagging, keep_blank_values=True)
        ctx["s3:requestobjecttagkeys"] = [k for k, _ in pairs]
        for k, v in pairs:
            ctx["s3:requestobjecttag/" + k] = [v]
    if req.auth is not None:
        m = req.auth.method
        ctx["s3:authtype"] = ["REST-QUERY-STRING" if m.endswith("query") else "REST-HEADER"]
        if m.startswith("v4"):
            ctx["s3:signatureversion"] = ["AWS4-HMAC-SHA256"]
        elif m.startswith("v2"):
            ctx["s3:signatureversion"] = ["AWS"]
    return ctx


async def check(req: S3Request, b: BucketRecord, action: str, key: str | None = None,
                access: BucketAccess | None = None,
                more: dict[str, list[str]] | None = None) -> Decision:
    """The decision for `action` on bucket b (and `key` for object actions); `more`: context
    keys to set besides the request's."""
    access = access or await bucket_access(req, b)
    who = requester(req)
    ctx = context(req, action)
    if more:
        ctx.update(more)
    version = req.query.get("versionId") if key == req.key else None
    obj = None
    if access.policy is not None and access.policy.uses_key_prefix("s3:existingobjecttag/") \
            and key is not None:
        obj = await req.gw.store.get_object(b.name, key, version)
        for k, v in (getattr(obj, "tags", None) or {}).items():
            ctx["s3:existingobjecttag/" + k] = [v]
    d = decide(who, action, access, key, ctx)
    if d is Decision.NEED_OBJECT:
        if obj is None:
            obj = await req.gw.store.get_object(b.name, key or "", version)
        # A missing object: only its bucket's owner would own it.
        oa = ObjectAccess(b.owner) if obj is None else ObjectAccess(
            obj.owner, tuple(acl.from_list(obj.acl, obj.owner)))
        d = decide(who, action, access, key, ctx, oa)
    return d


async def authorize(req: S3Request, b: BucketRecord, action: str | None = None,
                    key: str | None = None) -> BucketAccess | None:
    """Raise AccessDenied unless the request may do its action on bucket b. With no action
    known for the handler, only the bucket's owner may (as before access control)."""
    action = action or req.extra.get("action")
    check_expected_owner(req, b.owner)
    if action is None:
        if not req.user or b.owner != req.user:
            raise S3Error("AccessDenied")
        return None
    access = await bucket_access(req, b)
    req.extra["access"] = access
    if is_object_action(action) and key is None:
        if not req.key:
            return access  # DeleteObjects: each key is checked (check_key) by the handler
        key = req.key
    d = await check(req, b, action, key, access)
    if not d.allowed:
        if d is Decision.IMPLICIT_DENY and action == "GetObject" and \
                await _missing_to_lister(req, b, access, key):
            # as S3: a key that does not exist is 404 to anyone who may list the bucket,
            # whether or not a GetObject on it would be allowed
            raise S3Error("NoSuchKey", resource=req.resource, Key=key)
        raise S3Error("AccessDenied")
    return access


def check_expected_owner(req: S3Request, owner: str,
                         header: str = "x-amz-expected-bucket-owner") -> None:
    """`x-amz-expected-bucket-owner` (or the copy source's): the request goes ahead only if
    the bucket belongs to that account (the gateway's one account id, or the owner's
    canonical id); AccessDenied otherwise, as S3."""
    want = req.headers.get(header)
    if want is None:
        return
    want = want.strip()
    if want != ACCOUNT and want != canonical_id(owner):
        raise S3Error("AccessDenied")


async def may_list_key(req: S3Request, b: BucketRecord, access: BucketAccess,
                       key: str) -> bool:
    """Whether the requester may list the bucket where `key` would be listed (ListBucket,
    with s3:prefix the key itself: a policy allowing a prefix of it counts)."""
    d = await check(req, b, "ListBucket", None, access, {"s3:prefix": [key]})
    return d.allowed


async def _missing_to_lister(req: S3Request, b: BucketRecord, access: BucketAccess,
                             key: str | None) -> bool:
    if key is None or "versionId" in req.query:
        return False
    if await req.gw.store.get_object(b.name, key) is not None:
        return False
    return await may_list_key(req, b, access, key)


async def check_key(req: S3Request, b: BucketRecord, action: str, key: str) -> bool:
    """Whether the request may do an object action on one more key (DeleteObjects)."""
    access = req.extra.get("access") or await bucket_access(req, b)
    if access.policy is None and req.user and req.user == access.owner:
        return True  # no policy: nothing can deny the owner a key write
    return (await check(req, b, action, key, access)).allowed


async def hide_missing(req: S3Request, err: S3Error) -> S3Error:
    """As S3: a missing key is NoSuchKey only to those who may list the bucket; anyone else
    learns nothing about which keys exist (AccessDenied)."""
    access: BucketAccess | None = req.extra.get("access")
    if access is None or (req.user and req.user == access.owner):
        return err
    b = BucketRecord(access.name, access.owner, 0.0)
    if await may_list_key(req, b, access, req.key):
        return err
    return S3Error("AccessDenied")


async def authorize_source(req: S3Request, b: BucketRecord, key: str) -> None:
    """A copy's source: the requester must be allowed to read it (s3:GetObject)."""
    access = await bucket_access(req, b)
    if not (await check(req, b, "GetObject", key, access)).allowed:
        raise S3Error("AccessDenied")
