"""Who makes a request: user name, canonical id (64 hex, as S3 shows owners and grantees)."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass

# The account every ZoneGate user belongs to in ARNs (arn:aws:iam::<account>:user/<name>).
ACCOUNT = "000000000000"
_CANONICAL = re.compile(r"^[0-9a-f]{64}$")


def canonical_id(name: str) -> str:
    """A user's canonical id: derived from the name, so that every gateway, the config's users
    and the store's alike, shows the same id for the same owner without a lookup."""
    return hashlib.sha256(b"zonegate-user:" + name.encode("utf-8")).hexdigest()


def is_canonical_id(text: str) -> bool:
    return bool(_CANONICAL.match(text))


def user_arn(name: str) -> str:
    return f"arn:aws:iam::{ACCOUNT}:user/{name}"


@dataclass(frozen=True)
class Requester:
    """The principal of a request; name None = anonymous."""

    name: str | None

    @property
    def anonymous(self) -> bool:
        return self.name is None

    @property
    def canonical_id(self) -> str | None:
        return None if self.name is None else canonical_id(self.name)


ANONYMOUS = Requester(None)
