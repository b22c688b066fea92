"""Where each fragment of a part belongs under a cluster layout: the mover's plan (pure).

`plan(layout, part)` lists the moves that put a part's fragments where the layout wants them:
- fragments on a node that is gone (or no longer in the layout) and fragments found lost (a
  failed or replaced drive) are *rebuilt* from parity;
- fragments on a node that takes no new fragments (draining, weight 0), a second fragment on
  one node, and fragments beyond a failure domain's share are *copied* to a new home;
- with a `Fill` (bytes held per node against its share of the whole), one more fragment moves
  from the fullest holder to an emptier node while the fills are more than half the tolerance
  apart, so that a pass over every part evens the nodes out; a balanced cluster plans nothing.

A new home is the fragment's rendezvous home under the layout (`Placement.primary` over
`layout.slots()`: what writes and `erasure/rehome.py` call home, so the mover and the rehomer
agree) when that node can take it, else the emptiest node that can (writable, holds no other
fragment of the part, its domain below its share).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from erasure.clusterlayout import ClusterLayout
from erasure.layout import PartLayout
from erasure.placement import Placement

TOLERANCE = 0.05  # "balanced": every writable node's fill within 5 % of the mean


@dataclass(frozen=True)
class Move:
    """Fragment `index` goes from `src` to `dst`; `rebuild`: `src` cannot give it (gone, lost
    with a drive), so it is rebuilt from the part's other fragments; `src` may equal `dst` (a
    replaced drive's fragment rebuilt onto the same node)."""

    index: int
    src: str
    dst: str
    rebuild: bool = False
    why: str = ""


class Fill:
    """Bytes of fragments each node holds against its share of the total (by layout weight
    among the nodes that take writes): what rebalancing evens out. `plan` updates it as it
    plans, so one pass over the parts converges."""

    def __init__(self, layout: ClusterLayout, held: Mapping[str, int],
                 tolerance: float = TOLERANCE) -> None:
        self.tolerance = tolerance
        self.weights = {n.id: n.weight for n in layout.writable()}
        self.held: Counter[str] = Counter({k: int(v) for k, v in held.items()})
        self._wsum = sum(self.weights.values()) or 1.0
        self.total = sum(self.held.values())  # kept as moves are added: asked per candidate

    def add(self, node: str, n: int) -> None:
        self.held[node] += n
        self.total += n

    def target(self, node: str) -> float:
        return self.total * self.weights.get(node, 0.0) / self._wsum

    def deviation(self, node: str) -> float:
        """held / share - 1 (0: exactly its share); inf for a node that should hold nothing."""
        t = self.target(node)
        if t <= 0:
            return float("inf") if self.held[node] > 0 else 0.0
        return self.held[node] / t - 1.0

    def spread(self) -> float:
        """The largest |deviation| over the nodes that take writes."""
        return max((abs(self.deviation(n)) for n in self.weights), default=0.0)

    def balanced(self) -> bool:
        return self.spread() <= self.tolerance

    def excess(self) -> int:
        """Bytes above their share held by nodes more than half the tolerance over it: about
        what rebalancing still has to move."""
        out = 0.0
        for n, v in self.held.items():
            t = self.target(n)
            if v > t * (1 + self.tolerance / 2):
                out += v - t
        return int(out)

    def report(self) -> dict[str, dict[str, float | None]]:
        """Per node: bytes held, its share (0 for a node that takes no writes) and the
        deviation held / share - 1 (None where it has no share)."""
        out: dict[str, dict[str, float | None]] = {}
        for n in sorted(set(self.held) | set(self.weights)):
            t = self.target(n)
            out[n] = {"held": int(self.held[n]), "share": t,
                      "deviation": self.held[n] / t - 1.0 if t > 0 else None}
        return out


class Planner:
    """`plan` for many parts under one layout (the placement is built once)."""

    def __init__(self, layout: ClusterLayout, *, fill: Fill | None = None,
                 unavailable: Iterable[str] = ()) -> None:
        self.layout = layout
        self.fill = fill
        self.domain_of = {n.id: n.domain for n in layout.nodes}
        # nodes that take no new fragments now (down, full): never chosen as a new home
        self.unavailable = set(unavailable)
        self.writable = [n.id for n in layout.writable() if n.id not in self.unavailable]
        self.takes = {n.id for n in layout.writable()}
        self.holds = {n.id for n in layout.known()}
        self.placement = Placement(layout.slots(), layout.width) if len(
            layout.slots()) >= layout.width else None
        self._placements: dict[int, Placement | None] = {layout.width: self.placement}

    def _home(self, part: PartLayout, index: int) -> str | None:
        n = part.scheme.n
        if n not in self._placements:
            slots = self.layout.slots()
            self._placements[n] = Placement(slots, n) if len(slots) >= n else None
        p = self._placements[n]
        if p is None:
            return None
        home = p.primary(part.part_uid)
        return home[index] if index < len(home) else None

    def _share(self, part: PartLayout) -> int:
        domains = {self.domain_of[n] for n in self.takes}
        return -(-part.scheme.n // max(1, len(domains)))

    def plan(self, part: PartLayout, *, lost: Iterable[int] = (), frag_bytes: int = 0
             ) -> list[Move]:
        """The moves for one part (see the module docstring). `lost`: indexes whose recorded
        node was asked and does not hold them (a failed or replaced drive); `frag_bytes`: the
        size of one fragment archive, for the fill bookkeeping."""
        lost = set(lost)
        skip = set(part.missing)  # awaiting the healer: not the mover's
        share = self._share(part)
        keep: dict[int, str] = {}
        must: list[tuple[int, str, bool, str]] = []  # index, src, rebuild, why
        per_node: Counter[str] = Counter()
        per_domain: Counter[str] = Counter()
        for i, node in sorted(part.placement.items()):
            if i in skip or i >= part.scheme.n:
                continue
            if node not in self.holds:
                must.append((i, node, True, "node gone"))
            elif i in lost:
                must.append((i, node, True, "lost with a drive"))
            elif node not in self.takes:
                must.append((i, node, False, "node draining"))
            elif per_node[node]:
                must.append((i, node, False, "second fragment on the node"))
            elif per_domain[self.domain_of[node]] >= share:
                must.append((i, node, False, "domain over its share"))
            else:
                keep[i] = node
                per_node[node] += 1
                per_domain[self.domain_of[node]] += 1
        moves: list[Move] = []
        used = set(keep.values())
        for i, src, rebuild, why in must:
            # a replaced drive's fragment goes back to its node when that node can take it
            prefer = src if rebuild and why.startswith("lost") else self._home(part, i)
            dst = self._choose(part.part_uid, prefer, used, per_domain, share)
            if dst is None:
                continue  # nowhere to go now; the next pass tries again
            moves.append(Move(i, src, dst, rebuild, why))
            used.add(dst)
            per_domain[self.domain_of[dst]] += 1
            if self.fill is not None and src != dst:
                self.fill.add(src, -frag_bytes)
                self.fill.add(dst, frag_bytes)
        if self.fill is not None and frag_bytes and not moves:
            m = self._balance(part, keep, used, per_domain, share, frag_bytes)
            if m is not None:
                moves.append(m)
        return moves

    def _choose(self, part_uid: str, prefer: str | None, used: set[str],
                per_domain: Counter[str], share: int) -> str | None:
        def ok(n: str) -> bool:
            return (n in self.writable and n not in used
                    and per_domain[self.domain_of[n]] < share)

        if prefer is not None and ok(prefer):
            return prefer
        cands = [n for n in self.writable if ok(n)]
        if not cands:
            return None
        fill = self.fill
        if fill is not None:
            return min(cands, key=lambda n: (fill.deviation(n), n))
        if self.placement is not None:  # the part's rendezvous (handoff) order
            rank = {n: r for r, n in enumerate(self.placement.ranked(part_uid))}
            return min(cands, key=lambda n: rank.get(n, len(rank)))
        return cands[0]

    def _balance(self, part: PartLayout, keep: dict[int, str], used: set[str],
                 per_domain: Counter[str], share: int, size: int) -> Move | None:
        fill = self.fill
        assert fill is not None
        if not keep or fill.balanced():
            return None
        half = fill.tolerance / 2
        i, src = max(keep.items(), key=lambda kv: (fill.deviation(kv[1]), kv[0]))
        src_dev = fill.deviation(src)
        if src_dev <= 0:
            return None
        per_domain = Counter(per_domain)
        per_domain[self.domain_of[src]] -= 1  # the fragment leaves its domain
        home = self._home(part, i)
        cands = [n for n in self.writable if n not in used
                 and per_domain[self.domain_of[n]] < share]
        if not cands:
            return None
        dst = home if home in cands and fill.deviation(home) < 0 else min(
            cands, key=lambda n: (fill.deviation(n), n))
        dst_dev = fill.deviation(dst)
        if dst_dev >= 0 or (src_dev <= half and dst_dev >= -half):
            return None
        # only if it brings the two closer: the receiver must stay below where the giver was
        if (fill.held[dst] + size) / max(fill.target(dst), 1.0) - 1.0 >= src_dev:
            return None
        fill.add(src, -size)
        fill.add(dst, size)
        return Move(i, src, dst, False, "rebalance")


def plan(layout: ClusterLayout, part: PartLayout, *, fill: Fill | None = None,
         lost: Iterable[int] = (), frag_bytes: int = 0,
         unavailable: Iterable[str] = ()) -> list[Move]:
    """The moves that put `part`'s fragments where `layout` wants them (module docstring)."""
    return Planner(layout, fill=fill, unavailable=unavailable).plan(
        part, lost=lost, frag_bytes=frag_bytes)


def moved(part: PartLayout, moves: Iterable[Move]) -> PartLayout:
    """The part's layout once `moves` are done."""
    placement = dict(part.placement)
    for m in moves:
        placement[m.index] = m.dst
    return PartLayout(part.part_uid, part.length, part.scheme, placement, list(part.missing),
                      part.crc32c)
