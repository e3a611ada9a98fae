"""The kubernetes backend against REPLAYED API responses (MOCK: no cluster can run here).

The exchanges are hand-written in the shape of the Kubernetes v1 API (PodList, Pod, Status) —
not captured from a live cluster. They check that the official client is called the way we
mean (namespace, labelSelector, gracePeriodSeconds) and that recovery waits for a new Ready pod.
"""
from __future__ import annotations


import pytest

from chaos.controller import Controller
from chaos.plan import PlanError, parse_plan
from support_chaos import read_timeline, replay  # noqa: F401 - replay is a fixture

NS = "chat"
SEL = "app.kubernetes.io/name=refbot"


def pod(name, uid, phase="Running", ready=True, deleting=False):
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": NS, "uid": uid, "labels": {"app.kubernetes.io/name": "refbot"},
                         **({"deletionTimestamp": "2026-01-01T00:00:05Z"} if deleting else {})},
            "spec": {"nodeName": "node-1", "containers": [{"name": "refbot", "image": "refbot:v1"}]},
            "status": {"phase": phase, "startTime": "2026-01-01T00:00:00Z",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}}


def pod_list(*pods):
    return {"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "100"}, "items": list(pods)}


LIST = {"method": "GET", "path": f"/api/v1/namespaces/{NS}/pods", "query": {"labelSelector": SEL}, "status": 200}
A, B = pod("refbot-7d9f-a", "uid-a"), pod("refbot-7d9f-b", "uid-b")


def backend(url):
    from chaos.backends.kubernetes import KubernetesBackend
    return KubernetesBackend(namespace=NS, host=url, poll=0.05, recover_timeout=10, selectors={"bot": SEL})


def test_kill_deletes_with_grace_0_and_waits_for_a_new_ready_pod(replay, tmp_path):
    srv = replay([
        dict(LIST, body=pod_list(A, B)),                              # validate: instances
        dict(LIST, body=pod_list(A, B)),                              # occurrence: instances
        dict(LIST, body=pod_list(A, B)),                              # apply: serving before
        {"method": "GET", "path": f"/api/v1/namespaces/{NS}/pods/refbot-7d9f-a", "status": 200, "body": A},
        {"method": "DELETE", "path": f"/api/v1/namespaces/{NS}/pods/refbot-7d9f-a",
         "query": {"gracePeriodSeconds": "0"}, "status": 200, "body": pod("refbot-7d9f-a", "uid-a", deleting=True)},
        dict(LIST, body=pod_list(pod("refbot-7d9f-a", "uid-a", deleting=True), B,
                                 pod("refbot-7d9f-c", "uid-c", phase="Pending", ready=False))),
        dict(LIST, body=pod_list(B, pod("refbot-7d9f-c", "uid-c", ready=False))),
        dict(LIST, body=pod_list(B, pod("refbot-7d9f-c", "uid-c"))),
    ])
    plan = parse_plan("faults:\n  - {kind: kill, target: bot, at: 0s, count: 1}\n")
    names = ["refbot-7d9f-a", "refbot-7d9f-b"]
    plan.seed = next(s for s in range(100) if plan.faults[0].choose(names, 0, s) == ["refbot-7d9f-a"])
    ctl = Controller(plan, backend(srv.url), tmp_path / "run").start()
    assert ctl.wait(20)
    tl = read_timeline(tmp_path / "run")
    assert [(r["event"], r["outcome"], r["instance"]) for r in tl] == [
        ("apply", "ok", "refbot-7d9f-a"), ("recover", "ok", "refbot-7d9f-a")], tl
    assert tl[0]["detail"]["uid"] == "uid-a" and tl[0]["detail"]["serving_before"] == 2
    deletes = [r for r in srv.requests if r["method"] == "DELETE"]
    assert len(deletes) == 1 and deletes[0]["query"]["gracePeriodSeconds"] == "0"
    assert srv.unused() == []               # recovery polled until the new pod was Ready


def test_a_pod_gone_before_its_kill_is_not_applied_and_not_waited_for(replay, tmp_path):
    """The pod was listed, then deleted by someone else (a rollout) before the kill: the apply found it gone (404).
    It was "recovered" by waiting for a replacement pod of the old uid, as if goldfish had killed it; now nothing was
    applied, so nothing is outstanding and nothing is recovered (chaos.backends.NotApplied)."""
    gone = {"apiVersion": "v1", "kind": "Status", "status": "Failure", "reason": "NotFound", "code": 404,
            "message": 'pods "refbot-7d9f-a" not found'}
    srv = replay([
        dict(LIST, body=pod_list(A, B)),                              # validate: instances
        dict(LIST, body=pod_list(A, B)),                              # occurrence: instances
        dict(LIST, body=pod_list(B)),                                 # apply: serving before
        {"method": "GET", "path": f"/api/v1/namespaces/{NS}/pods/refbot-7d9f-a", "status": 404, "body": gone},
    ])
    plan = parse_plan("faults:\n  - {kind: kill, target: bot, at: 0s, count: 1}\n")
    names = ["refbot-7d9f-a", "refbot-7d9f-b"]
    plan.seed = next(s for s in range(100) if plan.faults[0].choose(names, 0, s) == ["refbot-7d9f-a"])
    ctl = Controller(plan, backend(srv.url), tmp_path / "run").start()
    assert ctl.wait(20)
    tl = read_timeline(tmp_path / "run")
    assert [(r["event"], r["outcome"]) for r in tl] == [("apply", "error")], tl
    assert tl[0]["error"] == "NotApplied: pod chat/refbot-7d9f-a is gone (404)", tl
    assert ctl.outstanding.entries() == [] and ctl.unapplied and srv.unused() == []
    assert not [r for r in srv.requests if r["method"] == "DELETE"]


def test_unsupported_kinds_are_refused_at_validation(replay, tmp_path):
    srv = replay([])
    plan = parse_plan("faults:\n  - {kind: pause, target: bot, at: 0s, duration: 1s}\n"
                      "  - {kind: redis-stall, target: redis, at: 0s, duration: 1s}\n", "k.yaml")
    with pytest.raises(PlanError) as err:
        Controller(plan, backend(srv.url), tmp_path / "run").validate()
    assert "k.yaml:2: kind: backend 'kubernetes' cannot do fault kind 'pause'" in str(err.value)
    assert "k.yaml:3: kind: backend 'kubernetes' cannot do fault kind 'redis-stall'" in str(err.value)
    assert srv.requests == []               # nothing was asked of the cluster


def test_no_pods_for_the_selector_is_refused(replay, tmp_path):
    srv = replay([dict(LIST, body=pod_list(pod("refbot-x", "u", phase="Pending", ready=False)))])
    plan = parse_plan("faults:\n  - {kind: restart, target: bot, at: 0s}\n", "k.yaml")
    with pytest.raises(PlanError, match="'bot' has no instances on backend 'kubernetes'"):
        Controller(plan, backend(srv.url), tmp_path / "run").validate()
    assert [r["method"] for r in srv.requests] == ["GET"]
