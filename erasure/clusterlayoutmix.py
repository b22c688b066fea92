"""ErasureCluster's cluster layout (issue 25; docs/design.md, "Cluster layout and data
movement"): the version in use, adopting a newer one while running (clients for new nodes,
none for gone ones, placement over the nodes that take writes, the nodes told their drives'
states), placements and homes by a part's own width, and health with a memory (the layout
report and the census of parts below full redundancy). A mixin of ErasureCluster: it uses the
cluster's config, session, clients and codecs.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from erasure.clusterlayout import ClusterLayout
from erasure.config import ClusterConfig, NodeSpec
from erasure.layoutstore import LayoutStore
from erasure.nodeclient import NodeClient
from erasure.placement import Placement, _score

log = logging.getLogger("erasure.cluster")


class LayoutMixin:
    # provided by ErasureCluster
    config: ClusterConfig
    clients: dict[str, NodeClient]
    layout_store: LayoutStore | None
    layout_poll: float
    layout_observers: list[Callable[[ClusterLayout], None]]
    census_observers: list[Callable[[Any], None]]
    census_max_age: float
    last_census: Any
    _census: asyncio.Task | None
    _pushes: dict[str, asyncio.Task]
    _session: Any
    node_timeout: float
    codec_for: Any
    _full_changed: Any
    _check_one: Any
    _identities: dict[tuple[str, str, int], str]
    _foreign: dict[str, set[str]]

    def _set_layout(self, layout: ClusterLayout) -> None:
        self.layout = layout
        self.scheme = layout.scheme
        self.codec = self.codec_for(self.scheme)
        self._placements: dict[int, Placement | None] = {}
        self.placement = Placement(layout.slots(), self.scheme.n)
        self._placements[self.scheme.n] = self.placement
        e = self.config.erasure
        self.write_quorum = e.write_quorum if e.scheme == self.scheme else min(
            self.scheme.k + 1, self.scheme.n)

    def _client(self, spec: NodeSpec) -> NodeClient:
        c = NodeClient(spec, self.config.secret, self._session, self.node_timeout)
        c.on_full = self._full_changed
        return c

    def _sync_clients(self) -> list[NodeClient]:
        """A client per node that may hold fragments (active, draining); gone nodes have
        none (never asked). A new dict, so that loops over the old one finish on it.
        Returns the clients made new."""
        new: dict[str, NodeClient] = {}
        made = []
        # How this machine reaches a node is its cluster file's business: a node the file
        # names is asked at the file's url (a `zonegate dev` restart may move a port), the
        # others at the layout's.
        local = {n.id: n.url for n in self.config.nodes}
        for n in self.layout.known():
            url = local.get(n.id, n.url)
            spec = NodeSpec(n.id, url, n.domain, tuple(d.path for d in n.drives))
            c = self.clients.get(n.id)
            if c is None or c.spec.url != url:
                c = self._client(spec)
                made.append(c)
            else:
                c.spec = spec
            new[n.id] = c
        self.clients = new
        return made

    async def adopt(self, layout: ClusterLayout) -> bool:
        """Switch to `layout` if it is newer than the one in use (no restart): new nodes get
        clients (checked before they take writes), gone nodes lose theirs, new writes are
        placed over the nodes that take writes, and every node is told its drives' states.
        Parts already written keep their own PartLayout and scheme. Returns whether it
        switched."""
        if layout.version <= self.layout.version:
            return False
        old = self.layout
        self._set_layout(layout)
        made = self._sync_clients() if self._session is not None else []
        await asyncio.gather(*(self._check_one(c) for c in made))
        log.info("adopted cluster layout v%d (was v%d): %s", layout.version, old.version,
                 layout.note or "no note")
        self.push_layout()
        self._tell_layout()
        return True

    def _tell_layout(self) -> None:
        for observe in self.layout_observers:
            try:
                observe(self.layout)
            except Exception:  # an observer's bug must not stop the switch
                log.exception("layout observer failed")

    async def refresh_layout(self) -> bool:
        """Adopt the store's current layout if it is newer; returns whether it switched."""
        if self.layout_store is None:
            return False
        if await self.layout_store.version() <= self.layout.version:
            return False  # the usual answer: one small query, no document
        cur = await self.layout_store.current()
        return cur is not None and await self.adopt(cur)

    async def _layout_loop(self) -> None:
        failing = False
        while True:
            await asyncio.sleep(self.layout_poll)
            try:
                await self.refresh_layout()
                if failing:
                    log.info("the cluster layout can be read again")
                failing = False
            except asyncio.CancelledError:
                raise
            except Exception as e:  # the store is away: the next look tries again
                if not failing:  # once per outage, not every poll
                    log.warning("could not read the cluster layout (keeping v%d): %s",
                                self.layout.version, e)
                failing = True

    def layout_doc(self, node_id: str) -> dict[str, Any] | None:
        """What `PUT /v1/layout` tells a node: the version and its drives' states."""
        n = self.layout.node(node_id)
        if n is None:
            return None
        return {"version": self.layout.version, "node": n.id, "state": n.state,
                "drives": [d.to_dict() for d in n.drives]}

    def push_layout(self, node_ids: Iterable[str] | None = None) -> None:
        """Tell nodes (every known one by default) the current layout, in the background;
        a node that misses it is told again when its health check shows an older version."""
        for nid in list(self.clients) if node_ids is None else node_ids:
            c = self.clients.get(nid)
            doc = self.layout_doc(nid)
            if c is None or doc is None or not c.up:
                continue
            running = self._pushes.get(nid)
            if running is not None and not running.done():
                continue

            async def push(c: NodeClient = c, doc: dict[str, Any] = doc) -> None:
                try:
                    await c.put_layout(doc)
                except asyncio.CancelledError:
                    raise
                except Exception as e:
                    log.info("node %s not told layout v%s yet: %s", c.id, doc["version"], e)

            self._pushes[nid] = asyncio.create_task(push())

    def placement_for(self, width: int) -> Placement | None:
        """Placement of `width` fragments over the nodes that take writes (a part keeps the
        width of the scheme it was written with); None when too few nodes take writes."""
        if width not in self._placements:
            try:
                self._placements[width] = Placement(self.layout.slots(), width)
            except ValueError:
                self._placements[width] = None
        return self._placements[width]

    def home(self, part_uid: str, width: int | None = None) -> list[str]:
        """Each fragment's home (its primary placement under the current layout) for a part
        of `width` fragments (default: the current scheme's); [] when none can be had."""
        p = self.placement_for(width or self.scheme.n)
        return p.primary(part_uid) if p is not None else []

    def ranked(self, part_uid: str) -> list[str]:
        """Every known node (active or draining) in the part's rendezvous order."""
        return sorted(self.clients, key=lambda nid: _score(part_uid, nid), reverse=True)

    def layout_report(self) -> dict[str, Any]:
        """erasure/layouthealth.py's report from the last health checks (a drive whose
        identity differs from the one recorded for its slot counts as new)."""
        from erasure.layouthealth import NodeView, layout_report
        views = {}
        for nid, c in self.clients.items():
            foreign = self._foreign.get(nid, set())
            drives = None if c.drives is None else [
                {**d, "replaced": bool(d.get("replaced")) or str(d.get("path")) in foreign}
                for d in c.drives]
            views[nid] = NodeView(c.up, c.ready, drives)
        return layout_report(self.layout, views)

    async def check_identities(self, c: NodeClient) -> None:
        """Record each of the node's drives' identity for its slot and generation in the
        layout store the first time it is seen; a drive reporting another one is new in a
        used slot until the layout registers it (`drive replace` bumps the generation). This
        catches what a node cannot see by itself (a node with one drive)."""
        from erasure.layouthealth import same_path
        store, n = self.layout_store, self.layout.node(c.id)
        if store is None or n is None or not c.drives:
            return
        foreign: set[str] = set()
        for d in c.drives:
            ident, path = d.get("identity"), str(d.get("path"))
            entry = next((e for e in n.drives if same_path(e.path, path)), None)
            if not ident or entry is None:
                continue
            key = (c.id, entry.path, entry.generation)
            known = self._identities.get(key)
            if known is None:
                try:
                    known = await store.drive_identity(*key, str(ident))
                except Exception as e:  # the store is away: the next check tries again
                    log.info("drive identity of %s:%s not checked: %s", c.id, path, e)
                    continue
                self._identities[key] = known
            if known != ident:
                foreign.add(path)
        self._foreign[c.id] = foreign

    def census_soon(self) -> None:
        """Start a census (erasure/layouthealth.py) in the background unless one runs or the
        last is younger than `census_max_age` and of the current layout version."""
        last = self.last_census
        if self._census is not None and not self._census.done():
            return
        if last is not None and last.layout_version == self.layout.version and \
                time.time() - last.at < self.census_max_age:
            return

        async def run() -> None:
            from erasure.layouthealth import census
            try:
                self.last_census = await census(self)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                log.warning("census of the parts failed: %s", e)
                return
            for observe in self.census_observers:
                try:
                    observe(self.last_census)
                except Exception:
                    log.exception("census observer failed")

        self._census = asyncio.create_task(run())

