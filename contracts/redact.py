"""Redaction: the one way goldfish hides secrets in everything it writes or prints.

URLs are parsed (``urllib.parse``), never matched with a regular expression: the userinfo
(``user:password@``, whatever the password holds, ``@`` included) becomes ``user:***@`` (and all of it ``***@``
when a raw '/', '?' or '#' in it ends the authority early: up to the last '@'), and the
value of every query or fragment parameter whose name looks like a credential (``password``,
``token``, ``secret``, ``api_key``, ``sig``...) becomes ``***``. Everything else is kept as
written, so the redacted URL still says where. A URL that does not parse keeps only its scheme.
Header values are all hidden: a header is added to carry a credential more often than not. A
request body template keeps its shape; the values under credential-like keys are hidden.
``text`` redacts every URL inside free text (error lines).
"""
from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

MASK = "***"
_SECRET_NAME = re.compile(r"pass|pwd|secret|token|auth|key|sig|credential", re.I)
# to the next space (a quote may be in a password), its scheme from the start of a run of scheme characters: tried
# from every letter of a long run (a 100,000-character value in an error line), the search took quadratic time,
# 16 s for that one line (fuzz hunt 18)
_URL_IN_TEXT = re.compile(r"(?<![A-Za-z0-9+.-])[A-Za-z][A-Za-z0-9+.-]*://\S+")


def url(value: str | None) -> str:
    """``value`` with its credentials masked (None and '' give '')."""
    if not value:
        return ""
    text = str(value)
    if "://" not in text:
        return text  # a module:function, a file path: nothing to hide
    head, _, after = text.partition("://")
    try:
        netloc = urlsplit(text).netloc
    except ValueError:  # e.g. an unclosed IPv6 bracket
        netloc = None
    if netloc is None or not after.startswith(netloc):
        return f"{head}://{MASK} (not a valid URL)"
    rest = after[len(netloc):]
    if _cut_short(head, netloc, rest):
        # a raw '/', '?' or '#' in the credentials ends the authority early: a parser (redis-py's, urllib's) takes
        # the password's start for it and the rest of the password for the path, query or fragment. Hidden: all of
        # it, up to the last '@' (what the user meant as credentials, user name included: where it ends is not
        # sure either), whatever parser reads the URL
        tail = after.rpartition("@")[2]
        return f"{head}://{MASK}@{url(f'{head}://{tail}').partition('://')[2]}"
    if "@" in netloc:
        userinfo, _, hosts = netloc.rpartition("@")
        netloc = f"{_masked(userinfo)}@{hosts}"
    before_fragment, hash_, fragment = rest.partition("#")
    path, mark, query = before_fragment.partition("?")
    return f"{head}://{netloc}{path}{mark}{_params(query)}{hash_}{_params(fragment)}"


def credentials_problem(value: str | None) -> str | None:
    """Why ``value``'s credentials are cut short, or None: a raw '/', '?' or '#' before the last '@' ends the
    authority there, so redis-py and urllib read the password's start as the password and what follows its first
    '@' as the host (``redis://:s3cr@t/xyz@host/0`` connects to host 't' with password 's3cr')."""
    if not value or "://" not in str(value):
        return None
    head, _, after = str(value).partition("://")
    try:
        netloc = urlsplit(str(value)).netloc
    except ValueError:
        return None
    if not after.startswith(netloc) or not _cut_short(head, netloc, after[len(netloc):]):
        return None
    return ("its user:password (before the last '@') holds a raw '/', '?' or '#', which ends the URL's host part "
            "early: the text after the first '@' would be taken for the host; percent-encode them in the "
            "password (%2F, %3F, %23, and '@' as %40)")


def reason(value: str | None, why) -> str:
    """The reason a check of the URL ``value`` gave (a ValueError's text: redis-py's, contracts.redis_url's), fit to
    print beside ``url(value)``: a reason quotes parts of the URL as the check parsed it (``path '/xyz@host/0'``),
    which for a URL whose credentials are cut short hold the rest of the password: then the reason is why it is
    cut short instead; any other reason has every URL in it, and the password where it appears, masked."""
    if problem := credentials_problem(value):
        return problem
    said = text(str(why))
    try:
        password = urlsplit(str(value or "")).password
    except ValueError:
        password = None
    for secret in {password, unquote(password or "")} - {None, ""}:  # where it stands alone: 'p' is not in 'port'
        said = re.sub(rf"(?<![A-Za-z0-9]){re.escape(secret)}(?![A-Za-z0-9])", MASK, said)
    return said


def headers(values: dict[str, str] | None) -> dict[str, str]:
    """Header names kept, every value masked."""
    return {name: MASK for name in (values or {})}


def json_value(value):
    """A JSON value (a request body template) with the value of every key that looks like a credential
    masked, at any depth: ``{"api_key": "***", "model": "m"}``."""
    if isinstance(value, dict):
        return {k: MASK if _SECRET_NAME.search(str(k)) else json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_value(v) for v in value]
    return value


def header_line(line: str) -> str:
    """``Name: value`` -> ``Name: ***`` (for messages about a header option)."""
    name, sep, _ = str(line).partition(":")
    return f"{name}{sep} {MASK}" if sep else str(line)


def text(value: str) -> str:
    """Free text (an error line) with every URL in it redacted."""
    return _URL_IN_TEXT.sub(lambda m: url(m.group(0)), str(value))


def deep(value):
    """A JSON value (run.json, a summary) with every URL in its strings redacted."""
    if isinstance(value, str):
        return text(value) if "://" in value else value
    if isinstance(value, dict):
        return {k: deep(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [deep(v) for v in value]
    return value


def _params(query: str) -> str:
    """``a=1&password=x`` -> ``a=1&password=***``; everything else byte for byte."""
    if not query or "=" not in query:
        return query
    out = []
    for pair in query.split("&"):
        name, sep, _ = pair.partition("=")
        out.append(f"{name}={MASK}" if sep and _SECRET_NAME.search(unquote(name)) else pair)
    return "&".join(out)


def _masked(userinfo: str) -> str:
    """``user:password`` -> ``user:***``; userinfo with no ':' (a token) -> ``***``."""
    return f"{userinfo.split(':', 1)[0]}:{MASK}" if ":" in userinfo else MASK


_SCHEMES_WITHOUT_AT = ("redis", "rediss", "redis+sentinel", "rediss+sentinel", "unix")  # their paths are /db


def _cut_short(head: str, netloc: str, rest: str) -> bool:
    """An '@' after what a parser reads as the authority belongs to the credentials: the authority already holds
    credentials, or is no plain host[:port], or the URL is a Redis one (whose path, a database number, holds no
    '@'). An http URL with a plain host and an '@' in its path (``/users/@me``) is not cut short."""
    return "@" in rest and ("@" in netloc or not _is_host(netloc) or head.lower() in _SCHEMES_WITHOUT_AT)


def _is_host(netloc: str) -> bool:
    """A plain ``host[:port]`` list (several for sentinel URLs), with no userinfo in it."""
    for part in netloc.split(","):
        host, colon, port = part.rpartition(":") if ":" in part and not part.endswith("]") else (part, "", "")
        if not host or (colon and not port.isdigit()):
            return False
    return True
