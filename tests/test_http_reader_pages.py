"""--http-url against history APIs that page their answers or want credentials (bot hunt 11, W5 and W9).

A correct bot whose history API answers the newest 20 messages with ``"has_more": true`` was FAIL stored_loss 33%
(page 1 read as the whole history, and a warning blaming a window memory); one whose history API wants the chat's
Bearer token was exit 3 "audit FAILED" advising --store-url. Now: a next page's URL the reply gives (in the
document or a Link header) is followed; a page of more that names only a flag or a cursor is exit 2 naming it; a
401/403 is exit 2 naming the status and how to authenticate (docs/oracle.md "Readers").

Real parts: a real HTTP server on a free loopback port (tests/conftest.py), journaled runs from
tests/support_oracle.py, the audit through ``audit_run`` and through ``python -m oracle audit``'s main().
"""
from __future__ import annotations

import base64
import dataclasses
import time
from urllib.parse import parse_qs, urlsplit

import pytest

from conftest import JsonHandler, http_server
from oracle.audit import audit_run
from oracle.keys import TemplateMismatch
from oracle.store import StoreError, StoreOptions
from support_oracle import build_world, oracle_main, simple_specs, write_journal

# the journal's refused turns (simple_specs) would fail the errors gate from the journal alone: exit 1
QUIET_ERRORS = ("--gate", "strict,errors=off")
PAGE = 3      # messages per page: every session's history (9-10 stored messages) spans 3-4 pages


class _Api(JsonHandler):
    """/<style>/<session>[?page=N|?cursor=N|?limit=N]: the session's history in ``store`` (oldest first) in the
    paging style ``style`` names; 404 when the session has none."""
    store: dict = {}
    token = "s3cret"
    seen_auth: list = []

    def do_GET(self):  # noqa: N802 - http.server's name
        parts = urlsplit(self.path)
        _, style, session = parts.path.split("/")[:3]
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        if style.startswith("auth"):
            self.seen_auth.append(self.headers.get("Authorization"))
            if self.headers.get("Authorization") != f"Bearer {self.token}":
                return self.send_json(401, {"detail": "Not authenticated"}, {"WWW-Authenticate": "Bearer"})
        if style == "forbidden":
            return self.send_json(403, {"detail": "Forbidden"})
        if session not in self.store:
            return self.send_json(404, {"detail": "no such conversation"})
        messages = self.store[session]
        page = int(query.get("page", 1))
        chunk = messages[(page - 1) * PAGE:page * PAGE]
        more = page * PAGE < len(messages)
        here = f"http://127.0.0.1:{self.server.server_port}/{style}/{session}"
        if style in ("all", "auth"):
            return self.send_json(200, {"messages": messages, "has_more": False, "last_id": "msg_x"})
        if style == "dify":  # the newest `limit`, oldest first within the page; has_more says older ones exist
            limit = int(query.get("limit", PAGE))
            return self.send_json(200, {"messages": messages[-limit:], "has_more": len(messages) > limit, "limit": limit})
        if style == "cursor":  # Slack/Notion-style: a token only the API knows where to put
            return self.send_json(200, {"messages": chunk, "next_cursor": f"c{page + 1}" if more else ""})
        if style == "drf":  # Django REST framework: an absolute next URL, null on the last page
            return self.send_json(200, {"count": len(messages), "messages": chunk,
                                    "next": f"{here}?page={page + 1}" if more else None})
        if style == "relative":  # a relative next URL, inside a pagination object
            return self.send_json(200, {"data": {"messages": chunk},
                                    "pagination": {"has_more": more, "next": f"?page={page + 1}" if more else None}})
        if style == "link":  # GitHub-style: the next page in a Link header, the body a bare list
            headers = {"Link": f'<{here}?page={page + 1}>; rel="next"'} if more else {}
            return self.send_json(200, chunk, headers)
        if style == "elsewhere":  # the next page on another host
            return self.send_json(200, {"messages": chunk, "next": "http://localhost:1/x?page=2" if more else None})
        if style == "circle":  # the next page is this one
            return self.send_json(200, {"messages": chunk, "next": f"{here}?page=1"})
        raise AssertionError(style)



@pytest.fixture
def api():
    _Api.store, _Api.seen_auth = {}, []
    with http_server(_Api) as server:
        yield f"http://127.0.0.1:{server.server_port}"


def journaled(tmp_path, sessions: int = 4):
    """A run folder whose bot remembered every fact, and the history API of a correct store for it."""
    specs = [[dataclasses.replace(spec, verdict_amnesia=False) for spec in session]
             for session in simple_specs(sessions)]
    world = build_world(specs, start=time.time() - 60, seed=11)
    run = tmp_path / "run"
    write_journal(run, world.records)
    _Api.store = {s: [m for _, m in world.stored[s]] for s in world.order}
    assert all(len(m) > 2 * PAGE for m in _Api.store.values())
    return run


def clean(summary: dict) -> bool:
    return summary["anomalies"] == {} and summary["metrics"]["stored_loss"]["count"] == 0


# ---- W5: paged history APIs -----------------------------------------------------------------------------------------

def test_a_page_of_more_named_by_has_more_is_exit_2_never_turns_lost(tmp_path, api, capsys):
    """The hunt's bot: the newest 3 messages with has_more true. Was FAIL stored_loss (page 1 read as the whole
    history, "a window memory (LTRIM)" warned); now exit 2 naming has_more and the page size to ask for."""
    run = journaled(tmp_path)
    url = f"{api}/dify/{{session}}"
    with pytest.raises(TemplateMismatch, match=r"the history API answered page 1 of more \(has_more: true; it "
                                               r"answered limit: 3\): goldfish reads one response per session"):
        audit_run(run, StoreOptions(http_url=url))
    assert not (run / "audit" / "summary.json").exists()
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, *QUIET_ERRORS)
    assert code == 2 and "page 1 of more (has_more: true" in err and "?limit=1000" in err, (code, out, err)
    assert "lost" not in out

    # asked for the whole history in one reply (the advice): has_more false, read whole
    assert clean(audit_run(run, StoreOptions(http_url=f"{api}/dify/{{session}}?limit=1000")))


def test_a_page_of_more_named_by_a_cursor_is_exit_2(tmp_path, api, capsys):
    """A cursor (next_cursor) only the API knows where to put is not guessed at: exit 2 naming it."""
    run = journaled(tmp_path)
    url = f"{api}/cursor/{{session}}"
    with pytest.raises(TemplateMismatch, match=r"page 1 of more \(next_cursor: 'c2'\).*never a cursor"):
        audit_run(run, StoreOptions(http_url=url))
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, *QUIET_ERRORS)
    assert code == 2 and "next_cursor: 'c2'" in err, (code, out, err)


@pytest.mark.parametrize("style, field", [("drf", "messages"), ("relative", "data.messages"), ("link", "messages")])
def test_a_next_page_url_the_reply_gives_is_followed_and_the_history_read_whole(tmp_path, api, capsys, style, field):
    """An absolute next URL (Django REST framework), a relative one beside has_more in a pagination object, a
    Link: rel="next" header (the body a bare list): every page is read, the pages joined: a clean audit, exit 0."""
    run = journaled(tmp_path)
    url = f"{api}/{style}/{{session}}"
    summary = audit_run(run, StoreOptions(http_url=url, messages_field=field))
    assert clean(summary) and summary["store"]["reader"] == "http"
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, "--messages-field", field, *QUIET_ERRORS)
    assert code == 0, (code, out, err)


def test_a_next_page_on_another_server_or_in_a_circle_is_refused(tmp_path, api):
    """A next URL on another host is not followed (credentials would go there): exit 2 naming it; a next URL naming
    a page already read (the API's paging loops) stops the read rather than loop for ever."""
    run = journaled(tmp_path)
    with pytest.raises(TemplateMismatch, match=r"page 1 of more \(next: 'http://localhost:1/x\?page=2'\): its next "
                                               r"page is on another server"):
        audit_run(run, StoreOptions(http_url=f"{api}/elsewhere/{{session}}"))
    with pytest.raises(StoreError, match=r"a page already read: the API's paging goes round in a circle"):
        audit_run(run, StoreOptions(http_url=f"{api}/circle/{{session}}"))


def test_the_last_page_saying_has_more_false_is_the_whole_history(tmp_path, api):
    """has_more false with OpenAI's last_id beside it (there on every page) is a whole history, read as one."""
    run = journaled(tmp_path)
    assert clean(audit_run(run, StoreOptions(http_url=f"{api}/all/{{session}}")))


# ---- W9: a history API that wants credentials -----------------------------------------------------------------------

def test_a_history_api_that_refuses_without_credentials_is_exit_2_saying_how_to_authenticate(tmp_path, api, capsys):
    """The chat's Bearer token is needed by its history API too: was exit 3 "audit FAILED" (HTTP 401) advising
    --store-url from Locust, a bare "answered HTTP 401" from the CLI; now exit 2 naming the status, the scheme asked
    and the ways to authenticate the GET."""
    run = journaled(tmp_path)
    url = f"{api}/auth/{{session}}"
    with pytest.raises(TemplateMismatch, match=r"answered HTTP 401 Unauthorized, Bearer asked .*which carried no "
                                               r"credentials: --http-url sends no header of the chat's"):
        audit_run(run, StoreOptions(http_url=url))
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, *QUIET_ERRORS)
    assert code == 2 and "HTTP 401" in err and "Authenticate the GET" in err and "~/.netrc" in err, (code, out, err)

    with pytest.raises(TemplateMismatch, match=r"answered HTTP 403 Forbidden .*Authenticate the GET"):
        audit_run(run, StoreOptions(http_url=f"{api}/forbidden/{{session}}"))


def test_basic_credentials_in_the_url_are_sent(tmp_path, api):
    """The way that needs no new option: user:password in --http-url goes as Basic auth (requests does it); the
    API refusing them says the credentials sent were refused, not that none were sent."""
    run = journaled(tmp_path)
    url = f"{api}/auth/{{session}}".replace("http://", "http://me:pw@")
    with pytest.raises(TemplateMismatch, match=r"with the credentials it sent"):
        audit_run(run, StoreOptions(http_url=url))
    assert _Api.seen_auth[-1] == "Basic " + base64.b64encode(b"me:pw").decode()



def test_http_header_sends_the_chats_token_to_the_history_api(tmp_path, api, capsys):
    """--http-header 'Authorization: Bearer ...' (repeatable) goes with every GET: the history API behind the chat's
    own token is read; a wrong token is exit 2 saying the credentials sent were refused; the option without
    --http-url, or not 'Name: value', is refused naming it, its value masked."""
    run = journaled(tmp_path)
    url = f"{api}/auth/{{session}}"
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, "--http-header", "Authorization: Bearer s3cret",
                                 "--http-header", "X-Tenant: t1", *QUIET_ERRORS)
    assert code == 0 and set(_Api.seen_auth) == {"Bearer s3cret"}, (code, out, err)
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, "--http-header", "Authorization: Bearer no",
                                 *QUIET_ERRORS)
    assert code == 2 and "with the credentials it sent" in err, (code, out, err)
    code, out, err = oracle_main(capsys, "audit", run, "--http-header", "Authorization: Bearer s3cret")
    assert code == 2 and "--http-header: how to read the store, but none is read" in err, (code, out, err)
    code, out, err = oracle_main(capsys, "audit", run, "--http-url", url, "--http-header", "Bearer s3cret")
    assert code == 2 and "--http-header:" in err and "not 'Name: value'" in err and "s3cret" not in err, err
