"""A fixed-bucket histogram for the zone log's flush latencies and sizes.

The zone log knows nothing of Prometheus; it keeps cumulative bucket counts that the node's
metrics collector exposes as Prometheus histograms at scrape time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

# fdatasync on a disk: sub-millisecond (cache) to seconds (a loaded SMR drive).
FLUSH_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                         2.5, 5.0)
# One 4 KiB block (a lone small put) up to the zone log's largest writes.
FLUSH_BYTES_BUCKETS = tuple(float(4096 << (2 * i)) for i in range(10))  # 4 KiB .. 1 GiB


@dataclass(frozen=True, slots=True)
class HistogramSnapshot:
    """Cumulative counts per upper bound (the last bound is +Inf), with sum and count."""

    buckets: tuple[tuple[float, int], ...]
    sum: float
    count: int

    def __add__(self, other: HistogramSnapshot) -> HistogramSnapshot:
        """Merge two snapshots of histograms with the same bounds (e.g. a pool's drives)."""
        if [b for b, _ in self.buckets] != [b for b, _ in other.buckets]:
            raise ValueError("cannot merge histograms with different buckets")
        merged = tuple((b, n + m) for (b, n), (_, m) in zip(self.buckets, other.buckets,
                                                              strict=True))
        return HistogramSnapshot(merged, self.sum + other.sum, self.count + other.count)


class FixedHistogram:
    """Counts observations into fixed buckets. Not thread-safe: observe from one thread."""

    __slots__ = ("bounds", "_counts", "_sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0

    def observe(self, value: float) -> None:
        self._counts[bisect.bisect_left(self.bounds, value)] += 1
        self._sum += value

    def snapshot(self) -> HistogramSnapshot:
        cumulative, total = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self._counts, strict=True):
            total += n
            cumulative.append((bound, total))
        return HistogramSnapshot(tuple(cumulative), self._sum, total)
