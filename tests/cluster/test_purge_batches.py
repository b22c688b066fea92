"""Deleted objects' fragments leave in batches, on real processes: the sweeper asks each node
once (`POST /v1/purge`) for all the parts it frees, instead of a listing and a DELETE per
archive (22 node requests per part of an 8+2 cluster), and every fragment still goes."""

from __future__ import annotations

import urllib.request

import pytest

from tests.support.gwcluster import Gateway, archive_ids, serving, wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))
OBJECTS = 40


def node_requests(g: Gateway, route: str) -> int:
    """Requests every node answered on `route`, from their Prometheus counters."""
    n = 0
    for i, url in enumerate(g.nodes.urls):
        req = urllib.request.Request(url + "/metrics",
                                     headers=g.nodes.headers(i, "GET", "/metrics", {}))
        with _NO_PROXY.open(req, timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith("zonegate_node_requests_total{") and \
                        f'route="{route}"' in line:
                    n += int(float(line.split()[-1]))
    return n


def test_deleted_objects_are_purged_with_one_request_per_node(tmp_path):
    with serving(Gateway(tmp_path, nodes=6)) as g:
        s3 = g.client()
        s3.create_bucket(Bucket="gone")
        base = archive_ids(g)
        for n in range(OBJECTS):
            s3.put_object(Bucket="gone", Key=f"k{n}", Body=bytes([n]) * 100_000)
        written = archive_ids(g) - base
        assert len(written) == OBJECTS * 6  # one part each, 4+2 on six nodes
        purges, deletes = node_requests(g, "purge"), node_requests(g, "record_delete")
        s3.delete_objects(Bucket="gone", Delete={
            "Objects": [{"Key": f"k{n}"} for n in range(OBJECTS)]})
        assert wait_for(lambda: archive_ids(g) == base, timeout=60), \
            len(archive_ids(g) - base)
        # one purge per node per sweep (a sweep may catch the deletes in two batches)
        assert node_requests(g, "purge") - purges <= 2 * len(g.nodes.urls)
        assert node_requests(g, "record_delete") == deletes
