"""What the gateway's records on the nodes share (gateway/store/storage.py's parts, delete
markers, tag archives): a part layout as the JSON the metadata store and the orphan queue keep,
and how long a failed write's pending mark waits before the sweeper looks for leftovers."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import Any

# A failed write's leftovers are looked for this long after it failed: time enough for a node
# still committing an archive whose answer the writer gave up on.
FAILED_WRITE_DELAY = 60.0


def layout_to_dict(layout: Any) -> dict[str, Any]:
    if isinstance(layout, dict):
        return layout
    if hasattr(layout, "to_dict"):
        return layout.to_dict()
    if is_dataclass(layout):
        return asdict(layout)
    raise TypeError(f"cannot serialise layout {layout!r}")
