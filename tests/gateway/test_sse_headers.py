"""gateway/s3/sse.py: every SSE request header combination and S3's answer to it (a table: a
new header case cannot slip in unseen)."""

from __future__ import annotations

import base64
import hashlib

import pytest

from gateway.s3 import sse
from gateway.s3.errors import S3Error

KEY = bytes(range(32))
K64 = base64.b64encode(KEY).decode()
M64 = base64.b64encode(hashlib.md5(KEY).digest()).decode()
C = "x-amz-server-side-encryption-customer-"
CC = "x-amz-copy-source-server-side-encryption-customer-"
TRIO = {C + "algorithm": "AES256", C + "key": K64, C + "key-md5": M64}

WRITES = [
    ({}, ""),
    ({"x-amz-server-side-encryption": "AES256"}, "AES256"),
    ({"x-amz-server-side-encryption": " AES256 "}, "AES256"),
    (TRIO, "SSE-C"),
    ({"x-amz-server-side-encryption": "aws:kms"}, "NotImplemented"),
    ({"x-amz-server-side-encryption": "aws:kms:dsse"}, "NotImplemented"),
    ({"x-amz-server-side-encryption": "aws:kms",
      "x-amz-server-side-encryption-aws-kms-key-id": "k"}, "NotImplemented"),
    ({"x-amz-server-side-encryption": "aes256"}, "InvalidArgument"),
    ({"x-amz-server-side-encryption": ""}, "InvalidArgument"),
    ({"x-amz-server-side-encryption-aws-kms-key-id": "k"}, "InvalidArgument"),
    ({"x-amz-server-side-encryption": "AES256",
      "x-amz-server-side-encryption-aws-kms-key-id": "k"}, "InvalidArgument"),
    ({"x-amz-server-side-encryption": "AES256", **TRIO}, "InvalidArgument"),
    ({C + "algorithm": "AES256"}, "InvalidArgument"),
    ({C + "key": K64}, "InvalidArgument"),
    ({C + "key-md5": M64}, "InvalidArgument"),
    ({C + "algorithm": "AES256", C + "key": K64}, "InvalidArgument"),
    ({C + "algorithm": "AES256", C + "key-md5": M64}, "InvalidArgument"),
    ({C + "key": K64, C + "key-md5": M64}, "InvalidArgument"),
    ({**TRIO, C + "algorithm": "AES128"}, "InvalidEncryptionAlgorithmError"),
    ({**TRIO, C + "key": "not base64!"}, "InvalidArgument"),
    ({**TRIO, C + "key": base64.b64encode(KEY[:16]).decode()}, "InvalidArgument"),
    ({**TRIO, C + "key-md5": base64.b64encode(b"x" * 16).decode()}, "InvalidArgument"),
    ({**TRIO, C + "key-md5": "%%%"}, "InvalidArgument"),
]


@pytest.mark.parametrize("headers,want", WRITES)
def test_write_headers(headers, want):
    if want in ("", "AES256", "SSE-C"):
        t = sse.parse_target(headers, secure=True, allow_http=False)
        assert t.mode == want
        if want == "SSE-C":
            assert t.customer.key == KEY and t.customer.key_md5 == M64
            assert K64 not in repr(t)  # never the key in a log line
        return
    with pytest.raises(S3Error) as e:
        sse.parse_target(headers, secure=True, allow_http=False)
    assert e.value.code == want
    assert K64 not in str(e.value.extra)  # an error never echoes the key


def test_sse_c_needs_a_secure_connection_unless_allowed():
    with pytest.raises(S3Error) as e:
        sse.parse_target(TRIO, secure=False, allow_http=False)
    assert (e.value.code, e.value.status) == ("InvalidRequest", 400)
    assert sse.parse_target(TRIO, secure=False, allow_http=True).mode == "SSE-C"
    assert sse.parse_target({"x-amz-server-side-encryption": "AES256"}, secure=False,
                            allow_http=False).mode == "AES256"


def test_copy_source_trio():
    h = {CC + "algorithm": "AES256", CC + "key": K64, CC + "key-md5": M64}
    assert sse.parse_customer_key(h, sse.COPY_CUSTOMER).key == KEY
    assert sse.parse_customer_key(h) is None  # not the destination's key
    with pytest.raises(S3Error) as e:
        sse.parse_customer_key({CC + "algorithm": "AES256"}, sse.COPY_CUSTOMER)
    assert e.value.code == "InvalidArgument"
    assert e.value.extra["ArgumentName"].startswith("x-amz-copy-source-server-side-encryption")


def test_reads_refuse_the_method_header_and_echo():
    with pytest.raises(S3Error) as e:
        sse.refuse_method_on_read({"x-amz-server-side-encryption": "AES256"})
    assert e.value.code == "InvalidArgument"
    sse.refuse_method_on_read({})
    assert sse.response_headers("AES256") == {"x-amz-server-side-encryption": "AES256"}
    ck = sse.parse_customer_key(TRIO)
    assert sse.response_headers("SSE-C", ck) == {C + "algorithm": "AES256", C + "key-MD5": M64}
    assert sse.response_headers("") == {}
