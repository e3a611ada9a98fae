"""The audit's options, defined once: ``python -m oracle audit`` and the end of a Locust run take the
same ones, with the same names, defaults and help (so a bot with another store layout is audited
at the end of its run, with no second command).

``add_store_options`` / ``add_gate_options`` add them to any argparse-like parser; Locust's parser
also takes its web-UI flags (``include_in_web_ui``, ``is_secret``), which are dropped for argparse.
``store_options`` and ``gates`` turn the parsed values into ``StoreOptions`` and ``Gates``.
"""
from __future__ import annotations

import argparse
import math
import re
import weakref

from contracts import redact
from oracle.store import StoreOptions, own_ids_template

_D = StoreOptions()


class NotEmpty(argparse.Action):
    """An option whose value chooses whether a store is read at all (``--store-url``, ``--http-url``,
    ``--reader``): given explicitly empty, on the command line or in a Locust config file (``store-url =``), it
    is refused, naming it. Left out, its default (empty: no store) stands; the web UI's start form sets the value
    itself, where an empty field is no store.

    Why: an empty value is an unset shell variable (``--store-url $STORE_URL``), and it meant no store: a Locust
    run was judged from its journal alone and passed, and ``oracle audit RUN --store-url ''`` re-judged the old
    snapshot, exit 0, while ``--gate ''`` was refused. ``left_out``: what leaving the option out gives (Locust's
    options that use it too say theirs: "no chaos plan is armed")."""

    def __init__(self, *args, left_out: str = "no store is read", **kwargs):
        super().__init__(*args, **kwargs)
        self.left_out = left_out

    def __call__(self, parser, namespace, values, option_string=None):
        if not str(values).strip():
            raise argparse.ArgumentError(self, "the value is empty (an unset variable?): give one, or leave the "
                                               f"option out (then {self.left_out})")
        setattr(namespace, self.dest, values)


class Once(argparse.Action):
    """An option given at most once on a command line: argparse keeps the last of two silently, so
    ``--gate probe_amnesia=0 --gate probe_amnesia=50%`` PASSed a run with 47% failed probes (while
    ``--gate probe_amnesia=0,probe_amnesia=50%`` was refused), and ``--store-url A --store-url B`` read B.
    Refused, naming both values (a store URL with its password masked)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._given: dict = {}  # id(namespace) -> (a weak reference to it, the value shown)

    def __call__(self, parser, namespace, values, option_string=None):
        self.once(namespace, values)
        setattr(namespace, self.dest, values)

    def once(self, namespace, values) -> None:
        shown = repr(redact.url(str(values)) if "url" in self.dest else redact.text(str(values)))
        for key in [key for key, (ref, _) in self._given.items() if ref() is None]:  # namespaces gone
            del self._given[key]
        earlier = self._given.get(id(namespace))
        if earlier is not None and earlier[0]() is namespace:
            raise argparse.ArgumentError(self, f"given twice, {earlier[1]} and {shown}: only the last would be used; "
                                               "give it once" + (" (its items comma-separated, each gate once)"
                                                                 if self.dest == "gate" else ""))
        try:
            self._given[id(namespace)] = (weakref.ref(namespace), shown)
        except TypeError:  # a namespace that takes no weak reference: not tracked
            pass


class OnceNotEmpty(Once, NotEmpty):
    """``NotEmpty``, given at most once (``Once``): the options that choose the store read."""

    def __call__(self, parser, namespace, values, option_string=None):
        self.once(namespace, values)
        NotEmpty.__call__(self, parser, namespace, values, option_string)


STORE = [
    (("--store-url",), dict(default="", is_secret=True, action=OnceNotEmpty,
                            help="Redis to read back and audit: redis://[:password@]host:port/db "
                                 "(without it, and without --http-url or --reader, no store is audited)")),
    (("--http-url",), dict(default="", action=OnceNotEmpty, help="URL template returning a session's history, "
                                            "e.g. http://bot/sessions/{session}/history")),
    (("--http-header",), dict(action="append", default=None, is_secret=True, include_in_web_ui=False,
                              help="'Name: value' sent with every --http-url GET, repeatable: a history API behind the "
                                   "chat's own token ('Authorization: Bearer ...')")),
    (("--reader",), dict(default="", action=OnceNotEmpty, help="module:function that reads a batch of sessions (docs/oracle.md)")),
    (("--key-template",), dict(default=_D.key_template, help="store key of a session's history "
                                                             "(default message_store:{session}; {conversation}: "
                                                             "goldfish's own id where the bot issues its own)")),
    (("--store-format", "--format"), dict(default=_D.format, help="list (one entry per message), blob (one "
                                                                  "JSON list in a string key) or auto (by key type)")),
    (("--direction",), dict(default=_D.direction, help="lpush: newest first (LangChain, default); rpush: oldest first")),
    (("--role-field",), dict(default=_D.role_field, help="dotted path of a message's role (default type)")),
    (("--content-field",), dict(default=_D.content_field, help="dotted path of a message's text (default data.content)")),
    (("--user-role",), dict(action="append", default=None, include_in_web_ui=False,
                            help="role name of user entries, repeatable (default human, user, HumanMessage, "
                                 "HumanMessageChunk)")),
    (("--assistant-role",), dict(action="append", default=None, include_in_web_ui=False,
                                 help="role name of assistant entries, repeatable (default ai, assistant, AIMessage, "
                                      "AIMessageChunk)")),
    (("--messages-field", "--http-messages-field"), dict(
        default=_D.messages_field, help="dotted path of the message list inside a JSON document: a blob key or the "
                                        "HTTP reply (Rasa's tracker: events); a document that is a list is the list")),
    (("--batch",), dict(default=str(_D.batch), include_in_web_ui=False, help="sessions per read round trip")),
    (("--no-scan",), dict(action="store_true", default=False, include_in_web_ui=False,
                          help="do not SCAN the store for keys no session of the run owns")),
]
GATES = [
    (("--gate",), dict(default="strict", action=Once,
                       help="the verdict's gates: strict (nothing allowed), lenient, off, a YAML gates file, and/or "
                            "name=limit items, comma-separated, later ones win, e.g. 'strict,probe_amnesia=1%%,errors=5' "
                            "(docs/oracle.md \"The verdict\")")),
    (("--max-probe-amnesia",), dict(default="", action=Once, include_in_web_ui=False, help="same as --gate probe_amnesia=RATE (0..1)")),
    (("--max-stored-loss",), dict(default="", action=Once, include_in_web_ui=False, help="same as --gate stored_loss=RATE (0..1)")),
    (("--max-crosstalk",), dict(default="", action=Once, include_in_web_ui=False, help="same as --gate crosstalk=N (sessions with cross-talk)")),
]


def option_names() -> tuple[str, ...]:
    """The attribute names of the audit's options (``--store-url`` is ``store_url``), for a caller that checks them."""
    return tuple(flags[0][2:].replace("-", "_") for flags, _ in STORE + GATES)
LOCUST_ONLY = ("include_in_web_ui", "is_secret")


class OptionError(ValueError):
    """An audit option that cannot work; the message names the option."""


def add_store_options(parser, locust: bool = False) -> None:
    """On an argparse parser (or group), or with ``locust``: on Locust's, or any ``add(*flags, **kwargs)``
    callable that takes Locust's web-UI flags."""
    _add(parser, STORE, locust)


def add_gate_options(parser, locust: bool = False) -> None:
    _add(parser, GATES, locust)


def _add(parser, options, locust: bool) -> None:
    add = parser if callable(parser) else parser.add_argument
    for flags, kwargs in options:
        add(*flags, **(kwargs if locust else {k: v for k, v in kwargs.items() if k not in LOCUST_ONLY}))


def shape_options(values) -> dict:
    """The element-shape options given other than their defaults, as StoreOptions fields: a re-audit from the
    snapshot applies them to its entries, which it keeps as they were read (the roles a bot stores its answers
    under, found out after the run, need no second read of the store)."""
    get = lambda name: getattr(values, name, None)  # noqa: E731
    given = {"role_field": get("role_field"), "content_field": get("content_field"),
             "user_roles": tuple(get("user_role") or ()) or None,
             "assistant_roles": tuple(get("assistant_role") or ()) or None, "messages_field": get("messages_field")}
    return {name: value for name, value in given.items() if value is not None and value != getattr(_D, name)}


def store_options(values) -> StoreOptions | None:
    """The store the parsed options name (None: no store given); OptionError on a bad value, with or without
    a store (a re-audit from the snapshot takes the shape options too)."""
    get = lambda name, default=None: getattr(values, name, default)  # noqa: E731
    try:
        batch = int(str(get("batch", _D.batch)))
    except ValueError:
        raise OptionError(f"--batch: {get('batch')!r} is not a whole number") from None
    if batch < 1:
        raise OptionError(f"--batch: {batch} must be >= 1")
    _check_batch(batch)
    for name, option in GIVEN_NOT_EMPTY:
        _not_empty(get(name), option)
    for name in ("user_role", "assistant_role"):
        _roles(get(name) or (), f"--{name.replace('_', '-')}")
    url, http_url, reader = (str(get(n) or "") or None for n in ("store_url", "http_url", "reader"))
    if not (url or http_url or reader):
        return None
    given = [option for option, value in (("--store-url", url), ("--http-url", http_url), ("--reader", reader))
             if value]
    if len(given) > 1:  # one of them was read and the others silently ignored
        raise OptionError(f"{' and '.join(given)}: give one way to read the store, not {len(given)}")
    headers = tuple(http_header(text) for text in get("http_header") or ())
    if headers and not http_url:
        raise OptionError("--http-header: goes with --http-url (the history API's GETs), which is not given")
    key_template, own_ids = own_ids_template(str(get("key_template") or _D.key_template))
    options = StoreOptions(
        url=url, http_url=http_url, http_headers=headers, reader=reader, key_template=key_template, own_ids=own_ids,
        format=str(get("store_format") or _D.format), direction=str(get("direction") or _D.direction),
        role_field=str(get("role_field") or _D.role_field), content_field=str(get("content_field") or _D.content_field),
        user_roles=tuple(get("user_role") or _D.user_roles), assistant_roles=tuple(get("assistant_role") or _D.assistant_roles),
        messages_field=str(get("messages_field", _D.messages_field) or ""), batch=batch,
        scan_foreign=not get("no_scan", False))
    check_store(options)
    return options


HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


def http_header(text: str) -> tuple[str, str]:
    """``--http-header 'Name: value'`` as (name, value); OptionError naming it (its value masked) otherwise."""
    name, sep, value = str(text).partition(":")
    if not sep or not HEADER_NAME.match(name.strip()):
        raise OptionError("--http-header: a value is not 'Name: value' (a name of letters, digits and -, then ':'); "
                          "not shown, as it may hold a credential")
    if any(not c.isprintable() and c != "\t" for c in value):
        raise OptionError(f"--http-header: the value of {name.strip()!r} holds a control character (a line break?)")
    return name.strip(), value.strip()


def read_options_given(values) -> list[str]:
    """The options given that say how to read a store (not how to decode what was read): with no store to read
    (a re-audit from the snapshot) they would be silently ignored, and a --key-template meant to fix a
    mismatch changed nothing."""
    get = lambda name, default=None: getattr(values, name, default)  # noqa: E731
    given = {"--key-template": get("key_template", _D.key_template) != _D.key_template,
             "--store-format": get("store_format", _D.format) != _D.format,
             "--direction": get("direction", _D.direction) != _D.direction,
             "--batch": str(get("batch", _D.batch)) != str(_D.batch), "--no-scan": bool(get("no_scan", False)),
             "--http-header": bool(get("http_header"))}
    return [option for option, on in given.items() if on]


# options whose explicitly empty value (an unset shell variable) was silently the default
GIVEN_NOT_EMPTY = (("key_template", "--key-template"), ("store_format", "--format"), ("direction", "--direction"),
                   ("role_field", "--role-field"), ("content_field", "--content-field"))


def _not_empty(value, option: str) -> None:
    if value is not None and not str(value).strip():
        raise OptionError(f"{option}: the value is empty (an unset variable?): give one, or leave the option out "
                          "for its default")


def _no_empty_item(value, option: str) -> None:
    """A comma-separated list with an empty item (``,``, ``lenient,``, ``a,,b``): a typo or an unset variable
    (``lenient,$EXTRA``). The items left were used without a word while an empty ``--gate ''`` was refused."""
    if value is None or not str(value).strip():
        return
    items = [item.strip() for item in str(value).split(",")]
    if "" in items:
        where = "at its end" if items[-1] == "" else "at its start" if items[0] == "" else "between two commas"
        raise OptionError(f"{option} {redact.text(str(value))!r}: an empty item {where} (an unset variable?): "
                          "remove the comma, or give a profile, a gates file or name=limit there")


def _roles(roles, option: str) -> None:
    if any(not str(role).strip() for role in roles):
        raise OptionError(f"{option}: an empty role name (an unset variable?): no stored entry is recognised by it, "
                          "and it replaces the defaults")


def check_roles(options: StoreOptions) -> None:
    """OptionError when a role name is empty, a side has none, or a role is both the user's and the
    assistant's (also the snapshot's roles with the ones a re-audit is given)."""
    for option, roles in (("--user-role", options.user_roles), ("--assistant-role", options.assistant_roles)):
        if not roles:
            raise OptionError(f"{option}: no role name given")
        _roles(roles, option)
    both = set(options.user_roles) & set(options.assistant_roles)
    if both:
        raise OptionError(f"--user-role and --assistant-role both name {', '.join(sorted(both))}: a stored entry "
                          "is the user's or the assistant's, not both")


def check_store(options: StoreOptions) -> None:
    """Everything that can be known about the store options without reaching the store; OptionError naming
    the option (also for options that come as JSON: ``oracle follow``)."""
    from oracle.store import StoreError

    _check_batch(options.batch)
    try:
        options.validate()
    except StoreError as exc:
        raise OptionError(str(exc)) from None
    _check_store(options)


REDIS_SCHEMES = ("redis", "rediss", "unix", "redis+sentinel", "rediss+sentinel")  # contracts/redis_url.py


def _check_store(options: StoreOptions) -> None:
    """What can be known about the store without reaching it; OptionError naming the option.

    Why: these used to surface only at the end of a run, after the whole load, as a failed audit."""
    from urllib.parse import urlsplit

    from contracts.redis_url import check_url

    if options.url:
        scheme = options.url.partition("://")[0].lower()
        if scheme not in REDIS_SCHEMES:
            hint = " (an HTTP history endpoint goes in --http-url)" if scheme in ("http", "https") else ""
            raise OptionError(f"--store-url {redact.url(options.url)!r}: not a Redis URL: the scheme must be one of "
                              f"{', '.join(s + '://' for s in REDIS_SCHEMES)}{hint}")
        try:
            check_url(options.url)
        except ValueError as exc:
            raise OptionError(f"--store-url {redact.url(options.url)!r}: {redact.reason(options.url, exc)}") from None
    if options.http_url:
        try:
            parts = urlsplit(options.http_url)
            parts.port  # noqa: B018 - raises on a port that is not a number
        except ValueError as exc:
            raise OptionError(f"--http-url {redact.url(options.http_url)!r}: {exc}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise OptionError(f"--http-url {redact.url(options.http_url)!r}: not an http(s)://host/... URL")
    for option, path in (("--role-field", options.role_field), ("--content-field", options.content_field),
                         ("--messages-field", options.messages_field)):
        if path and any(not part for part in path.split(".")):
            raise OptionError(f"--{option.lstrip('-')}: {path!r} has an empty part (write a.b, not a..b, .a or a.)")
    check_roles(options)


def _check_batch(batch) -> None:
    if not isinstance(batch, int) or batch < 1:
        raise OptionError(f"--batch: {batch!r} must be a whole number >= 1")
    if batch > 100_000:
        raise OptionError(f"--batch: {batch} is more than 100000 sessions per round trip")


def reach_store(options: StoreOptions | None, timeout: float = 3.0) -> None:
    """Reach the store the options name, now (Redis: PING; HTTP: a connection; a reader function: its
    import); OptionError naming the option, credentials masked, when it cannot be reached.

    Why: a refused store or a wrong password would otherwise be found after the whole load."""
    if options is None:
        return
    if options.reader:
        from oracle.function_reader import load_function
        from oracle.store import StoreError

        try:
            load_function(options.reader)
        except StoreError as exc:
            raise OptionError(str(exc)) from None
    elif options.http_url:
        import socket
        from urllib.parse import urlsplit

        parts = urlsplit(options.http_url)
        try:
            socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)),
                                     timeout).close()
        except OSError as exc:
            raise OptionError(f"--http-url {redact.url(options.http_url)!r}: cannot connect: {exc}") from None
    else:  # the audit's own connection set-up (RedisReader.check): what fails here would fail the audit
        import dataclasses

        import redis

        from oracle.redis_reader import RedisReader, unreached
        from oracle.store import StoreError

        try:
            reader = RedisReader(dataclasses.replace(options, timeout_s=timeout))
        except StoreError as exc:  # a URL redis-py cannot use (the message masks its password)
            raise OptionError(str(exc)) from None
        try:
            reader.connect()
        except redis.RedisError as exc:
            raise OptionError(f"--store-url {redact.url(options.url)!r}: "
                              f"{redact.text(unreached(exc, url=options.url))}") from None
        except OSError as exc:
            raise OptionError(f"--store-url {redact.url(options.url)!r}: cannot reach the store: "
                              f"{redact.text(exc) or type(exc).__name__}") from None
        finally:
            reader.close()


def gates(values):
    """--gate and the --max-* shorthands as the verdict's Gates; OptionError on a bad value."""
    from oracle import verdict

    get = lambda name: getattr(values, name, None)  # noqa: E731
    shorthands = (_number(get("max_probe_amnesia"), "max-probe-amnesia", 1.0),
                  _number(get("max_stored_loss"), "max-stored-loss", 1.0), _count(get("max_crosstalk"), "max-crosstalk"))
    try:  # legacy_overrides refuses a rate of 100% (it was a traceback, exit 3)
        overrides = verdict.legacy_overrides(*shorthands)
    except verdict.GateError as exc:
        raise OptionError(str(exc)) from None
    _not_empty(get("gate"), "--gate")
    _no_empty_item(get("gate"), "--gate")
    try:  # a --max-* shorthand over a gate an item of --gate sets too is refused by parse_gates
        return verdict.parse_gates(str(get("gate") or "strict"), shorthands=overrides)
    except verdict.GateError as exc:
        raise OptionError(str(exc)) from None


def _number(value, name: str, high: float) -> float | None:
    """A number in [0, high]; for a rate (high 1), a percentage too: 5% as --gate writes it."""
    if value is None or str(value).strip() == "":
        return None
    text = str(value).strip()
    try:
        number = float(text[:-1]) / 100 if high == 1.0 and text.endswith("%") else float(text)
    except ValueError:
        raise OptionError(f"--{name}: {value!r} is not a number") from None
    if not math.isfinite(number) or not 0 <= number <= high:
        raise OptionError(f"--{name}: {value!r} is not a number in [0, {high:g}]")
    return number


def _count(value, name: str) -> int | None:
    number = _number(value, name, float("inf")) if value is not None and str(value).strip() else None
    if number is not None and number != int(number):
        raise OptionError(f"--{name}: {value!r} is not a whole number")
    return None if number is None else int(number)
