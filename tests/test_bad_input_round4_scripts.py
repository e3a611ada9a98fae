"""Bad input, round 4: scripts, plans' numbers, Locust options and refbot flags that were read wrong in silence.

- a number YAML 1.1 reads otherwise than it looks (`010` is 8, `0x10` 16, `1:30` 90): a chaos plan ran `at: 010`
  at +8s while a script read `burst: 010` as 10; both are refused naming file:line (contracts/yamldoc.py);
- script steps whose value was dropped: `chatter: [..]`, `{..}` or `~` (a random filler line, or the text "~"),
  `think: {min: ..}` (0), `burst: {turns: 3, delay: 5s}` (delay ignored), and filler that is a probe in lower case;
- Locust options where one silently lost: `--audit-every` with no store or with `--no-audit`, an unknown
  `--chaos-backend` without `--chaos`, `--session-field` beside `--session-header`, a `--header` of the session
  header's name, and a `--chat-path` of `//chat` (every turn failed);
- `refbot serve --redis-url http://...` (a traceback, exit 1) and `refbot up --save 'abc def'` (redis-server's
  config error, exit 1): exit 2 naming the flag, nothing started.
"""
from __future__ import annotations

import pytest

from locustfiles.script import ScriptError, load_script, parse_script
from support_refbot import REPO, processes_mentioning, refbot_cli
from test_bad_input import LocustLikeParser, assert_named, init_exit, marked_line
from test_bad_input_options import refbot_up

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


# ---- numbers YAML 1.1 misreads: chaos plans (contracts.yamldoc.value) -------------------------------------
KILL = "faults:\n  - {id: k, kind: kill, target: bot, duration: 1s, "
PLANS = [
    ("octal-at", KILL + "at: 010}  #!\n", "010: write 10 (a leading 0 reads as octal in YAML 1.1: 010 is 8)"),
    ("octal-count", KILL + "at: 5s, count: 010}  #!\n", "010: write 10"),
    ("octal-negative", KILL + "at: 5s, count: -010}  #!\n", "-010: write -10"),
    ("hex-every", "faults:\n  - {kind: kill, target: bot, duration: 1s, every: 0x10, until: 60}  #!\n",
     "0x10: write 16 (YAML 1.1 reads 0x as hexadecimal)"),
    ("binary-seed", "seed: 0b101  #!\n" + KILL + "at: 1s}\n", "0b101: write 5"),
    ("sexagesimal-at", KILL + "at: 1:30}  #!\n", "1:30: write 90 (YAML 1.1 reads 1:30 in base 60)"),
    ("sexagesimal-float-duration", "duration: 1:30.5  #!\n" + KILL + "at: 1s}\n", "1:30.5: write 90.5"),
    ("octal-id", "faults:\n  - {id: 007, kind: kill, target: bot, at: 1s}  #!\n", "007: write 7"),
]


@pytest.mark.parametrize("name, text, fragment", PLANS, ids=[p[0] for p in PLANS])
def test_a_number_yaml_1_1_misreads_in_a_plan_is_refused_naming_its_line(name, text, fragment, tmp_path, capsys):
    from chaos.__main__ import main

    plan = tmp_path / "plan.yaml"
    plan.write_text(text)
    assert main(["validate", str(plan)]) == 2
    err = capsys.readouterr().err
    assert_named(err, f"{plan}:{marked_line(text)}:", fragment)
    assert "missing" not in err  # the refused value is said once, not as missing too


def test_numbers_that_read_as_they_look_still_load():
    """Plain decimals, 0, a float with a leading 0 before its point, and a quoted "010" (text: 10 s). (No '_':
    ``1_000`` is refused since round 14, as in durations.)"""
    from chaos.plan import parse_plan

    plan = parse_plan("seed: 0\nduration: 1000\nfaults:\n  - {id: k, kind: kill, target: bot, at: \"010\", "
                      "duration: 0.5}\n  - {kind: kill, target: bot, at: 10, count: 2}\n"
                      "  - {kind: kill, target: bot, at: 010.5}\n")
    assert [f.at for f in plan.faults] == [10.0, 10.0, 10.5]
    assert plan.duration == 1000 and plan.faults[1].count.n == 2


# ---- scripts ------------------------------------------------------------------------------------------
P = "steps:\n  - plant: order number\n"
SCRIPTS = [
    ("burst-octal", P + "  - burst: 010  #!\n", "steps[1].burst: 010: write 10 (a leading 0 reads as octal"),
    ("burst-turns-octal", P + "  - burst: {turns: 03}  #!\n", "steps[1].burst: 03: write 3"),
    ("repeat-sexagesimal", "repeat: 1:00  #!\n" + P, "repeat: 1:00: write 60 (YAML 1.1 reads 1:00 in base 60)"),
    ("think-octal", P + "  - think: 010  #!\n", "steps[1].think: 010: write 10"),
    ("chatter-a-list", P + "  - chatter: [first line, second line]  #!\n",
     "steps[1].chatter: must be a non-empty line of text, not a list (or `- chatter` alone for a filler line)"),
    ("chatter-a-mapping", P + "  - chatter: {text: hello there}  #!\n", "steps[1].chatter: must be a non-empty "
     "line of text, not a mapping"),
    ("chatter-tilde", P + "  - chatter: ~  #!\n", "steps[1].chatter: must be a non-empty line of text, not null"),
    ("chatter-nothing", P + "  - chatter:  #!\n", "steps[1].chatter: must be a non-empty line of text, not null"),
    ("chatter-empty-text", P + "  - chatter: ''  #!\n", "steps[1].chatter: must be a non-empty line of text"),
    ("filler-list-null-item", "chatter: [Hello there, ~]  #!\n" + P, "chatter: must be a non-empty line of text, "
     "not null"),
    ("think-a-mapping", P + "  - think: {min: 0.1, max: 0.2}  #!\n",
     "steps[1].think: must be seconds or a range like 0.2-1.0, not a mapping"),
    ("think-a-list", P + "  - think: [0.1, 0.2]  #!\n", "steps[1].think: must be seconds or a range like 0.2-1.0, "
     "not a list"),
    ("think-null", P + "  - think: ~  #!\n", "steps[1].think: must be seconds or a range like 0.2-1.0, not null"),
    ("burst-unknown-key", P + "  - burst: {turns: 3,\n      delay: 5s}  #!\n",
     "steps[1].burst: unknown key 'delay' (a burst takes `turns: N` only)"),
    ("filler-probe-lower-case", P + "  - chatter: what is my order number  #!\n",
     "steps[1].chatter: 'what is my order number' looks like a plant, probe"),
    ("filler-plant-upper-case", "chatter: ['MY PIN IS 1234.']  #!\n" + P, "chatter: 'MY PIN IS 1234.' looks like"),
    ("step-with-an-unknown-second-key", P + "  - {burst: 2, delay: 5s}  #!\n", "steps[1]: a step is one of"),
]


@pytest.mark.parametrize("name, text, fragment", SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_a_script_value_that_would_be_dropped_is_refused_naming_file_line_and_field(name, text, fragment, tmp_path,
                                                                                    parser, capsys):
    script = tmp_path / "script.yaml"
    script.write_text(text)
    code, out = init_exit(parser, ["--script", str(script)], capsys)
    assert code == 2, out
    assert_named(out, f"{script}:{marked_line(text)}: ", fragment)


def test_the_values_each_step_takes_still_load():
    script = parse_script(P + "  - chatter\n  - chatter: Thanks, that is useful.\n  - chatter: 12345\n"
                          "  - burst: {turns: 3}\n  - burst: \"010\"\n  - think: 0.2-1.0\n  - think: 0\n"
                          "  - probe: order number\n", "my.yaml")
    assert [(s.kind, s.text, s.turns, s.think) for s in script.steps[1:]] == [
        ("chatter", None, 1, (0.0, 0.0)), ("chatter", "Thanks, that is useful.", 1, (0.0, 0.0)),
        ("chatter", "12345", 1, (0.0, 0.0)), ("burst", None, 3, (0.0, 0.0)), ("burst", None, 10, (0.0, 0.0)),
        ("think", None, 1, (0.2, 1.0)), ("think", None, 1, (0.0, 0.0)), ("probe", None, 1, (0.0, 0.0))]


def test_every_shipped_script_and_plan_still_loads():
    from chaos.plan import load_plan

    for path in sorted((REPO / "locustfiles" / "scripts").glob("*.yaml")):
        assert load_script(path).turns > 0, path
    for path in [*sorted((REPO / "chaos" / "plans").glob("*.yaml")), REPO / "chaos" / "examples" / "hello-plan.yaml"]:
        assert load_plan(path).faults, path
    with pytest.raises(ScriptError):  # and the new rules do apply to what they load
        parse_script(P + "  - burst: 010\n")


# ---- Locust options ------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def parser():
    from locustfiles import options

    p = LocustLikeParser(prog="locust")
    options.add_arguments(p)
    return p


OPTIONS = [
    (["--audit-every", "5s"], "--audit-every", "--audit-every '5s' needs a store to audit (--store-url, --http-url "
     "or --reader), and none is given"),
    (["--store-url", "redis://127.0.0.1:1/0", "--no-audit", "--audit-every", "2s"], "--audit-every",
     "--audit-every '2s' with --no-audit: there is no audit to roll"),
    (["--chaos-backend", "bogus"], "--chaos-backend", "--chaos-backend: 'bogus' is not one of local, docker, kubernetes"),
    (["--session-field", "sid", "--session-header", "X-Session-Id"], "--session-field 'sid' and --session-header "
     "'X-Session-Id'", "the session id goes in one place"),
    (["--header", "x-session: fixed", "--session-header", "X-Session"], "--header 'x-session' and --session-header "
     "'X-Session'", "name the same header"),
    (["--chat-path", "//chat"], "--chat-path", "--chat-path: '//chat' starts with '//', which names a host"),
]


@pytest.mark.parametrize("argv, where, fragment", OPTIONS, ids=[" ".join(a) for a, _, _ in OPTIONS])
def test_options_that_contradict_each_other_are_refused_by_name(argv, where, fragment, parser, capsys):
    code, out = init_exit(parser, argv, capsys)
    assert code == 2, out
    assert_named(out, where, fragment)


def test_the_neighbours_of_those_refusals_are_accepted(parser, capsys):
    """The default --session-field with --session-header (it is then not in the body), an explicitly empty one, a
    known backend without a plan, another header beside --session-header, a path with one '/' and '//' later."""
    for argv in (["--session-header", "X-Session-Id"], ["--session-field", "", "--session-header", "X-S"],
                 ["--chaos-backend", "docker"], ["--header", "X-Tenant: t", "--session-header", "X-Session"],
                 ["--chat-path", "/v1//chat"], ["--audit-every", "0"]):
        assert init_exit(parser, argv, capsys) == (0, ""), argv


# ---- refbot --------------------------------------------------------------------------------------------
def test_serve_with_a_redis_url_that_is_not_redis_is_exit_2_naming_it():
    result = refbot_cli("serve", "--port", "1", "--redis-url", "http://127.0.0.1:1/", timeout=60)
    assert result.returncode == 2, result.stderr[-2000:]
    assert_named(result.stderr, "--redis-url", "'http://127.0.0.1:1/' is not a Redis URL: give redis://, rediss://, "
                 "unix://, redis+sentinel://")


def test_a_redis_url_error_masks_its_password():
    from refbot.config import Config, ConfigError

    with pytest.raises(ConfigError, match=r"--redis-url \(REFBOT_REDIS_URL\) 'redis://:\*\*\*@h:1/abc': path") as info:
        Config.from_env({"REFBOT_REDIS_URL": "redis://:s3cret@h:1/abc"})
    assert "s3cret" not in str(info.value)
    assert Config.from_env({"REFBOT_REDIS_URL": "redis+sentinel://h:1,h:2/mymaster/0"}).redis_url.startswith("redis+")


@pytest.mark.parametrize("save", ["abc def", "1 1 2", "0 1", "-1 1"])
def test_up_with_save_points_redis_would_refuse_is_exit_2_before_anything_starts(save, tmp_path):
    state_dir = tmp_path / "s"
    result = refbot_up(state_dir, "--replicas", "1", "--persistence", "rdb", "--save", save)
    assert result.returncode == 2, result.stderr[-2000:]
    assert_named(result.stderr, f"--save {save!r}", "is not Redis save points: pairs of SECONDS CHANGES")
    assert not (state_dir / "state.json").exists()
    assert processes_mentioning(str(state_dir)) == []


def test_save_points_redis_takes_are_accepted():
    from refbot.__main__ import save_points

    assert all(save_points(s) for s in ("", "1 1", "3600 1 300 100", " 60  10000 ", "1 0"))
