"""Backend registry: name -> class, imported lazily so `docker`/`kubernetes` load only when used."""
from __future__ import annotations

import importlib
import inspect
import math

from chaos.backend import Backend

class NotApplied(RuntimeError):
    """A backend's ``apply`` refused before touching anything (the target was not running): the fault never took
    effect, so nothing is outstanding and nothing is recovered (recovering a kill would start a process that was
    down). Raise it only when nothing at all was done; any other failure of ``apply`` is recovered at once."""


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
    """The backend ``name`` built with ``config``; ValueError naming an option it does not take or a bad value."""
    cls = backend_class(name)
    check_config(cls, name, config)
    return cls(**config)


def check_config(cls: type[Backend], name: str, config: dict) -> None:
    """Each option is one the constructor takes, of the type it declares (numbers finite and >= 0)."""
    params = inspect.signature(cls, eval_str=True).parameters
    takes = [k for k, q in params.items() if q.kind in (q.POSITIONAL_OR_KEYWORD, q.KEYWORD_ONLY)]
    for key, value in config.items():
        if key not in takes:
            raise ValueError(f"backend option {key!r}: backend {name!r} has no such option "
                             f"(it takes: {', '.join(takes) or 'none'})")
        declared = params[key].annotation
        if declared in (float, int) and not isinstance(value, bool) and isinstance(value, (int, float)):
            if not 0 <= value < math.inf:
                raise ValueError(f"backend option {key!r}: {value!r} must be a number >= 0")
            continue
        try:
            fits = declared is inspect.Parameter.empty or isinstance(value, declared)
        except TypeError:  # a generic such as dict[str, str]: not checkable here
            fits = True
        if not fits:
            raise ValueError(f"backend option {key!r}: {value!r} is not a {_type_name(declared)}")


def _type_name(declared) -> str:
    return " or ".join(t.__name__ for t in getattr(declared, "__args__", (declared,)) if t is not type(None))
