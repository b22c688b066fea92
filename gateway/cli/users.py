"""`zonegate user add/list/remove`: S3 users kept in the metadata store, beside the config's
`[[users]]` (which keep working and cannot be changed here).

`add` prints the new secret key once (it is never shown, listed or logged again); `list`
shows access keys, names and canonical ids, never secrets. Gateways pick up a new user on
its first request, and stop taking a removed one's key within a few seconds (gateway/server/users.py).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import secrets
import string
import time
from typing import Any

from gateway.access.identity import canonical_id

_NAME = re.compile(r"^[\w+=,.@-]{1,64}$")
_KEY_CHARS = string.ascii_uppercase + string.digits


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("user", help="S3 users kept in the metadata store: add, list, remove")
    usub = p.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    a = usub.add_parser("add", help="add a user; prints its access key and secret key once")
    a.add_argument("--config", required=True, help="cluster config (TOML)")
    a.add_argument("name", help="the user's name (its display name; letters, digits, +=,.@_-)")
    a.add_argument("--access-key", default=None, help="access key to use (default: random)")
    a.set_defaults(func=cmd_add)
    ls = usub.add_parser("list", help="list users (the config's and the store's), no secrets")
    ls.add_argument("--config", required=True, help="cluster config (TOML)")
    ls.set_defaults(func=cmd_list)
    r = usub.add_parser("remove", help="remove a store user (by access key or name)")
    r.add_argument("--config", required=True, help="cluster config (TOML)")
    r.add_argument("user", help="access key or name")
    r.set_defaults(func=cmd_remove)


def _load(path: str) -> Any:
    from erasure.config import ClusterConfig
    return ClusterConfig.load(path)


async def _with_store(config: Any, fn: Any) -> Any:
    from gateway.metadata import store_from_config
    store = store_from_config(dict(config.gateway or {}))
    await store.start()
    try:
        return await fn(store)
    finally:
        await store.close()


def new_access_key() -> str:
    return "ZG" + "".join(secrets.choice(_KEY_CHARS) for _ in range(18))


def new_secret_key() -> str:
    return secrets.token_urlsafe(30)[:40]


def cmd_add(args: argparse.Namespace) -> int:
    from gateway.metadata.store import UserRecord
    config = _load(args.config)
    if not _NAME.match(args.name):
        raise ValueError(f"user name {args.name!r}: 1-64 letters, digits or +=,.@_-")
    ak = args.access_key or new_access_key()
    if not re.fullmatch(r"[A-Za-z0-9]{16,128}", ak):
        raise ValueError("an access key is 16-128 letters and digits")
    static = {u.access_key: u.name for u in config.users}
    if args.name in static.values() or ak in static:
        raise ValueError(f"user {args.name!r} or access key {ak} is in the config's [[users]]")
    secret = new_secret_key()

    async def add(store: Any) -> bool:
        if any(u.display_name == args.name for u in await store.list_users()):
            raise ValueError(f"a user named {args.name!r} exists already")
        return await store.add_user(UserRecord(ak, secret, canonical_id(args.name),
                                               args.name, time.time()))
    if not asyncio.run(_with_store(config, add)):
        raise ValueError(f"access key {ak} is taken")
    print(f"user {args.name} added\naccess key:   {ak}\nsecret key:   {secret}\n"
          f"canonical id: {canonical_id(args.name)}\n"
          "(the secret key is shown this once; keep it now)")
    return 0


def cmd_list(args: argparse.Namespace) -> int:
    config = _load(args.config)
    users = asyncio.run(_with_store(config, lambda store: store.list_users()))
    rows = [(u.access_key, u.name, "config", "") for u in config.users]
    rows += [(u.access_key, u.display_name, "store",
              time.strftime("%Y-%m-%d %H:%M", time.gmtime(u.created))) for u in users]
    print(f"{'ACCESS KEY':<22} {'NAME':<20} {'FROM':<6} {'CREATED':<16} CANONICAL ID")
    for ak, name, src, created in rows:
        print(f"{ak:<22} {name:<20} {src:<6} {created:<16} {canonical_id(name)}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    config = _load(args.config)
    if any(args.user in (u.access_key, u.name) for u in config.users):
        raise ValueError(f"{args.user!r} is a [[users]] entry of the config; edit the config")

    async def remove(store: Any) -> str | None:
        for u in await store.list_users():
            if args.user in (u.access_key, u.display_name):
                await store.remove_user(u.access_key)
                return u.display_name
        return None
    name = asyncio.run(_with_store(config, remove))
    if name is None:
        raise ValueError(f"no store user {args.user!r}")
    print(f"user {name} removed (gateways refuse its key within a few seconds)")
    return 0
