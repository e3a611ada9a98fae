"""The chat API contract, from options: where the message and session id go, where the reply is.

Real bots differ in path (the session id may be part of it: ``/v1/sessions/{session}/messages``
or ``/chat?conversation={session}``), field names (dotted paths for nested JSON, ``input.text``;
a number indexes a list, ``messages.0.content``, and in a reply a negative one counts from its end,
``history.-1.content``), constant fields every request carries (a model name, LangServe's
``config``: ``--body``), whether the session id travels in the body, a header or the path, extra
headers (auth), and how the reply comes back: a JSON field (``data.answer.text``), the whole body
as text, or streamed as server-sent events, JSON lines or the Vercel AI SDK's data stream, whose
pieces are put together (``--reply-format``). Some bots issue the conversation id themselves
(Dify's ``conversation_id``, a session cookie): ``--session-from`` says where it comes back, and
from then on it travels where the session id would. A job API answers a turn with a job whose reply is
polled for (``--poll-path``); a chat page's bot talks over a WebSocket (``--websocket``:
locustfiles/socket_turns.py). All of it is data, so a team with an unusual bot writes a Locust config
file, not Python.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import quote, unquote, urlsplit
from xml.etree import ElementTree

from contracts import codec

SESSION = "{session}"  # where the session id goes in --chat-path
# goldfish's own id of the conversation (the journal's session): known from the first turn and constant, also with
# --session-from (a bot's user id that must stay one over the conversation, Dify's ``user``)
CONVERSATION = "{conversation}"
REPLY_FORMATS = ("json", "text", "sse", "ndjson", "xml", "ai-sdk")
BODY_FORMATS = ("json", "form")  # form: application/x-www-form-urlencoded, flat fields (a Flask request.form bot)
METHODS = ("POST", "PUT", "PATCH", "GET")  # GET: the fields go in the query string (a Flask request.args bot)
# a polled job's status (or state) while it still runs: its answer may hold the text so far (ChatContract.job_done)
RUNNING = ("queued", "in_queue", "pending", "waiting", "scheduled", "submitted", "starting", "started", "running",
           "processing", "in_progress", "in progress", "generating", "streaming", "thinking", "working")
SESSION_SOURCES = ("reply", "header", "cookie")  # --session-from reply:FIELD | header:NAME | cookie:NAME
MAX_BOT_SESSION = 4096  # characters of an id the bot issues (it goes into headers, bodies and store keys; a JWT)
POLL_FIELD = re.compile(r"\{(reply|header)\.([^{}]*)\}")  # --poll-path's {reply.FIELD}: a value of the turn's
# JSON answer; {header.NAME}: a header of its response (a 202's Location, RFC 9110 15.3.3)
URL_HEADERS = ("location", "content-location")  # a 201 Created names the new conversation by its URL
_LINE_BREAK = re.compile(r"\r\n|\r|\n")  # server-sent events' line ends (not str.splitlines': no \x0b, \u2028...)


class NoReply(ValueError):
    """The response has no reply text at the configured place (not JSON, or the field is missing)."""


class PathError(ValueError):
    """A dotted path that cannot be set in the request body (through a text value, a list index too far)."""


@dataclass(frozen=True)
class ChatContract:
    path: str = "/chat"
    message_field: str = "message"
    session_field: str = "session_id"
    session_header: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    reply_field: str = "reply"
    reply_format: str = "json"
    reply_where: str = ""  # PATH=VALUE: only a stream's pieces (the items at a * of reply_field) where it holds
    body: str = ""  # a JSON object: the constant fields of every request body
    session_from: str = ""  # where the bot issues the session id: reply:FIELD, header:NAME, cookie:NAME
    start_path: str = ""    # a request that starts each conversation, whose response issues the id
    start_body: str = ""    # its JSON object body (default {})
    body_format: str = "json"  # json | form
    method: str = "POST"
    poll_path: str = ""  # a job API: the turn is answered with a job, GET here until its reply is there
    websocket: bool = False  # turns go over a WebSocket (locustfiles/socket_turns.py)

    @classmethod
    def from_settings(cls, s) -> "ChatContract":
        return cls(path=s.chat_path, message_field=s.message_field,
                   session_field="" if s.session_header else s.session_field,
                   session_header=s.session_header, headers=tuple(s.headers.items()),
                   reply_field=s.reply_field, reply_format=s.reply_format, body=s.body,
                   reply_where=s.reply_where,
                   session_from=s.session_from, start_path=s.start_path, start_body=s.start_body,
                   body_format=s.body_format, method=s.chat_method, poll_path=s.poll_path,
                   websocket=s.websocket)

    @cached_property
    def session_source(self) -> tuple[str, str] | None:
        """(``reply`` | ``header`` | ``cookie``, field path or name) of ``--session-from``; None without it."""
        if not self.session_from:
            return None
        source, _, name = self.session_from.partition(":")
        return source, name

    @cached_property
    def _template(self) -> bytes | None:
        return codec.dumps(codec.loads(self.body)) if self.body else None

    @cached_property
    def _session_in_body(self) -> bool:
        """A ``{session}`` in a --body value: replaced by the turn's session id (a bot that takes a user id and a
        conversation id from two fields gets one per conversation, not one user for every virtual user)."""
        return bool(self._template) and SESSION.encode() in self._template

    @cached_property
    def _conversation_in_body(self) -> bool:
        return bool(self._template) and CONVERSATION.encode() in self._template

    @cached_property
    def _conversation_in_headers(self) -> bool:
        return any(CONVERSATION in value for value in dict(self.headers).values())

    @cached_property
    def _session_in_headers(self) -> bool:
        return any(SESSION in value for value in dict(self.headers).values())

    @cached_property
    def closes_connections(self) -> bool:
        """``--header 'Connection: close'``: each turn on a connection of its own (RFC 9112 9.6: a client that sent
        close does not send another request on that connection, whatever the response said)."""
        return any(name.strip().lower() == "connection" and "close" in value.lower() for name, value in self.headers)

    @cached_property
    def _simple(self) -> bool:
        return not (self.session_header or self.headers or self.body or not self.session_field or self.session_from
                    or "." in self.message_field + self.session_field or self.reply_format == "sse")

    def request(self, session: str | None, message: str, conversation: str | None = None) -> tuple[dict, dict | None]:
        """The JSON body and the headers (None when there are none) of one turn; ``session`` None: a turn
        sent before the bot issued the id (``--session-from``), which carries none. ``conversation``: goldfish's
        own id of it, for ``{conversation}`` (default ``session``: they differ only with --session-from)."""
        if self._simple:
            return {self.session_field: session, self.message_field: message}, None  # the hot, common case
        conversation = conversation or session
        template = self._template
        if session is not None and self._session_in_body:  # {"user_id": "{session}"}: the id in more places
            template = _filled(template, SESSION, session)
        if conversation is not None and self._conversation_in_body:
            template = _filled(template, CONVERSATION, conversation)
        body: dict = codec.loads(template) if template else {}  # a fresh copy per turn
        set_dotted(body, self.message_field, message)
        headers = dict(self.headers)
        if session is not None and self._session_in_headers:
            headers = {name: value.replace(SESSION, session) for name, value in headers.items()}
        if conversation is not None and self._conversation_in_headers:
            headers = {name: value.replace(CONVERSATION, conversation) for name, value in headers.items()}
        if self.reply_format == "sse" and not any(name.lower() == "accept" for name in headers):
            headers["Accept"] = "text/event-stream"
        if session is not None and self.session_header:  # None: the bot has not issued it yet (--session-from)
            headers[self.session_header] = session
        elif session is not None and self.session_field:
            set_dotted(body, self.session_field, session)
        return body, headers or None

    def issued_session(self, content: bytes, header=None, cookie=None, reply_format: str | None = None) -> str | None:
        """The session id a 2xx response issues (``--session-from``): in the reply (read as ``reply_format``,
        default the turns' --reply-format), or ``header(name)`` / ``cookie(name)`` (the caller's lookups of the
        response's headers and its cookie jar). None when it holds none that can be sent back: an id is text
        (or a whole number) of printable characters, at most MAX_BOT_SESSION long."""
        return next(filter(None, map(usable_session, self._issued(content, header, cookie, reply_format))), None)

    def no_session_issued(self, content: bytes, header=None, cookie=None, reply_format: str | None = None) -> str:
        """Why a 2xx response issued no usable id (``issued_session`` None): its error text."""
        longest = max((v for v in self._issued(content, header, cookie, reply_format) if isinstance(v, str)),
                      key=len, default="")
        if len(longest) > MAX_BOT_SESSION:
            return f"the session id issued is {len(longest)} characters long, more than {MAX_BOT_SESSION} " \
                   f"(--session-from {self.session_from})"
        return f"no session id issued (--session-from {self.session_from})"

    def _issued(self, content: bytes, header, cookie, reply_format: str | None) -> list:
        """The values where --session-from says the id is, as they come (the first usable one is the id)."""
        reply_format = reply_format or self.reply_format
        source, name = self.session_source or ("", "")
        if source in ("header", "cookie"):
            lookup = header if source == "header" else cookie
            value = lookup(name) if lookup is not None else None
            if source == "header" and name.lower() in URL_HEADERS and isinstance(value, str):
                value = last_segment(value)
            return [value]
        if source == "reply":  # the first piece of a stream that names it (Dify's events all do)
            try:
                pieces = [json_reply(content)] if reply_format == "json" else \
                    sse_data(content) if reply_format == "sse" else \
                    [part for _, part in ai_sdk_parts(content)] if reply_format == "ai-sdk" else \
                    ndjson_lines(content)
            except (codec.DecodeError, NoReply):
                return []
            return [_at(piece, name.split(".")) for piece in pieces]
        return []

    def poll_target(self, content: bytes, session: str, header: Callable[[str], str | None] = lambda name: None
                    ) -> str | None:
        """The path a turn's job is polled at (``--poll-path``): ``{session}``, each ``{reply.FIELD}`` (a dotted
        path in the JSON the turn was answered with: the job's id) and each ``{header.NAME}`` (a header of that
        response, ``header``) filled in, percent-encoded; or, when the option is one placeholder alone, that value
        as it is: a path or an http(s) URL the answer links the job to (``{"links": {"self": "/v1/jobs/7"}}``, a
        202's ``Location``). None when the answer names no such value."""
        try:
            answer = json_reply(content) if "{reply." in self.poll_path else None
        except codec.DecodeError:
            return None

        def value(source: str, field: str):
            return header(field) if source == "header" else _at(answer, field.split("."))

        whole = POLL_FIELD.fullmatch(self.poll_path)
        if whole:  # the job's own path or URL, as the answer gives it: used as it is
            link = value(*whole.groups())
            if isinstance(link, str):
                link = link.strip()
            return link if isinstance(link, str) and (link.startswith("/") and not link.startswith("//") or
                                                      link.startswith(("http://", "https://"))) \
                and link.isprintable() and not any(c.isspace() for c in link) else None
        values = {}
        for source, field in POLL_FIELD.findall(self.poll_path):
            found = usable_session(value(source, field))
            if found is None:
                return None
            values[source, field] = quote(found, safe="")
        return POLL_FIELD.sub(lambda m: values[m[1], m[2]], self.poll_path.replace(SESSION, quote(session, safe="")))

    def start_request(self, conversation: str = "") -> dict:
        """The body of the request that starts a conversation (``--start-path``): a fresh copy each time, its
        ``{conversation}`` goldfish's id of it (a ``{session}`` is refused: options.check_placeholders)."""
        return codec.loads(_filled(self.start_body.encode(), CONVERSATION, conversation)) if self.start_body else {}

    def start_headers(self, conversation: str) -> dict:
        """The --header headers of the request that starts a conversation (an API key): those that carry the
        session id (``Authorization: Bearer {session}``) wait for the id that request issues."""
        return {name: value.replace(CONVERSATION, conversation) for name, value in self.headers if SESSION not in value}

    @cached_property
    def reply_path(self) -> tuple[str, ...]:
        return tuple(self.reply_field.split(".")) if self.reply_field else ()

    def reply(self, content: bytes) -> str:
        """The reply text of a 2xx response body; NoReply when it holds none where the contract says."""
        if self.reply_format == "text":  # the whole body: a line end or blank lines around it are no part of it
            text = content.decode("utf-8", "replace").strip()
        elif self.reply_format == "json":
            try:
                payload = json_reply(content)
            except codec.DecodeError:
                hint = " (it looks like an event stream: --reply-format sse)" \
                    if content.lstrip().startswith((b"data:", b"event:", b":")) else ""
                raise NoReply("reply is not JSON" + hint) from None
            if self.where is not None and "*" not in self.reply_path and not self.kept(payload):
                # one answer of several (a job's while it runs, a WebSocket's token frames): not yet the reply
                raise NoReply(f"the answer is not one --reply-where {self.reply_where!r} keeps")
            text = self.field_of(payload)
        elif self.reply_format == "xml":
            text = xml_text(content, self.reply_path, self.reply_field)
        elif self.reply_format == "ai-sdk":
            text = ai_sdk_text(content)
        else:
            events: list[str] = []
            pieces = sse_data(content, events) if self.reply_format == "sse" else ndjson_lines(content)
            text = self._joined(pieces, events)
        if not text.isascii():  # a JSON "\ud800" escape decodes to a lone surrogate, which no UTF-8 file can hold
            text = text.encode("utf-8", "replace").decode("utf-8")
        return text

    def has_reply(self, content: bytes) -> bool:
        """Whether a 2xx body holds a reply where the contract says (a polled job's: not yet, while it runs)."""
        try:
            self.reply(content)
        except NoReply:
            return False
        return True

    def job_done(self, content: bytes) -> bool:
        """Whether a polled job's answer that holds a reply is its last: not while its ``status`` (or ``state``)
        says it still runs (Replicate's ``processing`` answers the text so far; OpenAI's ``in_progress``, Celery's
        ``STARTED``). --reply-where, when given, says when it is done instead (``reply``)."""
        if self.where is not None or self.reply_format != "json":
            return True
        try:
            payload = json_reply(content)
        except codec.DecodeError:
            return True
        status = next((payload.get(name) for name in ("status", "state") if isinstance(payload, dict)
                       and isinstance(payload.get(name), str)), "")
        return status.lower() not in RUNNING

    @cached_property
    def joins_messages(self) -> bool:
        """The reply may hold more than the bot's answer (every item of a list, a whole body): a bot that sends
        back the whole conversation then answers each probe with the user's own plant in it."""
        return "*" in self.reply_path or self.reply_format == "text"

    @cached_property
    def where(self) -> tuple[tuple[str, ...], str, bool] | None:
        """(path, value, equal) of --reply-where (PATH=VALUE, or PATH!=VALUE: equal False), None without it."""
        if not self.reply_where:
            return None
        path, _, value = self.reply_where.partition("=")
        return tuple(path.removesuffix("!").split(".")), value, not path.endswith("!")

    def kept(self, piece, event: str = "") -> bool:
        """Whether a stream's piece (or an item at a ``*``) is kept by --reply-where: the value at its path is
        the text given, or a JSON value written so (``final=true``); with ``!=``, it is not, or is not there
        (Gemini's thought parts carry ``thought: true``, its answer's none: ``thought!=true``). ``event``: a
        server-sent event's name, which ``event`` is when its data has no such field (``event=token`` kept no piece
        of a stream that names its events so: bot hunt 16)."""
        if self.where is None:
            return True
        path, wanted, equal = self.where
        value = _at(piece, path)
        if value is _MISSING and event and path == ("event",):
            value = event
        same = value is not _MISSING and (value == wanted if isinstance(value, str) else
                                          codec.dumps(value).decode() == wanted)
        return same == equal

    def field_of(self, payload, pick_items: bool = True) -> str:
        """The text at --reply-field in a decoded JSON value. A ``*`` part takes every item of a list: a bot
        that answers in several messages (Rasa's ``*.text``) answers their texts, one per line; with
        --reply-where, only the items (at the last ``*``) it keeps (``pick_items``: not in a stream, whose pieces
        it picks instead)."""
        if "*" in self.reply_path:
            star = len(self.reply_path) - self.reply_path[::-1].index("*")
            items = [item for item in _every(payload, self.reply_path[:star]) if not pick_items or self.kept(item)]
            texts = [v for item in items for v in _every(item, self.reply_path[star:]) if isinstance(v, str)]
            if not texts:
                raise NoReply(f"no text at reply field {self.reply_field!r}"
                              + (f" in the items --reply-where {self.reply_where!r} keeps"
                                 if pick_items and self.where else ""))
            return "\n".join(texts)
        value = _at(payload, self.reply_path)
        if value is _MISSING:
            raise NoReply(f"no reply field {self.reply_field!r}{_what_came(payload)}")
        if not isinstance(value, str):
            raise NoReply(f"reply field {self.reply_field!r} is not text" if self.reply_path else
                          f"the reply is a JSON {type(value).__name__}, not text: set --reply-field")
        return value

    def _joined(self, pieces, events: list[str] = ()) -> str:
        """A streamed reply: the text of each piece, in order. A piece that is a JSON string is text
        itself; a JSON object or list gives the text at --reply-field, and is skipped when it has none
        there (a role-only delta, a metadata event, a final chunk with ``content: null``). With --reply-where,
        only the JSON pieces it keeps: LangServe's /stream_events sends each token once per level of the
        chain (``event=on_chat_model_stream`` keeps the model's)."""
        texts, seen = [], 0
        for piece, event in zip(pieces, events or [""] * len(pieces)):
            seen += 1
            if not self.kept(piece, event):
                continue
            if isinstance(piece, str):
                texts.append(piece)
            elif isinstance(piece, (dict, list)):
                try:
                    texts.append(self.field_of(piece, pick_items=False))
                except NoReply:
                    continue
        if not texts:
            kept = f" that --reply-where {self.reply_where!r} keeps" if self.where else ""
            raise NoReply(f"no piece{kept} of the stream's {seen} has reply field {self.reply_field!r}" if seen
                          else "the stream holds no data")
        if cumulative(texts):
            return texts[-1]
        if len(texts) > 2 and texts[-1] == "".join(texts[:-1]):  # the deltas, then a final event with the whole text
            return texts[-1]
        return "".join(texts)


def cumulative(texts: list[str]) -> bool:
    """A stream whose every piece is the whole text so far (Gradio's, a chat page's that redraws the bubble): each
    one starting with the one before, and the text growing. Its reply is the last piece; joined, it was the answer
    many times over, and a correct bot's stored reply read as unanswered for every reply that came in pieces. A
    redraw of the same text (Gradio repeats the whole text at the end) keeps it cumulative; pieces that are all the
    same ("ha", "ha") are deltas, joined."""
    return len(texts) >= 2 and len(texts[-1]) > len(texts[0]) and all(map(str.startswith, texts[1:], texts))


EXPRESS_SIGNED = re.compile(r"s:([^.]+)\.[A-Za-z0-9+/]{43}")  # express-session: s:<id>.<HMAC-SHA256, unpadded base64>


def cookie_id(value: str) -> str:
    """The bot's id in its session cookie's value: without the double quotes RFC 6265 allows around it (Starlette
    quotes a value with ``=`` or ``/``: ``sid="r/B1+ZLQ=="``); an express-session cookie, ``s%3A<id>.<signature>``,
    is its id, as connect-redis keeps the session at ``sess:<id>`` (the whole signed value named no key, and only
    --reader could read such a store: bot hunt 14)."""
    if len(value) > 1 and value[0] == value[-1] == '"':
        value = value[1:-1]
    signed = EXPRESS_SIGNED.fullmatch(unquote(value)) if value.startswith(("s:", "s%3A")) else None
    return signed[1] if signed else value


def sse_data(content: bytes, events: list | None = None) -> list:
    """The data of each server-sent event (WHATWG's framing: ``data:`` lines joined by newlines, an
    event ends at a blank line, ``:`` starts a comment), decoded: JSON where it is JSON, else its text;
    OpenAI's ``[DONE]``, a JSON ``null`` (LangGraph's ``end`` event: it was joined to the reply as the text "null",
    and a correct bot FAILed every turn unanswered, bot hunt 14) and empty events are left out. An ``error`` event
    is NoReply. ``events``: filled with each kept event's name ("" for none), in step with the data."""
    out, event, data = [], "", []
    for line in _LINE_BREAK.split(content.decode("utf-8", "replace")) + [""]:
        if not line:
            if data:
                text = "\n".join(data)
                if event == "error":
                    raise NoReply(f"the stream sent an error event: {text[:200]!r}")
                if text.strip() not in ("[DONE]", "null"):  # OpenAI's end; LangGraph's `event: end` holds null
                    out.append(_json_or_text(text))
                    if events is not None:
                        events.append(event)
            event, data = "", []
            continue
        name, _, value = line.partition(":")
        value = value[1:] if value.startswith(" ") else value
        if name == "data":
            data.append(value)
        elif name == "event":
            event = value
    return out


def ai_sdk_parts(content: bytes) -> list[tuple[bytes, object]]:
    """(type, decoded JSON value) of each line of a Vercel AI SDK data stream (``x-vercel-ai-data-stream: v1``):
    ``TYPE:JSON``, ``0:"piece"`` a piece of text, ``3:"message"`` an error (NoReply), ``e:``/``d:`` the finish.
    A line of another shape is NoReply."""
    out = []
    for number, line in enumerate(content.splitlines(), 1):
        if line.strip():
            kind, _, value = line.partition(b":")
            try:
                decoded = codec.loads(value) if len(kind) == 1 and kind.isalnum() else _MISSING
            except codec.DecodeError:
                decoded = _MISSING
            if decoded is _MISSING:
                raise NoReply(f"line {number} of the stream is not an AI SDK data-stream part (TYPE:JSON)")
            if kind == b"3":
                raise NoReply(f"the stream sent an error part: {str(decoded)[:200]!r}")
            out.append((kind, decoded))
    return out


def ai_sdk_text(content: bytes) -> str:
    """The reply in an AI SDK data stream: its text parts (``0:"piece"``) joined with nothing between them."""
    texts = [value for kind, value in ai_sdk_parts(content) if kind == b"0" and isinstance(value, str)]
    if not texts:
        raise NoReply('no text part (0:"...") in the AI SDK data stream')
    return "".join(texts)


def ndjson_lines(content: bytes) -> list:
    """Each line of a JSON Lines stream (Ollama's), decoded; a line that is not JSON is NoReply. A body that is one
    JSON array is a stream of its items (Gemini's streamGenerateContent without alt=sse: an array of chunks, written
    as they come): joined by the items at a ``*`` of --reply-field, one per line, it split the answer's words."""
    if content.lstrip()[:1] == b"[":
        try:
            whole = codec.loads(content)
        except codec.DecodeError:
            whole = None
        if isinstance(whole, list):
            return whole
    out = []
    for number, line in enumerate(content.splitlines(), 1):
        if line.strip():
            try:
                out.append(codec.loads(line))
            except codec.DecodeError:
                raise NoReply(f"line {number} of the stream is not JSON") from None
    return out


_MISSING = object()


def _what_came(payload) -> str:
    """What a response without the reply field held instead, for its failure's reason: the fields of an object, or
    a JSON string holding JSON (a body encoded twice: every turn a 200, none acknowledged)."""
    if isinstance(payload, dict):
        return f" (the response's fields: {', '.join(codec.short(k) for k in list(payload)[:8])}{', ...' if len(payload) > 8 else ''})" \
            if payload else " (the response is an empty JSON object)"
    if isinstance(payload, str):
        try:
            codec.loads(payload)
        except codec.DecodeError:
            return " (the response is a JSON string)"
        return " (the response is a JSON string that holds JSON: the body was encoded twice)"
    return f" (the response is a JSON {type(payload).__name__})"


def _at(value, path):
    """The value at a dotted path (its parts) of a decoded JSON value, _MISSING when it is not there."""
    for part in path:
        if isinstance(value, dict) and part in value:
            value = value[part]
        elif isinstance(value, list) and (index := _item(part, len(value))) is not None:
            value = value[index]
        else:
            return _MISSING
    return value


def _every(value, path) -> list:
    """Every value at a dotted path whose ``*`` parts take each item of a list."""
    values = [value]
    for part in path:
        if part == "*":
            values = [item for v in values if isinstance(v, list) for item in v]
        else:
            values = [v for v in (_at(v, (part,)) for v in values) if v is not _MISSING]
    return values


XSSI_GUARDS = (b")]}'", b"while(1);", b"for(;;);")  # what Google's and Angular's JSON APIs put before the JSON


def json_reply(content: bytes):
    """A JSON reply, decoded; without the anti-XSSI guard some APIs put first (``)]}'`` and a line end), which
    made a correct bot's every reply "not JSON"."""
    start = content.lstrip()
    guard = next((g for g in XSSI_GUARDS if start.startswith(g)), None)
    if guard is not None:
        content = start[len(guard):].lstrip(b",")
    return codec.loads(content)


def last_segment(url: str) -> str:
    """The last path segment of a URL or path, percent-decoded: the id in ``Location: /v1/sessions/abc``
    (the id then goes into --chat-path's ``{session}``, not the whole URL)."""
    return unquote(urlsplit(url.strip()).path.rstrip("/").rpartition("/")[2])


def _filled(template: bytes, placeholder: str, value: str) -> bytes:
    """A JSON template with ``placeholder`` in its strings replaced by ``value``, escaped as JSON text."""
    return template.replace(placeholder.encode(), codec.dumps(value)[1:-1])


def usable_session(value) -> str | None:
    """An issued session id as it can be sent back (in a header, a body, a store key), or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value or len(value) > MAX_BOT_SESSION or not value.isprintable():
        return None
    return value


def xml_text(content: bytes, path: tuple, field: str) -> str:
    """The reply in an XML document (Twilio's TwiML, ``<Response><Message>text</Message></Response>``): the
    text of the elements at the dotted path of tag names below the root (``*`` any tag; namespaces ignored),
    each stripped, one per line. NoReply when it is not XML or no element is there."""
    try:
        nodes = [ElementTree.fromstring(content)]
        for part in path:
            nodes = [child for node in nodes for child in node if part == "*" or child.tag.rpartition("}")[2] == part]
        texts = ["".join(node.itertext()).strip() for node in nodes]
    except (ElementTree.ParseError, RecursionError):
        raise NoReply("reply is not XML") from None
    if not texts:
        raise NoReply(f"no reply element {field!r}")
    return "\n".join(texts)


def _json_or_text(text: str):
    try:
        value = codec.loads(text)
    except codec.DecodeError:
        return text
    return value if isinstance(value, (str, dict, list)) else text


def _index(part: str) -> int | None:
    return int(part) if part.isascii() and part.isdigit() else None


def _item(part: str, length: int) -> int | None:
    """The index a path part names in a list of ``length`` items when reading: ``0`` the first, ``-1`` the last
    (a bot that answers the whole conversation: ``history.-1.content``); None when it names none."""
    digits = part[1:] if part[:1] == "-" else part
    if not (digits.isascii() and digits.isdigit()):
        return None
    index = int(part)
    return index if -length <= index < length else None


def set_dotted(target: dict, path: str, value) -> None:
    """``set_dotted(d, "a.b", v)`` -> ``d["a"]["b"] = v``. A number indexes a list (``messages.0.content``):
    an item that is there, or the next one, appended; a container that is not there yet is made an
    object, or a list when the part after it is a number. PathError when the path runs through a value
    that is neither (a text of the --body template) or past a list's end."""
    parts = path.split(".")
    for part, after in zip(parts, parts[1:]):
        key = _slot(target, part, path)
        missing = key == len(target) if isinstance(target, list) else key not in target
        if missing:
            _put(target, key, [] if _index(after) is not None else {})
        target = target[key]
    _put(target, _slot(target, parts[-1], path), value)


def _slot(container, part: str, path: str):
    if isinstance(container, dict):
        return part
    if isinstance(container, list):
        index = _index(part)
        if index is None or index > len(container):
            raise PathError(f"{path!r}: {part!r} is not an index of a list of {len(container)} item(s)")
        return index
    raise PathError(f"{path!r}: {part!r} is inside a {type(container).__name__} value, not an object or a list")


def _put(container, key, value) -> None:
    if isinstance(container, list) and key == len(container):
        container.append(value)
    else:
        container[key] = value


def check_fields(message: str, session: str, reply: str) -> None:
    """The dotted paths of the options must name distinct places: ValueError naming the options otherwise.

    Why: ``--message-field x --session-field x`` silently drops the session id (every probe then
    looks forgotten), and ``a`` with ``a.b`` cannot both be set (a turn would fail on every send)."""
    paths = {"--message-field": message, "--session-field": session, "--reply-field": reply}
    for option, path in paths.items():
        if path and any(not part for part in str(path).split(".")):
            raise ValueError(f"{option}: {path!r} has an empty part (write a.b, not a..b, .a or a.)")
        if option != "--reply-field" and "*" in str(path).split("."):
            raise ValueError(f"{option}: {path!r}: '*' (every item of a list) is for --reply-field only")
    if not (message and session):
        return
    a, b = str(message).split("."), str(session).split(".")
    if a[:len(b)] == b or b[:len(a)] == a:
        what = "are the same field" if a == b else "overlap (one lies inside the other)"
        raise ValueError(f"--message-field {message!r} and --session-field {session!r} {what}: "
                         "the message and the session id need two places in the request body")
