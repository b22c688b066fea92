"""S3 errors: one exception type, the table of S3 error codes, and the XML error body.

Every layer of the gateway raises `S3Error(code, message)`; the app turns it into S3's
`<Error>` body with `error_xml()` and the table's HTTP status. The code alone is enough:
the status and a default message come from `ERRORS`.

    raise S3Error("NoSuchKey", resource="/bucket/key")
    raise S3Error("InvalidArgument", "max-keys must be an integer",
                  ArgumentName="max-keys", ArgumentValue="x")
"""

from __future__ import annotations

import re
from xml.sax.saxutils import escape as _xml_escape

# What XML 1.0 cannot carry: C0 controls but tab/LF/CR, lone surrogates (a client's bytes
# that are not UTF-8, kept as surrogate escapes), U+FFFE/U+FFFF.
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")

# code -> (HTTP status, default message). Messages follow AWS's wording where clients or
# compatibility suites look at them.
ERRORS: dict[str, tuple[int, str]] = {
    "AccessDenied": (403, "Access Denied"),
    "AccessControlListNotSupported": (400, "The bucket does not allow ACLs"),
    "AuthorizationHeaderMalformed": (400, "The authorization header is malformed."),
    "AuthorizationQueryParametersError": (
        400, "Error parsing the X-Amz-Credential parameter or another query auth parameter."),
    "BadDigest": (400, "The Content-MD5 you specified did not match what we received."),
    "BucketAlreadyExists": (
        409, "The requested bucket name is not available. The bucket namespace is shared by "
             "all users of the system. Please select a different name and try again."),
    "BucketAlreadyOwnedByYou": (
        409, "Your previous request to create the named bucket succeeded and you already "
             "own it."),
    "BucketNotEmpty": (409, "The bucket you tried to delete is not empty"),
    "EntityTooLarge": (400, "Your proposed upload exceeds the maximum allowed object size."),
    "EntityTooSmall": (400, "Your proposed upload is smaller than the minimum allowed object size."),
    "IllegalVersioningConfigurationException": (
        400, "Indicates that the versioning configuration specified in the request is invalid."),
    "IllegalLocationConstraintException": (
        400, "The unspecified location constraint is incompatible for the region specific "
             "endpoint this request was sent to."),
    "IncompleteBody": (400, "You did not provide the number of bytes specified by the "
                            "Content-Length HTTP header."),
    "InternalError": (500, "We encountered an internal error. Please try again."),
    "InvalidAccessKeyId": (
        403, "The AWS Access Key Id you provided does not exist in our records."),
    "InvalidArgument": (400, "Invalid Argument"),
    "InvalidBucketName": (400, "The specified bucket is not valid."),
    "InvalidBucketAclWithObjectOwnership": (
        400, "Bucket cannot have ACLs set with ObjectOwnership's BucketOwnerEnforced setting"),
    "InvalidBucketState": (409, "The request is not valid with the current state of the bucket."),
    "InvalidChunkSizeError": (400, "Only the last chunk is allowed to have a size less than "
                                   "8192 bytes"),
    "InvalidDigest": (400, "The Content-MD5 you specified is not valid."),
    "InvalidEncryptionAlgorithmError": (
        400, "The encryption request you specified is not valid."),
    "InvalidObjectState": (403, "The operation is not valid for the current state of the object."),
    "InvalidPart": (
        400, "One or more of the specified parts could not be found. The part might not have "
             "been uploaded, or the specified entity tag might not have matched the part's "
             "entity tag."),
    "InvalidPartOrder": (
        400, "The list of parts was not in ascending order. The parts list must be specified "
             "in order by part number."),
    "InvalidRange": (416, "The requested range is not satisfiable"),
    "InvalidRequest": (400, "Invalid Request"),
    "InvalidStorageClass": (400, "The storage class you specified is not valid"),
    "InvalidTag": (400, "The tag provided was not a valid tag."),
    "InvalidURI": (400, "Couldn't parse the specified URI."),
    "KeyTooLongError": (400, "Your key is too long"),
    "MalformedACLError": (
        400, "The XML you provided was not well-formed or did not validate against our "
             "published schema"),
    "MalformedPolicy": (400, "Policies must be valid JSON and the first byte must be '{'"),
    "MalformedTrailerError": (
        400, "The request contained trailing data that was not well-formed or did not "
             "conform to our published schema."),
    "MalformedXML": (
        400, "The XML you provided was not well-formed or did not validate against our "
             "published schema"),
    "MaxMessageLengthExceeded": (400, "Your request was too big."),
    "MaxPostPreDataLengthExceeded": (
        400, "Your POST request fields preceding the upload file were too large."),
    "MalformedPOSTRequest": (
        400, "The body of your POST request is not well-formed multipart/form-data."),
    "InvalidPolicyDocument": (
        400, "The content of the form does not meet the conditions specified in the policy "
             "document."),
    "MetadataTooLarge": (
        400, "Your metadata headers exceed the maximum allowed metadata size."),
    "MethodNotAllowed": (405, "The specified method is not allowed against this resource."),
    "MissingContentLength": (411, "You must provide the Content-Length HTTP header."),
    "MissingRequestBodyError": (400, "Request Body is empty"),
    "MissingSecurityHeader": (400, "Your request is missing a required header."),
    "NoSuchBucket": (404, "The specified bucket does not exist"),
    "NoSuchBucketPolicy": (404, "The bucket policy does not exist"),
    "NoSuchCORSConfiguration": (404, "The CORS configuration does not exist"),
    "NoSuchKey": (404, "The specified key does not exist."),
    "NoSuchLifecycleConfiguration": (404, "The lifecycle configuration does not exist"),
    "NoSuchTagSet": (404, "The TagSet does not exist"),
    "NoSuchPublicAccessBlockConfiguration": (
        404, "The public access block configuration was not found"),
    "NoSuchUpload": (
        404, "The specified upload does not exist. The upload ID may be invalid, or the upload "
             "may have been aborted or completed."),
    "NoSuchVersion": (404, "The specified version does not exist."),
    "NoSuchObjectLockConfiguration": (
        404, "The specified object does not have a ObjectLock configuration"),
    "ObjectLockConfigurationNotFoundError": (
        404, "Object Lock configuration does not exist for this bucket"),
    "NotImplemented": (501, "A header you provided implies functionality that is not "
                            "implemented."),
    "NotModified": (304, "Not Modified"),
    "OwnershipControlsNotFoundError": (404, "The bucket ownership controls were not found"),
    "OperationAborted": (
        409, "A conflicting conditional operation is currently in progress against this "
             "resource. Please try again."),
    "PreconditionFailed": (
        412, "At least one of the pre-conditions you specified did not hold"),
    "RequestTimeTooSkewed": (
        403, "The difference between the request time and the server's time is too large."),
    "RequestTimeout": (
        400, "Your socket connection to the server was not read from or written to within "
             "the timeout period."),
    "ServerSideEncryptionConfigurationNotFoundError": (
        404, "The server side encryption configuration was not found"),
    "ServiceUnavailable": (503, "Please reduce your request rate."),
    "SignatureDoesNotMatch": (
        403, "The request signature we calculated does not match the signature you provided. "
             "Check your key and signing method."),
    "SlowDown": (503, "Please reduce your request rate."),
    "TooManyBuckets": (400, "You have attempted to create more buckets than allowed"),
    "UnexpectedContent": (400, "This request does not support content"),
    "UnresolvableGrantByEmailAddress": (
        400, "The e-mail address you provided does not match any account on record."),
    "XAmzContentSHA256Mismatch": (
        400, "The provided 'x-amz-content-sha256' header does not match what was computed."),
}


class S3Error(Exception):
    """An S3 error response: code, message, HTTP status, resource and extra XML fields.

    `extra` keyword arguments become extra child elements of `<Error>` (AWS adds e.g.
    `ArgumentName`, `ArgumentValue`, `StringToSign`, `RequestTime`, `ServerTime`), in order.
    Unknown codes get status 400 unless `status` is given.
    """

    def __init__(
        self,
        code: str,
        message: str | None = None,
        *,
        status: int | None = None,
        resource: str | None = None,
        **extra: object,
    ) -> None:
        default_status, default_message = ERRORS.get(code, (400, code))
        self.code = code
        self.message = message if message is not None else default_message
        self.status = status if status is not None else default_status
        self.resource = resource
        self.extra: dict[str, str] = {k: str(v) for k, v in extra.items() if v is not None}
        # Response headers the error carries (x-amz-delete-marker on a deleted key, ...).
        self.headers: dict[str, str] = {}
        super().__init__(f"{code}: {self.message}")

    def __repr__(self) -> str:
        return f"S3Error({self.code!r}, {self.message!r}, status={self.status})"


def escape(text: str) -> str:
    """`text` as XML character data; what XML cannot carry (an echoed access key with a
    NUL or an invalid byte) becomes U+FFFD, so the body is always well-formed UTF-8."""
    return _xml_escape(_NOT_XML.sub("\ufffd", text))


def error_xml(
    err: S3Error, request_id: str, *, resource: str | None = None, host_id: str | None = None
) -> bytes:
    """S3's `<Error>` body for `err` (UTF-8 bytes with the XML declaration).

    `resource` (e.g. the request path) is used when the error does not carry its own.
    HEAD responses must not carry this body; that is the app's job.
    """
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n<Error>',
        f"<Code>{escape(err.code)}</Code>",
        f"<Message>{escape(err.message)}</Message>",
    ]
    res = err.resource if err.resource is not None else resource
    if res is not None:
        parts.append(f"<Resource>{escape(res)}</Resource>")
    for name, value in err.extra.items():
        parts.append(f"<{name}>{escape(value)}</{name}>")
    parts.append(f"<RequestId>{escape(request_id)}</RequestId>")
    parts.append(f"<HostId>{escape(host_id if host_id is not None else request_id)}</HostId>")
    parts.append("</Error>")
    return "".join(parts).encode("utf-8")
