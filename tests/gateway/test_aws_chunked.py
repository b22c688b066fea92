"""aws-chunked bodies: AWS's published signed examples decode and verify, botocore's unsigned
trailer bodies decode, any split of the wire bytes decodes the same, and every malformation
or tampering is the right S3 error, found without buffering more than a chunk.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import io

import pytest
from botocore.auth import SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
from botocore.httpchecksum import (
    AwsChunkedWrapper,
    Crc32Checksum,
    CrtCrc32cChecksum,
    CrtCrc64NvmeChecksum,
    Sha1Checksum,
    Sha256Checksum,
)
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.s3.auth import (
    AuthResult,
    AwsChunkedDecoder,
    RequestBody,
    StaticCredentials,
    authenticate,
)
from gateway.s3.auth.chunked import MAX_CHUNK
from gateway.s3.auth.common import parse_amz_date
from gateway.s3.errors import S3Error

# The credentials, time and request of AWS's SigV4 streaming examples (S3 API reference,
# "Signature Calculations for the Authorization Header: Transferring Payload in Multiple
# Chunks" and "... Including Trailing Headers").
EX_AK, EX_SK = "AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
EX_DATE = "20130524T000000Z"
EX_NOW = parse_amz_date(EX_DATE)
EX_CREDS = StaticCredentials([("example", EX_AK, EX_SK)])
EX_SEED = "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9"
EX_CHUNK_SIGS = ["ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
                 "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
                 "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9"]
EX_TRAILER_SEED = "106e2a8a18243abcf37539882f36619c00e2dfc72633413f02d3b74544bfeb8e"
EX_TRAILER_CHUNK_SIGS = ["b474d8862b1487a5145d686f57f013e54db672cee1c953b3010fb58501ef5aa2",
                         "1c1344b170168f8e65b41376b44b20fe354e373826ccbbe2c1d40a8cae51e5c7",
                         "2ca2aba2005185cf7159c6277faf83795951dd77a3a99e6e65d5c9f85863f992"]
EX_TRAILER = ("x-amz-checksum-crc32c", "sOO8/Q==")
EX_TRAILER_SIG = "d81f82fc3505edab99d459891051a732e8730629a2e4a59689829ca17fe2e435"
EX_SIZES = [65536, 1024, 0]


def example_headers(seed: str, mode: str, signed: str, extra: dict[str, str]) -> dict[str, str]:
    return {
        "Host": "s3.amazonaws.com", "x-amz-date": EX_DATE,
        "x-amz-storage-class": "REDUCED_REDUNDANCY", "x-amz-content-sha256": mode,
        "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": "66560", **extra,
        "Authorization": f"AWS4-HMAC-SHA256 Credential={EX_AK}/20130524/us-east-1/s3/"
                         f"aws4_request,SignedHeaders={signed},Signature={seed}",
    }


EX_HEADERS = example_headers(
    EX_SEED, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
    "content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
    "x-amz-decoded-content-length;x-amz-storage-class", {"Content-Length": "66824"})
EX_TRAILER_HEADERS = example_headers(
    EX_TRAILER_SEED, "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
    "content-encoding;host;x-amz-content-sha256;x-amz-date;x-amz-decoded-content-length;"
    "x-amz-storage-class;x-amz-trailer", {"x-amz-trailer": "x-amz-checksum-crc32c"})


def example_body(sigs: list[str], trailer: bytes = b"") -> bytes:
    out = b""
    for size, sig in zip(EX_SIZES, sigs, strict=True):
        out += b"%x;chunk-signature=%s\r\n" % (size, sig.encode())
        if size:
            out += b"a" * size + b"\r\n"
    return out + (trailer or b"\r\n")


# ---- an independent reference signer (straight from the AWS documentation) ---------------


def ref_key(secret: str, date: str, region: str = "us-east-1") -> bytes:
    k = ("AWS4" + secret).encode()
    for msg in (date, region, "s3", "aws4_request"):
        k = hmac.new(k, msg.encode(), hashlib.sha256).digest()
    return k


def ref_sign_chunks(key: bytes, amz_date: str, scope: str, seed: str,
                    chunks: list[bytes]) -> list[str]:
    sigs, prev = [], seed
    empty = hashlib.sha256(b"").hexdigest()
    for data in chunks:
        sts = (f"AWS4-HMAC-SHA256-PAYLOAD\n{amz_date}\n{scope}\n{prev}\n{empty}\n"
               f"{hashlib.sha256(data).hexdigest()}")
        prev = hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()
        sigs.append(prev)
    return sigs


def ref_sign_trailer(key: bytes, amz_date: str, scope: str, prev: str, canonical: bytes) -> str:
    sts = (f"AWS4-HMAC-SHA256-TRAILER\n{amz_date}\n{scope}\n{prev}\n"
           f"{hashlib.sha256(canonical).hexdigest()}")
    return hmac.new(key, sts.encode(), hashlib.sha256).hexdigest()


def ref_encode_signed(key: bytes, amz_date: str, scope: str, seed: str, chunks: list[bytes],
                      trailers: list[tuple[str, str]] | None = None) -> bytes:
    chunks = [c for c in chunks if c] + [b""]
    sigs = ref_sign_chunks(key, amz_date, scope, seed, chunks)
    out = bytearray()
    for data, sig in zip(chunks, sigs, strict=True):
        out += b"%x;chunk-signature=%s\r\n" % (len(data), sig.encode())
        if data:
            out += data + b"\r\n"
    if trailers is None:
        return bytes(out + b"\r\n")
    canonical = "".join(f"{n}:{v}\n" for n, v in trailers).encode()
    tsig = ref_sign_trailer(key, amz_date, scope, sigs[-1], canonical)
    for n, v in trailers:
        out += f"{n}:{v}\r\n".encode()
    out += f"x-amz-trailer-signature:{tsig}\r\n\r\n".encode()
    return bytes(out)


EX_KEY = ref_key(EX_SK, "20130524")
EX_SCOPE = "20130524/us-east-1/s3/aws4_request"


def test_reference_signer_reproduces_the_published_signatures():
    chunks = [b"a" * 65536, b"a" * 1024, b""]
    assert ref_sign_chunks(EX_KEY, EX_DATE, EX_SCOPE, EX_SEED, chunks) == EX_CHUNK_SIGS
    assert ref_sign_chunks(EX_KEY, EX_DATE, EX_SCOPE, EX_TRAILER_SEED, chunks) == \
        EX_TRAILER_CHUNK_SIGS
    assert ref_sign_trailer(EX_KEY, EX_DATE, EX_SCOPE, EX_TRAILER_CHUNK_SIGS[-1],
                            b"x-amz-checksum-crc32c:sOO8/Q==\n") == EX_TRAILER_SIG


# ---- helpers -----------------------------------------------------------------------------


async def _pieces(data: bytes, sizes: list[int] | int = 8192):
    i, k = 0, 0
    while i < len(data):
        n = sizes if isinstance(sizes, int) else sizes[k % len(sizes)]
        k += 1
        yield data[i:i + max(1, n)]
        i += max(1, n)


def decode(dec) -> bytes:
    async def run():
        out = bytearray()
        async for chunk in dec:
            out += chunk
        return bytes(out)
    return asyncio.run(run())


def example_auth(headers=EX_HEADERS) -> AuthResult:
    return authenticate("PUT", "/examplebucket/chunkObject.txt", [], headers, EX_CREDS,
                        now=EX_NOW)


# ---- AWS examples ------------------------------------------------------------------------


def test_published_signed_streaming_example_decodes():
    auth = example_auth()
    assert auth.signature == EX_SEED and auth.content_sha256 == "STREAMING-AWS4-HMAC-SHA256-PAYLOAD"
    body = example_body(EX_CHUNK_SIGS)
    assert len(body) == 66824  # the example's Content-Length
    rb = RequestBody(auth, EX_HEADERS, _pieces(body, 5000))
    assert decode(rb) == b"a" * 66560
    assert rb.complete and rb.size == 66560


def test_published_signed_trailer_example_decodes_and_exposes_the_checksum():
    auth = example_auth(EX_TRAILER_HEADERS)
    assert auth.signature == EX_TRAILER_SEED
    trailer = b"x-amz-checksum-crc32c:sOO8/Q==\r\nx-amz-trailer-signature:%s\r\n\r\n" % (
        EX_TRAILER_SIG.encode())
    body = example_body(EX_TRAILER_CHUNK_SIGS, trailer)
    rb = RequestBody(auth, EX_TRAILER_HEADERS, _pieces(body, 3000))
    assert decode(rb) == b"a" * 66560
    assert rb.trailers == {"x-amz-checksum-crc32c": "sOO8/Q=="}
    assert rb.checksum_algorithm == "CRC32C" and rb.checksum == "sOO8/Q=="


def test_tampered_chunk_is_refused_before_it_is_yielded():
    body = bytearray(example_body(EX_CHUNK_SIGS))
    body[-200] = ord("b")  # inside the 1 KiB chunk
    dec = AwsChunkedDecoder(_pieces(bytes(body)), mode="STREAMING-AWS4-HMAC-SHA256-PAYLOAD",
                            decoded_length=66560, auth=example_auth())
    got = []

    async def run():
        async for c in dec:
            got.append(c)

    with pytest.raises(S3Error) as e:
        asyncio.run(run())
    assert (e.value.code, e.value.status) == ("SignatureDoesNotMatch", 403)
    assert b"".join(got) == b"a" * 65536  # only the verified first chunk came out


@pytest.mark.parametrize("case", ["swapped", "seed", "final", "trailer-value", "trailer-sig",
                                  "no-trailer-sig"])
def test_signature_chain_and_trailer_tampering(case):
    sigs = list(EX_TRAILER_CHUNK_SIGS)
    tv, tsig = EX_TRAILER[1], EX_TRAILER_SIG
    if case == "swapped":
        sigs[0], sigs[1] = sigs[1], sigs[0]
    elif case == "seed":
        sigs = list(EX_CHUNK_SIGS)  # a valid chain, but from another seed
    elif case == "final":
        sigs[2] = sigs[2][:-1] + "0"
    elif case == "trailer-value":
        tv = "AAAAAA=="
    elif case == "trailer-sig":
        tsig = tsig[:-1] + "0"
    trailer = f"x-amz-checksum-crc32c:{tv}\r\n".encode()
    if case != "no-trailer-sig":
        trailer += f"x-amz-trailer-signature:{tsig}\r\n".encode()
    body = example_body(sigs, trailer + b"\r\n")
    dec = AwsChunkedDecoder(_pieces(body), mode="STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
                            decoded_length=66560, declared_trailers=["x-amz-checksum-crc32c"],
                            auth=example_auth(EX_TRAILER_HEADERS))
    with pytest.raises(S3Error) as e:
        decode(dec)
    expected = "MalformedTrailerError" if case == "no-trailer-sig" else "SignatureDoesNotMatch"
    assert e.value.code == expected
    assert not dec.complete and dec.trailers == {}


# ---- botocore: unsigned payload with a trailing checksum ---------------------------------


CHECKSUM_CLASSES = {"CRC32": Crc32Checksum, "CRC32C": CrtCrc32cChecksum,
                    "CRC64NVME": CrtCrc64NvmeChecksum, "SHA1": Sha1Checksum,
                    "SHA256": Sha256Checksum}


def unsigned_auth() -> AuthResult:
    return AuthResult(user="u", access_key="AK", method="v4-header",
                      content_sha256="STREAMING-UNSIGNED-PAYLOAD-TRAILER")


def botocore_chunked(data: bytes, algo: str, chunk_size: int) -> bytes:
    w = AwsChunkedWrapper(io.BytesIO(data), checksum_cls=CHECKSUM_CLASSES[algo],
                          checksum_name=f"x-amz-checksum-{algo.lower()}", chunk_size=chunk_size)
    return w.read()


@pytest.mark.parametrize("algo", sorted(CHECKSUM_CLASSES))
def test_botocore_unsigned_trailer_bodies_decode_and_verify(algo):
    data = bytes(range(256)) * 1500
    wire = botocore_chunked(data, algo, 65536)
    headers = {"x-amz-trailer": f"x-amz-checksum-{algo.lower()}",
               "x-amz-decoded-content-length": str(len(data)), "content-encoding": "aws-chunked"}
    rb = RequestBody(unsigned_auth(), headers, _pieces(wire, [1, 100, 65536, 7, 300000]))
    assert decode(rb) == data
    assert rb.checksum_algorithm == algo
    assert rb.checksum == rb.trailers[f"x-amz-checksum-{algo.lower()}"]


def test_empty_body_with_trailer():
    wire = botocore_chunked(b"", "CRC32", 1024)
    headers = {"x-amz-trailer": "x-amz-checksum-crc32", "x-amz-decoded-content-length": "0"}
    rb = RequestBody(unsigned_auth(), headers, _pieces(wire))
    assert decode(rb) == b"" and rb.checksum == "AAAAAA=="


# ---- signed streaming built with botocore's seed signature -------------------------------


def test_botocore_signed_seed_with_reference_chunks_round_trips():
    data = bytes(range(256)) * 700
    # SigV4Auth (not S3SigV4Auth, which replaces x-amz-content-sha256 with the body hash)
    # signs the streaming mode given in the header; it would double-encode a '%' in the path.
    req = AWSRequest(method="PUT", url="http://127.0.0.1:9000/bucket/some-key.bin", headers={
        "x-amz-content-sha256": "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER",
        "Content-Encoding": "aws-chunked", "x-amz-decoded-content-length": str(len(data)),
        "x-amz-trailer": "x-amz-checksum-sha256"})
    SigV4Auth(Credentials("AK1", "SK1"), "s3", "eu-central-1").add_auth(req)
    headers = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in req.headers.items()}
    headers["Host"] = "127.0.0.1:9000"
    auth = authenticate("PUT", "/bucket/some-key.bin", [], headers,
                        StaticCredentials([("u", "AK1", "SK1")]))
    key = ref_key("SK1", auth.amz_date[:8], "eu-central-1")
    digest = hashlib.sha256(data).digest()
    trailers = [("x-amz-checksum-sha256", base64.b64encode(digest).decode())]
    wire = ref_encode_signed(key, auth.amz_date, auth.scope, auth.signature,
                             [data[i:i + 10000] for i in range(0, len(data), 10000)], trailers)
    rb = RequestBody(auth, headers, _pieces(wire, 4096))
    assert decode(rb) == data and rb.checksum == trailers[0][1]


# ---- any split of the wire bytes decodes the same ----------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.binary(max_size=5000), chunk=st.integers(1, 700),
       splits=st.lists(st.integers(1, 900), min_size=1, max_size=8), signed=st.booleans())
def test_any_chunking_and_any_split_decode_to_the_payload(data, chunk, splits, signed):
    chunks = [data[i:i + chunk] for i in range(0, len(data), chunk)]
    if signed:
        seed = hashlib.sha256(repr(splits).encode()).hexdigest()
        auth = AuthResult(user="u", access_key="AK", method="v4-header",
                          content_sha256="STREAMING-AWS4-HMAC-SHA256-PAYLOAD", signature=seed,
                          signing_key=EX_KEY, scope=EX_SCOPE, amz_date=EX_DATE)
        wire = ref_encode_signed(EX_KEY, EX_DATE, EX_SCOPE, seed, chunks)
        mode = auth.content_sha256
    else:
        auth, mode = unsigned_auth(), "STREAMING-UNSIGNED-PAYLOAD-TRAILER"
        wire = botocore_chunked(data, "CRC32C", chunk)
    dec = AwsChunkedDecoder(_pieces(wire, splits), mode=mode, decoded_length=len(data),
                            declared_trailers=[] if signed else ["x-amz-checksum-crc32c"],
                            auth=auth)
    assert decode(dec) == data and dec.complete


# ---- malformed bodies --------------------------------------------------------------------


def _unsigned(wire: bytes, length: int, trailers=("x-amz-checksum-crc32",), sizes=64):
    return AwsChunkedDecoder(_pieces(wire, sizes), mode="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                             decoded_length=length, declared_trailers=list(trailers),
                             auth=unsigned_auth())


GOOD = botocore_chunked(b"hello world", "CRC32", 5)  # 5\r\nhello\r\n5\r\n worl\r\n1\r\nd\r\n0...


@pytest.mark.parametrize("wire,length,code", [
    (b"zz\r\nhello\r\n0\r\n\r\n", 5, "InvalidRequest"),                 # not hex
    (b"5;\r\nhello", 5, "IncompleteBody"),                              # cut inside a chunk
    (GOOD[:20], 11, "IncompleteBody"),                                  # cut mid-way
    (GOOD.split(b"0\r\n")[0], 11, "IncompleteBody"),                    # no final chunk
    (GOOD, 12, "IncompleteBody"),                                       # shorter than declared
    (GOOD, 10, "IncompleteBody"),                                       # longer than declared
    (GOOD.replace(b"hello\r\n", b"helloXX"), 11, "InvalidRequest"),     # no CRLF after data
    (GOOD + b"extra", 11, "InvalidRequest"),                            # data after the end
    (GOOD.replace(b"x-amz-checksum-crc32", b"x-amz-checksum-sha1"), 11,
     "MalformedTrailerError"),                                          # undeclared trailer
    (GOOD.split(b"0\r\n")[0] + b"0\r\n\r\n", 11, "MalformedTrailerError"),  # declared, missing
    (GOOD.replace(b"x-amz-checksum-crc32:", b"x-amz-checksum-crc32 "), 11,
     "MalformedTrailerError"),                                          # not name:value
    (b"1000001\r\n", 0x1000001, "InvalidRequest"),                      # chunk over 16 MiB
])
def test_malformed_bodies_are_clear_errors(wire, length, code):
    with pytest.raises(S3Error) as e:
        decode(_unsigned(wire, length))
    assert e.value.code == code, e.value.message


def test_signed_mode_requires_chunk_signatures():
    auth = example_auth()
    for wire in (b"10000\r\n" + b"a" * 65536 + b"\r\n",
                 b"10000;chunk-signature=xyz\r\n" + b"a" * 65536 + b"\r\n"):
        with pytest.raises(S3Error) as e:
            decode(AwsChunkedDecoder(_pieces(wire), mode=auth.content_sha256,
                                     decoded_length=65536, auth=auth))
        assert e.value.code == "InvalidRequest"


def test_long_header_line_fails_after_4_kib_without_reading_on():
    consumed = 0

    async def endless():
        nonlocal consumed
        while True:
            consumed += 1024
            yield b"f" * 1024

    with pytest.raises(S3Error) as e:
        decode(AwsChunkedDecoder(endless(), mode="STREAMING-UNSIGNED-PAYLOAD-TRAILER",
                                 decoded_length=10, auth=unsigned_auth()))
    assert e.value.code == "InvalidRequest" and "longer than" in e.value.message
    assert consumed <= 8 * 1024


def test_oversized_chunk_is_refused_before_its_data_is_read():
    consumed = 0

    async def source():
        nonlocal consumed
        yield b"%x;chunk-signature=%s\r\n" % (MAX_CHUNK + 1, b"0" * 64)
        while True:
            consumed += 1
            yield b"a" * 65536

    auth = example_auth()
    with pytest.raises(S3Error) as e:
        decode(AwsChunkedDecoder(source(), mode=auth.content_sha256,
                                 decoded_length=MAX_CHUNK * 4, auth=auth))
    assert e.value.code == "InvalidRequest" and consumed == 0


def test_missing_decoded_length_and_signed_mode_without_sigv4():
    with pytest.raises(S3Error) as e:
        RequestBody(unsigned_auth(), {"x-amz-trailer": "x-amz-checksum-crc32"}, _pieces(GOOD))
    assert (e.value.code, e.value.status) == ("MissingContentLength", 411)
    v2 = AuthResult(user="u", access_key="AK", method="v2-header",
                    content_sha256="STREAMING-AWS4-HMAC-SHA256-PAYLOAD")
    with pytest.raises(S3Error):
        AwsChunkedDecoder(_pieces(GOOD), mode=v2.content_sha256, decoded_length=11, auth=v2)


def test_a_decoder_iterates_once():
    dec = _unsigned(GOOD, 11)
    assert decode(dec) == b"hello world"
    with pytest.raises(RuntimeError):
        dec.__aiter__()
