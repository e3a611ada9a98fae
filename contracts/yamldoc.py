"""The one reader for the YAML people write (chaos plans, conversation scripts): a node tree with
line marks, so every message names ``file:line``, holding plain data and nothing else.

It fails one way only, ``YamlError`` (a ValueError, ``file:line: reason``), for: bytes that are
not UTF-8; a document over ``MAX_BYTES``; bad YAML syntax; a tag that is not plain data
(``!!python/...``, ``!custom``, ``!!binary``, ``!!set``...); a merge key (``<<: *base``);
a mapping key that is not a scalar
(``? [a, b]``) or one given twice in a mapping; a lone surrogate (``"\\ud800"``); nesting deeper than ``MAX_DEPTH``; aliases that expand past ``MAX_NODES``
nodes or refer to themselves ("billion laughs"). ``value`` turns a checked node into Python data
(str, int, float, bool, None, list, dict) and fails the same way on a scalar YAML cannot build
(an int of 5,000 digits) or one YAML 1.1 reads otherwise than it looks (``misread_number``: ``010`` is 8,
``1:30`` is 90; ``_underscored``: ``1_0`` is 10, where a duration refuses '_'). ``show`` is a value short enough for a one-line message.
"""
from __future__ import annotations

import reprlib
from pathlib import Path
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from contracts.runfolder import read_regular

MAX_BYTES = 1 << 20     # a plan or script is a page of text; a megabyte is a mistake
MAX_DEPTH = 32
MAX_NODES = 100_000     # after alias expansion
_STD = "tag:yaml.org,2002:"
_SCALARS = {_STD + t for t in ("str", "int", "float", "bool", "null")}
_AS_TEXT = {_STD + "timestamp"}  # `at: 2024-01-01` is a date to YAML 1.1 and text to us


class YamlError(ValueError):
    """Not YAML goldfish reads; the message is ``file:line: reason``."""


def load(path: str | Path, what: str = "the file") -> tuple[str, yaml.Node | None]:
    """The file's text and its checked root node (None for an empty document)."""
    try:
        data = read_regular(path, MAX_BYTES)  # a FIFO never ends, nor does /dev/zero: neither is a plan or a script
    except OSError as exc:
        raise YamlError(f"{path}: cannot read {what}: {exc.strerror or exc}") from None
    text = decode(data, str(path))
    return text, parse(text, str(path))


def decode(data: bytes, path: str) -> str:
    """UTF-8 text without its byte-order mark, or YamlError naming the line of the first bad byte (or a
    second byte-order mark, which YAML would read as part of the first key)."""
    if len(data) > MAX_BYTES:
        raise YamlError(f"{path}: more than the {MAX_BYTES} bytes a YAML file may have")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if data[:2] in (b"\xff\xfe", b"\xfe\xff"):  # a byte-order mark of UTF-16 (an editor's "Unicode" save)
            raise YamlError(f"{path}:1: UTF-16 text (its byte-order mark), not UTF-8: save it as UTF-8") from None
        line = data.count(b"\n", 0, exc.start) + 1
        raise YamlError(f"{path}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x}): "
                        "is this a binary file?") from None
    text = text.removeprefix("\ufeff")
    if text.startswith("\ufeff"):
        raise YamlError(f"{path}:1: starts with a stray byte-order mark (U+FEFF) after the first one: "
                        "remove it (an editor or a concatenation added it)")
    return text


def parse(text: str, path: str = "<yaml>") -> yaml.Node | None:
    """Compose ``text`` into a node tree and check it (see the module docstring)."""
    if len(text) > MAX_BYTES:
        raise YamlError(f"{path}: {len(text)} characters is more than the {MAX_BYTES} a YAML file may have")
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
        if mark is None and isinstance(getattr(exc, "position", None), int):  # a ReaderError: a bad character
            where = f"{path}:{text.count(chr(10), 0, exc.position) + 1}"
        else:
            where = f"{path}:{mark.line + 1}" if mark else path
        reason = getattr(exc, "problem", None) or str(exc).split("\n", 1)[0]
        raise YamlError(f"{where}: not valid YAML: {reason}") from None
    except RecursionError:
        raise YamlError(f"{path}: not valid YAML here: nested too deeply") from None
    if root is not None:
        _check(root, path)
    return root


def _check(root: yaml.Node, path: str) -> None:
    """Tags, keys, depth and expanded size, without expanding anything (sizes are memoised per node)."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: yaml.Node, depth: int) -> int:
        where = f"{path}:{line(node)}"
        if id(node) in sizes:
            return sizes[id(node)]
        if id(node) in open_nodes:
            raise YamlError(f"{where}: an alias refers to a node that contains it")
        if depth > MAX_DEPTH:
            raise YamlError(f"{where}: nested more than {MAX_DEPTH} levels deep")
        if isinstance(node, yaml.ScalarNode):
            if node.tag == _STD + "merge":  # a plain `<<` that is no key (those are refused below): text, quoted
                raise YamlError(f"{where}: << unquoted is YAML's merge key; for the text, quote it: '<<'")
            if node.tag not in _SCALARS and node.tag not in _AS_TEXT:
                raise YamlError(f"{where}: tag {shown_tag(node.tag)} is not allowed (plain data only)")
            try:
                node.value.encode("utf-8")
            except UnicodeEncodeError as exc:  # a "\ud800" escape: every journal line and request would fail
                raise YamlError(f"{where}: {show(node.value)} holds a lone surrogate (\\u{ord(node.value[exc.start]):04x}), "
                                "which no UTF-8 text can carry") from None
            sizes[id(node)] = 1
            return 1
        if node.tag not in (_STD + "seq", _STD + "map"):
            raise YamlError(f"{where}: tag {shown_tag(node.tag)} is not allowed (plain data only)")
        open_nodes.add(id(node))
        total = 1
        if isinstance(node, yaml.MappingNode):
            seen: dict[tuple, int] = {}
            for key, item in node.value:
                if key.tag == _STD + "merge":  # `<<: *base`: YAML 1.1's merge key, which no reader here expands
                    raise YamlError(f"{path}:{line(key)}: merge keys (<<) are not supported: write the keys out")
                if not isinstance(key, yaml.ScalarNode):
                    raise YamlError(f"{path}:{line(key)}: a key must be a plain value, not a "
                                    f"{'list' if isinstance(key, yaml.SequenceNode) else 'mapping'}")
                if (key.tag, key.value) in seen:  # YAML wants keys unique; PyYAML would keep the last silently
                    raise YamlError(f"{path}:{line(key)}: {show(key.value)[1:-1]}: given twice (first on line "
                                    f"{seen[key.tag, key.value]})")
                seen[key.tag, key.value] = line(key)
                total += size(key, depth + 1) + size(item, depth + 1)
        else:
            for item in node.value:
                total += size(item, depth + 1)
        open_nodes.discard(id(node))
        if total > MAX_NODES:
            raise YamlError(f"{where}: expands to more than {MAX_NODES} values (aliases repeated?)")
        sizes[id(node)] = total
        return total

    size(root, 0)


def value(node: yaml.Node | None, path: str = "<yaml>") -> Any:
    """The plain Python value of a checked node; YamlError naming the line when a scalar cannot be built."""
    if node is None:
        return None
    if isinstance(node, yaml.MappingNode):
        return {value(k, path): value(v, path) for k, v in node.value}
    if isinstance(node, yaml.SequenceNode):
        return [value(item, path) for item in node.value]
    if node.tag in _AS_TEXT:
        return node.value
    try:
        built = SafeConstructor().construct_object(node)
    except (ValueError, yaml.YAMLError) as exc:  # e.g. an int beyond Python's digit limit
        raise YamlError(f"{path}:{line(node)}: {show(node.value)} is not a valid "
                        f"{shown_tag(node.tag).lstrip('!')}: {str(exc).split(chr(10))[0][:120]}") from None
    if why := misread_number(node) or _underscored(node):
        raise YamlError(f"{path}:{line(node)}: {why}")
    return built


def _underscored(node: yaml.ScalarNode) -> str | None:
    """Why a number holding '_' is refused (``1_0``: YAML 1.1 drops the '_' and reads 10), or None: a duration, a
    script's count and a gate refuse '_', so a plan's bare number must too (docs/chaos.md)."""
    if node.tag not in (_STD + "int", _STD + "float") or "_" not in node.value:
        return None
    shown = show(node.value.strip())[1:-1]
    return (f"{shown}: write {node.value.strip().replace('_', '')} (YAML 1.1 drops the '_' of a number; here a number "
            "is ASCII digits 0-9 without '_', as in durations)")


def misread_number(node: yaml.Node | None) -> str | None:
    """Why a number reads otherwise in YAML 1.1 than people read it (``010`` is 8, ``0x10`` 16, ``1:30`` 90),
    or None. Plans get YAML 1.1's value and scripts read the text, so either way one side is wrong: refused."""
    if not isinstance(node, yaml.ScalarNode) or node.tag not in (_STD + "int", _STD + "float"):
        return None
    text = node.value.strip()
    shown, digits = show(text)[1:-1], text.lstrip("+-").replace("_", "")
    if ":" not in digits and not (node.tag == _STD + "int" and len(digits) > 1 and digits[0] == "0"):
        return None
    try:
        read = show(SafeConstructor().construct_object(node))
    except ValueError:  # more digits than Python prints
        read = "a number of thousands of digits"
    if ":" in digits:
        return f"{shown}: write {read} (YAML 1.1 reads {shown} in base 60)"
    if digits[1] in "xb":
        base = "hexadecimal" if digits[1] == "x" else "binary"
        return f"{shown}: write {read} (YAML 1.1 reads 0{digits[1]} as {base})"
    meant = show(("-" if text.startswith("-") else "") + (digits.lstrip("0") or "0"))[1:-1]
    return f"{shown}: write {meant} (a leading 0 reads as octal in YAML 1.1: {shown} is {read})"


def line(node: yaml.Node) -> int:
    """The node's 1-based line in its file."""
    return node.start_mark.line + 1


def show(value: Any, limit: int = 60) -> str:
    """A repr short enough for one line of a message."""
    r = reprlib.Repr()
    r.maxstring = r.maxother = limit
    r.maxlist = r.maxdict = 6
    r.maxlevel = 2
    return r.repr(value)


def shown_tag(tag: str) -> str:
    return "!!" + tag[len(_STD):] if tag.startswith(_STD) else tag
