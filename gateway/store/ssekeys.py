"""Data keys of encrypted objects, and what is kept to use them again (the envelope).

Every encrypted object (or multipart upload) gets a random 256-bit data key
(gateway/store/encryption.py seals its chunks with keys derived from it). The data key is
never stored in clear: it is wrapped (AES key wrap, RFC 3394) by

- SSE-S3: the cluster master key, one of those in `[gateway] sse_master_key_file`; the
  envelope names which (its id), so rotating (adding a key at the end of the file) makes new
  objects use the new key while old ones keep opening with theirs;
- SSE-C: the client's key, which is never stored: only a salted HMAC-SHA256 of it, to tell a
  wrong key (403) from a right one before anything is read.

The envelope is a small JSON text kept in the object's stored headers under ENVELOPE_HEADER
(hidden from clients), so it travels in the object's self-description on the nodes and
`recover-metadata` brings it back; the master keys themselves are only ever in their file.

Master key file: one key per line, `<id> <base64 of 32 bytes>`; `#` comments and blank lines
are ignored; the last key is the newest. The file should be readable by the gateway only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import logging
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives.keywrap import InvalidUnwrap, aes_key_unwrap, aes_key_wrap

from gateway.s3.errors import S3Error

log = logging.getLogger("zonegate.sse")

ENVELOPE_HEADER = "x-zonegate-sse"   # in stored headers / upload headers; never sent out
_KEY_ID = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
SSE_S3 = "AES256"
SSE_C = "SSE-C"


class MasterKeyError(ValueError):
    """The master key file is missing, unreadable or malformed (one line, for the operator;
    never the key material)."""


@dataclass(frozen=True)
class MasterKeys:
    """The cluster master keys by id, and the id of the newest one."""

    keys: dict[str, bytes]
    newest: str

    def __repr__(self) -> str:
        return f"MasterKeys(ids={list(self.keys)}, newest={self.newest!r})"

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> MasterKeys:
        try:
            text = Path(path).read_text()
        except OSError as e:
            raise MasterKeyError(f"cannot read the master key file {path}: {e.strerror}") \
                from None
        keys: dict[str, bytes] = {}
        newest = ""
        for n, line in enumerate(text.splitlines(), 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split()
            if len(fields) != 2 or not _KEY_ID.match(fields[0]):
                raise MasterKeyError(f"{path}:{n}: expected `<id> <base64 key>`")
            try:
                key = base64.b64decode(fields[1], validate=True)
            except (binascii.Error, ValueError):
                key = b""
            if len(key) != 32:
                raise MasterKeyError(f"{path}:{n}: key {fields[0]!r} is not 32 bytes in base64")
            if fields[0] in keys:
                raise MasterKeyError(f"{path}:{n}: key id {fields[0]!r} appears twice")
            keys[fields[0]] = key
            newest = fields[0]
        if not keys:
            raise MasterKeyError(f"{path}: no key in the master key file")
        return cls(keys, newest)


def new_key_line(key_id: str) -> str:
    """A line for a master key file: a fresh random key under `key_id`."""
    if not _KEY_ID.match(key_id):
        raise ValueError(f"bad key id {key_id!r}")
    return f"{key_id} {base64.b64encode(secrets.token_bytes(32)).decode()}\n"


def create_key_file(path: str | os.PathLike[str], key_id: str = "k1") -> None:
    """A new master key file (mode 0600) holding one fresh key; an existing one is kept."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    with os.fdopen(fd, "w") as f:
        f.write("# ZoneGate SSE-S3 master keys: `<id> <base64 key>`, the last is the newest.\n")
        f.write(new_key_line(key_id))
        f.flush()
        os.fsync(f.fileno())


@dataclass(frozen=True)
class SseSettings:
    """The gateway's `[gateway]` SSE settings: master keys (None: SSE-S3 unavailable) and
    whether SSE-C may be used over plain HTTP."""

    master: MasterKeys | None = None
    allow_http: bool = False

    @classmethod
    def from_gateway(cls, gw: dict[str, Any], base: str | None = None) -> SseSettings:
        """From a `[gateway]` table; a relative key file path is taken from `base` (the
        config file's directory), as tls_cert is."""
        path = gw.get("sse_master_key_file")
        if path and base and not os.path.isabs(str(path)):
            path = os.path.join(base, str(path))
        master = MasterKeys.load(str(path)) if path else None
        return cls(master, _flag(gw.get("sse_c_allow_http", False)))


def _flag(v: Any) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("1", "true", "yes", "on")
    return bool(v)


@dataclass(frozen=True)
class Envelope:
    """How an object's data key is kept. mode: AES256 (SSE-S3) or SSE-C."""

    mode: str
    wrapped: str          # base64 of the wrapped data key
    key_id: str = ""      # SSE-S3: the master key that wraps it
    salt: str = ""        # SSE-C: base64 salt and HMAC-SHA256(salt, client key)
    mac: str = ""

    def to_text(self) -> str:
        d = {"v": 1, "mode": self.mode, "wrapped": self.wrapped}
        if self.mode == SSE_S3:
            d["key_id"] = self.key_id
        else:
            d["salt"], d["mac"] = self.salt, self.mac
        return json.dumps(d, separators=(",", ":"))

    @classmethod
    def from_text(cls, text: str) -> Envelope:
        d = json.loads(text)
        return cls(str(d["mode"]), str(d["wrapped"]), str(d.get("key_id", "")),
                   str(d.get("salt", "")), str(d.get("mac", "")))


def envelope_of(headers: dict[str, str]) -> Envelope | None:
    raw = headers.get(ENVELOPE_HEADER)
    return Envelope.from_text(raw) if raw else None


def visible(headers: dict[str, str]) -> dict[str, str]:
    """Stored headers without the envelope (what a client may see or a copy inherits)."""
    if ENVELOPE_HEADER not in headers:
        return headers
    return {k: v for k, v in headers.items() if k != ENVELOPE_HEADER}


def _mac(salt: bytes, customer_key: bytes) -> bytes:
    return hmac.new(salt, customer_key, hashlib.sha256).digest()


def new_data_key() -> bytes:
    return secrets.token_bytes(32)


def seal_key(mode: str, data_key: bytes, *, master: MasterKeys | None = None,
             customer_key: bytes | None = None) -> Envelope:
    """The envelope of a fresh data key."""
    if mode == SSE_S3:
        if master is None:
            raise S3Error("NotImplemented", "Server-side encryption with S3 managed keys is not "
                          "available: no sse_master_key_file is configured on this server.")
        kek = master.keys[master.newest]
        return Envelope(SSE_S3, _b64(aes_key_wrap(kek, data_key)), key_id=master.newest)
    assert customer_key is not None
    salt = secrets.token_bytes(16)
    return Envelope(SSE_C, _b64(aes_key_wrap(customer_key, data_key)), salt=_b64(salt),
                    mac=_b64(_mac(salt, customer_key)))


def customer_key_matches(env: Envelope, customer_key: bytes) -> bool:
    return hmac.compare_digest(_mac(base64.b64decode(env.salt), customer_key),
                               base64.b64decode(env.mac))


def open_key(env: Envelope, *, master: MasterKeys | None = None,
             customer_key: bytes | None = None) -> bytes:
    """The data key of an envelope. SSE-C: AccessDenied for a key other than the one used
    (checked with the HMAC first); SSE-S3: InternalError if its master key is gone."""
    if env.mode == SSE_C:
        if customer_key is None or not customer_key_matches(env, customer_key):
            raise S3Error("AccessDenied")
        kek = customer_key
    else:
        kek = master.keys.get(env.key_id) if master is not None else None
        if kek is None:
            log.error("an object is sealed with master key %r, which is not in the master key "
                      "file", env.key_id)
            raise S3Error("InternalError", "The key that encrypts this object is not "
                          "available on this server.")
    try:
        return aes_key_unwrap(kek, base64.b64decode(env.wrapped))
    except InvalidUnwrap:
        raise S3Error("AccessDenied" if env.mode == SSE_C else "InternalError") from None


def _b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


def opaque_etag(data_key: bytes, md5_hex: str) -> str:
    """The ETag of SSE-C content: not its MD5 (which would tell something of the plaintext),
    but a keyed digest of it, stable for the object, 32 hex digits like an MD5."""
    return hmac.new(data_key, b"etag\x00" + bytes.fromhex(md5_hex),
                    hashlib.sha256).hexdigest()[:32]
