"""Errors the erasure layer raises to its callers (the gateway maps them to S3 errors)."""

from __future__ import annotations


class ErasureError(Exception):
    """Base class of the erasure layer's failures."""


class QuorumError(ErasureError):
    """A write could not reach its write quorum; nothing of it is left on the nodes."""


class PartUnavailable(ErasureError):
    """Fewer than k good fragments of a part could be read."""
