"""Where the k+m fragments of a part go: rendezvous (highest-random-weight) hashing.

Every (part, fragment index, node) triple gets a pseudo-random score; fragments are matched to
nodes greedily from the highest score down (a stable matching), so no node gets two fragments of
one part and no failure domain gets more than its share (none, when there are at least k+m
domains). Adding or removing a node only changes the matches that involve it, plus a few that
cascade from them: about 1/13 of all placements move when a 13th node joins twelve.

New writes may weight the choice by each node's writable room (`place_weighted`): weighted
rendezvous (Efraimidis-Spirakis keys u^(1/w)) picks which nodes take the part, so nodes with
less room left take fewer new fragments and the nodes fill evenly to the end; the layout records
where each fragment went, so reads never depend on the choice.

Nodes known to be down are not re-matched: their fragments go to *handoff* nodes, the next
nodes in the part's rendezvous order (a per-part ranking of all nodes), so every other fragment
stays where it is. Repair uses the same order to find a home for a fragment whose node is gone.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter, OrderedDict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

PRIMARY_CACHE = 4096  # part placements remembered
ROOM_BALANCED = 0.9  # nodes' rooms all within this fraction of the most: the plain placement
ROOM_EXPONENT = 2  # weight = (room / most room) ** this: strong enough to even nodes out


@dataclass(frozen=True)
class NodeSlot:
    """What placement needs to know about a node."""

    id: str
    domain: str


def room_weights(rooms: Mapping[str, int]) -> dict[str, float] | None:
    """Weights for `place_weighted` from each node's writable bytes: (room / most)^2 (a node
    with no room keeps a tiny weight, it comes last), or None - the plain placement - while
    every node's room is within ROOM_BALANCED of the most (stable placements while the
    nodes are even; the weighting starts as they drift apart, and grows as they fill)."""
    if not rooms:
        return None
    most = max(rooms.values())
    if most <= 0 or min(rooms.values()) >= ROOM_BALANCED * most:
        return None
    return {nid: max(r / most, 1e-3) ** ROOM_EXPONENT for nid, r in rooms.items()}


def _score(*parts: str) -> int:
    h = hashlib.blake2b("\0".join(parts).encode(), digest_size=8)
    return int.from_bytes(h.digest(), "big")


class Placement:
    """Rendezvous placement of `width` (= k+m) fragments over a fixed node list."""

    def __init__(self, nodes: Sequence[NodeSlot], width: int) -> None:
        ids = [n.id for n in nodes]
        if len(set(ids)) != len(ids):
            raise ValueError("placement: duplicate node ids")
        if width > len(nodes):
            raise ValueError(f"placement: {width} fragments need at least {width} nodes, "
                             f"have {len(nodes)}")
        self.nodes = list(nodes)
        self.width = width
        self.domain_of = {n.id: n.domain for n in nodes}
        domains = len(set(self.domain_of.values()))
        # With fewer domains than fragments, spread them as evenly as the domains allow.
        self.per_domain = -(-width // domains)
        # A write asks for a part's placement several times (targets, layout, repair queue):
        # k+m x nodes hashes each time, so the last few thousand answers are kept.
        self._primary_cache: OrderedDict[str, tuple[str, ...]] = OrderedDict()

    def ranked(self, part_uid: str) -> list[str]:
        """All node ids in this part's rendezvous order (handoff order)."""
        return sorted(self.domain_of, key=lambda nid: _score(part_uid, nid), reverse=True)

    def primary(self, part_uid: str) -> list[str]:
        """Node id for each fragment index when every node is up."""
        cache = self._primary_cache
        hit = cache.get(part_uid)
        if hit is not None:
            cache.move_to_end(part_uid)
            return list(hit)
        nodes = self._primary(part_uid)
        cache[part_uid] = tuple(nodes)
        if len(cache) > PRIMARY_CACHE:
            cache.popitem(last=False)
        return nodes

    def _primary(self, part_uid: str) -> list[str]:
        pairs = sorted(((_score(part_uid, str(i), n.id), i, n.id)
                        for i in range(self.width) for n in self.nodes), reverse=True)
        chosen: dict[int, str] = {}
        used: set[str] = set()
        per_domain: Counter[str] = Counter()
        for _, i, nid in pairs:
            dom = self.domain_of[nid]
            if i in chosen or nid in used or per_domain[dom] >= self.per_domain:
                continue
            chosen[i] = nid
            used.add(nid)
            per_domain[dom] += 1
            if len(chosen) == self.width:
                break
        return [chosen[i] for i in range(self.width)]

    def handoffs(self, part_uid: str, used: Iterable[str], exclude: Iterable[str] = ()
                 ) -> Iterator[str]:
        """Nodes not in `used` or `exclude`, in rendezvous order, those in failure domains
        still below their share first (used nodes count towards their domain)."""
        used = set(used)
        skip = used | set(exclude)
        per_domain = Counter(self.domain_of[n] for n in used if n in self.domain_of)
        rest = [n for n in self.ranked(part_uid) if n not in skip]
        yielded: set[str] = set()
        while True:
            fresh = [n for n in rest if n not in yielded
                     and per_domain[self.domain_of[n]] < self.per_domain]
            pool = fresh or [n for n in rest if n not in yielded]
            if not pool:
                return
            nid = pool[0]
            yielded.add(nid)
            per_domain[self.domain_of[nid]] += 1
            yield nid

    def place(self, part_uid: str, exclude: Iterable[str] = ()) -> list[str]:
        """Node id for each fragment index, with excluded (down) nodes' fragments handed off.
        Raises ValueError when too few nodes remain to give every fragment its own node."""
        exclude = set(exclude)
        nodes = self.primary(part_uid)
        if not exclude.intersection(nodes):
            return nodes
        keep = [n for n in nodes if n not in exclude]
        spare = self.handoffs(part_uid, keep, exclude)
        out = []
        for nid in nodes:
            if nid in exclude:
                nid = next(spare, None)
                if nid is None:
                    raise ValueError(f"placement: not enough nodes up for {self.width} fragments")
            out.append(nid)
        return out

    def place_weighted(self, part_uid: str, weights: Mapping[str, float],
                       exclude: Iterable[str] = ()) -> list[str]:
        """Node id for each fragment index, nodes chosen with probability growing with their
        weight (their writable room): weighted rendezvous over the nodes not excluded (a node
        without a positive weight comes last), failure domains still below their share
        first. A chosen node keeps its fragment index from `primary` where it has one.
        Raises ValueError when too few nodes remain."""
        exclude = set(exclude)

        def key(nid: str) -> float:
            w = weights.get(nid, 0.0)
            u = (_score(part_uid, nid) + 1) / ((1 << 64) + 1)  # in (0, 1)
            return math.log(u) / w if w > 0 else -math.inf

        order = sorted((n for n in self.domain_of if n not in exclude),
                       key=lambda n: (key(n), _score(part_uid, n)), reverse=True)
        per_domain: Counter[str] = Counter()
        chosen: list[str] = []
        for fresh_only in (True, False):
            for nid in order:
                if len(chosen) == self.width:
                    break
                dom = self.domain_of[nid]
                if nid in chosen or (fresh_only and per_domain[dom] >= self.per_domain):
                    continue
                chosen.append(nid)
                per_domain[dom] += 1
        if len(chosen) < self.width:
            raise ValueError(f"placement: not enough nodes up for {self.width} fragments")
        primary = self.primary(part_uid)
        out: list[str | None] = [n if n in chosen else None for n in primary]
        rest = iter(n for n in chosen if n not in primary)
        return [n if n is not None else next(rest) for n in out]
