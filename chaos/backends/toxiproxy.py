"""Toxic faults through Toxiproxy, whatever the main backend: the target names a Toxiproxy proxy.

The controller routes ``toxic`` faults here when a Toxiproxy URL is configured; the toxic is
named ``goldfish-<fault id>`` so recovery (and a later ``python -m chaos heal``) can remove
exactly the toxic it added.
"""
from __future__ import annotations

import re

from chaos.backend import Backend, UnsupportedFault
from chaos.faults import TOXIC, Fault
from chaos.toxiproxy import Toxiproxy


def toxic_name(fault: Fault) -> str:
    return "goldfish-" + re.sub(r"[^A-Za-z0-9_.-]", "_", fault.id)


def toxic_attributes(fault: Fault) -> dict:
    p = fault.params
    if p["toxic"] == "latency":
        return {"latency": int(p.get("latency") or 0), "jitter": int(p.get("jitter") or 0)}
    return {"timeout": int(p.get("timeout") or 0)}     # reset_peer and timeout


class ToxiproxyBackend(Backend):
    name = "toxiproxy"
    kinds = frozenset({TOXIC})

    def __init__(self, url: str):
        self.url = url
        self.api = Toxiproxy(url)

    def config(self) -> dict:
        return {"url": self.url}

    def check(self, fault: Fault) -> None:
        super().check(fault)
        if fault.params.get("toxic") == "latency" and not fault.params.get("latency"):
            raise UnsupportedFault("a latency toxic needs 'latency' (ms)")

    def instances(self, target: str) -> list[str]:
        return [target] if target in self.api.proxies() else []

    def describe(self, instance: str) -> str:
        p = self.api.proxy(instance)
        return f"toxiproxy proxy {instance} listen {p.get('listen')} -> {p.get('upstream')} ({len(p.get('toxics') or [])} toxics)"

    def apply(self, fault: Fault, instance: str) -> dict:
        name = toxic_name(fault)
        self.api.add_toxic(instance, name, fault.params["toxic"], toxic_attributes(fault),
                           stream=fault.params.get("stream", "downstream"),
                           toxicity=float(fault.params.get("toxicity", 1.0)))
        return {"proxy": instance, "toxic": name}

    def recover(self, fault: Fault, instance: str, undo: dict) -> None:
        self.api.remove_toxic(undo.get("proxy") or instance, undo.get("toxic") or toxic_name(fault))
