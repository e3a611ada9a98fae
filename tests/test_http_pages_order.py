"""--http-url against history APIs whose pages go newest to oldest (bot hunt 12, X2 and M2).

A correct bot whose history API answers page 1 with the newest messages and links "next" to older pages (each page
oldest first inside: Slack/Discord/Telegram "load older") was FAIL reordered on 96% of sessions: the pages were
joined in read order, and the ascending pairs inside the pages outvoted the one descent at each page boundary. Now
the reader joins the pages oldest first when their goldfish tokens show them going newest to oldest; it moves whole
pages only, never a message inside one, so a store's own reordering is still FAILed, and pages it cannot order stay
as read. And a next page on localhost when --http-url names 127.0.0.1 (same port) is the same server (as
oracle/keys.py's _same_store counts it): followed, where it was exit 2 "on another server".

Real parts: a real HTTP server on a free loopback port (tests/conftest.py), journaled runs from
tests/support_oracle.py, the audit through ``audit_run`` and ``python -m oracle audit``'s main(), the reader itself.
"""
from __future__ import annotations

import dataclasses
import json
import random
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import JsonHandler, http_server
from contracts.tokens import TOKEN_RE
from oracle.audit import audit_run
from oracle.http_reader import HttpReader
from oracle.store import StoreOptions
from support_oracle import build_world, inject, oracle_main, simple_specs, write_journal

QUIET_ERRORS = ("--gate", "strict,errors=off")  # the journal's refused turns would fail the errors gate alone
PAGE = 3  # messages per page: every session's history (9-12 stored messages) spans 3-4 pages


class _Api(JsonHandler):
    """/<style>/<session>[?page=N]: the session's history in ``store`` (oldest first) in pages of PAGE messages.

    older: page 1 the newest PAGE messages, next = the older page (each page oldest first inside);
    oldest: page 1 the oldest PAGE messages, next = the newer page;
    localhost: as oldest, the next URL on localhost (same port) though the request came to 127.0.0.1;
    fixed: ``pages[session]``, the pages as given, in that order."""
    store: dict = {}
    pages: dict = {}
    hosts: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        _, style, session = parts.path.split("/")[:3]
        page = int({k: v[0] for k, v in parse_qs(parts.query).items()}.get("page", 1))
        self.hosts.append(self.headers.get("Host", "").rsplit(":", 1)[0])
        port = self.server.server_port
        if style == "fixed":
            chunks = self.pages[session]
        else:
            messages = self.store[session]
            chunks = [messages[i:i + PAGE] for i in range(0, len(messages), PAGE)]
            if style == "older":
                chunks = [messages[max(0, end - PAGE):end] for end in range(len(messages), 0, -PAGE)]
        host = "localhost" if style == "localhost" else "127.0.0.1"
        more = page < len(chunks)
        nxt = f"http://{host}:{port}/{style}/{session}?page={page + 1}" if more else None
        return self.send_json(200, {"messages": chunks[page - 1], "next": nxt})



@pytest.fixture
def api():
    _Api.store, _Api.pages, _Api.hosts = {}, {}, []
    with http_server(_Api) as server:
        yield f"http://127.0.0.1:{server.server_port}"


def journaled(tmp_path, sessions: int = 4, reorder: bool = False):
    """A run folder whose bot remembered every fact, and the history API of its store: correct, or with one
    session's turns truly reordered (``reorder``); returns (run, the reordered sessions)."""
    specs = [[dataclasses.replace(spec, verdict_amnesia=False) for spec in session]
             for session in simple_specs(sessions)]
    world = build_world(specs, start=time.time() - 60, seed=11)
    damaged = set()
    if reorder:
        rng = random.Random(5)
        for session in world.order[:2]:
            if inject(world, session, "reordered", rng):
                damaged.add(session)
        assert damaged
    run = tmp_path / "run"
    write_journal(run, world.records)
    _Api.store = {s: [m for _, m in world.stored[s]] for s in world.order}
    assert all(len(m) > 2 * PAGE for m in _Api.store.values())
    return run, damaged


def clean(summary: dict) -> bool:
    return summary["anomalies"] == {} and summary["metrics"]["stored_loss"]["count"] == 0


def read(url: str, session: str) -> list:
    (raw,), = list(HttpReader(StoreOptions(http_url=url)).read([session]))
    return raw.entries


def _msg(text: str) -> dict:
    return {"role": "user", "content": text}


def test_pages_newest_to_oldest_are_joined_oldest_first_and_the_correct_bot_passes(tmp_path, api, capsys):
    """The hunt's bot: page 1 the newest, next = older, each page oldest first. Was FAIL reordered; now PASS, the
    history read exactly as stored."""
    run, _ = journaled(tmp_path)
    url = f"{api}/older/{{session}}"
    for session, messages in _Api.store.items():
        assert read(url, session) == messages
    summary = audit_run(run, StoreOptions(http_url=url))
    assert clean(summary), summary["anomalies"]
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, *QUIET_ERRORS)
    assert code == 0 and "PASS" in out and "FAIL" not in out, (code, out, err)

    # the same store paged oldest to newest (the way docs/oracle.md asks for) is read as before
    url = f"{api}/oldest/{{session}}"
    for session, messages in _Api.store.items():
        assert read(url, session) == messages
    assert clean(audit_run(run, StoreOptions(http_url=url)))


def test_a_bot_that_truly_reorders_is_still_failed_behind_newest_first_pages(tmp_path, api, capsys):
    """Only whole pages are moved: turns the store itself holds out of order stay out of order, FAIL reordered of
    exactly the sessions damaged, not of every session."""
    run, damaged = journaled(tmp_path, reorder=True)
    url = f"{api}/older/{{session}}"
    summary = audit_run(run, StoreOptions(http_url=url))
    assert set(summary["anomalies"]) == {"reordered"}, summary["anomalies"]
    assert summary["anomalies"]["reordered"] == len(damaged) < len(_Api.store), summary["anomalies"]
    for session, messages in _Api.store.items():
        got = read(url, session)
        assert sorted(map(json.dumps, got)) == sorted(map(json.dumps, messages))  # pages moved whole, none lost
        if session not in damaged:
            assert got == messages
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, *QUIET_ERRORS)
    assert code == 1 and "reordered" in out, (code, out, err)


def test_only_pages_consistently_newest_to_oldest_are_reversed_others_keep_the_order_read(api):
    """No tokens, tokens on one page only, pages whose turns interleave, and a history newest first throughout
    (for the audit to name): the reader never guesses, the pages stay as read. Descending pages are reversed
    whole, whatever lies between them."""
    sid = "gf0123456789abcdef"
    t = lambda n: _msg(f"[{sid}t{n}] turn {n}")  # noqa: E731
    cases = {
        "none": [[_msg("hello"), _msg("again")], [_msg("older"), _msg("oldest")]],
        "one": [[t(4), t(5)], [_msg("no token here")]],
        "interleave": [[t(2), t(5)], [t(3), t(4)]],
        "overlap": [[t(3), t(6)], [t(4), t(5)], [t(0), t(1)]],  # page 2 inside page 1's range: not descending
        "newest-throughout": [[t(5), t(4)], [t(3), t(2)], [t(1), t(0)]],
    }
    for name, pages in cases.items():
        _Api.pages[name] = pages
        assert read(f"{api}/fixed/{{session}}".replace("{session}", name), name) == \
            [m for page in pages for m in page], name

    # and the general case: descending pages whose inside runs oldest first, one turn split by the boundary, a
    # page with no token between them, an empty last page: every page, whole, in reverse
    pages = [[t(5), _msg("reply 5"), t(6)], [_msg("system")], [t(2), t(3), t(4), t(5)], [t(0), t(1)], []]
    _Api.pages["split"] = pages
    got = read(f"{api}/fixed/split", "split")
    assert got == [m for page in reversed(pages) for m in page]
    assert [int(TOKEN_RE.search(m["content"]).group(2)) for m in got if TOKEN_RE.search(m["content"])] == \
        [0, 1, 2, 3, 4, 5, 5, 6]


def test_a_next_page_on_localhost_is_the_same_server_as_127_0_0_1(tmp_path, api, capsys):
    """M2: --http-url on 127.0.0.1, the next page on localhost with the same port: followed (it was exit 2 "on
    another server"); localhost on another port stays refused (tests/test_http_reader_pages.py)."""
    run, _ = journaled(tmp_path)
    url = f"{api}/localhost/{{session}}"
    assert clean(audit_run(run, StoreOptions(http_url=url)))
    assert "localhost" in _Api.hosts and "127.0.0.1" in _Api.hosts
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, *QUIET_ERRORS)
    assert code == 0, (code, out, err)
