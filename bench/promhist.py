"""Quantiles of the gateway's Prometheus histograms between two scrapes (what a bench's
requests alone did): `scrape(endpoint)` before and after, then `quantiles(a, b, name, op)`."""

from __future__ import annotations

import urllib.request
from typing import Any

from prometheus_client.parser import text_string_to_metric_families


def scrape(endpoint: str) -> dict[tuple[str, str, float], float]:
    """{(histogram name, operation label, bucket upper bound): cumulative count}."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(endpoint + "/metrics", timeout=30) as r:
        text = r.read().decode()
    out: dict[tuple[str, str, float], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.endswith("_bucket") and "operation" in s.labels:
                key = (s.name[:-len("_bucket")], s.labels["operation"], float(s.labels["le"]))
                out[key] = out.get(key, 0.0) + s.value
    return out


def quantiles(a: dict[tuple[str, str, float], float], b: dict[tuple[str, str, float], float],
              name: str, op: str, qs: tuple[float, ...] = (0.5, 0.99)) -> dict[str, Any]:
    """Count and the bucket-interpolated quantiles of `name{operation=op}` between scrapes,
    and the count over 1 s (exact: 1 s is a bucket bound, where an interpolated p99 between
    two bounds says little)."""
    bounds = sorted(le for (n, o, le) in b if n == name and o == op)
    cum = [b[(name, op, le)] - a.get((name, op, le), 0.0) for le in bounds]
    total = cum[-1] if cum else 0.0
    out: dict[str, Any] = {"count": int(total)}
    out["over_1s"] = int(total - cum[bounds.index(1.0)]) if 1.0 in bounds else None
    for q in qs:
        out[f"p{round(q * 100)}"] = _quantile(bounds, cum, q) if total else None
    return out


def _quantile(bounds: list[float], cum: list[float], q: float) -> float:
    want = q * cum[-1]
    lo_b, lo_c = 0.0, 0.0
    for le, c in zip(bounds, cum, strict=True):
        if c >= want:
            if le == float("inf"):
                return lo_b
            return lo_b + (le - lo_b) * ((want - lo_c) / (c - lo_c) if c > lo_c else 1.0)
        lo_b, lo_c = le, c
    return bounds[-1]
