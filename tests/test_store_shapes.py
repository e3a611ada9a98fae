"""Store shapes real bots use, against a real redis-server: a hash of numbered fields beside metadata fields
(a title, a count, updated_at) is a history; entries that are valid JSON of another shape (Gradio's [user, bot]
pairs, a stream entry's text under a field named by its role) or plain "user: text" lines stop the audit (exit 2)
naming that cause, not "msgpack"."""
from __future__ import annotations

import json
import random

import msgpack
import pytest

from oracle.audit import audit_run
from oracle.audit_cli import main as audit_main
from oracle.keys import TemplateMismatch
from oracle.store import StoreOptions
from support_oracle import TurnSpec, build_world, finding_keys, inject, read_findings, simple_specs, write_journal

TEMPLATE = "chat:{session}"


def clean_specs(sessions: int = 4) -> list[list[TurnSpec]]:
    """Every turn acknowledged, every probe answered: the journal alone fails no gate (the CLI then exits 2, not 1,
    when the store cannot be read)."""
    return [[TurnSpec("plant", "ok"), TurnSpec("chatter", "ok", burst=2), TurnSpec("chatter", "ok"),
             TurnSpec("probe", "ok"), TurnSpec("chatter", "ok")] for _ in range(sessions)]


def plain(m: dict) -> dict:
    return {"role": "user" if m["type"] == "human" else "assistant", "content": m["data"]["content"]}


def options(server, **extra) -> StoreOptions:
    return StoreOptions(url=server.url, key_template=TEMPLATE, direction="rpush", role_field="role",
                        content_field="content", **extra)


def numbered_hash(client, session: str, messages: list, numbers: list[int] | None = None, meta: str = "title",
                  titled: bool = True) -> None:
    """HSET chat:<session> 0 msg 1 msg ... (out of order on the wire), with the metadata fields a bot adds."""
    numbers = list(range(len(messages))) if numbers is None else numbers
    fields = {str(n): json.dumps(plain(m)) for n, m in reversed(list(zip(numbers, messages)))}
    if meta == "title" and titled:
        fields["title"] = "Delivery question"
    elif meta == "count":
        fields.update({"count": str(len(messages)), "updated_at": "1700000000.25"})
    client.hset(f"chat:{session}", mapping=fields)


@pytest.mark.parametrize("meta", ["title", "count"])
def test_a_numbered_hash_beside_metadata_fields_is_the_history(meta, tmp_path, redis_server):
    """A correct bot (MODE=hash_title: a title on half the conversations; MODE=hash_meta: count and updated_at on
    all) FAILed with every titled session's turns lost, or stopped with exit 2: no anomaly at all."""
    world = build_world(simple_specs(4), seed=11)
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = redis_server.client()
    for i, s in enumerate(world.order):
        numbered_hash(client, s, [m for _, m in world.stored[s]], meta=meta, titled=i % 2 == 0)
    summary = audit_run(run, options(redis_server))
    assert finding_keys(run) == set() and summary["anomalies"] == {}, read_findings(run)[:3]


def test_a_numbered_message_missing_from_a_titled_hash_is_that_turn_lost(tmp_path, redis_server):
    """The numbered fields are read, in numeric order (a gap where the lost turn's fields were is no matter),
    the title beside them is not: the one lost turn is found, nothing else."""
    world = build_world(simple_specs(3), seed=5)
    full = {s: list(world.stored[s]) for s in world.order}
    expected = inject(world, world.order[0], "lost", random.Random(1))
    assert expected
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = redis_server.client()
    for s in world.order:
        kept = [(n, m) for n, (turn, m) in enumerate(full[s]) if any(m is k for _, k in world.stored[s])]
        numbered_hash(client, s, [m for _, m in kept], [n for n, _ in kept])
    lost_session = world.order[0]
    assert client.hlen(f"chat:{lost_session}") - 1 < len(full[lost_session])  # a gap in the numbers
    audit_run(run, options(redis_server))
    assert finding_keys(run) == expected


def test_a_hash_of_neither_kind_is_still_named(tmp_path, redis_server):
    """A hash with no numbered field and no --messages-field: a corrupt finding naming its fields; every session
    so, the audit stops naming the key's layout, not a format."""
    world = build_world(clean_specs(3), seed=7)
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = redis_server.client()
    first, *rest = world.order
    client.hset(f"chat:{first}", mapping={"title": "Delivery question", "user": "u"})
    for s in rest:
        numbered_hash(client, s, [m for _, m in world.stored[s]])
    audit_run(run, options(redis_server))
    corrupt = [f for f in read_findings(run) if f["class"] == "corrupt"]
    assert corrupt and corrupt[0]["session"] == first
    assert "<a hash without a field 'messages' or numbered fields: title, user>" in corrupt[0]["evidence"]["excerpt"]
    for s in rest:
        client.delete(f"chat:{s}")
        client.hset(f"chat:{s}", mapping={"title": "t", "updated_at": "1"})
    with pytest.raises(TemplateMismatch, match="decodes as a message: .*3 keys are of a layout the audit does not read "
                                               "as a history .*without a field 'messages'") as caught:
        audit_run(run, options(redis_server))
    assert "msgpack" not in str(caught.value)


def gradio(client, session: str, messages: list) -> None:
    """A Gradio-style history: one JSON list of [user, bot] pairs, SET whole."""
    pairs = []
    for m in messages:
        if m["type"] == "human":
            pairs.append([m["data"]["content"], None])
        else:
            pairs[-1][1] = m["data"]["content"]
    client.set(f"chat:{session}", json.dumps(pairs))


def stream_rolefield(client, session: str, messages: list) -> None:
    """XADD k * user <text> / XADD k * assistant <text>: the text under a field named by the role."""
    for m in messages:
        client.xadd(f"chat:{session}", {plain(m)["role"]: m["data"]["content"]})


def plainlist(client, session: str, messages: list) -> None:
    """RPUSH k "user: <text>": plain text lines, no JSON."""
    client.rpush(f"chat:{session}", *[f"{plain(m)['role']}: {m['data']['content']}" for m in messages])


def msgpacked(client, session: str, messages: list) -> None:
    client.rpush(f"chat:{session}", *[msgpack.packb(plain(m)) for m in messages])


@pytest.mark.parametrize("store, fmt, match", [
    ("gradio", "blob", r"decodes as a message: .* valid JSON, but not messages with a role and a text at "
                       r"--role-field 'role' / --content-field 'content' \(wrong shape: a JSON list, not an object"),
    ("stream_rolefield", "auto", r"decodes as a message: .* valid JSON, but not messages with a role and a text at "
                                 r"--role-field 'role' .*\(wrong shape: no role string at 'role'"),
    ("plainlist", "auto", r"decodes as JSON: .* text that is not JSON \(not valid JSON: user: \[gf"),
    ("msgpack", "auto", r"decodes as JSON: .* not text \(not utf-8\): another format, such as msgpack")])
def test_a_store_of_another_shape_stops_the_audit_naming_the_cause(store, fmt, match, tmp_path, redis_server, capsys):
    """Correct bots whose entries the options do not read: exit 2, nothing judged, the message saying what the
    entries are (valid JSON of another shape, text that is not JSON, binary), counted; "msgpack" only for binary."""
    world = build_world(clean_specs(4), seed=9)
    run = tmp_path / "run"
    write_journal(run, world.records)
    client = redis_server.client()
    write = {"gradio": gradio, "stream_rolefield": stream_rolefield, "plainlist": plainlist, "msgpack": msgpacked}
    for s in world.order:
        write[store](client, s, [m for _, m in world.stored[s]])
    with pytest.raises(TemplateMismatch, match=match) as caught:
        audit_run(run, options(redis_server, format=fmt))
    assert ("msgpack" in str(caught.value)) == (store == "msgpack"), str(caught.value)
    assert "entries in 4 keys" in str(caught.value)
    code = audit_main([str(run), "--store-url", redis_server.url, "--key-template", TEMPLATE, "--direction", "rpush",
                       "--role-field", "role", "--content-field", "content", "--store-format", fmt, "--jobs", "1"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "oracle audit: not one entry of the 4 sessions" in err and ("msgpack" in err) == (store == "msgpack"), err
