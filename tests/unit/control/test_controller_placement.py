"""Placement live: the controller annotates the pods a scale-in takes before it writes /scale,
and the ReplicaSet (the API double's, in the controller's order) deletes exactly those."""

from collections import Counter

DELETION_COST = "controller.kubernetes.io/pod-deletion-cost"

STATIC = """\
- scaleTargetRef: {{name: web}}
  minReplicas: 1
  maxReplicas: 10
  policy: {{name: static, replicas: 2}}
  placement: {placement}
"""


def nodes_of(api) -> Counter:
    return Counter(
        p["spec"].get("nodeName")
        for p in api.pods()
        if p["metadata"]["name"].startswith("web") and not p["metadata"].get("deletionTimestamp")
    )


def spread(kapi):
    """Four pods over three nodes: two on node-a, one each on node-b and node-c."""
    kapi.create_deployment("web", replicas=4)
    assert sorted(nodes_of(kapi).values()) == [1, 1, 2]


def test_scale_in_marks_the_emptiest_nodes_pods_before_writing_scale(kapi, make_controller):
    spread(kapi)
    crowded = nodes_of(kapi).most_common(1)[0][0]
    lonely = {p["metadata"]["name"] for p in kapi.pods() if p["spec"].get("nodeName") != crowded}
    [out] = make_controller(STATIC.format(placement="true")).sync()
    assert out.replicas == 2
    writes = [w[2] for w in kapi.writes if "/pods/" in w[2] or w[2].endswith("/scale")]
    patched = {w.rsplit("/", 1)[1] for w in writes if w.startswith("PATCH")}
    assert patched == lonely
    assert writes[-1] == "PUT /apis/apps/v1/namespaces/default/deployments/web/scale"
    # the two left share one node: the others emptied
    assert nodes_of(kapi) == Counter({crowded: 2})


def test_without_placement_the_replicaset_spreads(kapi, make_controller):
    # The controller's own rule 5 deletes from the node with more pods first: two nodes
    # stay in use, which is what placement avoids.
    spread(kapi)
    [out] = make_controller(STATIC.format(placement="false")).sync()
    assert out.replicas == 2
    assert not [w for w in kapi.writes if "/pods/" in w[2]]
    assert sorted(nodes_of(kapi).values()) == [1, 1]


def test_costs_are_read_back_and_a_stale_mark_is_removed(kapi, make_controller):
    spread(kapi)
    crowded = nodes_of(kapi).most_common(1)[0][0]
    keep = sorted(p["metadata"]["name"] for p in kapi.pods() if p["spec"]["nodeName"] == crowded)
    # a mark left on a pod that this scale-in keeps (an earlier step's) must go
    kapi.patch_object(
        "v1", "pods", keep[0], "default", {"metadata": {"annotations": {DELETION_COST: "-9"}}}
    )
    make_controller(STATIC.format(placement="true")).sync()
    left = {
        p["metadata"]["name"]: p for p in kapi.pods() if not p["metadata"].get("deletionTimestamp")
    }
    assert sorted(left) == keep
    assert DELETION_COST not in (left[keep[0]]["metadata"].get("annotations") or {})


def test_dry_run_marks_nothing(kapi, make_controller):
    spread(kapi)
    make_controller(STATIC.format(placement="true"), dry_run=True).sync()
    assert not [w for w in kapi.writes if "/pods/" in w[2] or w[2].endswith("/scale")]
