"""goldfish's Locust options: declared once here, settable on the command line, in a Locust
config file (``chat-path = /v1/chat``) or the web UI, and parsed into one typed ``Settings``.

Values that the web UI may edit are kept as strings (the UI keeps an option's type, and
``None`` defaults come back as strings anyway) and parsed by ``Settings.from_options``, so a
bad value gives one clear message naming the option.
"""
from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING
from pathlib import Path

import msgspec

from chaos.backends import REGISTRY as CHAOS_BACKENDS
from contracts import codec, durations, redact
from contracts.console import control_character, printable  # a link's target, shown escaped
from contracts.runfolder import RunFolder
from locustfiles.contract import (BODY_FORMATS, CONVERSATION, METHODS, POLL_FIELD, REPLY_FORMATS, SESSION,
                                  SESSION_SOURCES, PathError, check_fields, set_dotted)
from oracle import (AuditOptionError, NotEmpty, StoreOptions, add_gate_options, add_store_options, audit_option_names,
                    gates, store_options)

if TYPE_CHECKING:
    from oracle import Gates

DEFAULT_SCRIPT = str(Path(__file__).parent / "scripts" / "support.yaml")
DEFAULT_SESSION_FIELD = "session_id"
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


class OptionError(ValueError):
    """An option value that cannot work; the message names the option."""


def check_line(value: str, option: str) -> str:
    """One line of printable text, for an option that is printed back: ``--label`` (by ``oracle compare`` and
    ``trend``, and it names the run folder) and ``--run-dir`` (by Locust's end-of-run lines, ``oracle audit`` and
    every message naming a run file): ``contracts.console.control_character``."""
    why = control_character(value)
    if why is not None:
        raise OptionError(f"{option}: {redact.text(value)[:80]!r} {why}")
    return value


def check_run_dir(run_dir: str) -> str:
    """A --run-dir inside another run's folder (its store/, journal/, audit/...) is refused: a live re-audit of that
    run replaces its store/ (this run deleted), its journal/ reads this run's files as its shards. A dangling link is
    named as one ("File exists" said nothing is there, and the users then sat idle)."""
    if not run_dir:
        return run_dir
    if os.path.islink(run_dir) and not os.path.exists(run_dir):
        raise OptionError(f"--run-dir {run_dir} is a symbolic link to {printable(os.readlink(run_dir))}, which does not exist: "
                          "make that folder, or name another --run-dir")
    if (outer := RunFolder(run_dir).enclosing_run()) is not None:
        raise OptionError(f"--run-dir {run_dir} lies inside the run folder {printable(outer)} (it holds run.json, journal/ or an "
                          "audit): a later audit of that run would delete or misread this one; name a folder outside it")
    return run_dir


# what run.json records of the options (Settings.public(), the target): each must be UTF-8 text
RECORDED = ("run_dir", "label", "script", "think", "chaos", "chaos_backend", "stack_state", "settle", "audit_every",
            "telemetry_interval", "chat_path", "message_field", "session_field", "session_header", "session_from",
            "start_path", "start_body", "body", "chat_method", "body_format", "reply_format", "reply_field",
            "reply_where", "poll_path", "websocket", "replica_header", "header", "step_duration", "host") + audit_option_names()


def env_var(names) -> str:
    """The environment variable of an option, as Locust names its own (``--store-url``: ``LOCUST_STORE_URL``):
    a container or CI job configured through LOCUST_* variables had goldfish's ignored, so ``LOCUST_CHAOS`` armed
    no plan and the run PASSed a chaos test without chaos."""
    flag = next(n for n in names if n.startswith("--"))
    return "LOCUST_" + flag[2:].upper().replace("-", "_")


# --help groups, in the order they are listed (goldfish's options come after Locust's own)
GROUPS = {
    "run": ("goldfish: the run", "what each test runs and where its run folder goes"),
    "contract": ("goldfish: the chat API contract", "how a turn is sent and where the reply is (no Python needed)"),
    "store": ("goldfish: store and audit", "the store read back and audited when each test stops"),
    "chaos": ("goldfish: chaos", "faults armed at each test start and healed at each test stop"),
    "gates": ("goldfish: gates", "the verdict's rules (docs/oracle.md \"The verdict\")"),
    "shape": ("goldfish: load shape", "the opt-in step-load shape (fixed when Locust starts)"),
}


def add_arguments(parser) -> None:
    """Register every goldfish option on Locust's parser (called from init_command_line_parser), in argument
    groups for --help. Locust's web-UI flags (include_in_web_ui, is_secret) are attributes of the argparse
    Action, which LocustArgumentParser.add_argument sets and ui_extra_args_dict reads from ``parser._actions``;
    a group's add_argument is argparse's own, so ``add`` sets them on the action it returns.

    The web UI form lists the options in the order they are added here (webui.py keeps Flask from sorting
    them): what to run, the chaos plan, the gates, the store, the contract. Options fixed for the process
    (run folder, headers, the step shape) and the --max-* shorthands of --gate stay out of the form."""
    groups = {key: parser.add_argument_group(title, description) for key, (title, description) in GROUPS.items()}

    def add(group: str, *names, ui: bool = True, secret: bool = False, **kw):
        kw.setdefault("env_var", env_var(names))
        action = groups[group].add_argument(*names, **kw)
        action.include_in_web_ui, action.is_secret, action.is_required, action.is_multiple = ui, secret, False, False
        return action

    def adder(group: str):
        """``add`` for the oracle's shared option lists (their Locust flags spelt as Locust spells them)."""
        return lambda *names, include_in_web_ui=True, is_secret=False, **kw: add(
            group, *names, ui=include_in_web_ui, secret=is_secret, **kw)

    # NotEmpty: an empty value (an unset variable) is refused, naming the option, where it was the default
    add("run", "--label", default="dev", action=NotEmpty, left_out="the label dev",
        help="release label recorded in run.json, e.g. v1.4.2 (one line of printable text)")
    add("run", "--script", default="", action=NotEmpty, left_out="the default script",
        help="conversation script YAML (default locustfiles/scripts/support.yaml)")
    add("run", "--think", default="0", action=NotEmpty, left_out="no think time",
        help="seconds between turns: 0.5 or a range 0.2-1.0")
    add("chaos", "--chaos", default="", action=NotEmpty, left_out="no chaos plan is armed",
        help="chaos plan YAML, armed from its beginning at each test start")
    add("chaos", "--chaos-backend", default="local", action=NotEmpty, left_out="the local backend",
        help="chaos backend: local, docker, kubernetes")
    add("chaos", "--stack-state", default=".stack/state.json", action=NotEmpty, left_out=".stack/state.json",
        help="stack state file of the local backend, or a targets file (.yaml) naming your own processes")
    # the verdict's gates, the same as `python -m oracle audit`'s (oracle/options.py). The errors gate judges
    # failed requests (allowed only while a chaos fault is in force), so goldfish sets Locust's
    # --exit-code-on-error default to 0: give it to fail on any failed request as plain Locust does
    add_gate_options(adder("gates"), locust=True)
    # store and audit: the same options as `python -m oracle audit` (defined once, in oracle/options.py)
    add_store_options(adder("store"), locust=True)
    add("store", "--settle", default="2s", help="wait after healing before the audit reads the store")
    add("store", "--no-audit", action="store_true", default=False, help="skip the audit even with --store-url")
    add("store", "--audit-every", default="0",
        help="rolling audit: every this long during the run, judge the conversations that completed more than "
             "--settle ago (a Redis store only; the final audit then re-checks them cheaply). 0: off")
    add("store", "--telemetry-interval", default="5s",
        help="sample the store's INFO and the Locust processes' RSS this often into telemetry.jsonl (0: off)")
    add("contract", "--chat-path", default="/chat",
        help="path of the chat endpoint; {session} in it is replaced by the session id (/v1/chats/{session}, "
             "/chat?id={session})")
    add("contract", "--message-field", default="message",
        help="dotted JSON path of the user message in the request (a number indexes a list: messages.0.content)")
    add("contract", "--session-field", default=DEFAULT_SESSION_FIELD,
        help="dotted JSON path of the session id in the request body (empty: not in the body)")
    # an empty --session-header or --replica-header means nothing the option left out does not (an unset variable)
    add("contract", "--session-header", default="", action=NotEmpty,
        left_out="the session id goes where --session-field says",
        help="send the session id in this header instead of the body")
    add("contract", "--session-from", default="",
        help="the bot issues the session id: reply:FIELD (dotted path in the reply), header:NAME or cookie:NAME of "
             "its response (header:Location: the URL's last path segment). A conversation's first turn is sent "
             "without one; from the first id issued on, it goes where the session id goes (--session-field, "
             "--session-header; a cookie goes back as a cookie)")
    add("contract", "--start-path", default="",
        help="a request that starts each conversation (POST, JSON body --start-body), whose response issues the "
             "session id (--session-from says where; read as JSON): /v1/threads, /sessions. Then {session} may "
             "be in --chat-path")
    add("contract", "--poll-path", default="",
        help="a job API: each turn is answered with a job (202 and its id), and its reply is polled for here (GET, "
             "every 0.2 s, until --reply-field is in the answer or --timeout passes): /jobs/{reply.job_id}, "
             "{reply.FIELD} a value of the turn's JSON answer, {header.NAME} a header of its response, {session} "
             "the session id; {header.Location} alone: the job's path or URL as a 202's Location gives it")
    add("contract", "--websocket", action="store_true", default=False,
        help="turns go over a WebSocket (ws:// or wss:// to --host's --chat-path), one per conversation: each turn "
             "a text frame of the JSON body, its reply the first frame holding --reply-field (json, or a whole "
             "frame: text)")
    add("contract", "--start-body", default="", action=NotEmpty, left_out="{}",
        help="the JSON object --start-path is sent (default {})")
    add("contract", "--body", default="", action=NotEmpty, left_out="no constant fields",
        help="a JSON object every request body starts from (constant fields: a model, LangServe's config); the "
             "message and session id are set into it")
    add("contract", "--chat-method", default="POST", action=NotEmpty, left_out="POST",
        help="the turn's HTTP method: POST, PUT, PATCH, or GET (the fields then go in the query string, "
             "/get?msg=...: a Flask request.args bot)")
    add("contract", "--body-format", default="json", action=NotEmpty, left_out="json",
        help="how the request body is sent: json, or form (application/x-www-form-urlencoded: flat fields, a "
             "Flask request.form or Twilio-webhook bot)")
    add("contract", "--reply-format", default="json", action=NotEmpty, left_out="json",
        help="how the reply comes back: json (at --reply-field), text (the whole body), sse (server-sent events) "
             "or ndjson (JSON lines): a stream's pieces are put together; xml (TwiML), ai-sdk (the Vercel AI SDK "
             "data stream: its 0: text parts)")
    add("contract", "--reply-field", default="reply",
        help="dotted JSON path of the reply text in the response (in each event or line of a stream; a negative "
             "index counts from a list's end: history.-1.content); empty: the JSON value itself is the text")
    add("contract", "--reply-where", default="",
        help="PATH=VALUE: of a stream's pieces (or of the items at a * of --reply-field), only those whose value at "
             "the dotted PATH is VALUE: LangServe's /stream_events sends each token once per level of the chain, "
             "event=on_chat_model_stream keeps the model's; type=response.output_text.delta (OpenAI's Responses); "
             "PATH!=VALUE: those whose value is not VALUE or is absent (Gemini's parts: thought!=true)")
    add("contract", "--replica-header", default="", action=NotEmpty, left_out="no replica is journaled",
        help="response header naming the replica that answered (e.g. X-Refbot-Replica): journaled per turn, "
             "and failed probes are broken down by it")
    add("contract", "--timeout", type=float, default=30.0, help="seconds before a turn is given up (journaled info)")
    add("contract", "--header", action="append", default=[], ui=False,
        help="extra request header 'Name: value' (repeatable; a list in a config file)")
    add("run", "--run-dir", default="", ui=False, action=NotEmpty, left_out="results/<UTC time>-<label>",
        help="the first test's run folder (default results/<UTC time>-<label>); later tests in the same "
             "process get <run-dir>-2, -3, ...")
    add("shape", "--step-users", type=int, default=0, ui=False, help="users added per load step (enables the step shape)")
    add("shape", "--steps", type=int, default=0, ui=False, help="number of load steps")
    add("shape", "--step-duration", default="30s", ui=False, help="duration of each load step")
    # failed requests are judged by the errors gate (faults excuse them); an explicit value still applies
    parser.set_defaults(exit_code_on_error=0)
    # a master sends every option (the store's password, header values) to any worker that connects: loopback
    # unless told otherwise (docs/locust.md "Master and workers")
    parser.set_defaults(master_bind_host="127.0.0.1")


def parse_duration(text, name: str, limit: float = durations.DEFAULT_LIMIT) -> float:
    """``2``, ``2s``, ``500ms``, ``1m30s`` -> seconds (the one grammar: contracts.durations)."""
    try:
        return durations.parse_duration(text, f"--{name}", limit)
    except durations.DurationError as exc:
        raise OptionError(str(exc)) from None


def check_request(get) -> None:
    """What every turn sends must be sendable: field paths that do not collide, a clean path and headers, a
    body template the paths can be set in, a reply format there is."""
    session_field = "" if get("session_header") else str(get("session_field") or "")
    try:
        check_fields(message=get("message_field"), session=session_field, reply=get("reply_field"))
    except ValueError as exc:
        raise OptionError(str(exc)) from None
    path = str(get("chat_path", "/chat"))
    if path.startswith("//"):  # a client reads //x as a host (a protocol-relative URL): every turn failed
        raise OptionError(f"--chat-path: {path!r} starts with '//', which names a host, not a path: give one '/'")
    if any(c.isspace() or not c.isprintable() for c in path):
        raise OptionError(f"--chat-path: {path!r} must not hold spaces or control characters (percent-encode them)")
    if "{" in path.replace(SESSION, "") or "}" in path.replace(SESSION, ""):
        raise OptionError(f"--chat-path: {path!r}: the only placeholder is {SESSION} (percent-encode other braces)")
    if get("session_header") and not _TOKEN.match(str(get("session_header"))):
        raise OptionError(f"--session-header: {get('session_header')!r} is not a header name (letters, digits and -)")
    if get("session_header") and str(get("session_field") or "") not in ("", DEFAULT_SESSION_FIELD):
        raise OptionError(f"--session-field {get('session_field')!r} and --session-header {get('session_header')!r}: "
                          "the session id goes in one place (with --session-header it is not in the body): give one")
    reply_format = _one_of(str(get("reply_format") or "json"), REPLY_FORMATS, "--reply-format")
    check_session_from(str(get("session_from") or "").strip(), path, reply_format, str(get("start_path") or "").strip(),
                       str(get("start_body") or ""))
    check_placeholders(get)
    check_reply_where(str(get("reply_where") or ""), reply_format, str(get("reply_field") or ""),
                      bool(get("poll_path") or get("websocket")))
    check_poll_path(str(get("poll_path") or "").strip())
    if get("websocket"):
        check_websocket(get, reply_format)
    body = str(get("body") or "")
    template = json_object(body, "--body")
    for option, path in (("--message-field", str(get("message_field"))), ("--session-field", session_field)):
        try:
            if path:
                set_dotted(template, path, "")  # as a turn sets it (the session id into what the message made)
        except PathError as exc:
            raise OptionError(f"{option}: {exc}" + (" (in --body)" if body else "")) from None
    body_format = _one_of(str(get("body_format") or "json"), BODY_FORMATS, "--body-format")
    method = _one_of(str(get("chat_method") or "POST").upper(), METHODS, "--chat-method")
    nested = next((k for k, v in template.items() if isinstance(v, (dict, list))), None)
    flat = "--chat-method GET: a query's" if method == "GET" else "--body-format form: a form's"
    if (body_format == "form" or method == "GET") and nested is not None:
        raise OptionError(f"{flat} fields are flat, but {nested!r} holds an object or a list "
                          "(check --body, --message-field and --session-field)")


def check_reply_where(text: str, reply_format: str, reply_field: str, answers: bool = False) -> None:
    """--reply-where is PATH=VALUE, and picks among several pieces or items: a stream's, a * of --reply-field's, or
    the JSON answers of one turn (``answers``: a job's polls, --poll-path, or a WebSocket's frames: the one that is
    the reply, ``status=succeeded``, ``type=done``). A lone JSON reply, a text body or XML have nothing to pick
    among, and the option would be ignored."""
    if not text:
        return
    path, equals, _ = text.partition("=")
    path = path.removesuffix("!")
    if not equals or not path or any(not part or part == "*" for part in path.split(".")):
        raise OptionError(f"--reply-where: {text!r} is not PATH=VALUE or PATH!=VALUE (a dotted path of the piece, "
                          "no '*': event=on_chat_model_stream)")
    if reply_format not in ("sse", "ndjson") and not (reply_format == "json" and ("*" in reply_field.split(".")
                                                                                  or answers)):
        raise OptionError(f"--reply-where {text!r} picks among a stream's pieces (--reply-format sse or ndjson), "
                          "the items at a * of --reply-field, or the JSON answers of a --poll-path job or a "
                          f"--websocket turn; --reply-format {reply_format} with --reply-field {reply_field!r} has "
                          "none to pick")


# a line of a Locust config file (locust.conf, --config): configargparse's DefaultConfigFileParser's pattern
_CONFIG_LINE = re.compile(r"^(?P<key>[^:=;#\s]+)")
CONFIG_FILES = ("~/.locust.conf", "locust.conf")  # Locust's default config files that are not TOML


def check_config_files(get) -> None:
    """A key given twice in a Locust config file: configargparse keeps the last one without a word (a TOML file
    refuses it itself). Checked in the files Locust reads (its defaults and ``--config``), where they exist.

    Why: ``store-url`` given twice (a pasted block) silently audited the second store."""
    if get("worker"):  # the master's options arrive with its test: its files are not this machine's
        return
    names = list(CONFIG_FILES) + ([str(get("config"))] if get("config") else [])
    for name in names:
        path = Path(name).expanduser()
        if path.suffix == ".toml" or not path.is_file():
            continue
        try:
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue  # Locust read it, or said why not
        seen: dict[str, int] = {}
        for number, line in enumerate(lines, 1):
            line = line.strip()
            if not line or line[0] in "#;[" or line.startswith("---"):
                continue
            match = _CONFIG_LINE.match(line)
            if not match:
                continue
            key = match.group("key").lstrip("-")
            if key in seen:
                raise OptionError(f"{path}: {key} is given twice (lines {seen[key]} and {number}): Locust would use "
                                  "the last one without a word; keep one (a list goes in one line: [a, b])")
            seen[key] = number


def _bounded(value, name: str, high: int) -> int:
    number = int(value or 0)
    if not 0 <= number <= high:
        raise OptionError(f"--{name}: {number} is not in [0, {high}]")
    return number


def _period(value, name: str, why: str) -> float:
    """A period of at least a second, or 0 (off)."""
    seconds = parse_duration(value, name)
    if 0 < seconds < 1:
        raise OptionError(f"--{name}: {value!r} is shorter than a second ({why}); give 1s or more, or 0 (off)")
    return seconds


def _check_run_time(get, shaped: bool) -> None:
    """Locust reads ``-t 0`` as no limit at all: a headless run would never end (unless the step shape ends it)."""
    if get("run_time") == 0 and (get("headless") or get("autostart")) and not get("worker") and not shaped:
        raise OptionError("-t/--run-time 0: Locust reads 0 as no time limit, so the run would never end; give a run "
                          "time (-t 10m), or leave -t out and stop the run yourself (Ctrl-C)")


def _check_users(get) -> None:
    """Locust takes ``-u -1`` (its parser checks only that it is a whole number), then raises in two greenlets
    (``target_user_count must be >= 0``), idles for the whole -t and ends with nothing journaled. Refused at
    start, as ``-t 0`` is. (A negative ``-r`` Locust's parser refuses itself: "must be > 0".)"""
    users = get("num_users")
    if isinstance(users, int) and not isinstance(users, bool) and users < 0:
        raise OptionError(f"-u/--users {users}: a negative number of users; give the peak number of concurrent "
                          "users (-u 10), or 0 to start none")


def _step_duration(value, steps: int) -> float:
    seconds = parse_duration(value, "step-duration")
    if steps and seconds < 1:
        raise OptionError(f"--step-duration: {value!r} is shorter than a second (Locust changes the load once a second)")
    return seconds


def parse_think(text: str, name: str = "--think") -> tuple[float, float]:
    """``0.5`` -> (0.5, 0.5); ``0.2-1.0`` or ``200ms-1s`` -> (0.2, 1.0); each side a duration."""
    s = str(text).strip() or "0"
    lo, sep, hi = s.partition("-")
    try:
        low = durations.parse_duration(lo, name, limit=durations.DAY)
        high = durations.parse_duration(hi, name, limit=durations.DAY) if sep else low
    except durations.DurationError as exc:  # its reason kept: a side over a day, NaN, not ASCII digits
        reason = str(exc).removeprefix(f"{name}: ")
        raise OptionError(f"{name}: {text!r} is not seconds or a range like 0.2-1.0"
                          + ("" if " is not a duration (" in reason else f": {reason}")) from None
    if high < low:
        raise OptionError(f"{name}: {text!r} is not seconds or a range like 0.2-1.0: it must have low <= high")
    return low, high


def _audit_option(parse, values):
    try:
        return parse(values)
    except AuditOptionError as exc:
        raise OptionError(str(exc)) from None


def _one_of(value: str, choices: tuple, option: str) -> str:
    if value not in choices:
        raise OptionError(f"{option}: {value!r} is not one of {', '.join(choices)}")
    return value


def json_object(text: str, option: str) -> dict:
    """A JSON object option (``--body``, ``--start-body``) decoded; {} when empty."""
    try:
        value = msgspec.json.decode(text) if text else {}  # strict JSON: NaN or Infinity would be sent as null
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError) as exc:
        raise OptionError(f"{option}: not JSON ({exc})") from None
    if not isinstance(value, dict):
        raise OptionError(f"{option}: {text[:80]!r} is not a JSON object")
    return value


def check_session_from(text: str, path: str, reply_format: str, start_path: str = "", start_body: str = "") -> None:
    """``--session-from`` and ``--start-path``: a source there is, a name, a start request that can be sent, and
    nowhere the first turn cannot do without an id."""
    if start_path:
        if not text:
            raise OptionError("--start-path needs --session-from: where its response issues the session id")
        if not start_path.startswith("/") or SESSION in start_path or CONVERSATION in start_path or any(
                c.isspace() or not c.isprintable() for c in start_path):
            raise OptionError(f"--start-path: {start_path!r} must start with '/', without spaces, {SESSION} or "
                              f"{CONVERSATION}")
    json_object(start_body, "--start-body")  # checked without --start-path too: run.json records it
    if not text:
        return
    source, sep, name = text.partition(":")
    if source not in SESSION_SOURCES or not sep or not name:
        raise OptionError(f"--session-from: {text!r} is not reply:FIELD, header:NAME or cookie:NAME")
    text_reply = reply_format in ("text", "xml") and not start_path  # a start response is read as JSON
    if source == "reply" and (text_reply or any(not part for part in name.split("."))):
        raise OptionError(f"--session-from: {text!r}: " + (f"a {reply_format} reply has no JSON fields"
                          if text_reply else "the field path has an empty part"))
    if source != "reply" and not _TOKEN.match(name):
        raise OptionError(f"--session-from: {name!r} is not a {source} name (letters, digits and -)")
    if SESSION in path and not start_path:
        raise OptionError(f"--session-from with {SESSION} in --chat-path: a conversation's first turn has no id to "
                          "put there yet (send the id in the body or a header, or start conversations with "
                          "--start-path)")


def check_placeholders(get) -> None:
    """No value may go out with a literal {session}: where it can never be filled, it is refused, naming
    {conversation} (goldfish's own id of the conversation, known from its first turn and constant)."""
    use = f"use {CONVERSATION}, goldfish's own id of the conversation (the same on every turn)"
    if SESSION in str(get("start_body") or ""):
        raise OptionError(f"--start-body: {SESSION} is the id the start request's response issues, not known when it "
                          f"is sent: {use}")
    if not str(get("session_from") or "").strip() or str(get("start_path") or "").strip():
        return
    headers = get("header") or []
    for option, text in (("--body", str(get("body") or "")),
                         ("--header", "".join(map(str, headers if isinstance(headers, list) else [headers])))):
        if SESSION in text:
            raise OptionError(f"{option}: {SESSION} is the id the bot issues (--session-from), which a conversation's "
                              f"first turn goes without: it could not be filled there: {use}, or start "
                              "conversations with --start-path")


SOCKET_REPLY_FORMATS = ("json", "text", "xml")  # a frame holds the whole reply: no stream to put together


def check_websocket(get, reply_format: str) -> None:
    """``--websocket`` with options that describe an HTTP exchange a socket's frames cannot be."""
    clash = next((f"--{name.replace('_', '-')} {value}" for name, value, default in (
        ("chat_method", str(get("chat_method") or "POST").upper(), "POST"),
        ("body_format", str(get("body_format") or "json"), "json"),
        ("poll_path", str(get("poll_path") or ""), "")) if value != default), None)
    if clash is None and reply_format not in SOCKET_REPLY_FORMATS:
        clash = f"--reply-format {reply_format} (a frame holds the whole reply: json, text or xml)"
    if clash is None and str(get("session_from") or "").startswith(("header:", "cookie:")):
        clash = f"--session-from {get('session_from')} (a frame has no headers or cookies; reply:FIELD works)"
    if clash:
        raise OptionError(f"--websocket and {clash}: a turn over a WebSocket is one JSON text frame and one frame "
                          "back; drop one")


def check_poll_path(path: str) -> None:
    """``--poll-path``: a path a job can be polled at, whose placeholders a turn can fill in; or one placeholder
    alone, ``{reply.links.self}`` or ``{header.Location}``: the job's path (or URL) as the answer gives it."""
    if not path:
        return
    if POLL_FIELD.fullmatch(path):  # the whole path (or URL) a value of the answer: a job's own link
        path = "/" + path
    if not path.startswith("/") or path.startswith("//") or any(c.isspace() or not c.isprintable() for c in path):
        raise OptionError(f"--poll-path: {path!r} must start with one '/', without spaces or control characters")
    for source, name in POLL_FIELD.findall(path):
        if source == "reply" and any(not part for part in name.split(".")):
            raise OptionError(f"--poll-path: {path!r}: a {{reply.FIELD}} path has an empty part")
        if source == "header" and not _TOKEN.match(name):
            raise OptionError(f"--poll-path: {path!r}: {{header.{name}}} does not name a header (letters, digits "
                              "and -)")
    rest = POLL_FIELD.sub("", path).replace(SESSION, "")
    if "{" in rest or "}" in rest:
        raise OptionError(f"--poll-path: {path!r}: the placeholders are {SESSION}, {{reply.FIELD}} (a value of the "
                          "turn's JSON answer, the job's id) and {header.NAME} (a header of its response: a 202's "
                          "Location); percent-encode other braces")


def parse_header(text: str, option: str = "--header") -> tuple[str, str]:
    name, sep, value = str(text).partition(":")
    if not sep or not _TOKEN.match(name.strip()):
        raise OptionError(f"{option}: {redact.header_line(text)!r} is not 'Name: value' (a name of letters, digits and -)")
    if any(not c.isprintable() and c != "\t" for c in value):
        raise OptionError(f"{option}: the value of {name.strip()!r} holds a control character (a line break?)")
    return name.strip(), value.strip()


def check_utf8(value, option: str, show: bool = True) -> None:
    """Python reads a command line's bytes that are not UTF-8 (a file name in another encoding) as lone
    surrogates, which run.json cannot hold: found when the test started, with the load running unjournaled."""
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError as exc:
        c = ord(exc.object[exc.start])
        what = f"byte 0x{c - 0xdc00:02x}" if 0xdc80 <= c <= 0xdcff else f"a lone surrogate \\u{c:04x}"
        shown = repr(redact.text(value)) if show else "the value"  # a header's or a body's may be a credential
        raise OptionError(f"{option}: {shown} must be valid UTF-8 (it holds {what}): run.json could not record "
                          "it") from None


def default_run_dir(label: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label or "dev")[:100]  # a file name holds 255 bytes
    return str(Path("results") / f"{stamp}-{safe}")


@dataclass(frozen=True)
class Settings:
    """Every goldfish option, typed and checked."""

    run_dir: str
    label: str
    script: str
    think: tuple[float, float]
    chat_path: str
    message_field: str
    session_field: str
    session_header: str
    headers: dict[str, str]
    reply_field: str
    replica_header: str
    timeout: float
    store: StoreOptions | None
    no_audit: bool
    settle: float
    gates: "Gates"
    chaos: str
    chaos_backend: str
    stack_state: str
    step_users: int
    step_duration: float
    steps: int
    telemetry_interval: float = 5.0
    audit_every: float = 0.0
    reply_format: str = "json"
    reply_where: str = ""
    body: str = ""
    session_from: str = ""
    start_path: str = ""
    start_body: str = ""
    body_format: str = "json"
    chat_method: str = "POST"
    poll_path: str = ""
    websocket: bool = False
    extra: dict = field(default_factory=dict)

    @cached_property
    def run_id(self) -> str:  # cached: every journal record carries it, and Path() is slow
        return Path(self.run_dir).name

    @property
    def steps_enabled(self) -> bool:
        return self.step_users > 0 and self.steps > 0

    @classmethod
    def from_options(cls, o) -> "Settings":
        get = lambda name, default=None: getattr(o, name, default)  # noqa: E731
        for name in RECORDED:
            for value in get(name) if isinstance(get(name), list) else [get(name)]:
                check_utf8(value, f"--{name.replace('_', '-')}", show=name not in ("header", "body", "start_body"))
        if not str(get("chat_path", "/chat")).startswith("/"):
            raise OptionError(f"--chat-path: {get('chat_path')!r} must start with '/'")
        if not get("message_field"):
            raise OptionError("--message-field must not be empty")
        cookie = str(get("session_from") or "").startswith("cookie:")  # the cookie carries it
        headers = get("header") or []
        placed = SESSION in str(get("chat_path", "")) + str(get("body") or "") + "".join(
            map(str, headers if isinstance(headers, list) else [headers]))  # a bearer token the bot issued
        if not (get("session_field") or get("session_header") or cookie or placed):
            raise OptionError("the session id must go somewhere: set --session-field or --session-header, or put "
                              f"{SESSION} in --chat-path, a --header value or --body")
        check_request(get)
        check_config_files(get)
        timeout = parse_duration(get("timeout", 30.0), "timeout", limit=durations.DAY)
        if timeout <= 0:
            raise OptionError(f"--timeout: {timeout} must be > 0")
        step_users, steps = _bounded(get("step_users"), "step-users", 100_000), _bounded(get("steps"), "steps", 1000)
        if (step_users > 0) != (steps > 0):
            raise OptionError("--step-users and --steps go together (both > 0 to enable the step shape)")
        _check_run_time(get, shaped=step_users > 0)
        _check_users(get)
        label = check_line(str(get("label") or "dev"), "--label")
        check_run_dir(check_line(str(get("run_dir") or ""), "--run-dir"))
        headers = dict(parse_header(h) for h in (get("header") or []))
        session_header = str(get("session_header") or "")
        if clash := next((h for h in headers if session_header and h.lower() == session_header.lower()), None):
            raise OptionError(f"--header {clash!r} and --session-header {session_header!r} name the same header: the "
                              "session id would replace the --header value; drop one")
        for option in ("--store-url", "--http-url"):  # the store's check would quote the rest of the password
            value = get(option[2:].replace("-", "_"))
            if isinstance(value, str) and (problem := redact.credentials_problem(value)):
                raise OptionError(f"{option} {redact.url(value)!r}: {problem}")
        store, no_audit = _audit_option(store_options, o), bool(get("no_audit", False))
        audit_every = _period(get("audit_every", "0"), "audit-every",
                              "python -m oracle follow passes at most once a second")
        if audit_every and (store is None or no_audit):  # the rolling audit would silently not run
            why = "with --no-audit: there is no audit to roll" if no_audit else \
                "needs a store to audit (--store-url, --http-url or --reader), and none is given"
            raise OptionError(f"--audit-every {get('audit_every')!r} {why}; drop one or the other")
        return cls(
            run_dir=str(get("run_dir") or "") or default_run_dir(label),
            label=label,
            script=str(get("script") or "") or DEFAULT_SCRIPT,
            think=parse_think(get("think", "0")),
            chat_path=str(get("chat_path", "/chat")),
            message_field=str(get("message_field")),
            session_field=str(get("session_field") or ""),
            session_header=session_header,
            headers=headers,
            reply_field=str(get("reply_field") or ""),
            reply_format=str(get("reply_format") or "json"),
            reply_where=str(get("reply_where") or ""),
            body=str(get("body") or ""),
            session_from=str(get("session_from") or "").strip(),
            start_path=str(get("start_path") or "").strip(),
            start_body=str(get("start_body") or ""),
            body_format=str(get("body_format") or "json"),
            chat_method=str(get("chat_method") or "POST").upper(),
            poll_path=str(get("poll_path") or "").strip(),
            websocket=bool(get("websocket", False)),
            replica_header=str(get("replica_header") or "").strip(),
            timeout=timeout,
            store=store,
            no_audit=no_audit,
            settle=parse_duration(get("settle", "2s"), "settle"),
            gates=_audit_option(gates, o),
            chaos=check_line(str(get("chaos") or ""), "--chaos"),  # printed back: "chaos: armed PATH"
            chaos_backend=_one_of(str(get("chaos_backend") or "local"), tuple(CHAOS_BACKENDS), "--chaos-backend"),
            stack_state=str(get("stack_state") or ".stack/state.json"),
            step_users=step_users,
            step_duration=_step_duration(get("step_duration", "30s"), steps),
            steps=steps,
            telemetry_interval=_period(get("telemetry_interval", "5s"), "telemetry-interval",
                                       "the store's INFO would be polled in a busy loop"),
            audit_every=audit_every,
        )

    def public(self) -> dict:
        """The options for run.json, with header values and credentials in URLs masked (contracts.redact)."""
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d["gates"] = self.gates.spec
        d["gate_limits"] = self.gates.written_out()
        d["headers"] = redact.headers(self.headers)
        d["body"] = redact.json_value(codec.loads(self.body)) if self.body else None
        d["start_body"] = redact.json_value(codec.loads(self.start_body)) if self.start_body else None
        d["think"] = list(self.think)
        d["store"] = None if self.store is None else {**self.store.__dict__, "url": redact.url(self.store.url),
                                                      "http_url": redact.url(self.store.http_url), "on_batch": None,
                                                      "http_headers": [[n, redact.MASK] for n, _ in self.store.http_headers]}
        return d
