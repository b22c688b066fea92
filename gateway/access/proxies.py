"""The client's address and scheme behind trusted reverse proxies (`[gateway] trusted_proxies`).

Behind HAProxy every connection's peer is the proxy, so `aws:SourceIp` and the client address
of log lines would name it. `trusted_proxies` lists the networks (CIDRs) of proxies whose
`X-Forwarded-For` and `X-Forwarded-Proto` headers are believed, as MinIO and Ceph RGW do. Only
when the TCP peer is in that list: the client address is the right-most address of the
`X-Forwarded-For` chain (every header line, in order) that is not itself a trusted proxy (each
proxy appends the peer it saw, so the entries left of that one are the client's own text and
may be forged), and the scheme is `X-Forwarded-Proto`'s last value. Otherwise, and by default
(an empty list), the peer's address and the connection's own scheme count: a client that
reaches the gateway directly cannot choose its address by sending the header.

uvicorn's own proxy-header middleware is turned off (`zonegate serve`): it trusts loopback
peers by default and rewrites the scope for everything; this applies to the policy context
and log lines only. A trusted proxy must replace `X-Forwarded-Proto`, not pass a client's on
(deploy/haproxy.cfg sets it on every request).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Any

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def _address(text: str) -> Address | None:
    """An X-Forwarded-For entry as an address: `1.2.3.4`, `1.2.3.4:5678`, `::1`, `[::1]:5678`."""
    t = text.strip()
    if t.startswith("["):
        t = t[1:].partition("]")[0]
    elif t.count(":") == 1:
        t = t.partition(":")[0]
    try:
        ip = ipaddress.ip_address(t)
    except ValueError:
        return None
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        return ip.ipv4_mapped  # ::ffff:10.0.0.1 from a dual-stack socket is 10.0.0.1
    return ip


class TrustedProxies:
    """The configured proxy networks and the client address and scheme they imply."""

    def __init__(self, networks: Iterable[Network] = ()) -> None:
        self.networks = tuple(networks)
        self._trusted = lru_cache(maxsize=1024)(self._compute)

    @classmethod
    def from_gateway(cls, gw: Mapping[str, Any] | None) -> TrustedProxies:
        """`trusted_proxies` of a `[gateway]` table; ValueError naming the setting for a
        value that is not a list of CIDRs (or addresses)."""
        raw = (gw or {}).get("trusted_proxies", [])
        if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
            raise ValueError("gateway.trusted_proxies must be a list of networks "
                             f'such as ["10.0.0.5/32"], not {raw!r}')
        nets = []
        for v in raw:
            try:
                nets.append(ipaddress.ip_network(v.strip(), strict=False))
            except ValueError:
                raise ValueError(f"gateway.trusted_proxies: {v!r} is not a network "
                                 '(CIDR such as "10.0.0.0/8", or an address)') from None
        return cls(nets)

    def __bool__(self) -> bool:
        return bool(self.networks)

    def _compute(self, host: str) -> bool:
        ip = _address(host)
        return ip is not None and any(ip in net for net in self.networks)

    def trusts(self, host: str | None) -> bool:
        """Whether `host` (a peer address, or an X-Forwarded-For entry) is a trusted proxy."""
        if not self.networks or not host or len(host) > 64:
            return False
        return self._trusted(host)

    def client_address(self, peer: str | None, forwarded_for: Sequence[str]) -> str:
        """The client's address: `peer` unless it is a trusted proxy that forwarded one.
        forwarded_for: the X-Forwarded-For header lines, in order."""
        peer = peer or ""
        if not forwarded_for or not self.trusts(peer):
            return peer
        hops = [h for line in forwarded_for for h in line.split(",") if h.strip()]
        if not hops:
            return peer
        for hop in reversed(hops):
            if not self.trusts(hop):
                ip = _address(hop)
                # Garbage from a trusted proxy names no one: the proxy itself it is.
                return str(ip) if ip is not None else peer
        ip = _address(hops[0])  # a chain of trusted proxies only: the first one is the client
        return str(ip) if ip is not None else peer

    def scheme(self, peer: str | None, scheme: str, forwarded_proto: Sequence[str]) -> str:
        """"http" or "https" as the client spoke it: the connection's own `scheme` unless a
        trusted proxy said otherwise in X-Forwarded-Proto (its last value)."""
        if forwarded_proto and self.trusts(peer):
            last = forwarded_proto[-1].rpartition(",")[2].strip().lower()
            if last in ("http", "https"):
                return last
        return scheme


def from_request(proxies: TrustedProxies, request: Any) -> tuple[str, str]:
    """(client address, scheme) of a starlette Request, as the trusted proxies tell them."""
    peer = request.client.host if request.client else ""
    scheme = str(request.scope.get("scheme") or "http")
    if not proxies:
        return peer, scheme
    h = request.headers
    return (proxies.client_address(peer, h.getlist("x-forwarded-for")),
            proxies.scheme(peer, scheme, h.getlist("x-forwarded-proto")))
