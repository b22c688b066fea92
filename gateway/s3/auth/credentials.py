"""Credentials lookup: access key -> (user name, secret key).

The verifiers take any callable `lookup(access_key) -> (user, secret) | None`. `StaticCredentials`
is the one built from the cluster configuration's `[[users]]` table (name, access_key,
secret_key); the metadata store or anything else can provide its own callable.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

CredentialLookup = Callable[[str], "tuple[str, str] | None"]


class StaticCredentials:
    """An in-memory access-key table; call it like a lookup function."""

    def __init__(self, users: Iterable[tuple[str, str, str]] = ()) -> None:
        self._keys: dict[str, tuple[str, str]] = {}
        for user, access_key, secret_key in users:
            self.add(user, access_key, secret_key)

    @classmethod
    def from_config(cls, users: Iterable[Mapping[str, str]]) -> StaticCredentials:
        """From `[[users]]` entries: {"name": ..., "access_key": ..., "secret_key": ...}."""
        out = cls()
        for entry in users:
            try:
                out.add(entry["name"], entry["access_key"], entry["secret_key"])
            except KeyError as e:
                raise ValueError(f"users entry is missing {e.args[0]!r}") from None
        return out

    def add(self, user: str, access_key: str, secret_key: str) -> None:
        if not access_key or not secret_key:
            raise ValueError(f"user {user!r}: access_key and secret_key must not be empty")
        if access_key in self._keys and self._keys[access_key][0] != user:
            raise ValueError(f"access key {access_key!r} is given to two users")
        self._keys[access_key] = (user, secret_key)

    def __call__(self, access_key: str) -> tuple[str, str] | None:
        return self._keys.get(access_key)

    def __len__(self) -> int:
        return len(self._keys)
