"""Parsed part lists of big multipart objects, kept per (bucket, key) while the stored JSON is
unchanged: a 10,000-part object's parts are megabytes of JSON, and a boto3 download makes one
ranged GET (one get_object) per 8 MiB."""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any

MIN_BYTES = 4096                  # smaller part lists are parsed each time
BUDGET_BYTES = 16 * 1024 * 1024   # JSON bytes kept in all


class PartsCache:
    def __init__(self, budget: int = BUDGET_BYTES) -> None:
        self.budget = budget
        self.bytes = 0
        self._lock = threading.Lock()
        self._items: OrderedDict[tuple[str, bytes], tuple[str, list]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def parts(self, bucket: str, key: bytes, raw: str) -> list[dict[str, Any]]:
        """The parsed parts of raw; callers must not change the list they get."""
        if len(raw) < MIN_BYTES:
            return json.loads(raw)
        ck = (bucket, key)
        with self._lock:
            hit = self._items.get(ck)
            if hit is not None and hit[0] == raw:
                self._items.move_to_end(ck)
                return hit[1]
        parts = json.loads(raw)
        with self._lock:
            old = self._items.pop(ck, None)
            self.bytes += len(raw) - (len(old[0]) if old else 0)
            self._items[ck] = (raw, parts)
            while self.bytes > self.budget and self._items:
                _, (r, _p) = self._items.popitem(last=False)
                self.bytes -= len(r)
        return parts
