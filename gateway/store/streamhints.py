"""Stream hints: the lifetime class a part's fragment archives are written under.

A node's zone log groups records of one hint in the same zones, so records that die together
should share a hint. For training data that is a "directory": the files of one checkpoint
(`ckpt/run1/step-100/...`) are written together and deleted together, and so are an upload's
parts and its manifest. So the hint is the bucket plus the key's prefix up to its last `/`,
for single PUTs, multipart parts and manifests alike (never an upload id: that would ask the
drives for a zone per upload).

A node accepts 1-256 printable ASCII characters without spaces (zonestore/node/handlers.py);
each record stores its hint, so long prefixes, or prefixes with other characters, are replaced
by a short digest of themselves (same prefix, same hint).
"""

from __future__ import annotations

import hashlib
import re

MAX_HINT = 96  # characters kept as they are; longer hints become bucket + digest
_PLAIN = re.compile(r"[\x21-\x7e]*")


def stream_hint(bucket: str, key: str) -> str:
    """`bucket/prefix/` of an object key (prefix = up to and including the last `/`)."""
    prefix = key[:key.rfind("/") + 1]
    hint = f"{bucket}/{prefix}"
    if len(hint) <= MAX_HINT and _PLAIN.fullmatch(hint):
        return hint
    digest = hashlib.blake2b(prefix.encode("utf-8", "surrogatepass"), digest_size=12).hexdigest()
    return f"{bucket}/~{digest}"
