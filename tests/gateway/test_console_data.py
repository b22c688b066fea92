"""The console's pure parts, by property: session cookies verify only as issued (any change,
another cluster secret, expiry, a changed user key or a removed user refuses them), the
Origin check, and the zone map built from `/v1/stats` or `/v1/zones` keeps its invariants
(one cell per zone, 0 <= garbage <= written <= capacity, capacity sums)."""

from __future__ import annotations

import time
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gateway.console.data import STATS_CONDITIONS, _drive_from_stats, _zones_drive
from gateway.console.session import SessionSigner, same_origin

USERS = {"AK1": SimpleNamespace(name="alice", secret_key="s3cret-alice"),
         "AK2": SimpleNamespace(name="bob", secret_key="s3cret-bob")}


def test_a_cookie_verifies_as_issued_only():
    signer = SessionSigner("cluster-secret")
    value, s = signer.issue("AK1", "s3cret-alice")
    got = signer.verify(value, USERS)
    assert got == s and got.access_key == "AK1"
    assert "s3cret" not in value and "cluster-secret" not in value
    assert SessionSigner("another-cluster").verify(value, USERS) is None
    assert signer.verify(value, {"AK1": SimpleNamespace(name="alice", secret_key="new")}) is None
    assert signer.verify(value, {"AK2": USERS["AK2"]}) is None
    short = SessionSigner("cluster-secret", lifetime=-1)
    old, _ = short.issue("AK1", "s3cret-alice")
    assert signer.verify(old, USERS) is None


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0), st.characters(codec="ascii"))
def test_any_change_to_a_cookie_refuses_it(pos, ch):
    signer = SessionSigner("cluster-secret")
    value, _ = signer.issue("AK1", "s3cret-alice")
    i = pos % len(value)
    changed = value[:i] + ch + value[i + 1:]
    if changed != value:
        assert signer.verify(changed, USERS) is None


def test_every_one_character_change_to_a_cookie_refuses_it():
    # every position, every ASCII character: base64's spare bits in a last character (and
    # characters a decoder skips) must not give a second spelling of the same cookie
    signer = SessionSigner("cluster-secret")
    value, _ = signer.issue("AK1", "s3cret-alice")
    accepted = [(i, c) for i in range(len(value)) for c in map(chr, range(128))
                if c != value[i] and signer.verify(value[:i] + c + value[i + 1:], USERS)]
    assert accepted == []
    assert signer.verify(value, USERS) is not None


@given(st.text(max_size=300))
def test_junk_cookies_are_refused_without_error(junk):
    assert SessionSigner("x").verify(junk, USERS) is None


def test_same_origin():
    h = {"host": "gw:9000"}
    assert same_origin({**h, "origin": "http://gw:9000"})
    assert same_origin({**h, "origin": "https://gw:9000"})  # behind a TLS proxy
    assert same_origin({**h, "referer": "http://gw:9000/console/"})
    assert not same_origin(h)
    assert not same_origin({**h, "origin": "http://gw:9001"})
    assert not same_origin({**h, "origin": "http://evil.example"})
    assert not same_origin({**h, "origin": "null"})
    assert not same_origin({**h, "origin": "file://gw:9000"})
    assert not same_origin({"origin": "http://gw:9000"})


ZONE = 256 << 20


@st.composite
def stats_drives(draw):
    counts = draw(st.dictionaries(st.sampled_from(sorted(STATS_CONDITIONS)),
                                  st.integers(0, 40), max_size=6))
    seq = sum(v for k, v in counts.items() if k not in ("not_wp", "offline", "readonly"))
    full = counts.get("full", 0)
    partial = counts.get("implicit_open", 0) + counts.get("explicit_open", 0) + \
        counts.get("closed", 0)
    used = full * ZONE + draw(st.integers(0, partial * ZONE))
    live = draw(st.integers(0, used))
    return {"drive": 0, "path": "/d0", "zones_by_condition": counts, "used_bytes": used,
            "live_bytes": live, "free_bytes": max(0, seq * ZONE - used),
            "max_open_zones": 12, "max_active_zones": 14}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stats_drives())
def test_the_map_from_stats_has_a_cell_per_zone_with_sane_numbers(d):
    out = _drive_from_stats(d)
    assert len(out["zones"]) == sum(d["zones_by_condition"].values())
    by: dict[str, int] = {}
    for i, z in enumerate(out["zones"]):
        assert z["index"] == i
        assert 0 <= z["garbage"] <= z["written"] <= z["capacity"]
        assert z["live"] + z["garbage"] == z["written"]
        by[z["cond"]] = by.get(z["cond"], 0) + 1
    want: dict[str, int] = {}
    for k, v in d["zones_by_condition"].items():
        if v:
            want[STATS_CONDITIONS[k]] = want.get(STATS_CONDITIONS[k], 0) + v
    assert by == want
    assert out["capacity"]["live"] == d["live_bytes"]


@st.composite
def zones_drives(draw):
    zones = []
    for i in range(draw(st.integers(0, 24))):
        cond = draw(st.sampled_from(["empty", "open", "closed", "full", "conventional",
                                     "offline"]))
        cap = ZONE
        written = 0 if cond in ("empty", "conventional") else draw(st.integers(0, cap))
        if cond == "full":
            written = draw(st.integers(cap - (1 << 20), cap))
        live = draw(st.integers(0, written))
        zones.append({"index": i, "cond": cond, "capacity": cap, "written": written,
                      "live": live, "garbage": written - live,
                      "reclaiming": draw(st.booleans())})
    return {"drive": 1, "path": "/d1", "zone_size": ZONE, "zone_capacity": ZONE,
            "max_open": 12, "max_active": 14, "zones": zones}


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(zones_drives())
def test_capacity_from_zones_adds_up(d):
    out = _zones_drive(d)
    cap = out["capacity"]
    zs = d["zones"]
    assert cap["live"] == sum(z["live"] for z in zs)
    assert cap["garbage"] == sum(z["garbage"] for z in zs)
    room = sum(z["capacity"] - z["written"] for z in zs if z["cond"] in ("empty", "open",
                                                                          "closed"))
    assert cap["writable"] == room
    stranded = sum(z["capacity"] - z["written"] for z in zs if z["cond"] == "full") + \
        sum(z["capacity"] for z in zs if z["cond"] == "offline")
    assert cap["stranded"] == stranded
    assert out["zones"] == d["zones"]


def test_session_expiry_is_in_the_future():
    _, s = SessionSigner("x").issue("AK1", "s3cret-alice")
    assert s.expires > time.time() + 3600
