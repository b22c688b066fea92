"""Node request signatures: accepted when right, refused when unsigned, wrong or replayed."""

import pytest

from zonestore.nodeauth import AuthError, sign_headers, verify_request


def test_signed_request_verifies_and_tampering_fails():
    h = sign_headers("s3cret", "PUT", "/v1/records/a.b", {"x": "1"}, b"body", now=1000)
    assert verify_request("s3cret", "PUT", "/v1/records/a.b", {"x": "1"}, h, now=1001)
    for args in [("GET", "/v1/records/a.b", {"x": "1"}), ("PUT", "/v1/records/a.c", {"x": "1"}),
                 ("PUT", "/v1/records/a.b", {"x": "2"})]:
        with pytest.raises(AuthError):
            verify_request("s3cret", *args, h, now=1001)
    with pytest.raises(AuthError):
        verify_request("other", "PUT", "/v1/records/a.b", {"x": "1"}, h, now=1001)


def test_unsigned_and_replayed_requests_are_refused():
    with pytest.raises(AuthError):
        verify_request("s", "GET", "/", {}, {}, now=0)
    h = sign_headers("s", "GET", "/", now=1000)
    with pytest.raises(AuthError, match="window"):
        verify_request("s", "GET", "/", {}, h, now=1000 + 3600)
