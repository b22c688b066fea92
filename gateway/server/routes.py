"""Which S3 operation a request names: method + query subresources -> the handler in
gateway/ops. The app dispatches with `route`; metrics name requests by it."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.responses import Response

from gateway.ops import (
    acl_ops,
    attributes,
    buckets,
    copy,
    cors,
    encryption,
    lifecycle,
    listing,
    multipart,
    objectlock,
    objects,
    policy_ops,
    postobject,
    service,
    tagging,
    versioning,
)
from gateway.ops.common import S3Request
from gateway.s3.errors import S3Error

Handler = Callable[[S3Request], Awaitable[Response]]

# Handler function name (`route` below) -> S3 operation name (AWS's, as in its API
# reference). Every handler route() can return needs one: tests/gateway/test_operation_names.py
# walks the routes and fails on a handler missing here.
OPERATION_NAMES = {
    "get_object_attributes": "GetObjectAttributes",
    "put_bucket_encryption": "PutBucketEncryption",
    "get_bucket_encryption": "GetBucketEncryption",
    "delete_bucket_encryption": "DeleteBucketEncryption",
    "put_lock_config": "PutObjectLockConfiguration",
    "get_lock_config": "GetObjectLockConfiguration",
    "put_retention": "PutObjectRetention",
    "get_retention": "GetObjectRetention",
    "put_legal_hold": "PutObjectLegalHold",
    "get_legal_hold": "GetObjectLegalHold",
    "post_object": "PostObject",
    "list_buckets": "ListBuckets",
    "create_bucket": "CreateBucket",
    "head_bucket": "HeadBucket",
    "delete_bucket": "DeleteBucket",
    "get_location": "GetBucketLocation",
    "get_versioning": "GetBucketVersioning",
    "put_versioning": "PutBucketVersioning",
    "list_uploads": "ListMultipartUploads",
    "list_versions": "ListObjectVersions",
    "list_objects": "ListObjects",
    "list_objects_v2": "ListObjectsV2",
    "delete_objects": "DeleteObjects",
    "get_object": "GetObject",
    "head_object": "HeadObject",
    "put_object": "PutObject",
    "delete_object": "DeleteObject",
    "copy_object": "CopyObject",
    "create_upload": "CreateMultipartUpload",
    "upload_part": "UploadPart",
    "upload_part_copy": "UploadPartCopy",
    "complete_upload": "CompleteMultipartUpload",
    "list_parts": "ListParts",
    "abort_upload": "AbortMultipartUpload",
    # CORS (gateway/ops/cors.py)
    "put_bucket_cors": "PutBucketCors",
    "get_bucket_cors": "GetBucketCors",
    "delete_bucket_cors": "DeleteBucketCors",
    "preflight": "PreflightRequest",
    # tagging and lifecycle (gateway/ops/tagging.py, gateway/ops/lifecycle.py)
    "put_bucket_tagging": "PutBucketTagging",
    "get_bucket_tagging": "GetBucketTagging",
    "delete_bucket_tagging": "DeleteBucketTagging",
    "put_object_tagging": "PutObjectTagging",
    "get_object_tagging": "GetObjectTagging",
    "delete_object_tagging": "DeleteObjectTagging",
    "put_bucket_lifecycle": "PutBucketLifecycleConfiguration",
    "get_bucket_lifecycle": "GetBucketLifecycleConfiguration",
    "delete_bucket_lifecycle": "DeleteBucketLifecycle",
    # ACLs, policies, ownership, public access block (gateway/ops/acl_ops.py, policy_ops.py)
    "get_bucket_acl": "GetBucketAcl",
    "put_bucket_acl": "PutBucketAcl",
    "get_object_acl": "GetObjectAcl",
    "put_object_acl": "PutObjectAcl",
    "get_policy": "GetBucketPolicy",
    "put_policy": "PutBucketPolicy",
    "delete_policy": "DeleteBucketPolicy",
    "get_policy_status": "GetBucketPolicyStatus",
    "get_ownership": "GetBucketOwnershipControls",
    "put_ownership": "PutBucketOwnershipControls",
    "delete_ownership": "DeleteBucketOwnershipControls",
    "get_pab": "GetPublicAccessBlock",
    "put_pab": "PutPublicAccessBlock",
    "delete_pab": "DeletePublicAccessBlock",
}
UNKNOWN_OPERATION = "Unknown"  # no S3 operation matches (the app answers with an error)

# Query parameters that name an S3 subresource; any we do not handle is NotImplemented.
SUBRESOURCES = {
    "accelerate", "acl", "analytics", "attributes", "cors", "delete", "encryption",
    "intelligent-tiering", "inventory", "legal-hold", "lifecycle", "location", "logging",
    "metadata", "metrics", "notification", "object-lock", "ownershipControls", "policy",
    "policyStatus", "publicAccessBlock", "replication", "requestPayment", "restore",
    "retention", "select", "tagging", "torrent", "uploadId", "uploads", "versioning",
    "versions", "website", "renameObject", "session",
}

# Tagging, object lock, lifecycle, encryption: configuration subresources.
BUCKET_CONFIG_ROUTES: dict[tuple[str, frozenset], Handler] = {
    ("PUT", frozenset({"tagging"})): tagging.put_bucket_tagging,
    ("GET", frozenset({"tagging"})): tagging.get_bucket_tagging,
    ("DELETE", frozenset({"tagging"})): tagging.delete_bucket_tagging,
    ("PUT", frozenset({"object-lock"})): objectlock.put_lock_config,
    ("GET", frozenset({"object-lock"})): objectlock.get_lock_config,
    ("PUT", frozenset({"lifecycle"})): lifecycle.put_bucket_lifecycle,
    ("GET", frozenset({"lifecycle"})): lifecycle.get_bucket_lifecycle,
    ("DELETE", frozenset({"lifecycle"})): lifecycle.delete_bucket_lifecycle,
    ("PUT", frozenset({"encryption"})): encryption.put_bucket_encryption,
    ("GET", frozenset({"encryption"})): encryption.get_bucket_encryption,
    ("DELETE", frozenset({"encryption"})): encryption.delete_bucket_encryption,
}
OBJECT_CONFIG_ROUTES: dict[tuple[str, frozenset], Handler] = {
    ("PUT", frozenset({"tagging"})): tagging.put_object_tagging,
    ("GET", frozenset({"tagging"})): tagging.get_object_tagging,
    ("DELETE", frozenset({"tagging"})): tagging.delete_object_tagging,
    ("PUT", frozenset({"retention"})): objectlock.put_retention,
    ("GET", frozenset({"retention"})): objectlock.get_retention,
    ("PUT", frozenset({"legal-hold"})): objectlock.put_legal_hold,
    ("GET", frozenset({"legal-hold"})): objectlock.get_legal_hold,
    ("GET", frozenset({"attributes"})): attributes.get_object_attributes,
}


def route(req: S3Request) -> Handler:
    """Pick the operation for method + subresources."""
    m, q = req.method, req.query
    subs = {k for k in q if k in SUBRESOURCES}
    if m == "OPTIONS":
        return cors.preflight  # a CORS preflight, whatever the subresources
    if not req.bucket:
        if m in ("GET", "HEAD"):
            return service.list_buckets
        raise S3Error("MethodNotAllowed", ResourceType="SERVICE", Method=m)
    if not req.key:
        table: dict[tuple[str, frozenset], Handler] = {
            ("PUT", frozenset()): buckets.create_bucket,
            ("HEAD", frozenset()): buckets.head_bucket,
            ("DELETE", frozenset()): buckets.delete_bucket,
            ("GET", frozenset({"location"})): buckets.get_location,
            ("GET", frozenset({"versioning"})): versioning.get_versioning,
            ("PUT", frozenset({"versioning"})): versioning.put_versioning,
            ("GET", frozenset({"uploads"})): multipart.list_uploads,
            ("GET", frozenset({"versions"})): listing.list_versions,
            ("POST", frozenset({"delete"})): versioning.delete_objects,
            ("POST", frozenset()): postobject.post_object,  # browser form upload
            **BUCKET_CONFIG_ROUTES,
            # CORS (gateway/ops/cors.py)
            ("PUT", frozenset({"cors"})): cors.put_bucket_cors,
            ("GET", frozenset({"cors"})): cors.get_bucket_cors,
            ("DELETE", frozenset({"cors"})): cors.delete_bucket_cors,
            # access control (acl15)
            ("GET", frozenset({"acl"})): acl_ops.get_bucket_acl,
            ("PUT", frozenset({"acl"})): acl_ops.put_bucket_acl,
            ("GET", frozenset({"policy"})): policy_ops.get_policy,
            ("PUT", frozenset({"policy"})): policy_ops.put_policy,
            ("DELETE", frozenset({"policy"})): policy_ops.delete_policy,
            ("GET", frozenset({"policyStatus"})): policy_ops.get_policy_status,
            ("GET", frozenset({"ownershipControls"})): policy_ops.get_ownership,
            ("PUT", frozenset({"ownershipControls"})): policy_ops.put_ownership,
            ("DELETE", frozenset({"ownershipControls"})): policy_ops.delete_ownership,
            ("GET", frozenset({"publicAccessBlock"})): policy_ops.get_pab,
            ("PUT", frozenset({"publicAccessBlock"})): policy_ops.put_pab,
            ("DELETE", frozenset({"publicAccessBlock"})): policy_ops.delete_pab,
        }
        if m == "GET" and not subs:
            return listing.list_objects_v2 if q.get("list-type") == "2" else listing.list_objects
        h = table.get((m, frozenset(subs)))
        if h is None:
            if not subs and m in ("POST",):
                raise S3Error("MethodNotAllowed", ResourceType="BUCKET", Method=m)
            raise S3Error("NotImplemented")
        return h
    copying = "x-amz-copy-source" in req.headers
    if m == "PUT" and subs == {"uploadId"} and "partNumber" in q:
        return multipart.upload_part_copy if copying else multipart.upload_part
    table = {
        ("GET", frozenset()): objects.get_object,
        ("HEAD", frozenset()): objects.head_object,
        ("DELETE", frozenset()): versioning.delete_object,
        ("POST", frozenset({"uploads"})): multipart.create_upload,
        ("POST", frozenset({"uploadId"})): multipart.complete_upload,
        ("GET", frozenset({"uploadId"})): multipart.list_parts,
        ("DELETE", frozenset({"uploadId"})): multipart.abort_upload,
        **OBJECT_CONFIG_ROUTES,
        # access control (acl15)
        ("GET", frozenset({"acl"})): acl_ops.get_object_acl,
        ("PUT", frozenset({"acl"})): acl_ops.put_object_acl,
    }
    if m == "PUT" and not subs:
        return copy.copy_object if copying else objects.put_object
    h = table.get((m, frozenset(subs)))
    if h is None:
        if not subs and m not in ("GET", "HEAD", "PUT", "DELETE"):
            raise S3Error("MethodNotAllowed", ResourceType="OBJECT", Method=m)
        raise S3Error("NotImplemented")
    return h
