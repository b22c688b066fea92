"""Never pretend: every `x-amz-*` request header the gateway knows, and what it does with it.

A header that would change what S3 stores or how it protects it is either honoured (by the
operation that takes it) or refused with S3's error; none is accepted and silently ignored.
`check_request` runs before every handler:

- HONOURED / HONOURED_PREFIXES: acted on by the operations that take them (tests/gateway/
  test_s3_header_honesty.py checks each one's effect);
- HARMLESS: authentication, transport and SDK bookkeeping, or no effect on what is stored
  (request-payer billing, MFA for an MFA delete that cannot be enabled here);
- REFUSED: storage-changing headers this gateway does not implement: NotImplemented;
- SSE_HEADERS: server-side encryption, honoured by gateway/s3/sse.py (SSE-S3, SSE-C) or refused
  with its error (aws:kms: NotImplemented, no KMS is configured);
- any other `x-amz-*` header on a request that writes (PUT, POST, DELETE): NotImplemented, so a
  header S3 adds later cannot slip in unseen: it must be added here, with its test row.

x-amz-storage-class: STANDARD is the one storage class; any other is InvalidStorageClass.
"""

from __future__ import annotations

from collections.abc import Mapping

from gateway.s3.errors import S3Error

HONOURED = frozenset({
    # CompleteMultipartUpload: the object's expected size, checked against its parts (the CRT
    # clients, boto3's and s3torchconnector's, send it)
    "x-amz-mp-object-size",
    "x-amz-acl", "x-amz-tagging", "x-amz-tagging-directive", "x-amz-metadata-directive",
    "x-amz-copy-source", "x-amz-copy-source-range",
    "x-amz-storage-class", "x-amz-object-ownership", "x-amz-bucket-object-lock-enabled",
    "x-amz-bypass-governance-retention", "x-amz-expected-bucket-owner",
    "x-amz-source-expected-bucket-owner", "x-amz-sdk-checksum-algorithm",
    "x-amz-checksum-algorithm", "x-amz-checksum-type", "x-amz-checksum-mode",
    "x-amz-trailer", "x-amz-decoded-content-length", "x-amz-content-sha256",
    "x-amz-object-attributes", "x-amz-max-parts", "x-amz-part-number-marker",
})
HONOURED_PREFIXES = ("x-amz-meta-", "x-amz-grant-", "x-amz-checksum-",
                     "x-amz-copy-source-if-", "x-amz-object-lock-")
HARMLESS = frozenset({
    "x-amz-date", "x-amz-security-token", "x-amz-user-agent", "x-amz-request-payer",
    "x-amz-mfa", "x-amz-te", "x-amz-optional-object-attributes",
    "x-amz-confirm-remove-self-bucket-access", "x-amz-client-context",
    "x-amz-sdk-invocation-id", "x-amz-sdk-request",
    # PutBucketLifecycleConfiguration: only about transitions, which are NotImplemented
    "x-amz-transition-default-minimum-object-size",
    # PutObjectLockConfiguration: a token S3 hands out for replication; nothing to check here
    "x-amz-bucket-object-lock-token",
})
REFUSED = {
    "x-amz-website-redirect-location": "Website redirects are not supported.",
    "x-amz-write-offset-bytes": "Appends to an object are not supported.",
    "x-amz-if-match-size": "Conditional deletes by size are not supported.",
    "x-amz-if-match-last-modified-time": "Conditional deletes by time are not supported.",
    "x-amz-if-match-initiated-time": "Conditional aborts by time are not supported.",
    "x-amz-rename-source": "RenameObject is not supported.",
}
SSE_HEADERS = frozenset({
    "x-amz-server-side-encryption", "x-amz-server-side-encryption-aws-kms-key-id",
    "x-amz-server-side-encryption-context", "x-amz-server-side-encryption-bucket-key-enabled",
    "x-amz-server-side-encryption-customer-algorithm",
    "x-amz-server-side-encryption-customer-key",
    "x-amz-server-side-encryption-customer-key-md5",
    "x-amz-copy-source-server-side-encryption-customer-algorithm",
    "x-amz-copy-source-server-side-encryption-customer-key",
    "x-amz-copy-source-server-side-encryption-customer-key-md5",
})
OBJECT_LOCK = frozenset({"x-amz-object-lock-mode", "x-amz-object-lock-retain-until-date",
                         "x-amz-object-lock-legal-hold"})
STORAGE_CLASSES = frozenset({"STANDARD"})
WRITES = frozenset({"PUT", "POST", "DELETE"})


def status(name: str) -> str:
    """"honoured" | "harmless" | "refused" | "unknown" for a lower-case header name."""
    if name in REFUSED:
        return "refused"
    if name in SSE_HEADERS:
        return "honoured"  # gateway/s3/sse.py: each one honoured or refused with S3's error
    if name in HONOURED or name.startswith(HONOURED_PREFIXES):
        if name.startswith("x-amz-object-lock-") and name not in OBJECT_LOCK:
            return "unknown"
        return "honoured"
    if name in HARMLESS:
        return "harmless"
    return "unknown"


def check_request(method: str, headers: Mapping[str, str]) -> None:
    """Refuse a request carrying an x-amz-* header this gateway would otherwise ignore while
    it changes what is stored (see the module doc)."""
    for raw in headers.keys():
        name = raw.lower()
        if not name.startswith("x-amz-"):
            continue
        st = status(name)
        if st == "refused":
            raise S3Error("NotImplemented", REFUSED[name], Header=name)
        if st == "unknown" and method in WRITES:
            raise S3Error("NotImplemented", Header=name)
        elif name == "x-amz-storage-class" and method in WRITES:
            value = headers[raw].strip()
            if value not in STORAGE_CLASSES:
                raise S3Error("InvalidStorageClass", StorageClassRequested=value[:64])
