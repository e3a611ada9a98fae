"""A store URL -> a redis-py client, for plain Redis and for Redis behind Sentinel.

redis-py 8's ``Redis.from_url`` knows ``redis://``, ``rediss://`` and ``unix://`` only, and
LangChain's ``redis+sentinel://`` names a single sentinel. Production clients list every
sentinel, so goldfish accepts:

    redis+sentinel://[[user]:password@]host:port[,host:port...]/service[/db][?option=value...]
    rediss+sentinel://...      (TLS to the Redis servers)

e.g. ``redis+sentinel://127.0.0.1:26379,127.0.0.1:26380/mymaster/0?socket_timeout=2``.
Credentials and query options (redis-py's own URL options) go to the Redis servers; the
sentinels are asked without credentials. The client is redis-py's ``Sentinel.master_for``, so
it follows a failover. The bots (refbot) and the oracle's reader build their clients here; errors
name the part that is wrong, never the whole URL (it may hold a password).

``check_url`` refuses what redis-py would silently get wrong: a path that is not a database number
(``/abc`` and ``/0/extra`` read database 0, ``/1/2`` database 12), and the options that change what
replies are (``decode_responses``, ``encoding``, ``encoding_errors``): goldfish reads stored bytes as
they are, and a stored entry that is not UTF-8 is a finding, not a client that cannot decode it. It also refuses,
naming the option, what redis-py takes from a URL and refuses only when it connects (then blamed on the server):
an option its connection does not know, a TLS option on ``redis://``, a timeout that is not seconds above 0; and
the database given twice with two values (``/0?db=5`` reads database 5).
"""
from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, unquote, urlsplit

import redis
from redis.connection import Connection, SSLConnection, parse_url
from redis.sentinel import Sentinel

SCHEMES = ("redis+sentinel", "rediss+sentinel")
# Sentinels answer at once; a stopped one must not hang a client (socket timeouts always set).
SENTINEL_TIMEOUTS = {"socket_timeout": 2.0, "socket_connect_timeout": 2.0}
SERVER_TIMEOUTS = {"socket_timeout": 10.0, "socket_connect_timeout": 5.0}
REPLY_OPTIONS = ("decode_responses", "encoding", "encoding_errors")  # they change what replies (and keys) are


@dataclass(frozen=True)
class SentinelURL:
    sentinels: tuple[tuple[str, int], ...]
    service: str
    options: dict = field(default_factory=dict)   # redis-py connection kwargs for the servers (db, password, ...)


def is_sentinel_url(url: str) -> bool:
    return url.split("://", 1)[0].lower() in SCHEMES


def parse_sentinel_url(url: str) -> SentinelURL:
    """Split a ``redis+sentinel://`` URL; ValueError naming the part that is wrong."""
    scheme, sep, rest = url.partition("://")
    if scheme.lower() not in SCHEMES or not sep:
        raise ValueError(f"not a Sentinel URL (scheme {scheme!r}): want redis+sentinel://host:port[,host:port...]/service[/db]")
    parts = urlsplit(f"//{rest}")
    hosts = parts.netloc.rpartition("@")[2]
    sentinels = []
    for item in filter(None, hosts.split(",")):
        host, colon, port = item.rpartition(":")
        if not colon or not host or not port.isdigit() or not int(port):
            raise ValueError(f"sentinel {item!r}: want host:port (a port above 0)")
        sentinels.append((host.strip("[]"), int(port)))
    if not sentinels:
        raise ValueError("no sentinel given: want redis+sentinel://host:port[,host:port...]/service[/db]")
    path = [p for p in parts.path.split("/") if p]
    if not path or len(path) > 2:
        raise ValueError(f"path {parts.path or '(none)'!r}: must be /service or /service/db (e.g. /mymaster/0)")
    # redis-py's own parser for credentials, db and query options, on a stand-in plain URL
    credentials = parts.netloc.rpartition("@")[0]
    plain = f"{'rediss' if scheme.lower() == 'rediss+sentinel' else 'redis'}://" \
            f"{credentials + '@' if credentials else ''}sentinel/{path[1] if len(path) == 2 else ''}"
    try:
        options = parse_url(plain + (f"?{parts.query}" if parts.query else ""))
    except ValueError as exc:
        raise ValueError(f"URL options: {exc}") from None
    options.pop("host", None)
    if options.pop("connection_class", None) is not None:
        options["ssl"] = True
    if len(path) == 2 and "db" not in options:
        raise ValueError(f"path {parts.path!r}: the database after the service must be a number, got {path[1]!r}")
    return SentinelURL(tuple(sentinels), path[0], options)


CLIENT_NAME = "goldfish"  # CLIENT SETNAME of goldfish's own connections (telemetry, audit): a redis-client-kill
                          # fault does not count them as the bot's (chaos/backends). Best-effort: name_connection


def name_connection(connection) -> None:
    """redis-py's ``redis_connect_func`` for goldfish's own connections: redis-py's own handshake (HELLO or AUTH,
    SELECT), then ``CLIENT SETNAME`` CLIENT_NAME, best-effort. Reading needs no name: a read-only ACL user (no
    ``+client|setname``), a renamed CLIENT command or a server that does not know it leave the connection
    unnamed (then a redis-client-kill fault counts it as the bot's), not unusable."""
    connection.on_connect()
    try:
        connection.send_command("CLIENT", "SETNAME", CLIENT_NAME, check_health=False)
        connection.read_response()
    except redis.ResponseError:  # NOPERM, unknown command: the error reply was read, the connection is in step
        pass


def own_client(url: str, **kwargs) -> redis.Redis:
    """``redis_client`` for goldfish's own connections to a store (the audit's reader, Locust's start check,
    telemetry): each connection named by ``name_connection``."""
    return redis_client(url, redis_connect_func=name_connection, **kwargs)


def no_hello(exc: BaseException) -> bool:
    """The server does not know HELLO (Redis before 6, or HELLO renamed away): it cannot speak RESP3, which
    redis-py asks for by default."""
    return isinstance(exc, redis.ResponseError) and "unknown command 'hello'" in str(exc).lower()


def resp2_if_no_hello(client: redis.Redis, rebuild) -> redis.Redis:
    """Connect ``client`` once (the connection goes back to its pool): ``client``, or, when the server does not know
    HELLO, ``rebuild(protocol=2)``, a client of its own (redis-py shapes replies per client). For a URL that chooses
    no protocol (``chooses_protocol``); any other error of the connection is raised."""
    pool = client.connection_pool
    try:
        pool.release(pool.get_connection())
    except redis.ResponseError as exc:
        if not no_hello(exc):
            raise
        client.close()
        return rebuild(protocol=2)
    return client


def chooses_protocol(url: str) -> bool:
    """The URL sets ``?protocol=``: goldfish does not pick another one for it."""
    try:
        options = parse_sentinel_url(url).options if is_sentinel_url(url) else parse_url(url)
    except ValueError:
        return False
    return options.get("protocol") is not None


def redis_client(url: str, **kwargs) -> redis.Redis:
    """A client for ``url``: ``Redis.from_url`` for plain URLs, redis-py's Sentinel for Sentinel URLs.

    ``kwargs`` are connection options (e.g. socket_timeout) and override the URL's; a Sentinel
    client always has socket timeouts, to its sentinels and to its servers. ValueError as ``check_url``'s."""
    check_url(url)
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    parsed = parse_sentinel_url(url)
    options = {**SERVER_TIMEOUTS, **parsed.options, **kwargs}
    sentinel = Sentinel(list(parsed.sentinels), sentinel_kwargs=dict(SENTINEL_TIMEOUTS))
    return sentinel.master_for(parsed.service, **options)


def check_url(url: str) -> None:
    """ValueError naming the part of a plain or Sentinel URL that is wrong (see the module docstring)."""
    if is_sentinel_url(url):
        options = parse_sentinel_url(url).options
        path = [p for p in urlsplit(f"//{url.partition('://')[2]}").path.split("/") if p]
        path_db = path[1] if len(path) == 2 else ""
        connection = SSLConnection if options.get("ssl") else Connection
    else:
        options = parse_url(url)
        parts = urlsplit(url)
        if parts.scheme.lower() != "unix" and not re.fullmatch(r"/?([0-9]+)?", unquote(parts.path)):
            raise ValueError(f"path {parts.path!r}: must be /db, a database number (e.g. /0)")
        path_db = "" if parts.scheme.lower() == "unix" else unquote(parts.path).strip("/")
        if parts.scheme.lower() != "unix" and parts.netloc and not parts.hostname:
            raise ValueError(f"no host in {parts.netloc.rpartition('@')[2] or 'the URL'!r}: redis-py would connect to "
                             "localhost instead; name the store's host (e.g. redis://127.0.0.1:6379/0)")
        if parts.scheme.lower() != "unix" and re.search(r":0+$", parts.netloc):
            raise ValueError(f"port 0 (of {parts.hostname}): no Redis listens there, and redis-py would connect to "
                             "port 6379 instead: give the store's port")
        connection = options.get("connection_class") or Connection
    for name in REPLY_OPTIONS:
        if name in options:
            raise ValueError(f"URL option {name}: goldfish reads the stored bytes as they are (a stored entry that "
                             "is not UTF-8 is a finding); remove the option")
    _check_options(url, options, connection, path_db)


def _init_names(cls) -> set[str]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None or klass is object:
            continue
        try:
            parameters = inspect.signature(init).parameters.values()
        except (TypeError, ValueError):
            continue
        names |= {p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)} - {"self"}
    return names


TIMEOUT_OPTIONS = ("socket_timeout", "socket_connect_timeout")


def _check_options(url: str, options: dict, connection, path_db: str) -> None:
    """What redis-py takes from a URL without a word and refuses only when it connects (then any error reads as a
    server that does not answer as Redis): an option no connection knows, a timeout that is not a number of
    seconds above 0; and the database given twice, in the path and as ``?db=``, with two values (redis-py reads
    the query's without a word)."""
    known = _init_names(connection) | _init_names(redis.ConnectionPool) | {"ssl"}
    scheme = url.partition("://")[0].lower()
    for name in options:
        if name not in known:
            kind = "TLS (rediss://)" if name.startswith("ssl_") and connection is not SSLConnection else ""
            why = f"a {kind} option, not one of a {scheme}:// connection" if kind else \
                f"not an option of redis-py's {scheme}:// connection (a misspelling?)"
            raise ValueError(f"URL option {name}: {why}; remove it")
    for name in TIMEOUT_OPTIONS:
        value = options.get(name)
        if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
            raise ValueError(f"URL option {name}={value!r}: must be a number of seconds above 0")
    query_db = parse_qs(urlsplit(url).query).get("db")
    if path_db and query_db and str(options.get("db")) != str(int(path_db)):
        raise ValueError(f"the database is given twice, /{path_db} in the path and db={query_db[0]} in the query: "
                         "give it once")
