"""Turn raw stored entries into (role, text) messages; anything undecodable becomes a finding.

Never unpickles: a pickle is recognised by its header and reported with a hex excerpt. Role
and text are found by dotted paths (LangChain: ``type`` and ``data.content``) and the role
names configured for user and assistant; other roles (system, tool) are kept as ``other``.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field

import msgspec  # decodes just the role and the text of an element, ~3x faster than a full parse

from contracts import codec
from oracle.store import RawSession, StoreOptions

USER, ASSISTANT, OTHER = "user", "assistant", "other"
# LangChain's ChatMessage (and its chunk) is stored as {"type": "chat", "data": {"role": "user", ...}}: its role is
# data.role, read when the role field is LangChain's ``type``
CHAT_TYPES, CHAT_ROLE = ("chat", "ChatMessageChunk"), ("data", "role")


@dataclass(slots=True)
class Decoded:
    """A stored session after decoding: messages oldest first, plus the entries that failed."""
    messages: list = field(default_factory=list)  # [(entry index, role, text)]
    users: list = field(default_factory=list)     # [(entry index, text)] the user-role subset, in order
    corrupt: list = field(default_factory=list)   # [{"index", "reason", "excerpt", "length"}]
    other_roles: set = field(default_factory=set)  # role names of the entries that are neither user nor assistant
    tool_texts: dict = field(default_factory=dict)  # entry index -> the string values of the tool calls' arguments
    #                                                 of a user or assistant entry with no text (``_tool_texts``)


def get_path(obj, path: str):
    """``get_path({"data": {"content": "x"}}, "data.content") == "x"``; None when absent."""
    return _dig(obj, path.split("."))


def message_list(document, path: str) -> list | None:
    """The message list of a decoded JSON document: the document when it is a list, else the list at ``path``."""
    if isinstance(document, list):
        return document
    found = get_path(document, path) if path else None
    return found if isinstance(found, list) else None


def excerpt(value, limit: int = 80) -> str:
    """A short printable view of any raw entry: safe to log and to put in a report."""
    if isinstance(value, (bytes, bytearray)):
        value = bytes(value)
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError:
            head = value[:limit // 2]
            return "hex:" + head.hex() + ("..." if len(value) > len(head) else "")
    elif isinstance(value, str):
        text = value
    else:
        text = repr(value)
    short = text[:limit]
    return short.encode("unicode_escape").decode("ascii") + ("..." if len(text) > limit else "")


def why_undecodable(value, reason: str = "") -> str:
    """Name the problem with an entry that did not parse as JSON (``reason``: the codec's)."""
    if isinstance(value, (bytes, bytearray)):
        if len(value) >= 2 and value[0] == 0x80 and 1 <= value[1] <= 5:
            return f"a Python pickle (protocol {value[1]}); not utf-8 text, not unpickled"
        try:
            bytes(value).decode("utf-8")
        except UnicodeDecodeError as exc:
            return f"not utf-8 text ({exc.reason} at byte {exc.start})"
    return "not valid JSON" + (f" ({reason})" if reason == "nested too deeply" else "")


class Shape:
    """The element shape: where the role and text sit, and which role names mean what."""

    def __init__(self, options: StoreOptions):
        self.role_path = options.role_field.split(".")
        self.content_path = options.content_field.split(".")
        self.roles = {r: USER for r in options.user_roles}
        self.roles.update({r: ASSISTANT for r in options.assistant_roles})
        self.messages_field = options.messages_field
        # the common shapes (LangChain: type / data.content; OpenAI-like: role / content) get a fast path
        self.fast = (self.role_path[0], *self.content_path) if len(self.role_path) == 1 and \
            len(self.content_path) in (1, 2) else None
        self.decoder = _typed_decoder(*self.fast, *([None] * (3 - len(self.fast)))) if self.fast else None
        # the text of an element ``decoder`` made (its content, or the content's sub-field)
        self.text_of = operator.attrgetter("content.text" if self.fast and len(self.fast) == 3 else "content")

    def message(self, element):
        """(role, text) or a string naming why the element has the wrong shape."""
        if not isinstance(element, dict):
            return f"wrong shape: a JSON {type(element).__name__}, not an object"
        role = _dig(element, self.role_path)
        if not isinstance(role, str):
            if isinstance(element.get("type"), str):  # an item, not a message (Agents SDK: reasoning, function_call)
                return OTHER, ""
            return f"wrong shape: no role string at {'.'.join(self.role_path)!r}"
        if role in CHAT_TYPES and self.role_path == ["type"] and isinstance(_dig(element, CHAT_ROLE), str):
            role = _dig(element, CHAT_ROLE)
        kind = self.roles.get(role, OTHER)
        content = _dig(element, self.content_path)
        if isinstance(content, list):  # LangChain multimodal content: [{"type": "text", "text": ...}]
            content = "".join(p if isinstance(p, str) else str(p.get("text", "")) if isinstance(p, dict) else ""
                              for p in content)
        if not isinstance(content, str):
            if kind == OTHER:  # a system, tool or action entry need hold no text: it is not judged
                return OTHER, ""
            if content is None and _calls_tools(element, self.content_path):  # OpenAI: content null beside tool_calls
                return kind, ""
            return f"wrong shape: no text at {'.'.join(self.content_path)!r}"
        return kind, content


def _tool_texts(element: dict, content_path: list) -> list[str]:
    """The string values of the arguments of the tool calls beside a message's empty text: LangChain's
    ``tool_calls[*].args`` (an object), OpenAI's ``tool_calls[*].function.arguments`` and ``function_call.arguments``
    (a JSON string). A structured answer by tool calling (LangChain's ``with_structured_output`` / ``bind_tools``
    with one ``Answer`` tool) keeps the reply there, ``content`` empty: oracle/checkers.py ``check_unanswered``
    reads one of them as the reply when it is that reply verbatim, and nothing else."""
    holder = _dig(element, content_path[:-1])
    calls = []
    for h in (holder, element) if holder is not element else (element,):
        if isinstance(h, dict):
            calls += h["tool_calls"] if isinstance(h.get("tool_calls"), list) else []
            calls += [h["function_call"]] if isinstance(h.get("function_call"), dict) else []
            kwargs = h.get("additional_kwargs")
            if isinstance(kwargs, dict) and isinstance(kwargs.get("tool_calls"), list):
                calls += kwargs["tool_calls"]
    out: list[str] = []
    for call in calls:
        if not isinstance(call, dict):
            continue
        args = call.get("args")
        function = call.get("function") if isinstance(call.get("function"), dict) else call
        if args is None and isinstance(function.get("arguments"), str):
            try:
                args = codec.loads(function["arguments"])
            except codec.DecodeError:
                args = function["arguments"]
        todo = [args]
        while todo:
            value = todo.pop()
            if isinstance(value, str):
                if value and value not in out:
                    out.append(value)
            elif isinstance(value, dict):
                todo += reversed(list(value.values()))
            elif isinstance(value, list):
                todo += reversed(value)
    return out


def _calls_tools(element: dict, content_path: list) -> bool:
    """The message beside the text (or the element itself) carries tool calls: a message without text."""
    holder = _dig(element, content_path[:-1])
    return any(isinstance(h, dict) and (h.get("tool_calls") or h.get("function_call"))
               for h in (holder, element))


def _dig(obj, parts):
    """The value at a path's parts: an object's field, or a list's item by its number (llama-index 0.14 keeps a
    message's text at ``blocks.0.text``); None when absent."""
    for part in parts:
        if isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            return None
    return obj


def decode_session(raw: RawSession, shape: Shape, elements: list | None = None) -> Decoded:
    """Decode every entry: the exact path, one entry at a time. ``elements``: what the typed decoder
    (``decode_elements``, run on whole batches by oracle/clean.py) already made of them, reused —
    tests/test_oracle_fastpaths.py checks both give the same."""
    out = Decoded()
    if raw.type == "string":
        _decode_blob(raw.entries[0] if raw.entries else b"", shape, out)
        return out
    if elements is not None and not any(e.role in CHAT_TYPES for e in elements) and \
            all(map(shape.text_of, elements)):  # (a chat's role is inside, an empty text may have tool calls: below)
        _fill(out, [e.role for e in elements], list(map(shape.text_of, elements)), shape)
        return out
    for index, entry in enumerate(raw.entries):
        try:
            element = codec.loads(entry)
        except codec.DecodeError as exc:
            if isinstance(entry, (bytes, str, bytearray)):
                out.corrupt.append(_corrupt(index, why_undecodable(entry, str(exc)), entry))
                continue
            element = entry  # already decoded (HTTP reader, user function)
        got = shape.message(element)
        if isinstance(got, str):
            out.corrupt.append(_corrupt(index, got, entry))
        else:
            _add(out, index, got, element, shape)
    return out


def _add(out: Decoded, index: int, got: tuple, element: dict, shape: Shape) -> None:
    """One decoded message; the role name of one neither user's nor assistant's is kept (the unanswered finding
    names them: a bot storing its answers under another role needs --assistant-role). A message with no text
    keeps its tool calls' argument strings aside (``Decoded.tool_texts``)."""
    out.messages.append((index, got[0], got[1]))
    if not got[1] and got[0] != OTHER:
        texts = _tool_texts(element, shape.content_path)
        if texts:
            out.tool_texts[index] = texts
    if got[0] == USER:
        out.users.append((index, got[1]))
    elif got[0] == OTHER:
        role, named = _dig(element, shape.role_path), _dig(element, CHAT_ROLE)
        out.other_roles.add(named if role in CHAT_TYPES and isinstance(named, str) else
                            role if isinstance(role, str) else element.get("type"))  # a role-less item: its type


def _typed_decoder(role_key: str, content_key: str, sub_key: str | None):
    """A msgspec decoder that reads only the role and text of an element (None: a shape it cannot express).

    msgspec skips the fields it is not asked for and builds no dicts, about 3x faster than a
    full parse; it raises on anything that does not have exactly this shape.
    """
    try:
        if sub_key is None:
            text_type = str
        else:
            text_type = msgspec.defstruct("Content", [("text", str)], rename={"text": sub_key}, gc=False)
        element = msgspec.defstruct("Element", [("role", str), ("content", text_type)],
                                    rename={"role": role_key, "content": content_key}, gc=False)
        return msgspec.json.Decoder(element)
    except (TypeError, ValueError):  # a shape msgspec cannot express (e.g. role and text at one key)
        return None


def decode_elements(entries: list, shape: Shape) -> list | None:
    """Every entry decoded straight to a (role, content) struct by one C call each; None when any
    entry does not fit (bad JSON, already decoded, another shape, multimodal content)."""
    try:
        return list(map(shape.decoder.decode, entries))
    except (ValueError, TypeError, RecursionError):  # msgspec errors are ValueErrors; a dict entry is a TypeError;
        return None  # an entry nested too deeply goes to the exact path, which finds it corrupt


def _fill(out: Decoded, roles: list, texts: list, shape: Shape) -> None:
    """Messages and their user subset from parallel lists of role names and texts."""
    kinds = list(map(shape.roles.get, roles, [OTHER] * len(roles)))
    out.messages = list(zip(range(len(kinds)), kinds, texts))
    out.users = [(i, text) for i, kind, text in out.messages if kind == USER]
    out.other_roles = {role for role, kind in zip(roles, kinds) if kind == OTHER}


def _decode_blob(blob, shape: Shape, out: Decoded) -> None:
    """One key holding a JSON list of messages (read-modify-write bots store history so)."""
    try:
        elements = codec.loads(blob)
    except codec.DecodeError as exc:
        out.corrupt.append(_corrupt(0, "blob is " + why_undecodable(blob, str(exc)), blob))
        return
    listed = message_list(elements, shape.messages_field)
    if listed is None:
        where = f" and has no list at {shape.messages_field!r}" if isinstance(elements, dict) and shape.messages_field \
            else ""
        out.corrupt.append(_corrupt(0, f"blob is a JSON {type(elements).__name__}{where}, not a list of messages",
                                    blob))
        return
    elements = listed
    for index, element in enumerate(elements):
        got = shape.message(element)
        if isinstance(got, str):
            out.corrupt.append(_corrupt(index, got, codec.dumps_line(element).rstrip(b"\n")))
        else:
            _add(out, index, got, element, shape)


def _corrupt(index: int, reason: str, value) -> dict:
    length = len(value) if isinstance(value, (bytes, str, bytearray)) else None
    return {"index": index, "reason": reason, "excerpt": excerpt(value), "length": length}
