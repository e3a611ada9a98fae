"""The reference bot's settings, read from REFBOT_* environment variables.

Environment variables are the one source of truth so that `python -m refbot serve`, the
embedded stack and a container all configure a replica the same way.
"""
from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

# mode name -> whether it takes a ":<int>" parameter (window:k, ttl:N)
MODES: dict[str, bool] = {
    "correct": False,
    "process-local": False,
    "fresh-per-request": False,
    "shared-instance": False,
    "read-modify-write": False,
    "fire-and-forget": False,
    "pickle-drift": False,
    "window": True,
    "context-key-mismatch": False,
    "ttl": True,
}
DEFAULT_WINDOW = 3
DEFAULT_TTL = 60
REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")  # uvicorn's (any case)


class ConfigError(ValueError):
    """A setting that cannot work; the message names the setting and what would."""


def parse_mode(text: str) -> tuple[str, int | None]:
    """Split ``"window:3"`` into ``("window", 3)``; reject unknown modes with the list of known ones."""
    name, colon, raw = text.strip().partition(":")
    if name not in MODES:
        known = ", ".join(f"{m}:N" if p else m for m, p in MODES.items())
        raise ConfigError(f"unknown memory mode {text!r}; known modes: {known}")
    if colon and not raw:
        raise ConfigError(f"--mode {text!r}: nothing follows ':' (window:3, ttl:60; the other modes take no ':')")
    if not raw:
        return name, None
    if not MODES[name]:
        raise ConfigError(f"memory mode {name!r} takes no parameter (got {text!r})")
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"memory mode {text!r}: the parameter after ':' must be a whole number") from None
    if value < 1:
        raise ConfigError(f"memory mode {text!r}: the parameter after ':' must be at least 1")
    return name, value


def _number(env: dict, name: str, default: float) -> float:
    raw = env.get(name)
    if raw in (None, ""):
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number") from None
    if value < 0:
        raise ConfigError(f"{name}={raw!r} must not be negative")
    return value


def check_redis_url(url: str) -> str:
    """The store URL, or ConfigError naming it: redis-py's own ValueError came as a traceback when the app was
    built, exit 1. The URL is shown with its password masked."""
    from contracts import redact
    from contracts.redis_url import check_url

    where = f"--redis-url (REFBOT_REDIS_URL) {redact.url(url)!r}"
    if url.partition("://")[0].lower() not in REDIS_SCHEMES or "://" not in url:
        raise ConfigError(f"{where} is not a Redis URL: give {', '.join(s + '://' for s in REDIS_SCHEMES)}")
    try:
        check_url(url)
    except ValueError as exc:
        raise ConfigError(f"{where}: {redact.reason(url, exc)}") from None
    return url


def log_level(env) -> str:
    """REFBOT_LOG_LEVEL, uvicorn's log level (default warning), or ConfigError: uvicorn raised KeyError on a
    level it does not know, a traceback once the replica started (`refbot up`: "bot-1 exited while starting")."""
    raw = env.get("REFBOT_LOG_LEVEL") or "warning"
    if raw.lower() not in LOG_LEVELS:
        raise ConfigError(f"REFBOT_LOG_LEVEL={raw!r} is not a log level ({', '.join(LOG_LEVELS)})")
    return raw.lower()


@dataclass
class Config:
    """One replica's settings; see docs/refbot.md for what each does."""

    mode: str = "correct"
    release: str = "v1"
    replica: str = field(default_factory=socket.gethostname)
    redis_url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "message_store:"
    think_ms: float = 30.0
    jitter_ms: float = 20.0
    window: int = DEFAULT_WINDOW
    ttl: int = DEFAULT_TTL
    flush_ms: float = 1000.0
    host: str = "127.0.0.1"
    port: int = 8000
    wait_replicas: int = 0      # WAIT for this many replicas after each write; 0: no WAIT
    wait_ms: float = 100.0      # WAIT's timeout
    log_level: str = "warning"  # uvicorn's

    @property
    def mode_name(self) -> str:
        return parse_mode(self.mode)[0]

    @classmethod
    def from_env(cls, env: dict | None = None) -> "Config":
        env = dict(os.environ if env is None else env)
        mode = env.get("REFBOT_MODE", "correct") or "correct"
        name, param = parse_mode(mode)
        window = int(_number(env, "REFBOT_WINDOW", DEFAULT_WINDOW))
        ttl = int(_number(env, "REFBOT_TTL", DEFAULT_TTL))
        if name == "window" and param:
            window = param
        if name == "ttl" and param:
            ttl = param
        if window < 1 or ttl < 1:
            raise ConfigError("REFBOT_WINDOW and REFBOT_TTL must be at least 1")
        port = int(_number(env, "REFBOT_PORT", 8000))
        if _number(env, "REFBOT_WAIT_REPLICAS", 0) and _number(env, "REFBOT_WAIT_MS", 100.0) < 1:
            raise ConfigError("REFBOT_WAIT_MS must be at least 1 (Redis's WAIT with timeout 0 blocks forever)")
        return cls(
            mode=mode,
            release=env.get("REFBOT_RELEASE") or "v1",
            replica=env.get("REFBOT_REPLICA") or socket.gethostname(),
            redis_url=check_redis_url(env.get("REFBOT_REDIS_URL") or "redis://127.0.0.1:6379/0"),
            key_prefix=env.get("REFBOT_KEY_PREFIX") or "message_store:",
            think_ms=_number(env, "REFBOT_THINK_MS", 30.0),
            jitter_ms=_number(env, "REFBOT_JITTER_MS", 20.0),
            window=window,
            ttl=ttl,
            flush_ms=_number(env, "REFBOT_FLUSH_MS", 1000.0),
            host=env.get("REFBOT_HOST") or "127.0.0.1",
            port=port,
            wait_replicas=int(_number(env, "REFBOT_WAIT_REPLICAS", 0)),
            wait_ms=_number(env, "REFBOT_WAIT_MS", 100.0),
            log_level=log_level(env),
        )
