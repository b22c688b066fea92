"""S3 XML in and out: safe parsing of request bodies and builders for response bodies.

Parsing uses defusedxml only (entity expansion, external entities and DTDs are refused); any
bad input is S3Error MalformedXML. Element names are matched without their namespace, so
bodies with or without `xmlns="http://s3.amazonaws.com/doc/2006-03-01/"` are accepted.

Builders take plain data (the dataclasses below, str, int, datetime or epoch seconds) and
return UTF-8 bytes with the XML declaration and S3's namespace. With `encoding_type="url"`
the listing builders URL-encode keys, prefixes, delimiters and markers as S3 does
(`quote_plus`, '/' kept), which botocore decodes.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import AsyncIterable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote_plus
from xml.etree.ElementTree import Element, ParseError, SubElement, tostring

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from gateway.s3.errors import S3Error
from gateway.s3.numbers import INT32_MAX, parse_uint

S3_NS = "http://s3.amazonaws.com/doc/2006-03-01/"
MAX_DELETE_KEYS = 1000
MAX_PARTS = 10000
MAX_XML_BODY = 4 * 1024 * 1024  # CompleteMultipartUpload with 10,000 parts fits easily

Timestamp = _dt.datetime | float | int


# ---- reading -----------------------------------------------------------------------------


async def read_body(chunks: AsyncIterable[bytes], limit: int = MAX_XML_BODY) -> bytes:
    """Collect a small request body (an XML document), refusing more than `limit` bytes
    with MaxMessageLengthExceeded before buffering it."""
    parts: list[bytes] = []
    size = 0
    async for chunk in chunks:
        size += len(chunk)
        if size > limit:
            raise S3Error("MaxMessageLengthExceeded",
                          f"Your request was too big (more than {limit} bytes).")
        parts.append(bytes(chunk))
    return b"".join(parts)


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def parse_untrusted(body: bytes) -> Element:
    """Parse an untrusted request document; any failure is MalformedXML. expat raises more
    than ParseError: LookupError for an unknown declared encoding (`encoding="x-bogus"`),
    ValueError (UnicodeError) for bytes that do not decode, and defusedxml its own
    exceptions for DTDs and entities; none of them may become a 500."""
    if not body or not body.strip():
        raise S3Error("MalformedXML")
    try:
        return SafeET.fromstring(body, forbid_dtd=True)
    except (ParseError, DefusedXmlException, LookupError, ValueError, RecursionError):
        raise S3Error("MalformedXML") from None


def _parse(body: bytes, root_name: str) -> Element:
    root = parse_untrusted(body)
    if _local(root.tag) != root_name:
        raise S3Error("MalformedXML")
    return root


def _children(el: Element, name: str) -> list[Element]:
    return [c for c in el if _local(c.tag) == name]


def _text(el: Element, name: str) -> str | None:
    found = _children(el, name)
    if len(found) > 1:
        raise S3Error("MalformedXML")
    if not found:
        return None
    return found[0].text or ""


@dataclass(frozen=True)
class CompletedPart:
    part_number: int
    etag: str
    checksums: dict[str, str] = field(default_factory=dict)  # algorithm -> base64


def parse_complete_multipart_upload(body: bytes) -> list[CompletedPart]:
    """The parts of a CompleteMultipartUpload body, in the order given.

    Empty list, missing PartNumber/ETag or a non-integer part number -> MalformedXML; part
    numbers outside 1..10000 -> InvalidArgument. Order and existence are the caller's checks
    (InvalidPartOrder, InvalidPart).
    """
    root = _parse(body, "CompleteMultipartUpload")
    parts: list[CompletedPart] = []
    for el in _children(root, "Part"):
        number_s, etag = _text(el, "PartNumber"), _text(el, "ETag")
        if number_s is None or etag is None:
            raise S3Error("MalformedXML")
        try:
            number = parse_uint(number_s.strip(), hi=INT32_MAX)
        except ValueError:
            raise S3Error("MalformedXML") from None
        if not 1 <= number <= MAX_PARTS:
            raise S3Error("InvalidArgument", "Part number must be an integer between 1 and "
                                             "10000, inclusive", ArgumentName="PartNumber",
                          ArgumentValue=number_s.strip())
        sums = {}
        for child in el:
            name = _local(child.tag)
            if name.startswith("Checksum") and name != "ChecksumType":
                sums[name[len("Checksum"):].upper()] = (child.text or "").strip()
        parts.append(CompletedPart(number, etag.strip(), sums))
    if not parts:
        raise S3Error("MalformedXML")
    return parts


@dataclass(frozen=True)
class DeleteRequest:
    objects: list[tuple[str, str | None]]  # (key, version id or None)
    quiet: bool


def parse_delete(body: bytes) -> DeleteRequest:
    """A DeleteObjects body: up to 1000 `<Object><Key>` (with optional VersionId) and Quiet."""
    root = _parse(body, "Delete")
    quiet_s = _text(root, "Quiet")
    quiet = False
    if quiet_s is not None:
        q = quiet_s.strip().lower()
        if q not in ("true", "false"):
            raise S3Error("MalformedXML")
        quiet = q == "true"
    objects: list[tuple[str, str | None]] = []
    for el in _children(root, "Object"):
        key = _text(el, "Key")
        if key is None or key == "":
            raise S3Error("MalformedXML")
        version = _text(el, "VersionId")
        objects.append((key, version.strip() if version is not None else None))
    if not objects or len(objects) > MAX_DELETE_KEYS:
        raise S3Error("MalformedXML")
    return DeleteRequest(objects, quiet)


def parse_create_bucket_configuration(body: bytes) -> str | None:
    """LocationConstraint of a CreateBucket body; None for an empty body or no constraint."""
    if not body or not body.strip():
        return None
    root = _parse(body, "CreateBucketConfiguration")
    loc = _text(root, "LocationConstraint")
    return loc.strip() or None if loc is not None else None


def parse_versioning_configuration(body: bytes) -> str:
    """The Status of a PutBucketVersioning body: "Enabled" or "Suspended". A Status or
    MfaDelete outside S3's values is MalformedXML, as S3 answers; a document without a Status
    is IllegalVersioningConfigurationException; MfaDelete Enabled (it needs MFA devices, which
    ZoneGate has not) is NotImplemented."""
    root = _parse(body, "VersioningConfiguration")
    status = _text(root, "Status")
    mfa = _text(root, "MfaDelete")
    if mfa is not None and mfa.strip() not in ("Enabled", "Disabled"):
        raise S3Error("MalformedXML")
    if status is None:
        raise S3Error("IllegalVersioningConfigurationException",
                      "The Versioning element must be specified")
    if status.strip() not in ("Enabled", "Suspended"):
        raise S3Error("MalformedXML")
    if mfa is not None and mfa.strip() == "Enabled":
        raise S3Error("NotImplemented", "MFA delete is not supported.")
    return status.strip()


# ---- writing -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Owner:
    id: str
    display_name: str | None = None


@dataclass(frozen=True)
class ObjectEntry:
    """One object in a listing (ListObjects v1/v2, ListObjectVersions)."""

    key: str
    last_modified: Timestamp
    etag: str  # quoted, as stored
    size: int
    storage_class: str = "STANDARD"
    owner: Owner | None = None
    checksum_algorithm: str | None = None
    checksum_type: str | None = None
    version_id: str = "null"
    is_latest: bool = True


@dataclass(frozen=True)
class PartEntry:
    part_number: int
    last_modified: Timestamp
    etag: str
    size: int
    checksums: Mapping[str, str] = field(default_factory=dict)  # algorithm -> base64


@dataclass(frozen=True)
class UploadEntry:
    key: str
    upload_id: str
    initiated: Timestamp
    owner: Owner | None = None
    storage_class: str = "STANDARD"
    checksum_algorithm: str | None = None
    checksum_type: str | None = None


def iso8601(ts: Timestamp) -> str:
    """S3's timestamp form: 2009-10-12T17:50:30.000Z."""
    if isinstance(ts, _dt.datetime):
        if ts.tzinfo is None:
            ts = ts.replace(tzinfo=_dt.UTC)
        d = ts.astimezone(_dt.UTC)
    else:
        d = _dt.datetime.fromtimestamp(float(ts), tz=_dt.UTC)
    return d.strftime("%Y-%m-%dT%H:%M:%S.") + f"{d.microsecond // 1000:03d}Z"


def _root(name: str) -> Element:
    return Element(name, xmlns=S3_NS)


def _add(parent: Element, name: str, value: object) -> Element:
    el = SubElement(parent, name)
    if value is None:
        return el
    if isinstance(value, bool):
        el.text = "true" if value else "false"
    elif isinstance(value, _dt.datetime):
        el.text = iso8601(value)
    else:
        el.text = str(value)
    return el


def _opt(parent: Element, name: str, value: object) -> None:
    if value is not None:
        _add(parent, name, value)


def _doc(root: Element) -> bytes:
    return b'<?xml version="1.0" encoding="UTF-8"?>\n' + tostring(root, encoding="utf-8",
                                                                  xml_declaration=False)


def _enc(value: str | None, encoding_type: str | None) -> str | None:
    if value is None or encoding_type != "url":
        return value
    return quote_plus(value, safe="/")


def _owner(parent: Element, owner: Owner, name: str = "Owner") -> None:
    el = SubElement(parent, name)
    _add(el, "ID", owner.id)
    _add(el, "DisplayName", owner.display_name or owner.id)


def _checksums(parent: Element, sums: Mapping[str, str]) -> None:
    for algo, value in sums.items():
        _add(parent, "Checksum" + algo.upper(), value)


def list_buckets(owner: Owner, buckets: Iterable[tuple[str, Timestamp]]) -> bytes:
    """ListAllMyBucketsResult for (name, creation time) pairs."""
    root = _root("ListAllMyBucketsResult")
    _owner(root, owner)
    container = SubElement(root, "Buckets")
    for name, created in buckets:
        b = SubElement(container, "Bucket")
        _add(b, "Name", name)
        _add(b, "CreationDate", iso8601(created))
    return _doc(root)


def _contents(root: Element, entries: Iterable[ObjectEntry], enc: str | None,
              with_owner: bool) -> None:
    for e in entries:
        c = SubElement(root, "Contents")
        _add(c, "Key", _enc(e.key, enc))
        _add(c, "LastModified", iso8601(e.last_modified))
        _add(c, "ETag", e.etag)
        if e.checksum_algorithm:
            _add(c, "ChecksumAlgorithm", e.checksum_algorithm)
        if e.checksum_type:
            _add(c, "ChecksumType", e.checksum_type)
        _add(c, "Size", e.size)
        _add(c, "StorageClass", e.storage_class)
        if with_owner and e.owner is not None:
            _owner(c, e.owner)


def _common_prefixes(root: Element, prefixes: Iterable[str], enc: str | None) -> None:
    for p in prefixes:
        _add(SubElement(root, "CommonPrefixes"), "Prefix", _enc(p, enc))


def list_objects_v1(
    *,
    bucket: str,
    prefix: str = "",
    marker: str = "",
    delimiter: str | None = None,
    max_keys: int = 1000,
    is_truncated: bool = False,
    contents: Sequence[ObjectEntry] = (),
    common_prefixes: Sequence[str] = (),
    next_marker: str | None = None,
    encoding_type: str | None = None,
) -> bytes:
    """ListBucketResult (v1). `Marker` is always present; pass `next_marker` only when S3
    would (truncated with a delimiter). Owners are included when the entries carry one."""
    root = _root("ListBucketResult")
    _add(root, "Name", bucket)
    _add(root, "Prefix", _enc(prefix, encoding_type))
    _add(root, "Marker", _enc(marker, encoding_type))
    _opt(root, "NextMarker", _enc(next_marker, encoding_type))
    _add(root, "MaxKeys", max_keys)
    _opt(root, "Delimiter", _enc(delimiter, encoding_type))
    _add(root, "IsTruncated", is_truncated)
    _opt(root, "EncodingType", encoding_type)
    _contents(root, contents, encoding_type, with_owner=True)
    _common_prefixes(root, common_prefixes, encoding_type)
    return _doc(root)


def list_objects_v2(
    *,
    bucket: str,
    prefix: str = "",
    delimiter: str | None = None,
    max_keys: int = 1000,
    is_truncated: bool = False,
    contents: Sequence[ObjectEntry] = (),
    common_prefixes: Sequence[str] = (),
    continuation_token: str | None = None,
    next_continuation_token: str | None = None,
    start_after: str | None = None,
    encoding_type: str | None = None,
    fetch_owner: bool = False,
) -> bytes:
    """ListBucketResult (v2). KeyCount = contents + common prefixes; Owner only with
    fetch_owner."""
    root = _root("ListBucketResult")
    _add(root, "Name", bucket)
    _add(root, "Prefix", _enc(prefix, encoding_type))
    _opt(root, "ContinuationToken", continuation_token)
    _opt(root, "NextContinuationToken", next_continuation_token)
    _opt(root, "StartAfter", _enc(start_after, encoding_type))
    _add(root, "KeyCount", len(contents) + len(common_prefixes))
    _add(root, "MaxKeys", max_keys)
    _opt(root, "Delimiter", _enc(delimiter, encoding_type))
    _add(root, "IsTruncated", is_truncated)
    _opt(root, "EncodingType", encoding_type)
    _contents(root, contents, encoding_type, with_owner=fetch_owner)
    _common_prefixes(root, common_prefixes, encoding_type)
    return _doc(root)


def list_object_versions(
    *,
    bucket: str,
    prefix: str = "",
    key_marker: str = "",
    version_id_marker: str = "",
    delimiter: str | None = None,
    max_keys: int = 1000,
    is_truncated: bool = False,
    versions: Sequence[ObjectEntry] = (),
    common_prefixes: Sequence[str] = (),
    next_key_marker: str | None = None,
    next_version_id_marker: str | None = None,
    encoding_type: str | None = None,
) -> bytes:
    """ListVersionsResult; for an unversioned store every entry has VersionId "null"."""
    root = _root("ListVersionsResult")
    _add(root, "Name", bucket)
    _add(root, "Prefix", _enc(prefix, encoding_type))
    _add(root, "KeyMarker", _enc(key_marker, encoding_type))
    _add(root, "VersionIdMarker", version_id_marker)
    _opt(root, "NextKeyMarker", _enc(next_key_marker, encoding_type))
    _opt(root, "NextVersionIdMarker", next_version_id_marker)
    _add(root, "MaxKeys", max_keys)
    _opt(root, "Delimiter", _enc(delimiter, encoding_type))
    _add(root, "IsTruncated", is_truncated)
    _opt(root, "EncodingType", encoding_type)
    for e in versions:
        v = SubElement(root, "Version")
        _add(v, "Key", _enc(e.key, encoding_type))
        _add(v, "VersionId", e.version_id)
        _add(v, "IsLatest", e.is_latest)
        _add(v, "LastModified", iso8601(e.last_modified))
        _add(v, "ETag", e.etag)
        if e.checksum_algorithm:
            _add(v, "ChecksumAlgorithm", e.checksum_algorithm)
        _add(v, "Size", e.size)
        _add(v, "StorageClass", e.storage_class)
        if e.owner is not None:
            _owner(v, e.owner)
    _common_prefixes(root, common_prefixes, encoding_type)
    return _doc(root)


def initiate_multipart_upload(bucket: str, key: str, upload_id: str) -> bytes:
    root = _root("InitiateMultipartUploadResult")
    _add(root, "Bucket", bucket)
    _add(root, "Key", key)
    _add(root, "UploadId", upload_id)
    return _doc(root)


def complete_multipart_upload(
    *,
    location: str,
    bucket: str,
    key: str,
    etag: str,
    checksums: Mapping[str, str] | None = None,
    checksum_type: str | None = None,
) -> bytes:
    root = _root("CompleteMultipartUploadResult")
    _add(root, "Location", location)
    _add(root, "Bucket", bucket)
    _add(root, "Key", key)
    _add(root, "ETag", etag)
    _checksums(root, checksums or {})
    _opt(root, "ChecksumType", checksum_type)
    return _doc(root)


def list_parts(
    *,
    bucket: str,
    key: str,
    upload_id: str,
    parts: Sequence[PartEntry] = (),
    part_number_marker: int = 0,
    next_part_number_marker: int | None = None,
    max_parts: int = 1000,
    is_truncated: bool = False,
    owner: Owner | None = None,
    storage_class: str = "STANDARD",
    checksum_algorithm: str | None = None,
    checksum_type: str | None = None,
) -> bytes:
    root = _root("ListPartsResult")
    _add(root, "Bucket", bucket)
    _add(root, "Key", key)
    _add(root, "UploadId", upload_id)
    if owner is not None:
        _owner(root, owner, "Initiator")
        _owner(root, owner)
    _add(root, "StorageClass", storage_class)
    _add(root, "PartNumberMarker", part_number_marker)
    _add(root, "NextPartNumberMarker",
         next_part_number_marker if next_part_number_marker is not None
         else (parts[-1].part_number if parts else 0))
    _add(root, "MaxParts", max_parts)
    _add(root, "IsTruncated", is_truncated)
    _opt(root, "ChecksumAlgorithm", checksum_algorithm)
    _opt(root, "ChecksumType", checksum_type)
    for p in parts:
        el = SubElement(root, "Part")
        _add(el, "PartNumber", p.part_number)
        _add(el, "LastModified", iso8601(p.last_modified))
        _add(el, "ETag", p.etag)
        _add(el, "Size", p.size)
        _checksums(el, p.checksums)
    return _doc(root)


def list_multipart_uploads(
    *,
    bucket: str,
    uploads: Sequence[UploadEntry] = (),
    key_marker: str = "",
    upload_id_marker: str = "",
    next_key_marker: str | None = None,
    next_upload_id_marker: str | None = None,
    max_uploads: int = 1000,
    is_truncated: bool = False,
    prefix: str = "",
    delimiter: str | None = None,
    common_prefixes: Sequence[str] = (),
    encoding_type: str | None = None,
) -> bytes:
    root = _root("ListMultipartUploadsResult")
    _add(root, "Bucket", bucket)
    _add(root, "KeyMarker", _enc(key_marker, encoding_type))
    _add(root, "UploadIdMarker", upload_id_marker)
    _add(root, "NextKeyMarker", _enc(next_key_marker or "", encoding_type))
    _add(root, "NextUploadIdMarker", next_upload_id_marker or "")
    _add(root, "Prefix", _enc(prefix, encoding_type))
    _opt(root, "Delimiter", _enc(delimiter, encoding_type))
    _add(root, "MaxUploads", max_uploads)
    _add(root, "IsTruncated", is_truncated)
    _opt(root, "EncodingType", encoding_type)
    for u in uploads:
        el = SubElement(root, "Upload")
        _add(el, "Key", _enc(u.key, encoding_type))
        _add(el, "UploadId", u.upload_id)
        if u.owner is not None:
            _owner(el, u.owner, "Initiator")
            _owner(el, u.owner)
        _add(el, "StorageClass", u.storage_class)
        _add(el, "Initiated", iso8601(u.initiated))
        _opt(el, "ChecksumAlgorithm", u.checksum_algorithm)
        _opt(el, "ChecksumType", u.checksum_type)
    _common_prefixes(root, common_prefixes, encoding_type)
    return _doc(root)


def _copy_result(name: str, etag: str, last_modified: Timestamp,
                 checksums: Mapping[str, str] | None) -> bytes:
    root = _root(name)
    _add(root, "LastModified", iso8601(last_modified))
    _add(root, "ETag", etag)
    _checksums(root, checksums or {})
    return _doc(root)


def copy_object_result(etag: str, last_modified: Timestamp,
                       checksums: Mapping[str, str] | None = None) -> bytes:
    return _copy_result("CopyObjectResult", etag, last_modified, checksums)


def copy_part_result(etag: str, last_modified: Timestamp,
                     checksums: Mapping[str, str] | None = None) -> bytes:
    return _copy_result("CopyPartResult", etag, last_modified, checksums)


@dataclass(frozen=True)
class DeleteError:
    key: str
    code: str
    message: str
    version_id: str | None = None


def delete_result(
    deleted: Iterable[tuple[str, str | None]],
    errors: Iterable[DeleteError] = (),
    *,
    quiet: bool = False,
) -> bytes:
    """DeleteResult: (key, version id or None) for each deleted object (omitted in quiet
    mode), and the errors (always listed)."""
    root = _root("DeleteResult")
    if not quiet:
        for key, version in deleted:
            el = SubElement(root, "Deleted")
            _add(el, "Key", key)
            _opt(el, "VersionId", version)
    for err in errors:
        el = SubElement(root, "Error")
        _add(el, "Key", err.key)
        _opt(el, "VersionId", err.version_id)
        _add(el, "Code", err.code)
        _add(el, "Message", err.message)
    return _doc(root)


def location_constraint(region: str | None) -> bytes:
    """GetBucketLocation: empty for us-east-1 (as S3 answers), else the region."""
    root = _root("LocationConstraint")
    if region and region != "us-east-1":
        root.text = region
    return _doc(root)
