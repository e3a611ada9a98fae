"""Conversation scripts: YAML data that says what one simulated user says, turn by turn.

A script is a list of steps (docs/locust.md):

    name: support
    chatter: ["Hi, I need some help.", ...]   # filler lines for bare `chatter` steps
    repeat: 1                                 # run the steps this many times per conversation
    steps:
      - plant: order number      # "My order number is <nonce>."
      - chatter                  # a filler line (or `chatter: "exact text"`)
      - think: 0.5               # pause (seconds, or a range "0.2-1.0")
      - probe: order number      # "What is my order number?"; passes when the reply holds the nonce
      - burst: 3                 # 3 turns of this session sent at once, without waiting

Errors name the file, the line and the field (from the YAML node marks), before any load.
"""
from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from contracts import durations, yamldoc
from contracts.console import control_character
from contracts.journal import MAX_TURN
from contracts.tokens import NONCE_RE, TOKEN_RE
from contracts.yamldoc import show

FACT_RE = re.compile(r"^[a-z]+( [a-z]+)*$")
# the plant sentence "My <fact> is <value>." is read back by ending the fact at its first " is " (refbot/model.py's
# PLANT_RE, and any bot that splits on the verb): the word "is" after a fact's first word ends it early
SPLIT_WORD = "is"
# any case: "what is my secret code" reads as a probe to a bot as much as "What is my ..." does
LOOKS_LIKE_GRAMMAR = re.compile(r"\bMy [a-z ]+ is |\bWhat is my\b", re.IGNORECASE)
KINDS = ("plant", "probe", "chatter", "burst", "think")
MAX_BURST = 20
MAX_TURNS = MAX_TURN + 1  # turn indices 0..MAX_TURN (contracts.journal)
DEFAULT_CHATTER = (
    "Hi, I need some help with my account.",
    "Thanks, that is useful.",
    "Can you check that again for me?",
    "I have another question.",
    "OK, understood.",
)


class ScriptError(ValueError):
    """A script that cannot run: the message is ``file:line: field: what is wrong``."""


@dataclass(frozen=True)
class Step:
    kind: str  # plant | probe | chatter | burst | think
    fact: str | None = None
    text: str | None = None  # chatter text (None: pick from the script's chatter lines)
    turns: int = 1  # burst size
    think: tuple[float, float] = (0.0, 0.0)


@dataclass(frozen=True)
class Script:
    name: str
    path: str
    sha: str
    steps: tuple[Step, ...]
    chatter: tuple[str, ...]

    @property
    def turns(self) -> int:
        return sum(s.turns for s in self.steps if s.kind != "think")


def load_script(path: str | Path) -> Script:
    try:
        text, root = yamldoc.load(path, "the script")
    except yamldoc.YamlError as exc:
        raise ScriptError(str(exc)) from None
    return _parse_root(root, text, str(path))


def parse_script(text: str, path: str = "<script>") -> Script:
    try:
        root = yamldoc.parse(text, path)
    except yamldoc.YamlError as exc:
        raise ScriptError(str(exc)) from None
    return _parse_root(root, text, path)


def _parse_root(root: yaml.Node | None, text: str, path: str) -> Script:

    def bad(node, field_name: str, msg: str):
        line = node.start_mark.line + 1 if node is not None else 1
        raise ScriptError(f"{path}:{line}: {field_name}: {msg}")

    if not isinstance(root, yaml.MappingNode):
        bad(root, "(top level)", "a script is a mapping with a `steps:` list")
    top = {k.value: v for k, v in root.value}
    for key_node, _ in root.value:
        if key_node.value not in {"name", "description", "chatter", "repeat", "steps"}:
            bad(key_node, key_node.value if len(key_node.value) <= 40 else show(key_node.value), "unknown key (known: name, description, chatter, repeat, steps)")
    if "name" in top and _plain(top["name"]) and (kind := _not_text(top["name"])):  # `name: 5` was the name '5'
        bad(top["name"], "name", f"must be text, not {kind} (quote it: '{top['name'].value}')")
    if "name" in top and not _plain(top["name"]) and top["name"].tag != "tag:yaml.org,2002:null":
        bad(top["name"], "name", f"must be text, not {_kind_of(top['name'])}")
    name = _scalar(top.get("name")) or Path(path).stem
    if "name" in top and (why := control_character(name)):  # printed back: a line break could forge a line
        bad(top["name"], "name", f"{show(name)} {why}")

    chatter = DEFAULT_CHATTER
    if "chatter" in top:
        node = top["chatter"]
        if not isinstance(node, yaml.SequenceNode) or not node.value:
            bad(node, "chatter", "must be a non-empty list of filler lines")
        for n in node.value:  # `chatter: [1, 2]`: numbers as filler lines (a step's `chatter: 12345` is its text)
            if _plain(n) and (kind := _not_text(n)):
                bad(n, "chatter", f"must be a line of text, not {kind} (quote it: '{n.value}')")
        chatter = tuple(_check_text(n, "chatter", bad) for n in node.value)

    repeat = 1
    if "repeat" in top:
        repeat = _int(top["repeat"], "repeat", bad, 1, 10_000)

    steps_node = top.get("steps")
    if not isinstance(steps_node, yaml.SequenceNode) or not steps_node.value:
        bad(steps_node or root, "steps", "must be a non-empty list of steps")
    planted: set[str] = set()
    steps: list[Step] = []
    for i, node in enumerate(steps_node.value):
        field_name = f"steps[{i}]"
        if isinstance(node, yaml.ScalarNode):
            kind, value = node.value, None
            if kind != "chatter":
                bad(node, field_name, f"{show(kind)} needs a value (only `chatter` may stand alone)")
        elif isinstance(node, yaml.MappingNode) and len(node.value) == 1:
            kind, value = node.value[0][0].value, node.value[0][1]
        else:
            bad(node, field_name, f"a step is one of {', '.join(KINDS)} with its value, e.g. `- plant: order number`")
        if kind not in KINDS:
            bad(node, field_name, f"unknown step {show(kind)} (known: {', '.join(KINDS)})")
        field_name = f"{field_name}.{kind}"
        if kind in ("plant", "probe"):
            fact = _scalar(value)
            if not fact or not FACT_RE.match(fact):
                bad(value or node, field_name, f"fact {show(fact)} must be lower-case words, e.g. `order number`")
            if why := ambiguous_fact(fact):
                bad(value, field_name, why)
            if kind == "probe" and fact not in planted:
                bad(value, field_name, f"probes {show(fact)} before any step plants it")
            planted.add(fact)
            steps.append(Step(kind, fact=fact))
        elif kind == "chatter":  # `- chatter` alone picks a filler line; a value is the exact line
            line = None if value is None else _check_text(value, field_name, bad,
                                                          " (or `- chatter` alone for a filler line)")
            steps.append(Step("chatter", text=line))
        elif kind == "burst":
            turns_node = value
            if isinstance(value, yaml.MappingNode):
                inner = {k.value: v for k, v in value.value}
                turns_node = inner.get("turns")
                if turns_node is None:
                    bad(value, field_name, "needs `turns: N`")
                if extra := next((k for k, _ in value.value if k.value != "turns"), None):
                    bad(extra, field_name, f"unknown key {show(extra.value)} (a burst takes `turns: N` only)")
            steps.append(Step("burst", turns=_int(turns_node, field_name, bad, 2, MAX_BURST)))
        else:  # think
            from locustfiles.options import OptionError, parse_think

            if not _plain(value):
                bad(value, field_name, f"must be seconds or a range like 0.2-1.0, not {_kind_of(value)}")
            if why := yamldoc.misread_number(value):
                bad(value, field_name, why)
            raw = _scalar(value)
            try:
                steps.append(Step("think", think=parse_think(raw, "think")))
            except OptionError as exc:  # its message keeps the reason: low above high; a side over a day, NaN
                bad(value, field_name, f"{show(raw)} {str(exc).removeprefix(f'think: {raw!r} ')}")
    turns = sum(s.turns for s in steps if s.kind != "think") * repeat
    if not turns:  # a conversation of pauses: the load would run and journal nothing
        bad(steps_node, "steps", "has no turn (only think steps): a conversation needs a plant, probe, chatter or burst")
    if turns > MAX_TURNS:
        bad(top.get("repeat") or steps_node, "repeat" if repeat > 1 else "steps",
            f"{turns} turns per conversation is more than a token can number ({MAX_TURNS})")
    sha = hashlib.sha256(text.encode()).hexdigest()
    return Script(name=name, path=path, sha=sha, steps=tuple(steps) * repeat, chatter=chatter)


def ambiguous_fact(fact: str) -> str | None:
    """Why the plant sentence of ``fact`` cannot be read back as that fact (None when it can).

    The grammar (docs/CONTRACTS.md "Message grammar") ends a plant's fact at its first " is ": a fact holding the
    word "is" after its first word (``name is bob``) plants "My name is bob is 0534-V0WX.", which reads as fact
    ``name`` with the value ``bob is 0534-V0WX``, so a correct bot answers every probe of it "I don't know" and
    the run FAILs. A probe ("What is my <fact>?") ends at the "?", which a fact cannot hold; a first word "is"
    (``is open``) follows "My " and reads back whole."""
    words = fact.split(" ")
    if SPLIT_WORD not in words[1:]:
        return None
    read = " ".join(words[:words.index(SPLIT_WORD, 1)])
    return (f"fact {show(fact)} holds the word {SPLIT_WORD!r}, which makes the plant sentence ambiguous: "
            f"\"My {fact} is <value>.\" reads as fact {show(read)} (the fact ends at the first ' is '), so a correct "
            "bot would fail every probe of it; rename the fact without that word")


def _scalar(node) -> str | None:
    return node.value.strip() if isinstance(node, yaml.ScalarNode) and node.value is not None else None


def _plain(node) -> bool:
    """A scalar that is not null: `~`, `null` and nothing at all are no value (not the text "~")."""
    return isinstance(node, yaml.ScalarNode) and node.tag != "tag:yaml.org,2002:null"


def _kind_of(node) -> str:
    return {yaml.SequenceNode: "a list", yaml.MappingNode: "a mapping"}.get(type(node), "null")


def _int(node, field_name, bad, low: int, high: int) -> int:
    if why := yamldoc.misread_number(node):
        bad(node, field_name, why)
    raw = _scalar(node)
    if raw is not None and (odd := durations.not_ascii_number(raw)):  # int() reads '٣' and '３' as 3, '1_0' as 10
        bad(node, field_name, f"{show(raw)} is not a whole number: it holds {odd!r} (U+{ord(odd):04X}); "
                              "write it in ASCII digits 0-9, without '_'")
    if raw is None and not isinstance(node, yaml.ScalarNode):  # `repeat: {n: 2}` said "None is not a whole number"
        bad(node, field_name, f"a {'list' if isinstance(node, yaml.SequenceNode) else 'mapping'} is not a whole number")
    try:
        value = int(raw)
    except (TypeError, ValueError):
        bad(node, field_name, f"{show(raw)} is not a whole number")
    if not low <= value <= high:
        bad(node, field_name, f"{value} is out of range [{low}, {high}]")
    return value


def _not_text(node) -> str | None:
    """What a plain scalar is when YAML reads it as no text (``5``, ``1.5``, ``true``), or None."""
    return {"tag:yaml.org,2002:int": "a number", "tag:yaml.org,2002:float": "a number",
            "tag:yaml.org,2002:bool": "true/false"}.get(node.tag)


def _check_text(node, field_name, bad, alone: str = "") -> str:
    text = _scalar(node) if _plain(node) else None
    if not text:
        what = "" if _plain(node) else f", not {_kind_of(node)}"
        bad(node, field_name, f"must be a non-empty line of text{what}{alone}")
    if "\0" in text:  # a plan refuses it in any text; a request holding it is refused or cut short
        bad(node, field_name, f"{show(text)} holds a NUL character")
    if LOOKS_LIKE_GRAMMAR.search(text) or TOKEN_RE.search(text) or NONCE_RE.search(text):
        bad(node, field_name, f"{show(text)} looks like a plant, probe, token or nonce; filler must not")
    return text
