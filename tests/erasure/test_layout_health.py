"""What health says from the layout (erasure/layouthealth.py), case by case: nodes and drives
that should exist but do not, failed drives, new drives in a used slot, registered
replacements, draining and gone nodes; a clean cluster has no problem line."""

from __future__ import annotations

from erasure.clusterlayout import Change, ClusterLayout, apply_changes
from erasure.config import ClusterConfig
from erasure.layouthealth import NodeView, layout_report


def layout() -> ClusterLayout:
    return ClusterLayout.bootstrap(ClusterConfig.from_dict({
        "secret": "health-secret", "erasure": {"k": 2, "m": 1},
        "nodes": [{"id": f"n{i}", "url": f"http://127.0.0.1:{9400 + i}",
                   "drives": [f"/d/n{i}/a", f"/d/n{i}/b"]} for i in range(5)]}))


def drives(i: int, **over: dict) -> list[dict]:
    out = [{"path": f"/d/n{i}/a"}, {"path": f"/d/n{i}/b"}]
    for j, extra in over.items():
        out[int(j[1:])].update(extra)
    return out


def test_a_clean_cluster_has_no_problems() -> None:
    rep = layout_report(layout(), {f"n{i}": NodeView(True, {}, drives(i)) for i in range(5)})
    assert rep["problems"] == [] and rep["nodes_expected"] == [f"n{i}" for i in range(5)]
    assert rep["layout_version"] == 1


def test_what_should_exist_but_does_not() -> None:
    lay = apply_changes(layout(), [Change("node drain", {"id": "n1"}),
                                   Change("node remove", {"id": "n2"}),
                                   Change("drive replace", {"node": "n3", "path": "/d/n3/b"})])
    views = {"n0": NodeView(True, {}, [{"path": "/d/n0/a"}]),           # a drive not there
             "n1": NodeView(True, {}, drives(1, d0={"failed": True, "error": "EIO"})),
             "n3": NodeView(True, {}, drives(3)),
             "n4": NodeView(True, {}, drives(4, d1={"replaced": True}))}  # n2 is gone
    rep = layout_report(lay, views)
    assert rep["nodes_gone"] == ["n2"] and rep["nodes_draining"] == ["n1"]
    assert rep["nodes_missing"] == [] and "n2" not in rep["nodes_expected"]
    assert rep["drives_missing"] == ["n0:/d/n0/b"]
    assert rep["drives_failed"] == ["n1:/d/n1/a"]
    assert rep["drives_new"] == ["n4:/d/n4/b"]
    assert rep["drives_replaced"] == ["n3:/d/n3/b"]
    assert len(rep["problems"]) == 3
    assert any("zonegate layout drive replace n4 /d/n4/b" in p for p in rep["problems"])
    # a node that does not answer is missing, whatever its drives
    views.pop("n3")
    rep = layout_report(lay, views)
    assert rep["nodes_missing"] == ["n3"]
    assert any(p.startswith("node n3 ") and "does not answer" in p for p in rep["problems"])
