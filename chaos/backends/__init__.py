"""Backend registry: name -> class, imported lazily so `docker`/`kubernetes` load only when used."""
from __future__ import annotations

import importlib

from chaos.backend import Backend

REGISTRY: dict[str, str] = {
    "local": "chaos.backends.local:LocalBackend",
    "docker": "chaos.backends.docker:DockerBackend",
    "kubernetes": "chaos.backends.kubernetes:KubernetesBackend",
}


def backend_class(name: str) -> type[Backend]:
    """The class registered under name; ValueError naming the known backends otherwise."""
    try:
        module, cls = REGISTRY[name].split(":")
    except KeyError:
        raise ValueError(f"unknown backend {name!r} (known: {', '.join(sorted(REGISTRY))})") from None
    return getattr(importlib.import_module(module), cls)


def make_backend(name: str, **config) -> Backend:
    return backend_class(name)(**config)
