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


def test_a_signature_is_bound_to_its_node():
    h = sign_headers("s", "PUT", "/v1/records/a", None, b"x", node="node01", now=1000)
    assert verify_request("s", "PUT", "/v1/records/a", {}, h, node="node01", now=1000)
    with pytest.raises(AuthError, match="not for this node"):
        verify_request("s", "PUT", "/v1/records/a", {}, h, node="node02", now=1000)
    with pytest.raises(AuthError, match="signature"):
        verify_request("s", "PUT", "/v1/records/a", {}, {**h, "X-ZG-Node": "node02"},
                       node="node02", now=1000)
    # Without the header the node line is empty: a bound signature does not verify unbound.
    stripped = {k: v for k, v in h.items() if k != "X-ZG-Node"}
    with pytest.raises(AuthError, match="signature"):
        verify_request("s", "PUT", "/v1/records/a", {}, stripped, node="node01", now=1000)


@pytest.mark.parametrize("ts", ["", "-5", "+5", "١٠٠٠", "1" * 5000, "1e3"])
def test_odd_timestamps_are_refused(ts):
    h = sign_headers("s", "GET", "/", now=1000) | {"X-ZG-Date": ts}
    with pytest.raises(AuthError):
        verify_request("s", "GET", "/", {}, h, now=1000)


def test_the_replay_cache_survives_a_restart_and_rotates(tmp_path):
    from zonestore.node.auth import ReplayCache
    path = tmp_path / "replay.log"
    c = ReplayCache(10.0, path=path, now=1000)
    assert c.first_time("sig-a", now=1000)
    assert not c.first_time("sig-a", now=1001)
    c.close()  # (a kill -9 leaves the same file: every entry is written as it is accepted)
    c = ReplayCache(10.0, path=path, now=1005)
    assert not c.first_time("sig-a", now=1005)
    assert c.first_time("sig-b", now=1019)
    c.close()
    # Past the horizon (2 x window) an entry is forgotten, on load as in memory.
    c = ReplayCache(10.0, path=path, now=1030)
    assert c.first_time("sig-a", now=1030)
    assert not c.first_time("sig-b", now=1030)
    # Rotation keeps what is still within the horizon.
    assert c.first_time("sig-c", now=1052)
    c.close()
    c = ReplayCache(10.0, path=path, now=1053)
    assert not c.first_time("sig-c", now=1053)
    assert c.first_time("sig-b", now=1053)
    c.close()
    assert path.stat().st_size < 200
