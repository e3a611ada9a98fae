"""The kubernetes backend: pods by namespace + label selector, through the official client.

kill = delete the pod with grace period 0; restart = delete it with its normal grace period
(the Deployment/StatefulSet makes a new one: "delete pod = restart"). Recovery waits until the
selector has as many Running+Ready pods as before. pause, Redis and HAProxy kinds are not
supported here (say so at validation). Verified only against replayed API responses — see
docs/chaos.md, "Kubernetes".
"""
from __future__ import annotations

import time

from chaos import faults as F
from chaos.backend import Backend, MissingExtra
from chaos.backends import NotApplied
from chaos.faults import Fault

# The same role label the docker backend reads; any other selector is one option away.
DEFAULT_SELECTORS = {"bot": "goldfish.role=bot", "redis": "goldfish.role=redis"}


class KubernetesBackend(Backend):
    name = "kubernetes"
    kinds = frozenset({F.KILL, F.RESTART})

    def __init__(self, namespace: str = "default", selectors: dict | None = None, kubeconfig: str | None = None,
                 context: str | None = None, host: str | None = None, recover_timeout: float = 180.0,
                 poll: float = 1.0):
        try:  # an extra: goldfish[kubernetes]
            from kubernetes import client, config
        except ModuleNotFoundError as exc:
            raise MissingExtra("kubernetes", "kubernetes", "kubernetes") from exc
        self.namespace, self.selectors = namespace, dict(selectors or DEFAULT_SELECTORS)
        self.kubeconfig, self.context, self.host = kubeconfig, context, host
        self.recover_timeout, self.poll = recover_timeout, poll
        if host:                                  # explicit API server (tests, kubectl proxy)
            cfg = client.Configuration()
            cfg.host = host
            api_client = client.ApiClient(cfg)
        else:
            try:
                config.load_incluster_config()
            except config.ConfigException:
                config.load_kube_config(config_file=kubeconfig, context=context)
            api_client = client.ApiClient()
        self.api = client.CoreV1Api(api_client)
        self.ApiException = client.exceptions.ApiException

    def config(self) -> dict:
        return {"namespace": self.namespace, "selectors": self.selectors, "kubeconfig": self.kubeconfig,
                "context": self.context, "host": self.host, "recover_timeout": self.recover_timeout}

    def _pods(self, selector: str) -> list:
        return self.api.list_namespaced_pod(self.namespace, label_selector=selector).items

    @staticmethod
    def _serving(pod) -> bool:
        """Running, Ready, and not on its way out."""
        if pod.metadata.deletion_timestamp is not None or pod.status.phase != "Running":
            return False
        return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))

    def instances(self, target: str) -> list[str]:
        if target in self.selectors:
            return sorted(p.metadata.name for p in self._pods(self.selectors[target]) if self._serving(p))
        try:
            pod = self.api.read_namespaced_pod(target, self.namespace)
        except self.ApiException as exc:
            if exc.status == 404:
                return []
            raise
        return [target] if self._serving(pod) else []

    def describe(self, instance: str) -> str:
        pod = self.api.read_namespaced_pod(instance, self.namespace)
        start = pod.status.start_time
        return (f"pod {self.namespace}/{instance} uid {pod.metadata.uid} phase {pod.status.phase}"
                f"{f' started {start.isoformat()}' if start else ''} node {pod.spec.node_name}")

    def apply(self, fault: Fault, instance: str) -> dict:
        selector = self.selectors.get(fault.target)
        before = len(self.instances(fault.target)) if selector else 1
        grace = 0 if fault.kind == F.KILL else fault.params.get("grace")
        kw = {} if grace is None else {"grace_period_seconds": int(grace)}
        try:
            pod = self.api.read_namespaced_pod(instance, self.namespace)
            self.api.delete_namespaced_pod(instance, self.namespace, **kw)
        except self.ApiException as exc:  # gone before it was deleted: nothing done, nothing to wait for
            if exc.status == 404:
                raise NotApplied(f"pod {self.namespace}/{instance} is gone (404)") from None
            raise
        return {"pod": instance, "uid": pod.metadata.uid, "selector": selector, "serving_before": before}

    def recover(self, fault: Fault, instance: str, undo: dict) -> None:
        """Nothing to start (the controller recreates the pod): wait until it has."""
        selector, want = undo.get("selector"), int(undo.get("serving_before") or 1)
        deadline = time.monotonic() + self.recover_timeout
        while True:
            if selector:
                pods = [p for p in self._pods(selector) if self._serving(p) and p.metadata.uid != undo.get("uid")]
                if len(pods) >= want:
                    return
            else:
                try:
                    pod = self.api.read_namespaced_pod(instance, self.namespace)
                    if self._serving(pod) and pod.metadata.uid != undo.get("uid"):
                        return
                except self.ApiException as exc:
                    if exc.status != 404:
                        raise
            if time.monotonic() > deadline:
                raise TimeoutError(f"{fault.target}: fewer than {want} serving pod(s) after "
                                   f"{self.recover_timeout:.0f}s (selector {selector or instance})")
            time.sleep(self.poll)
