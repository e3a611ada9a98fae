"""goldfish's Locust options: declared once here, settable on the command line, in a Locust
config file (``chat-path = /v1/chat``) or the web UI, and parsed into one typed ``Settings``.

Values that the web UI may edit are kept as strings (the UI keeps an option's type, and
``None`` defaults come back as strings anyway) and parsed by ``Settings.from_options``, so a
bad value gives one clear message naming the option.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from oracle.verdict import GateError, Gates, legacy_overrides, parse_gates

DEFAULT_SCRIPT = str(Path(__file__).parent / "scripts" / "support.yaml")


class OptionError(ValueError):
    """An option value that cannot work; the message names the option."""


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
        action = groups[group].add_argument(*names, **kw)
        action.include_in_web_ui, action.is_secret, action.is_required, action.is_multiple = ui, secret, False, False
        return action

    add("run", "--label", default="dev", help="release label recorded in run.json, e.g. v1.4.2")
    add("run", "--script", default="", help="conversation script YAML (default locustfiles/scripts/support.yaml)")
    add("run", "--think", default="0", help="seconds between turns: 0.5 or a range 0.2-1.0")
    add("chaos", "--chaos", default="", help="chaos plan YAML, armed from its beginning at each test start")
    add("chaos", "--chaos-backend", default="local", help="chaos backend: local, docker, kubernetes")
    add("chaos", "--stack-state", default=".stack/state.json", help="stack state file of the local backend")
    add("gates", "--gate", default="strict",
        help="the verdict's gates: strict (nothing allowed), lenient, a YAML file, and/or name=limit items, "
             "comma-separated, later ones win, e.g. 'strict,probe_amnesia=1%%,errors=5' (docs/oracle.md). The "
             "errors gate judges failed requests (allowed only while a chaos fault is in force), so goldfish "
             "sets Locust's --exit-code-on-error default to 0; set it to fail on any failed request as plain Locust")
    add("store", "--store-url", default="", secret=True,
        help="store to audit when each test stops, e.g. redis://127.0.0.1:6379/0 (without it: no audit)")
    add("store", "--key-template", default="message_store:{session}", help="store key of a session's history")
    add("store", "--store-format", default="auto", help="stored history layout: auto, list or blob (oracle.store)")
    add("store", "--settle", default="2s", help="wait after healing before the audit reads the store")
    add("store", "--no-audit", action="store_true", default=False, help="skip the audit even with --store-url")
    add("contract", "--chat-path", default="/chat", help="path of the chat endpoint")
    add("contract", "--message-field", default="message", help="dotted JSON path of the user message in the request")
    add("contract", "--session-field", default="session_id",
        help="dotted JSON path of the session id in the request body (empty: not in the body)")
    add("contract", "--session-header", default="", help="send the session id in this header instead of the body")
    add("contract", "--reply-field", default="reply", help="dotted JSON path of the reply text in the response")
    add("contract", "--replica-header", default="",
        help="response header naming the replica that answered (e.g. X-Refbot-Replica): journaled per turn, "
             "and failed probes are broken down by it")
    add("contract", "--timeout", type=float, default=30.0, help="seconds before a turn is given up (journaled info)")
    add("contract", "--header", action="append", default=[], ui=False,
        help="extra request header 'Name: value' (repeatable; a list in a config file)")
    add("run", "--run-dir", default="", ui=False,
        help="the first test's run folder (default results/<UTC time>-<label>); later tests in the same "
             "process get <run-dir>-2, -3, ...")
    add("gates", "--max-probe-amnesia", default="", ui=False, help="same as --gate probe_amnesia=RATE (0..1)")
    add("gates", "--max-stored-loss", default="", ui=False, help="same as --gate stored_loss=RATE (0..1, needs the audit)")
    add("gates", "--max-crosstalk", default="", ui=False, help="same as --gate crosstalk=N (sessions with cross-talk)")
    add("shape", "--step-users", type=int, default=0, ui=False, help="users added per load step (enables the step shape)")
    add("shape", "--steps", type=int, default=0, ui=False, help="number of load steps")
    add("shape", "--step-duration", default="30s", ui=False, help="duration of each load step")
    # failed requests are judged by the errors gate (faults excuse them); an explicit value still applies
    parser.set_defaults(exit_code_on_error=0)


def parse_duration(text: str | float | int, name: str) -> float:
    """``2``, ``2s``, ``500ms``, ``1m30s`` -> seconds."""
    if isinstance(text, (int, float)):
        return float(text)
    s = str(text).strip()
    try:
        return float(s)
    except ValueError:
        pass
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|h|m|s)", s)
    if not parts or "".join(a + b for a, b in parts) != s.replace(" ", ""):
        raise OptionError(f"--{name}: {text!r} is not a duration (e.g. 2, 2s, 500ms, 1m30s)")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(a) * scale[b] for a, b in parts)


def parse_think(text: str) -> tuple[float, float]:
    """``0.5`` -> (0.5, 0.5); ``0.2-1.0`` -> (0.2, 1.0)."""
    s = str(text).strip() or "0"
    lo, sep, hi = s.partition("-")
    try:
        low = float(lo)
        high = float(hi) if sep else low
    except ValueError:
        raise OptionError(f"--think: {text!r} is not seconds or a range like 0.2-1.0") from None
    if low < 0 or high < low:
        raise OptionError(f"--think: {text!r} must be >= 0 with low <= high")
    return low, high


def _optional_float(value, name: str, low: float | None = 0.0, high: float | None = None) -> float | None:
    if value is None or str(value).strip() == "":
        return None
    try:
        number = float(value)
    except ValueError:
        raise OptionError(f"--{name}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise OptionError(f"--{name}: {value!r} is not a finite number")
    if (low is not None and number < low) or (high is not None and number > high):
        raise OptionError(f"--{name}: {value!r} is out of range [{low}, {high}]")
    return number


def parse_gate_options(get) -> Gates:
    """--gate plus the older --max-* shorthands, as the oracle's gates (one grammar: oracle/verdict.py)."""
    overrides = legacy_overrides(
        _optional_float(get("max_probe_amnesia"), "max-probe-amnesia", 0.0, 1.0),
        _optional_float(get("max_stored_loss"), "max-stored-loss", 0.0, 1.0),
        _optional_int(get("max_crosstalk"), "max-crosstalk"))
    try:
        gates = parse_gates(str(get("gate") or "strict"))
    except GateError as exc:
        raise OptionError(str(exc)) from None
    return gates.with_overrides(overrides, ",".join(f"{name}={limit}" for name, limit in overrides.items()))


def _optional_int(value, name: str) -> int | None:
    number = _optional_float(value, name, 0.0, None)
    if number is not None and number != int(number):
        raise OptionError(f"--{name}: {value!r} is not a whole number")
    return None if number is None else int(number)


def parse_header(text: str) -> tuple[str, str]:
    name, sep, value = str(text).partition(":")
    if not sep or not name.strip() or " " in name.strip():
        raise OptionError(f"--header: {text!r} is not 'Name: value'")
    return name.strip(), value.strip()


def default_run_dir(label: str, now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now if now is not None else time.time()))
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", label or "dev")
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
    store_url: str
    key_template: str
    store_format: str
    no_audit: bool
    settle: float
    gates: Gates
    chaos: str
    chaos_backend: str
    stack_state: str
    step_users: int
    step_duration: float
    steps: int
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
        if not str(get("chat_path", "/chat")).startswith("/"):
            raise OptionError(f"--chat-path: {get('chat_path')!r} must start with '/'")
        if not get("message_field"):
            raise OptionError("--message-field must not be empty")
        if not get("reply_field"):
            raise OptionError("--reply-field must not be empty")
        if not get("session_field") and not get("session_header"):
            raise OptionError("the session id must go somewhere: set --session-field or --session-header")
        timeout = float(get("timeout", 30.0))
        if timeout <= 0:
            raise OptionError(f"--timeout: {timeout} must be > 0")
        step_users, steps = int(get("step_users", 0) or 0), int(get("steps", 0) or 0)
        if (step_users > 0) != (steps > 0):
            raise OptionError("--step-users and --steps go together (both > 0 to enable the step shape)")
        label = str(get("label") or "dev")
        return cls(
            run_dir=str(get("run_dir") or "") or default_run_dir(label),
            label=label,
            script=str(get("script") or "") or DEFAULT_SCRIPT,
            think=parse_think(get("think", "0")),
            chat_path=str(get("chat_path", "/chat")),
            message_field=str(get("message_field")),
            session_field=str(get("session_field") or ""),
            session_header=str(get("session_header") or ""),
            headers=dict(parse_header(h) for h in (get("header") or [])),
            reply_field=str(get("reply_field")),
            replica_header=str(get("replica_header") or "").strip(),
            timeout=timeout,
            store_url=str(get("store_url") or ""),
            key_template=str(get("key_template") or "message_store:{session}"),
            store_format=str(get("store_format") or "auto"),
            no_audit=bool(get("no_audit", False)),
            settle=parse_duration(get("settle", "2s"), "settle"),
            gates=parse_gate_options(get),
            chaos=str(get("chaos") or ""),
            chaos_backend=str(get("chaos_backend") or "local"),
            stack_state=str(get("stack_state") or ".stack/state.json"),
            step_users=step_users,
            step_duration=parse_duration(get("step_duration", "30s"), "step-duration"),
            steps=steps,
        )

    def public(self) -> dict:
        """The options for run.json, with header values masked (they often hold credentials)."""
        d = {k: v for k, v in self.__dict__.items() if k != "extra"}
        d["gates"] = self.gates.spec
        d["headers"] = {k: "***" for k in self.headers}
        d["think"] = list(self.think)
        d["store_url"] = mask_url(self.store_url)
        return d


def mask_url(url: str) -> str:
    """``redis://:secret@host`` -> ``redis://:***@host``."""
    return re.sub(r"(://[^:@/]*:)[^@/]*@", r"\1***@", url or "")
