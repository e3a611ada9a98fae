"""The bad-input corpus (#16): everything a user can get wrong, as tables of input -> exit code and a
message that names the file and line, or the option. No traceback, no exit 1 (which means "a gate
failed"), one short message, nothing recorded lost.

Everything runs in-process (the parsers and the ``main()`` functions the commands call), so the
whole corpus takes seconds; the few checks that need a real Locust run are in test_hardening_runs.py,
the property-based fuzzing of the plan, script and journal parsers in test_bad_input_fuzz.py.
A line marked ``#!`` in a YAML case is the line the message must name.
"""
from __future__ import annotations

import os
import json
import re
import zlib
from pathlib import Path

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

OK_FAULT = "{kind: kill, target: bot, at: 1s}"
LAUGHS = "".join(f"{c}: &{c} [{', '.join([f'*{p}'] * 9) if p else ', '.join(['lol'] * 9)}]\n"
                 for p, c in zip(["", "a", "b", "c", "d", "e"], "abcdef"))


def marked_line(text) -> int | None:
    lines = (text.decode("utf-8", "replace") if isinstance(text, bytes) else text).splitlines()
    return next((i + 1 for i, line in enumerate(lines) if "#!" in line), None)


def assert_named(out: str, where: str, fragment: str) -> None:
    assert where in out, out
    assert fragment in out, out
    assert "Traceback" not in out, out
    assert len(out) < 3000, f"{len(out)} characters: {out[:300]}..."


# ---- chaos plans: `python -m chaos validate PLAN` ----------------------------------------------
PLANS = [
    ("python-tag-apply", "faults:\n  - !!python/object/apply:os.system [echo hi]  #!\n",
     "tag !!python/object/apply:os.system is not allowed"),
    ("python-tag-in-a-value", "faults:\n  - kind: !!python/name:os.system  #!\n    target: bot\n    at: 1s\n",
     "tag !!python/name:os.system is not allowed"),
    ("python-tag-top", "name: !!python/object/new:list []  #!\nfaults: [" + OK_FAULT + "]\n", "is not allowed"),
    ("custom-tag", "faults:\n  - {kind: !boom kill, target: bot, at: 1s}  #!\n", "tag !boom is not allowed"),
    ("binary-tag", "faults:\n  - {kind: kill, target: !!binary aGk=, at: 1s}  #!\n", "tag !!binary"),
    ("set-tag", "faults: !!set {a, b}  #!\n", "tag !!set"),
    ("merge-key", "x: &x {kind: kill}\nfaults:\n  - <<: *x  #!\n    target: bot\n", "merge keys (<<) are not supported"),
    ("list-as-key-in-a-fault", "faults:\n  - ? [a, b]  #!\n    : 1\n", "a key must be a plain value, not a list"),
    ("list-as-key-at-top", "? [a, b]  #!\n: 1\nfaults: [" + OK_FAULT + "]\n", "not a list"),
    ("mapping-as-key", "faults:\n  - ? {a: 1}  #!\n    : 1\n", "not a mapping"),
    ("binary-file", b"\x80\x81\x82 binary  #!", "not UTF-8 text (byte 0x80)"),
    ("binary-byte-on-line-3", b"faults:\n  - kind: kill\n    target: b\xffot  #!\n", "not UTF-8 text (byte 0xff)"),
    ("billion-laughs", LAUGHS.replace("f: &f", "f: &f") + "faults:\n  - {kind: *f, target: bot, at: 1s}\n",
     "expands to more than 100000 values"),
    ("recursive-alias", "a: &a [*a]  #!\nfaults: [" + OK_FAULT + "]\n", "refers to a node that contains it"),
    ("nested-60-deep", "faults: " + "[" * 60 + "]" * 60 + "  #!\n", "nested more than 32 levels"),
    ("nested-100000-deep", "faults: " + "[" * 100_000 + "\n", "nested too deeply"),
    ("larger-than-a-megabyte", "# " + "x" * (1 << 20) + "\nfaults: []\n", "more than the 1048576"),
    ("yaml-syntax", "faults:\n  - kind: kill\n   target: bot  #!\n", "not valid YAML"),
    ("tab-indent", "faults:\n\t- kind: kill  #!\n", "not valid YAML"),
    ("control-character", "faults:\n  - {kind: k\x07ill}  #!\n", "not valid YAML"),
    ("duplicate-anchor-use-before-define", "faults:\n  - *nope  #!\n", "not valid YAML"),
    ("empty-file", "", "the plan is empty"),
    ("only-a-comment", "# nothing here\n", "the plan is empty"),
    ("scalar-document", "hello  #!\n", "must be a mapping with a 'faults' list"),
    ("no-faults-key", "name: x  #!\n", "faults: missing"),
    ("faults-a-number", "faults: 3  #!\n", "faults: must be a list"),
    ("faults-empty", "faults: []  #!\n", "faults: the list is empty"),
    ("fault-a-word", "faults:\n  - kill  #!\n", "each fault must be a mapping"),
    ("unknown-plan-key", "fautls: 1  #!\nfaults: [" + OK_FAULT + "]\n", "fautls: unknown plan key"),
    ("long-unknown-key", "x" * 500 + ": 1  #!\nfaults: [" + OK_FAULT + "]\n", "unknown plan key"),
    ("unknown-kind", "faults:\n  - {kind: explode, target: bot, at: 1s}  #!\n", "unknown fault kind 'explode'"),
    ("kind-a-list", "faults:\n  - {kind: [kill], target: bot, at: 1s}  #!\n", "unknown fault kind ['kill']"),
    ("kind-missing", "faults:\n  - {target: bot, at: 1s}  #!\n", "kind: missing"),
    ("kind-a-megabyte-string", "faults:\n  - {kind: '" + "k" * 900_000 + "', target: bot, at: 1s}  #!\n",
     "unknown fault kind"),
    ("target-missing", "faults:\n  - {kind: kill, at: 1s}  #!\n", "target: missing"),
    ("target-empty", "faults:\n  - {kind: kill, target: '', at: 1s}  #!\n", "target: must be a non-empty name"),
    ("target-a-number", "faults:\n  - {kind: kill, target: 3, at: 1s}  #!\n", "target: must be a non-empty name"),
    ("id-with-spaces", "faults:\n  - {id: 'a b', kind: kill, target: bot, at: 1s}  #!\n", "id: must be letters"),
    ("id-twice", "faults:\n  - {id: a, kind: kill, target: bot, at: 1s}\n  - {id: a, kind: kill, target: bot, at: 2s}  #!\n",
     "duplicate fault id 'a'"),
    ("field-twice", "faults:\n  - kind: kill\n    target: bot\n    at: 1s\n    at: 2s  #!\n", "at: given twice"),
    ("at-and-every", "faults:\n  - {kind: kill, target: bot, at: 1s, every: 2s}  #!\n", "give either 'at'"),
    ("neither-at-nor-every", "faults:\n  - {kind: kill, target: bot}  #!\n", "at: missing"),
    ("start-with-at", "faults:\n  - {kind: kill, target: bot, at: 1s, start: 1s}  #!\n", "start: only goes with 'every'"),
    ("every-zero", "duration: 10s\nfaults:\n  - {kind: kill, target: bot, every: 0}  #!\n", "every: must be > 0"),
    ("until-before-start", "faults:\n  - {kind: kill, target: bot, every: 5s, start: 9s, until: 3s}  #!\n",
     "until: must be after start"),
    ("at-nan", "faults:\n  - {kind: kill, target: bot, at: .nan}  #!\n", "at: nan must be a finite duration"),
    ("at-infinity", "faults:\n  - {kind: kill, target: bot, at: .inf}  #!\n", "at: inf must be a finite duration"),
    ("at-negative", "faults:\n  - {kind: kill, target: bot, at: -1}  #!\n", "at: -1 must be a finite duration"),
    ("at-a-word", "faults:\n  - {kind: kill, target: bot, at: soon}  #!\n", "at: 'soon' is not a duration"),
    ("at-units-out-of-order", "faults:\n  - {kind: kill, target: bot, at: 1s1m}  #!\n", "is not a duration"),
    ("at-far-away", "faults:\n  - {kind: kill, target: bot, at: 1000000000000000s}  #!\n",
     "longer than the longest duration allowed (30 days)"),
    ("at-a-400-digit-int", "faults:\n  - {kind: kill, target: bot, at: 1" + "0" * 400 + "}  #!\n",
     "must be a finite duration"),
    ("at-a-5000-digit-int", "faults:\n  - {kind: kill, target: bot, at: " + "9" * 5000 + "}  #!\n", "is not a valid int"),
    ("pause-without-duration", "faults:\n  - {kind: pause, target: bot, at: 1s}  #!\n", "duration: missing"),
    ("duration-on-an-instant-kind", "faults:\n  - {kind: lb-drop, target: bot, at: 1s, duration: 2s}  #!\n",
     "is instant; remove 'duration'"),
    ("redis-stall-a-billion-seconds", "faults:\n  - {kind: redis-stall, target: redis, at: 1s, duration: 1000000000s}  #!\n",
     "longer than the longest duration allowed"),
    ("redis-stall-over-its-bound", "faults:\n  - {kind: redis-stall, target: redis, at: 1s, duration: 301s}  #!\n",
     "longer than a redis-stall may last (300s"),
    ("redis-stall-write-over-its-bound",
     "faults:\n  - {kind: redis-stall, target: redis, at: 1s, duration: 1h, mode: write}  #!\n",
     "longer than a redis-stall may last"),
    ("duration-not-shorter-than-every", "duration: 1m\nfaults:\n  - {kind: pause, target: bot, every: 5s, duration: 5s}  #!\n",
     "is not shorter than every"),
    ("every-1ms-for-29-days", "duration: 696h\nfaults:\n  - {kind: redis-client-kill, target: redis, every: 1ms}  #!\n",
     "a plan may have at most 100000"),
    ("many-faults-together", "duration: 20h\nfaults:\n" + "".join(
        f"  - {{kind: redis-client-kill, target: redis, every: 1s, start: {i}s}}\n" for i in range(2)),
     "together; a plan may have at most 100000"),
    ("every-forever", "faults:\n  - {kind: kill, target: bot, every: 5s}  #!\n", "every: repeats forever"),
    ("until-after-the-plan", "duration: 10s\nfaults:\n  - {kind: kill, target: bot, every: 2s, until: 20s}  #!\n",
     "until: 20s is after the plan duration"),
    ("count-zero", "faults:\n  - {kind: kill, target: bot, at: 1s, count: 0}  #!\n", "count must be >= 1"),
    ("count-a-word", "faults:\n  - {kind: kill, target: bot, at: 1s, count: many}  #!\n", "count must be a whole number"),
    ("count-over-100-percent", "faults:\n  - {kind: kill, target: bot, at: 1s, count: 150%}  #!\n", "count must be"),
    ("count-nan", "faults:\n  - {kind: kill, target: bot, at: 1s, count: .nan}  #!\n", "count must be"),
    ("count-on-a-rolling-restart",
     "faults:\n  - {kind: rolling-restart, target: bot, at: 1s, release: v2, count: 1}  #!\n", "remove 'count'"),
    ("grace-nan", "faults:\n  - {kind: restart, target: bot, at: 1s, grace: .nan}  #!\n", "grace: must be in [0, 3600]"),
    ("grace-negative", "faults:\n  - {kind: restart, target: bot, at: 1s, grace: -5}  #!\n", "grace: must be in"),
    ("grace-a-400-digit-int", "faults:\n  - {kind: restart, target: bot, at: 1s, grace: " + "9" * 400 + "}  #!\n",
     "grace: must be float"),
    ("grace-a-word", "faults:\n  - {kind: restart, target: bot, at: 1s, grace: long}  #!\n", "grace: must be float"),
    ("toxicity-above-one", "faults:\n  - {kind: toxic, target: p, at: 1s, duration: 1s, toxic: latency, toxicity: 2}  #!\n",
     "toxicity: must be in [0, 1]"),
    ("latency-not-a-time", "faults:\n  - {kind: toxic, target: p, at: 1s, duration: 1s, toxic: latency, latency: slow}  #!\n",
     "latency: 'slow' is not a duration"),
    ("latency-an-hour-and-more",
     "faults:\n  - {kind: toxic, target: p, at: 1s, duration: 1s, toxic: latency, latency: 2h}  #!\n",
     "latency: must be in"),
    ("toxic-missing", "faults:\n  - {kind: toxic, target: p, at: 1s, duration: 1s}  #!\n", "toxic: missing"),
    ("env-with-a-number", "faults:\n  - {kind: rolling-restart, target: bot, at: 1s, release: v2, env: {A: 1}}  #!\n",
     "env: must map names to text"),
    ("env-a-list", "faults:\n  - {kind: rolling-restart, target: bot, at: 1s, release: v2, env: [a]}  #!\n",
     "env: must be dict"),
    ("release-missing", "faults:\n  - {kind: rolling-restart, target: bot, at: 1s}  #!\n", "release: missing"),
    ("pause-nan", "faults:\n  - {kind: rolling-restart, target: bot, at: 1s, release: v2, pause: .nan}  #!\n",
     "pause: must be in"),
    ("mode-not-a-choice", "faults:\n  - {kind: redis-restart, target: redis, at: 1s, mode: gently}  #!\n",
     "mode: must be one of crash, shutdown"),
    ("unknown-field", "faults:\n  - {kind: kill, target: bot, at: 1s, sevrity: 3}  #!\n", "sevrity: unknown field"),
    ("max-concurrent-zero", "max_concurrent: 0  #!\nfaults: [" + OK_FAULT + "]\n", "max_concurrent: must be a whole"),
    ("max-concurrent-exceeded", "max_concurrent: 1\nfaults:\n  - {kind: pause, target: bot, at: 1s, duration: 5s}\n"
     "  - {kind: pause, target: bot, at: 2s, duration: 5s}  #!\n", "2 faults would be active"),
    ("max-blast-a-word", "max_blast: lots  #!\nfaults: [" + OK_FAULT + "]\n", "max_blast: count must be"),
    ("seed-infinite", "seed: .inf  #!\nfaults: [" + OK_FAULT + "]\n", "seed: must be a whole number"),
    ("seed-a-1e400-float", "seed: 1.0e+400  #!\nfaults: [" + OK_FAULT + "]\n", "seed: must be a whole number"),
    ("seed-negative", "seed: -1  #!\nfaults: [" + OK_FAULT + "]\n", "seed: must be a whole number"),
    ("toxiproxy-not-a-url", "toxiproxy: localhost:8474  #!\nfaults: [" + OK_FAULT + "]\n", "must be an http(s) URL"),
    ("plan-duration-nan", "duration: .nan  #!\nfaults: [" + OK_FAULT + "]\n", "duration: nan must be a finite"),
    ("plan-duration-a-year", "duration: 8760h  #!\nfaults: [" + OK_FAULT + "]\n", "longer than the longest"),
    ("date-is-not-a-time", "faults:\n  - {kind: kill, target: bot, at: 2024-13-45}  #!\n", "is not a duration"),
    ("id-with-a-lone-surrogate", 'faults:\n  - {id: "k\\udfff", kind: kill, target: bot, at: 1s}  #!\n',
     "holds a lone surrogate (\\udfff)"),
]


@pytest.mark.parametrize("name, text, fragment", PLANS, ids=[p[0] for p in PLANS])
def test_bad_plans(name, text, fragment, tmp_path, capsys):
    from chaos.__main__ import main

    plan = tmp_path / "plan.yaml"
    plan.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["validate", str(plan)]) == 2
    line = marked_line(text)
    assert_named(capsys.readouterr().err, f"{plan}:{line}:" if line else str(plan), fragment)


# ---- chaos heal, run folders for chaos, backend options -----------------------------------------
OUTSTANDING = [
    ("garbage", b"garbage\n", "not JSON"),
    ("not-utf8", b'{"faults": "\xff"}', "not UTF-8"),
    ("a-list", b"[]", "not a JSON object but a list"),
    ("empty-file", b"", "not JSON"),
    ("nested-deeply", b"[" * 100_000, "nested too deeply"),
    ("faults-not-a-list", b'{"faults": {}}', "faults: must be a list"),
    ("fault-entry-a-number", b'{"faults": [3]}', "faults[0]: must be an object"),
    ("fault-without-key", b'{"faults": [{"fault": {}}]}', "faults[0].key: missing"),
    ("fault-without-instance", b'{"faults": [{"key": "a@b", "fault": {}}]}', "faults[0].instance: missing"),
    ("fault-without-kind", b'{"faults": [{"key": "a@b", "instance": "b", "fault": {"id": "a", "target": "t"}}]}',
     "faults[0].fault.kind: missing"),
    ("fault-not-an-object", b'{"faults": [{"key": "a@b", "instance": "b", "fault": "kill"}]}', "faults[0].fault: missing"),
    ("duration-a-word", b'{"faults": [{"key": "a@b", "instance": "b", "fault": {"id": "a", "kind": "kill", '
                        b'"target": "t", "duration": "long"}}]}', "fault.duration: must be a number"),
    ("undo-a-list", b'{"faults": [{"key": "a@b", "instance": "b", "undo": [1], "fault": {"id": "a", "kind": "kill", '
                    b'"target": "t"}}]}', "undo and fault.params must be objects"),
    ("backend-a-number", b'{"backend": 3, "faults": []}', "backend: must be a backend name"),
    ("backend-config-a-list", b'{"backend": "local", "backend_config": [1], "faults": []}', "backend_config: must be"),
    ("unknown-backend", b'{"backend": "nope", "faults": [{"key": "a@b", "instance": "b", "fault": {"id": "a", '
                        b'"kind": "kill", "target": "t"}}]}', "unknown backend 'nope'"),
    ("unknown-backend-option", b'{"backend": "local", "backend_config": {"bogus": 1}, "faults": [{"key": "a@b", '
                               b'"instance": "b", "fault": {"id": "a", "kind": "kill", "target": "t"}}]}',
     "backend option 'bogus'"),
]


@pytest.mark.parametrize("name, content, fragment", OUTSTANDING, ids=[o[0] for o in OUTSTANDING])
def test_bad_outstanding_json_names_the_file_and_what_is_wrong(name, content, fragment, tmp_path, capsys):
    from chaos.__main__ import main

    path = tmp_path / "run" / "chaos" / "outstanding.json"
    path.parent.mkdir(parents=True)
    path.write_bytes(content)
    assert main(["heal", str(tmp_path / "run")]) == 2
    assert_named(capsys.readouterr().err, str(path), fragment)
    assert path.read_bytes() == content  # nothing recorded is lost


@pytest.mark.parametrize("folder", ["/no/such/run", "empty", "a-file"])
def test_heal_on_a_folder_that_is_not_a_run_is_exit_2(folder, tmp_path, capsys):
    from chaos.__main__ import main

    if folder == "empty":
        folder = str(tmp_path)
    elif folder == "a-file":
        (tmp_path / "f").write_text("x")
        folder = str(tmp_path / "f")
    assert main(["heal", folder]) == 2
    assert_named(capsys.readouterr().err, folder, "not a run folder")


def test_heal_of_an_empty_name_says_so(capsys):
    from chaos.__main__ import main

    assert main(["heal", ""]) == 2
    assert "error: '' is no run folder: name the run folder to heal" in capsys.readouterr().err  # was "error: : not"


BACKEND_OPTS = [
    (["--backend-opt", "bogus"], "--backend-opt 'bogus': expected KEY=VALUE"),
    (["--backend-opt", "=1"], "expected KEY=VALUE"),
    (["--backend-opt", "bogus=1"], "backend option 'bogus': backend 'local' has no such option"),
    (["--backend-opt", "health_timeout=nan"], "backend option 'health_timeout'"),
    (["--backend-opt", "health_timeout=-1"], "backend option 'health_timeout'"),
    (["--backend-opt", "health_timeout=1e400"], "backend option 'health_timeout': inf must be a number"),
    (["--backend-opt", "state_dir=[1"], "--backend-opt state_dir: the value is not valid JSON"),
    (["--backend-opt", "state_dir=3"], "backend option 'state_dir': 3 is not a str"),
]


@pytest.mark.parametrize("argv, fragment", BACKEND_OPTS, ids=[a[1] for a, _ in BACKEND_OPTS])
def test_bad_backend_options_name_the_option(argv, fragment, tmp_path, capsys):
    from chaos.__main__ import main

    plan = Path(__file__).parent.parent / "chaos" / "plans" / "gentle.yaml"
    assert main(["validate", str(plan), "--backend", "local", "--state-dir", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert fragment in err and "Traceback" not in err, err


def test_a_state_dir_alone_validates_the_plan_against_that_stack(tmp_path, capsys):
    """`chaos validate --state-dir DIR plan.yaml` said "ok" of a target nothing there names: without --backend
    the state dir was ignored. A state dir means the local backend, as a targets file does."""
    from chaos.__main__ import main

    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {kind: kill, target: nosuch, at: 1s}\n")
    assert main(["validate", str(plan), "--state-dir", str(tmp_path / "stack")]) == 2
    err = capsys.readouterr().err
    assert "cannot resolve 'nosuch'" in err and "Traceback" not in err, err


# ---- conversation scripts and goldfish's Locust options: the checks Locust's init runs -----------
class LocustLikeParser(__import__("configargparse").ArgumentParser):
    """configargparse (Locust's parser's base: environment variables, config files) with the web-UI flags Locust's
    parser takes (Locust itself is not imported here: it monkey-patches ssl at import, which breaks the rest of this
    process; test_hardening_runs.py runs it)."""

    def add_argument(self, *args, include_in_web_ui=None, is_secret=None, **kwargs):
        return super().add_argument(*args, **kwargs)

    def error(self, message):
        print(f"{self.prog}: error: {message}", file=__import__("sys").stderr)
        raise SystemExit(2)


@pytest.fixture(scope="module")
def locust_parser():
    from locustfiles import options

    parser = LocustLikeParser(prog="locust")
    options.add_arguments(parser)
    return parser


def init_exit(parser, argv, capsys) -> tuple[int, str]:
    """Parse ``argv`` with goldfish's options and run what Locust's init runs (locustfiles/hooks.py:
    ``_runtime`` and ``_reach_store``): the exit code and what was printed (0 and '' when all is accepted)."""
    import oracle
    from locustfiles.options import OptionError, Settings
    from locustfiles.runtime import Runtime
    from locustfiles.script import ScriptError
    from oracle import AuditOptionError

    try:
        settings = Runtime.from_settings(Settings.from_options(parser.parse_args(argv))).settings
        if settings.store is not None and not settings.no_audit and hasattr(oracle, "reach_store"):
            oracle.reach_store(settings.store)
    except SystemExit as exc:
        captured = capsys.readouterr()
        return exc.code, captured.err + captured.out
    except (OptionError, ScriptError, AuditOptionError) as exc:  # hooks.py: "error: ..." and exit 2
        return 2, f"goldfish: error: {exc}"
    return 0, ""


SCRIPTS = [
    ("python-tag", "steps:\n  - chatter: !!python/object/apply:os.system [id]  #!\n", "is not allowed"),
    ("list-as-key", "? [a, b]  #!\n: 1\nsteps: [chatter]\n", "a key must be a plain value, not a list"),
    ("list-as-key-in-a-step", "steps:\n  - ? [plant]  #!\n    : x\n", "a key must be a plain value"),
    ("binary-file", b"\x89PNG  #!\r\n\x1a\n", "not UTF-8 text (byte 0x89)"),
    ("binary-byte-later", b"name: x\nsteps:\n  - chatter: caf\xe9  #!\n", "not UTF-8 text (byte 0xe9)"),
    ("billion-laughs", LAUGHS + "steps:\n  - chatter: *f\n", "expands to more than"),
    ("recursive-alias", "steps: &s [*s]  #!\n", "refers to a node that contains it"),
    ("nested-deeply", "steps: " + "[" * 5000 + "\n", "nested"),
    ("yaml-syntax", "steps:\n  - plant: order number\n   probe: x  #!\n", "not valid YAML"),
    ("empty-file", "", "a script is a mapping"),
    ("a-list", "- plant: x  #!\n", "a script is a mapping"),
    ("unknown-key", "stpes: []  #!\n", "stpes: unknown key"),
    ("steps-missing", "name: x  #!\n", "steps: must be a non-empty list"),
    ("steps-empty", "steps: []  #!\n", "steps: must be a non-empty list"),
    ("chatter-not-a-list", "chatter: hello  #!\nsteps: [chatter]\n", "chatter: must be a non-empty list"),
    ("chatter-line-looks-like-a-plant", "chatter: ['My pin is 1.']  #!\nsteps: [chatter]\n", "looks like a plant"),
    ("chatter-line-with-a-token", "chatter: ['[gf0123456789abcdeft1] hi']  #!\nsteps: [chatter]\n", "looks like"),
    ("chatter-line-empty", "chatter: ['']  #!\nsteps: [chatter]\n", "must be a non-empty line"),
    # valid YAML, and every conversation died encoding it after the whole load: PASS, exit 3
    ("chatter-line-with-a-lone-surrogate", 'chatter: ["lone \\ud800 surrogate"]  #!\nsteps: [chatter]\n',
     "holds a lone surrogate (\\ud800)"),
    ("repeat-a-word", "repeat: often  #!\nsteps: [chatter]\n", "repeat: 'often' is not a whole number"),
    ("repeat-zero", "repeat: 0  #!\nsteps: [chatter]\n", "repeat: 0 is out of range"),
    ("repeat-huge", "repeat: 99999999999999999999  #!\nsteps: [chatter]\n", "is out of range"),
    ("repeat-5000-digits", "repeat: " + "9" * 5000 + "  #!\nsteps: [chatter]\n", "is not a whole number"),
    ("more-turns-than-a-token-numbers", "repeat: 10000  #!\nsteps:\n" + "  - burst: 20\n" * 6,
     "more than a token can number"),
    ("unknown-step", "steps:\n  - dance: now  #!\n", "unknown step 'dance'"),
    ("plant-without-a-fact", "steps:\n  - plant  #!\n", "'plant' needs a value"),
    ("step-with-two-keys", "steps:\n  - {plant: a, probe: a}  #!\n", "a step is one of"),
    ("fact-upper-case", "steps:\n  - plant: Order Number  #!\n", "must be lower-case words"),
    ("fact-a-list", "steps:\n  - plant: [a]  #!\n", "must be lower-case words"),
    ("probe-before-plant", "steps:\n  - probe: shoe size  #!\n", "probes 'shoe size' before any step plants it"),
    ("burst-of-one", "steps:\n  - burst: 1  #!\n", "1 is out of range [2, 20]"),
    ("burst-of-21", "steps:\n  - burst: 21  #!\n", "21 is out of range"),
    ("burst-a-word", "steps:\n  - burst: many  #!\n", "is not a whole number"),
    ("burst-without-turns", "steps:\n  - burst: {size: 3}  #!\n", "needs `turns: N`"),
    ("only-think-steps", "steps:\n  - think: 1  #!\n  - think: 2\n", "has no turn (only think steps)"),
    ("think-nan", "steps:\n  - think: nan  #!\n", "'nan' is not seconds"),
    ("think-dot-nan", "steps:\n  - think: .nan  #!\n", "is not seconds"),
    ("think-infinity", "steps:\n  - think: inf  #!\n", "is not seconds"),
    ("think-negative", "steps:\n  - think: -1  #!\n", "is not seconds"),
    ("think-reversed-range", "steps:\n  - think: 2-1  #!\n", "is not seconds"),
    ("think-two-days", "steps:\n  - think: 48h  #!\n", "is not seconds"),
    ("think-a-word", "steps:\n  - think: a while  #!\n", "is not seconds"),
]


@pytest.mark.parametrize("name, text, fragment", SCRIPTS, ids=[s[0] for s in SCRIPTS])
def test_bad_scripts_stop_the_run_before_any_load(name, text, fragment, tmp_path, locust_parser, capsys):
    script = tmp_path / "script.yaml"
    script.write_bytes(text if isinstance(text, bytes) else text.encode())
    code, out = init_exit(locust_parser, ["--script", str(script)], capsys)
    assert code == 2
    line = marked_line(text)
    assert_named(out, f"{script}:{line}:" if line else str(script), fragment)


@pytest.mark.parametrize("kind", ["fifo", "device"])
def test_a_script_or_plan_that_is_not_a_regular_file_is_refused_unread(kind, tmp_path, locust_parser, capsys):
    """A FIFO never ends without a writer (the run hung before any load) and /dev/zero never ends at all
    (the whole of it was read into memory: 23 GB before the kernel killed the process)."""
    from chaos.__main__ import main

    if kind == "fifo":
        path, named = tmp_path / "script.yaml", "a FIFO"
        os.mkfifo(path)
    else:
        path, named = Path("/dev/zero"), "a character device"
    code, out = init_exit(locust_parser, ["--script", str(path)], capsys)
    assert code == 2 and f"{path}: cannot read the script: not a regular file but {named}" in out
    assert main(["validate", str(path)]) == 2
    assert f"{path}: cannot read plan: not a regular file but {named}" in capsys.readouterr().err


OPTIONS = [
    (["--think", "nan"], "--think"), (["--think", "inf"], "--think"), (["--think", "-1"], "--think"),
    (["--think", "5-1"], "--think"), (["--think", "2d"], "--think"), (["--think", "1e400"], "--think"),
    (["--timeout", "nan"], "--timeout: nan must be a finite duration"),
    (["--timeout", "inf"], "--timeout: inf must be a finite duration"),
    (["--timeout", "0"], "--timeout: 0.0 must be > 0"), (["--timeout", "-3"], "--timeout"),
    (["--timeout", "1e400"], "--timeout"), (["--timeout", "200000"], "--timeout"),
    (["--timeout", "soon"], "argument --timeout: invalid float value"),
    (["--settle", "nan"], "--settle"), (["--settle", "inf"], "--settle"), (["--settle", "later"], "--settle"),
    (["--step-users", "5", "--steps", "2", "--step-duration", "0"], "--step-duration"),
    (["--step-users", "5", "--steps", "2", "--step-duration", "nan"], "--step-duration"),
    (["--step-users", "5", "--steps", "2", "--step-duration", "400ms"], "--step-duration"),
    (["--step-users", "5"], "--step-users and --steps go together"),
    (["--steps", "-1"], "--steps: -1 is not in"), (["--steps", "100000", "--step-users", "1"], "--steps"),
    (["--step-users", "-4", "--steps", "2"], "--step-users"), (["--step-users", "many"], "argument --step-users"),
    (["--max-probe-amnesia", "nan"], "--max-probe-amnesia"), (["--max-probe-amnesia", "inf"], "--max-probe-amnesia"),
    (["--max-probe-amnesia", "2"], "--max-probe-amnesia"), (["--max-stored-loss", "-0.1"], "--max-stored-loss"),
    (["--max-crosstalk", "nan"], "--max-crosstalk"), (["--max-crosstalk", "1.5"], "--max-crosstalk"),
    (["--max-crosstalk", "inf"], "--max-crosstalk"),
    (["--gate", "probe_amnesia=nan"], "--gate"), (["--gate", "probe_amnesia=inf"], "--gate"),
    (["--gate", "nonsense=1"], "--gate"), (["--gate", "/no/such/gates.yaml"], "--gate"),
    (["--message-field", "x", "--session-field", "x"], "--message-field 'x' and --session-field 'x' are the same"),
    (["--message-field", "a", "--session-field", "a.b"], "--message-field 'a' and --session-field 'a.b' overlap"),
    (["--message-field", "a.b", "--session-field", "a"], "overlap"),
    (["--message-field", "a..b"], "--message-field: 'a..b' has an empty part"),
    (["--session-field", ".id"], "--session-field: '.id' has an empty part"),
    (["--reply-field", "data."], "--reply-field: 'data.' has an empty part"),
    (["--message-field", ""], "--message-field must not be empty"),
    (["--reply-format", "yaml"], "--reply-format: 'yaml' is not one of json, text, sse, ndjson, xml"),
    (["--body", "{nope"], "--body: not JSON"), (["--body", '{"t": NaN}'], "--body: not JSON"),
    (["--body", '{"t": Infinity}'], "--body: not JSON"), (["--body", "[1]"], "--body: '[1]' is not a JSON object"),
    (["--body", '{"input": "x"}', "--message-field", "input.text"], "--message-field: 'input.text': 'text' is inside"),
    (["--message-field", "messages.2.content"], "--message-field: 'messages.2.content': '2' is not an index"),
    (["--chat-path", "/c/{id}"], "--chat-path: '/c/{id}': the only placeholder is {session}"),
    (["--session-field", ""], "--session-field or --session-header"),
    (["--session-header", "X Conversation"], "--session-header: 'X Conversation' is not a header name"),
    (["--chat-path", "chat"], "--chat-path: 'chat' must start with '/'"),
    (["--chat-path", "/a b"], "--chat-path"), (["--chat-path", "/a\nb"], "--chat-path"),
    (["--header", "no colon here"], "--header"), (["--header", ": value"], "--header"),
    (["--header", "X-A: a\r\nInjected: b"], "--header: the value of 'X-A' holds a control character"),
    (["--session-from", "body:id"], "--session-from: 'body:id' is not reply:FIELD, header:NAME or cookie:NAME"),
    (["--session-from", "reply:"], "--session-from: 'reply:' is not"), (["--session-from", "cookie"], "--session-from"),
    (["--session-from", "reply:a..b"], "--session-from: 'reply:a..b': the field path has an empty part"),
    (["--session-from", "reply:id", "--reply-format", "text"], "--session-from: 'reply:id': a text reply has no JSON fields"),
    (["--session-from", "header:X Id"], "--session-from: 'X Id' is not a header name"),
    (["--session-from", "reply:id", "--chat-path", "/c/{session}"], "--session-from with {session} in --chat-path"),
    (["--start-path", "/threads"], "--start-path needs --session-from"),
    (["--body-format", "xml"], "--body-format: 'xml' is not one of json, form"),
    (["--chat-method", "DELETE"], "--chat-method: 'DELETE' is not one of POST, PUT, PATCH, GET"),
    (["--chat-method", "get", "--message-field", "q.text"], "--chat-method GET: a query's fields are flat"),
    (["--body-format", "form", "--message-field", "input.text"], "--body-format form: a form's fields are flat"),
    (["--body-format", "form", "--body", '{"config": {"a": 1}}'], "--body-format form: a form's fields are flat, but 'config' holds an object"),
    (["--message-field", "messages.*.content"], "--message-field: 'messages.*.content': '*' (every item of a list)"),
    (["--start-path", "threads", "--session-from", "reply:id"], "--start-path: 'threads' must start with '/'"),
    (["--start-path", "/t/{session}", "--session-from", "reply:id"], "--start-path: '/t/{session}' must start"),
    (["--start-path", "/t", "--session-from", "reply:id", "--start-body", "[1]"], "--start-body: '[1]' is not a JSON"),
    (["--start-path", "/t", "--session-from", "reply:id", "--start-body", "{x"], "--start-body: not JSON"),
]


@pytest.mark.parametrize("argv, fragment", OPTIONS, ids=[" ".join(a) for a, _ in OPTIONS])
def test_bad_options_stop_the_run_before_any_load(argv, fragment, locust_parser, capsys):
    code, out = init_exit(locust_parser, argv, capsys)
    assert code == 2
    assert_named(out, fragment.split(":")[0].split(" ")[-1] if fragment.startswith("argument") else
                 fragment.split()[0].rstrip(":"), fragment)


def test_a_header_name_with_a_space_does_not_print_its_value(locust_parser, capsys):
    code, out = init_exit(locust_parser, ["--header", "Auth orization: Bearer s3cr3t"], capsys)
    assert code == 2 and "--header" in out and "s3cr3t" not in out, out


STORE_OPTIONS = [
    (["--store-url", "http://:s3cr3t@127.0.0.1:1/"], "--store-url 'http://:***@127.0.0.1:1/': not a Redis URL"),
    (["--store-url", "redis://:s3cr3t@127.0.0.1:abc/0"], "--store-url 'redis://:***@127.0.0.1:abc/0'"),
    (["--store-url", "redis://127.0.0.1:6379/0?db=x"], "--store-url"),
    (["--store-url", "redis://127.0.0.1/0", "--store-format", "xml"], "--format must be auto, list or blob"),
    (["--store-url", "redis://127.0.0.1/0", "--direction", "up"], "--direction must be lpush or rpush"),
    (["--store-url", "redis://127.0.0.1/0", "--key-template", "history"], "--key-template 'history' must contain"),
    (["--store-url", "redis://127.0.0.1/0", "--batch", "0"], "--batch: 0 must be >= 1"),
    (["--store-url", "redis://127.0.0.1/0", "--batch", "lots"], "--batch: 'lots' is not a whole number"),
    (["--store-url", "redis://127.0.0.1/0", "--batch", "1000000"], "--batch: 1000000 is more than"),
    (["--store-url", "redis://127.0.0.1/0", "--user-role", "ai"], "--user-role and --assistant-role both name ai"),
    (["--store-url", "redis://127.0.0.1/0", "--content-field", "data..content"], "--content-field"),
    (["--store-url", "redis://127.0.0.1/0", "--role-field", ".type"], "--role-field"),
    (["--http-url", "ftp://127.0.0.1/{session}"], "--http-url 'ftp://127.0.0.1/{session}': not an http(s)"),
    (["--http-url", "http://127.0.0.1/history"], "--http-url 'http://127.0.0.1/history' must contain {session}"),
    (["--http-url", "http://127.0.0.1:99999/{session}"], "--http-url"),
    (["--reader", "no_such_module_here:read"], "--reader 'no_such_module_here:read': cannot import"),
    (["--reader", "os:no_such_function"], "--reader 'os:no_such_function': os has no function"),
    (["--reader", "just-a-name"], "--reader 'just-a-name' must look like package.module:function"),
]


@pytest.mark.parametrize("argv, fragment", STORE_OPTIONS, ids=[" ".join(a) for a, _ in STORE_OPTIONS])
def test_bad_store_options_stop_the_run_before_any_load(argv, fragment, locust_parser, capsys):
    code, out = init_exit(locust_parser, argv, capsys)
    assert code == 2
    assert_named(out, fragment.split()[0].rstrip(":"), fragment)
    assert "s3cr3t" not in out


def test_an_unreachable_store_stops_the_run_before_any_load(locust_parser, capsys, redis_server):
    from conftest import free_port

    redis_server.client().config_set("requirepass", "s3cr3t")
    cases = [
        (f"redis://:s3cr3t@127.0.0.1:{free_port()}/0", "Connection refused"),
        (f"redis://:wr0ng@127.0.0.1:{redis_server.port}/0", "cannot reach the store"),
        (f"redis://127.0.0.1:{redis_server.port}/0", "cannot reach the store"),
        (f"redis://:s3cr3t@127.0.0.1:{redis_server.port}/99", "answered but has no such database"),
        (f"http://127.0.0.1:{free_port()}/{{session}}", "cannot connect"),
    ]
    for url, fragment in cases:
        option = "--http-url" if url.startswith("http") else "--store-url"
        code, out = init_exit(locust_parser, [option, url], capsys)
        assert code == 2, url
        assert_named(out, option, fragment)
        assert "s3cr3t" not in out and "wr0ng" not in out, out
    assert init_exit(locust_parser, ["--store-url", f"redis://:s3cr3t@127.0.0.1:{redis_server.port}/0"], capsys) == (0, "")
    # --no-audit: the store is not read, so it need not be reachable
    assert init_exit(locust_parser, ["--store-url", f"redis://127.0.0.1:{free_port()}/0", "--no-audit"], capsys) == (0, "")


# ---- the bot's replies: every one is a journaled outcome, never an exception ------------------
REPLIES = [
    (200, b"", "info", "reply is not JSON"), (200, b"hello", "info", "reply is not JSON"),
    (200, b"\xff\xfe\x00", "info", "reply is not JSON"), (200, b'{"reply": "x"', "info", "reply is not JSON"),
    (200, b"[" * 100_000, "info", "reply is not JSON"), (200, b'{"reply": ' * 10_000, "info", "reply is not JSON"),
    (200, b"NaN", "info", "no reply field 'reply' (the response is a JSON float)"),
    (200, b"[]", "info", "no reply field 'reply' (the response is a JSON list)"),
    (200, b'"just text"', "info", "no reply field 'reply' (the response is a JSON string)"),
    (200, b'"{\\"reply\\": \\"x\\"}"', "info",
     "no reply field 'reply' (the response is a JSON string that holds JSON: the body was encoded twice)"),
    (200, b"{}", "info", "no reply field 'reply' (the response is an empty JSON object)"),
    (200, b'{"reply": null}', "info", "reply field 'reply' is not text"),
    (200, b'{"reply": 1e400}', "info", "reply field 'reply' is not text"),
    (200, b'{"reply": ["a"]}', "info", "reply field 'reply' is not text"),
    (200, b'{"reply": {"text": "a"}}', "info", "reply field 'reply' is not text"),
    (200, b'{"Reply": "wrong case"}', "info", "no reply field 'reply' (the response's fields: 'Reply')"),
    (500, b'{"reply": "oops"}', "info", "HTTP 500"), (404, b"", "info", "HTTP 404"), (302, b"", "info", "HTTP 302"),
    (200, b'{"reply": "lone \\ud800 surrogate"}', "ok", None),
    (200, b'{"reply": "nul \\u0000 inside"}', "ok", None),
    (200, '{"reply": "ünïcödé ✓"}'.encode(), "ok", None),
    (200, b'{"reply": "' + b"x" * 5_000_000 + b'"}', "ok", None),
    (202, b"", "info", "reply is not JSON (HTTP 202: a job API? --poll-path polls for its reply)"),  # bot hunt 13
    (202, b'{"id": "j1"}', "info", "no reply field 'reply' (the response's fields: 'id')"),
]


@pytest.mark.parametrize("status, body, outcome, error", REPLIES, ids=[f"{s}-{b[:24]!r}" for s, b, _, _ in REPLIES])
def test_bad_replies_are_journaled_outcomes(status, body, outcome, error, tmp_path):
    from contracts.journal import Turn, decode_line
    from locustfiles.contract import ChatContract
    from locustfiles.journal import Journal
    from locustfiles.outcome import judge_response

    got, reply, text = judge_response(status, body, None, ChatContract())
    assert (got, text) == (outcome, error)
    journal = Journal(tmp_path / "j.jsonl")  # the record of that turn can always be written and read back
    journal.record(Turn(session="gf0123456789abcdef", turn=0, sent=1.0, received=2.0, outcome=got, reply=reply,
                        error=text, status=status))
    assert decode_line(journal.path.read_bytes()).outcome == outcome


# ---- journals: one bad line is one file:line problem; the rest is read ------------------------
GOOD = b'{"run":"r","session":"gf0000000000000001","turn":0,"outcome":"ok","sent":1.0,"received":2.0}\n'
BIG = b"1" + b"0" * 400
JOURNAL_LINES = [
    ("invalid-utf8-in-a-string", b'{"session":"gf\xff","turn":1,"outcome":"ok","sent":1}\n', "not UTF-8"),
    ("invalid-utf8-bare", b"\xc3\x28\n", "not UTF-8"),
    ("turn-1e400", b'{"session":"gfa","turn":1e400,"outcome":"ok","sent":1}\n', "turn"),
    ("sent-1e400", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1e400}\n', "sent"),
    ("turn-a-400-digit-int", b'{"session":"gfa","turn":' + BIG + b',"outcome":"ok","sent":1}\n', "is not a finite number"),
    ("sent-a-400-digit-int", b'{"session":"gfa","turn":1,"outcome":"ok","sent":' + BIG + b'}\n', "is not a finite number"),
    ("turn-a-5000-digit-int", b'{"session":"gfa","turn":' + b"9" * 5000 + b',"outcome":"ok","sent":1}\n', "not JSON"),
    ("turn-negative", b'{"session":"gfa","turn":-1,"outcome":"ok","sent":1}\n', "turn -1 is out of range"),
    ("turn-too-big", b'{"session":"gfa","turn":1000000,"outcome":"ok","sent":1}\n', "is out of range"),
    ("turn-a-fraction", b'{"session":"gfa","turn":1.5,"outcome":"ok","sent":1}\n', "is not a whole number"),
    ("turn-a-word", b'{"session":"gfa","turn":"first","outcome":"ok","sent":1}\n', "is not a number"),
    ("turn-a-list", b'{"session":"gfa","turn":[1],"outcome":"ok","sent":1}\n', "is not a number"),
    ("sent-noon", b'{"session":"gfa","turn":1,"outcome":"ok","sent":"noon"}\n', "sent 'noon' is not a number"),
    ("sent-NaN", b'{"session":"gfa","turn":1,"outcome":"ok","sent":NaN}\n', "is not a finite number"),
    ("received-Infinity", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1,"received":Infinity}\n', "received"),
    ("outcome-maybe", b'{"session":"gfa","turn":1,"outcome":"maybe","sent":1}\n', "outcome 'maybe' is not one of"),
    # a reply that carried another session's data, its crosstalk written as one id: it was read as none (a PASS)
    ("crosstalk-a-string", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1,"crosstalk":"gfb"}\n',
     "crosstalk 'gfb' is not a list of session ids"),
    ("crosstalk-an-object", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1,"crosstalk":{"gfb":1}}\n',
     "is not a list of session ids"),
    ("crosstalk-of-lists", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1,"crosstalk":[[1]]}\n',
     "is not a list of session ids"),
    # sent in 1970, answered now: a latency of 56 years, read as a turn
    ("sent-decades-before-received", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1,"received":1764000000}\n',
     "from sent 1: no turn waits so long"),
    ("received-an-hour-before-sent", b'{"session":"gfa","turn":1,"outcome":"ok","sent":7200,"received":3600}\n',
     "received 3600 is -3,600 s from sent"),
    ("outcome-missing", b'{"session":"gfa","turn":1,"sent":1}\n', "missing field 'outcome'"),
    ("session-missing", b'{"turn":1,"outcome":"ok","sent":1}\n', "missing field 'session'"),
    ("session-a-list", b'{"session":["a"],"turn":1,"outcome":"ok","sent":1}\n', "is not an id"),
    ("session-empty", b'{"session":"","turn":1,"outcome":"ok","sent":1}\n', "is not an id"),
    ("step-a-word", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1,"step":"first"}\n', "step 'first' is not"),
    ("step-negative", b'{"session":"gfa","turn":1,"outcome":"ok","sent":1,"step":-2}\n', "step -2 is not"),
    ("a-list-not-an-object", b'[1, 2]\n', "not a JSON object but a list"),
    ("a-number", b'42\n', "not a JSON object"),
    ("nested-100000-deep", b"[" * 100_000 + b"\n", "nested too deeply"),
    ("object-nested-deeply", b'{"a":' * 50_000 + b"\n", "not JSON"),
    ("garbage", b"this is not json\n", "not JSON"),
    ("a-nul-byte", b"\x00\n", "not JSON"),
    ("utf-16", '{"a": 1}'.encode("utf-16") + b"\n", "not JSON"),
]


@pytest.mark.parametrize("name, line, fragment", JOURNAL_LINES, ids=[j[0] for j in JOURNAL_LINES])
def test_a_bad_journal_line_is_one_problem_named_by_file_and_line(name, line, fragment, tmp_path):
    from oracle.history import read_journal

    shard = tmp_path / "run" / "journal" / "local-1.jsonl"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(GOOD + line + GOOD.replace(b"01", b"02"))  # in the middle
    sessions, problems = read_journal(tmp_path / "run")
    assert set(sessions) == {"gf0000000000000001", "gf0000000000000002"}
    assert len(problems) == 1 and problems[0].startswith(f"{shard}:2: "), problems
    assert fragment in problems[0] and len(problems[0]) < 400, problems
    shard.write_bytes(GOOD + line)  # a complete last line is not a torn one: still reported
    assert read_journal(tmp_path / "run")[1][0].startswith(f"{shard}:2: ")


JOURNAL_QUIRKS = [
    ("torn-last-line", GOOD + GOOD[:30], 1, []),
    ("blank-lines", GOOD + b"\n\n   \n", 1, []),
    ("status-beyond-http", GOOD.replace(b'"turn":0', b'"status":' + BIG + b',"turn":0'), 1, []),
    ("reply-an-object", GOOD.replace(b'"turn":0', b'"reply":{"a":1},"turn":0'), 1, []),
    ("the-same-turn-twice", GOOD + GOOD, 1, ["journaled twice; kept the first"]),
    ("an-in-flight-first-turn-then-its-outcome", GOOD.replace(b'"outcome":"ok"', b'"outcome":"info"').replace(
        b',"received":2.0}', b',"error":"interrupted: in flight, no outcome recorded"}') + GOOD, 1, []),
]


@pytest.mark.parametrize("name, content, sessions, problems", JOURNAL_QUIRKS, ids=[q[0] for q in JOURNAL_QUIRKS])
def test_journal_quirks_that_are_not_problems(name, content, sessions, problems, tmp_path):
    from oracle.history import read_journal

    shard = tmp_path / "run" / "journal" / "local-1.jsonl"
    shard.parent.mkdir(parents=True)
    shard.write_bytes(content)
    found, seen = read_journal(tmp_path / "run")
    assert len(found) == sessions
    assert [p for p in seen if not any(f in p for f in problems)] == [] and len(seen) == len(problems), seen
    assert all(t.outcome == "ok" for turns in found.values() for t in turns)


JOURNAL_FOLDERS = [
    ("no-such-folder", None, "is not a run folder (no such directory)"),
    ("no-journal-folder", {}, "has no journal"),
    ("only-bad-lines", {"local-1.jsonl": b"garbage\n"}, "holds no valid journal records"),
    ("an-empty-shard", {"local-1.jsonl": b""}, "holds no valid journal records"),
    ("a-binary-shard", {"local-1.jsonl": bytes(range(256)) * 10}, "holds no valid journal records"),
]


@pytest.mark.parametrize("name, shards, fragment", JOURNAL_FOLDERS, ids=[f[0] for f in JOURNAL_FOLDERS])
def test_a_run_folder_without_a_usable_journal_is_exit_2(name, shards, fragment, tmp_path, capsys):
    from oracle.audit_cli import main

    run = tmp_path / "run"
    if shards is not None:
        run.mkdir()
        for shard, content in shards.items():
            (run / "journal").mkdir(exist_ok=True)
            (run / "journal" / shard).write_bytes(content)
    assert main([str(run)]) == 2
    assert_named(capsys.readouterr().err, str(run), fragment)


def test_a_file_given_as_the_run_folder_is_said_to_be_no_directory(tmp_path, capsys):
    """It was "no such directory" (input hunt 15)."""
    from oracle.audit_cli import main

    run = tmp_path / "run.json"
    run.write_text("{}")
    assert main([str(run)]) == 2
    assert_named(capsys.readouterr().err, str(run), "is not a run folder (not a directory)")


# ---- run folders: the chaos timeline and the load steps ----------------------------------------
APPLY = {"fault": "f1#0", "kind": "kill", "target": "bot", "instance": "bot-1", "event": "apply", "time": 10.0,
         "outcome": "ok"}
TIMELINE = [
    ("time-noon", {**APPLY, "time": "noon"}, "time 'noon' is not a finite number"),
    ("time-missing", {k: v for k, v in APPLY.items() if k != "time"}, "time None is not a finite number (required)"),
    ("time-a-list", {**APPLY, "time": [1]}, "is not a finite number"),
    ("time-a-400-digit-int", '{"event": "apply", "time": ' + "1" * 400 + "}", "is not a finite number"),
    ("time-NaN", '{"event": "apply", "time": NaN}', "is not a finite number"),
    ("event-boom", {**APPLY, "event": "boom"}, "event 'boom' is not apply or recover"),
    ("fault-a-number", {**APPLY, "fault": 3}, "fault 3 is not text"),
    ("outcome-meh", {**APPLY, "outcome": "meh"}, "outcome 'meh' is not ok or error"),
    ("detail-a-list", {**APPLY, "detail": [1]}, "detail [1] is not an object"),
    ("planned-a-word", {**APPLY, "planned": "soon"}, "planned 'soon'"),
    ("not-an-object", "[1]", "not a JSON object"),
    ("invalid-utf8", b'{"event": "apply", "time": 1, "kind": "\xff"}', "not UTF-8"),
]


@pytest.mark.parametrize("name, record, fragment", TIMELINE, ids=[t[0] for t in TIMELINE])
def test_a_bad_chaos_timeline_record_is_one_problem(name, record, fragment, tmp_path):
    from oracle.report_data import load_run
    from oracle.timeline import load_faults

    raw = record if isinstance(record, bytes) else (record if isinstance(record, str) else json.dumps(record)).encode()
    good = json.dumps({**APPLY, "event": "recover", "time": 12.0}).encode()
    path = tmp_path / "chaos.jsonl"
    path.write_bytes(json.dumps(APPLY).encode() + b"\n" + raw + b"\n" + good + b"\n")
    problems: list[str] = []
    faults = load_faults(tmp_path, problems)  # the audit's timeline
    assert [(f.start, f.end) for f in faults] == [(10.0, 12.0)]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: ") and fragment in problems[0], problems
    (tmp_path / "run.json").write_text("{}")  # the report's: an audited run folder with that timeline
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "summary.json").write_text('{"metrics": {}, "turns": {}, "observed": {}}')
    data = load_run(tmp_path)
    assert list(data.faults["start"]) == [10.0]
    assert [w for w in data.warnings if w.startswith(f"{path}:2: ")], data.warnings


STEPS = [
    ("step-first", {"step": "first", "users": 1, "start": 1.0, "end": 2.0}, "step 'first' is not a whole number"),
    ("step-negative", {"step": -1, "users": 1}, "step -1"),
    ("step-a-fraction", {"step": 1.5, "users": 1}, "step 1.5"),
    ("step-missing", {"users": 1}, "step None"),
    ("users-many", {"step": 1, "users": "many"}, "users 'many'"),
    ("start-noon", {"step": 1, "users": 1, "start": "noon"}, "start 'noon' is not a finite number"),
    ("end-infinity", '{"step": 1, "users": 1, "end": Infinity}', "end inf"),
    ("a-string", '"step"', "not a JSON object"),
]


@pytest.mark.parametrize("name, record, fragment", STEPS, ids=[s[0] for s in STEPS])
def test_a_bad_load_step_record_is_one_problem(name, record, fragment, tmp_path):
    from oracle.report_data import load_run
    from oracle.timeline import load_steps

    raw = (record if isinstance(record, str) else json.dumps(record)).encode()
    path = tmp_path / "steps.jsonl"
    path.write_bytes(b'{"step": 0, "users": 5, "start": 1.0, "end": 2.0}\n' + raw + b"\n")
    problems: list[str] = []
    assert [s["step"] for s in load_steps(tmp_path, problems)] == [0]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: ") and fragment in problems[0], problems
    (tmp_path / "run.json").write_text("{}")  # the report's: an audited run folder with those steps
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "summary.json").write_text('{"metrics": {}, "turns": {}, "observed": {}}')
    data = load_run(tmp_path)
    assert list(data.steps["step"]) == [0]
    assert [w for w in data.warnings if w.startswith(f"{path}:2: ")], data.warnings


TELEMETRY = [
    ("garbage", "garbage", "not JSON"), ("a-list", "[1, 2]", "not a JSON object"),
    ("time-noon", {"time": "noon"}, "time 'noon' is not a finite number"),
    ("users-a-word", {"time": 2.0, "users": "many"}, "users 'many' is not a whole number"),
    ("rss-of-words", {"time": 2.0, "rss": {"master": "big"}}, "rss {'master': 'big'} is not {process: bytes}"),
    ("store-a-word", {"time": 2.0, "store": "x"}, "store 'x' is not an object"),
    ("store-memory-empty", {"time": 2.0, "store": {"used_memory": ""}}, "store.used_memory '' is not a finite number"),
    ("store-keyspace-a-number", {"time": 2.0, "store": {"keyspace": 5}}, "store.keyspace 5 is not"),
    ("store-keyspace-db-null", {"time": 2.0, "store": {"keyspace": {"db0": None}}}, "store.keyspace"),
    ("store-error-a-number", {"time": 2.0, "store_error": 5}, "store_error 5 is not text"),
]


@pytest.mark.parametrize("name, record, fragment", TELEMETRY, ids=[t[0] for t in TELEMETRY])
def test_a_bad_telemetry_sample_is_one_problem(name, record, fragment, tmp_path):
    from oracle import telemetry

    raw = (record if isinstance(record, str) else json.dumps(record)).encode()
    path = tmp_path / "telemetry.jsonl"
    path.write_bytes(b'{"time": 1.0, "users": 2, "rss": {"local": 1000}, "store": {"used_memory": 5, '
                     b'"keyspace": {"db0": {"keys": 3, "expires": 0}}}}\n' + raw + b"\n")
    problems: list[str] = []
    frame = telemetry.load(tmp_path, problems)
    assert list(frame["time"]) == [1.0] and list(frame["keys"]) == [3]
    assert len(problems) == 1 and problems[0].startswith(f"{path}:2: ") and fragment in problems[0], problems


# ---- stores: what a re-audit reads back from the run's snapshot -------------------------------
SNAPPED = "gf0000000000000001"  # the one session of the snapshot below, in its partition's file
SESSIONS = f"sessions.{zlib.crc32(SNAPPED.encode()) % 16:02d}.jsonl"  # oracle.history.partition_of
SNAPSHOTS = [
    ("meta-not-utf8", "meta.json", b"\x80garbage", "store/meta.json: not JSON"),
    ("meta-a-list", "meta.json", b"[]", "store/meta.json: not a JSON object but a list"),
    ("meta-nested-deeply", "meta.json", b"[" * 100_000, "store/meta.json: not JSON: nested too deeply"),
    ("sessions-garbage-line", SESSIONS, b"garbage\n", f"store/{SESSIONS}:2: not JSON"),
    ("sessions-nested-line", SESSIONS, b"[" * 100_000 + b"\n", f"store/{SESSIONS}:2: not a snapshot line"),
    ("sessions-invalid-utf8", SESSIONS, b'{"session": "\xff"}\n', f"store/{SESSIONS}:2: not JSON"),
    ("sessions-not-a-session", SESSIONS, b'{"key": "x"}\n', f"store/{SESSIONS}:2: not a snapshot line"),
    ("foreign-garbage", "foreign.jsonl", b"x\n", "store/foreign.jsonl:1: not JSON"),
    ("meta-roles-a-number", "meta.json", b'{"complete": true, "partitions": 16, "shape": {"user_roles": 0}}',
     "store/meta.json: Expected `array`, got `int` - at `$.shape.user_roles`"),
    ("meta-evidence-a-number", "meta.json", b'{"complete": true, "partitions": 16, "evidence": 7}',
     "store/meta.json: Expected `object | null`, got `int` - at `$.evidence`"),
    ("meta-eviction-not-a-pair", "meta.json", b'{"complete": true, "partitions": 16, "evidence": {"evictions": [[]]}}',
     "store/meta.json: Expected `array` of length 2, got 0 - at `$.evidence.evictions[0]`"),
    ("meta-complete-a-word", "meta.json", b'{"complete": "yes", "partitions": 16}',
     "store/meta.json: Expected `bool`, got `str` - at `$.complete`"),
    ("sessions-no-exists", SESSIONS, b'{"session": "x"}\n', f"store/{SESSIONS}:2: not a snapshot line"),
]


@pytest.fixture(scope="module")
def snapshot_run(tmp_path_factory):
    """A journaled run and its store snapshot (one session), as the audit writes them."""
    from oracle.store import StoreOptions

    run = tmp_path_factory.mktemp("snap") / "run"
    (run / "journal").mkdir(parents=True)
    session = SNAPPED
    (run / "journal" / "local-1.jsonl").write_bytes(
        json.dumps({"run": "run", "session": session, "turn": 0, "outcome": "ok", "sent": 1.0, "received": 2.0,
                    "message": f"[{session}t0] hi", "reply": "Noted."}).encode() + b"\n")
    store = run / "store"
    store.mkdir()
    (store / "meta.json").write_text(json.dumps({"reader": "redis", "url": "redis://127.0.0.1/0",
                                                 "key_template": StoreOptions().key_template, "format": "auto",
                                                 "complete": True, "partitions": 16,
                                                 "files": [f"sessions.{p:02d}.jsonl" for p in range(16)]}))
    entries = [json.dumps({"type": "human", "data": {"content": f"[{session}t0] hi"}}),
               json.dumps({"type": "ai", "data": {"content": "Noted."}})]
    (store / SESSIONS).write_text(json.dumps({"session": session, "key": f"message_store:{session}",
                                                      "exists": True, "ttl": None, "type": "list",
                                                      "entries": entries}) + "\n")
    (store / "foreign.jsonl").write_text("")
    return run


@pytest.mark.parametrize("name, file, content, fragment", SNAPSHOTS, ids=[s[0] for s in SNAPSHOTS])
def test_a_damaged_store_snapshot_is_exit_2_naming_the_file(name, file, content, fragment, snapshot_run, tmp_path,
                                                             capsys):
    import shutil

    from oracle.audit_cli import main

    run = tmp_path / "run"
    shutil.copytree(snapshot_run, run)
    path = run / "store" / file
    path.write_bytes(content if file == "meta.json" else path.read_bytes() + content)
    before = {p: p.read_bytes() for p in (run / "journal").iterdir()}
    assert main([str(run), "--jobs", "1"]) == 2
    assert_named(capsys.readouterr().err, str(run / fragment.split(":")[0]), fragment.split(": ", 1)[1])
    assert {p: p.read_bytes() for p in (run / "journal").iterdir()} == before


# ---- audited run folders: what `python -m oracle report` and `compare` read ---------------------
def _json_edit(name: str, edit):
    """A damage: the run folder's JSON document ``name`` as ``edit`` leaves it (edit may change it in place)."""
    def damage(run: Path) -> None:
        doc = json.loads((run / name).read_text())
        changed = edit(doc)
        (run / name).write_text(json.dumps(doc if changed is None else changed))
    return damage


def _line_edit(name: str, edit, line: int = 0):
    """A damage: line ``line`` (0-based) of the run folder's JSON Lines file ``name`` as ``edit`` returns it."""
    def damage(run: Path) -> None:
        lines = (run / name).read_text().splitlines()
        lines[line] = json.dumps(edit(json.loads(lines[line])))
        (run / name).write_text("\n".join(lines) + "\n")
    return damage


def _window_edit(column: str, value: str):
    """A damage: one cell of audit/windows.csv's first row."""
    def damage(run: Path) -> None:
        path = run / "audit" / "windows.csv"
        lines = path.read_text().splitlines()
        cells = lines[1].split(",")
        cells[lines[0].split(",").index(column)] = value
        lines[1] = ",".join(cells)
        path.write_text("\n".join(lines) + "\n")
    return damage


def _replace(name: str, content: bytes):
    def damage(run: Path) -> None:
        (run / name).write_bytes(content)
    return damage


def _a_directory(name: str):
    def damage(run: Path) -> None:
        (run / name).unlink()
        (run / name).mkdir()
    return damage


def _verdict(**changes):
    """summary.json with a verdict (the synthetic summary predates them) that ``changes`` damage."""
    def edit(summary: dict) -> None:
        rule = {"gate": "stored_loss", "counts": "lost turns", "over": "acked turns", "limit": "0", "count": 60,
                "total": 2000, "rate": 0.03, "low": 0.02, "high": 0.04, "result": "fail"}
        summary["verdict"] = {"result": "fail", "gates": "strict", "rules": [rule], "failed": ["stored_loss: 60"],
                              "root_causes": [{"cause": "lost", "count": 60, "text": "lost turns"}]}
        for key, value in changes.items():
            if value is None:
                summary["verdict"].pop(key)
            else:
                summary["verdict"][key] = value
    return _json_edit("audit/summary.json", edit)


T0 = 1_700_000_000.0  # support_report.T0: the synthetic run's start
# (name, damage, exit code, the file the message names, what it says); optional parts: exit 0 and a warning in the
# report, which renders without them; summary.json (the verdict): exit 2 and no report
REPORT_FILES = [
    ("breakdown-cliff-true", _replace("audit/breakdown.json", b'{"probes": 1, "failed": 0, "replicas": false, '
                                                              b'"cliff": true, "tables": []}'),
     0, "audit/breakdown.json", "Expected `object | null`, got `bool` - at `$.cliff`; computed again from the journal"),
    ("breakdown-tables-a-number", _replace("audit/breakdown.json", b'{"probes": 1, "failed": 0, "replicas": false, '
                                                                   b'"cliff": null, "tables": 1e308}'),
     0, "audit/breakdown.json", "Expected `array`, got `float` - at `$.tables`"),
    ("breakdown-row-count-over-total", _replace(
        "audit/breakdown.json", b'{"probes": 1, "failed": 0, "replicas": false, "cliff": null, "tables": [{"key": "a", '
                                b'"title": "t", "by": "b", "counts": "c", "over": "o", "rows": [{"group": "x", '
                                b'"count": 3, "total": 2}]}]}'),
     0, "audit/breakdown.json", "count 3 is more than total 2 - at `$.tables[0].rows[0]`"),
    ("breakdown-a-directory", _a_directory("audit/breakdown.json"), 0, "audit/breakdown.json", "Is a directory"),
    ("window-lost-negative", _window_edit("lost", "-1"), 0, "audit/windows.csv",
     ":2: lost '-1' is not a whole number from 0 to 1e+15; the window is left out"),
    ("window-acked-infinite", _window_edit("acked", "inf"), 0, "audit/windows.csv", ":2: acked 'inf' is not a whole"),
    ("window-step-a-fraction", _window_edit("step", "1.5"), 0, "audit/windows.csv", ":2: step '1.5' is not a whole"),
    ("window-throughput-a-word", _window_edit("throughput", "fast"), 0, "audit/windows.csv",
     ":2: throughput 'fast' is not a number"),
    ("anomaly-time-empty", _line_edit("audit/anomalies.jsonl", lambda a: {**a, "time": ""}), 0,
     "audit/anomalies.jsonl", ":1: Expected `float | null`, got `str` - at `$.time`"),
    ("anomaly-turn-negative", _line_edit("audit/anomalies.jsonl", lambda a: {**a, "turn": -1}), 0,
     "audit/anomalies.jsonl", ":1: Expected `int` >= 0 - at `$.turn`"),
    ("run-label-a-list", _json_edit("run.json", lambda r: {**r, "label": [1]}), 0, "run.json",
     "label [1] is not text; left out"),
    ("run-options-a-number", _json_edit("run.json", lambda r: {**r, "options": 1e308}), 0, "run.json",
     "options 1e+308 is not an object; left out"),
    ("run-start-a-word", _json_edit("run.json", lambda r: {**r, "start": "noon"}), 0, "run.json",
     "start 'noon': Expected `float | null`, got `str`; left out"),
    ("run-start-1970", _json_edit("run.json", lambda r: {**r, "start": 0}), 0, "run.json",
     "start 0 (1970-01-01 00:00:00 UTC) is far from the audit's windows"),
    ("chaos-apply-at-time-0", _line_edit("chaos.jsonl", lambda e: {**e, "time": 0}), 0, "chaos.jsonl",
     "fault f1#1 (kill) from 0 (1970-01-01 00:00:00 UTC) to "),
    ("chaos-a-directory", _a_directory("chaos.jsonl"), 0, "chaos.jsonl", "Is a directory"),
    ("step-start-at-time-0", _line_edit("steps.jsonl", lambda s: {**s, "start": 0}), 0, "steps.jsonl",
     ":1: start 0 (1970-01-01 00:00:00 UTC) is far outside the run; the step is left out"),
    ("step-end-in-the-year-5000", _line_edit("steps.jsonl", lambda s: {**s, "end": 1e11}, line=2), 0, "steps.jsonl",
     ":3: end 100000000000"),
    ("summary-total-too-big", _json_edit("audit/summary.json", lambda s: s["metrics"]["probe_amnesia"].update(
        total=10**19)), 2, "audit/summary.json", "at `$.metrics.probe_amnesia.total`"),
    ("summary-turns-fail-null", _json_edit("audit/summary.json", lambda s: s["turns"].update(fail=None)), 2,
     "audit/summary.json", "Expected `int`, got `null` - at `$.turns.fail`"),
    ("summary-baseline-high-a-word", _json_edit("audit/summary.json", lambda s: s["baseline"]["probe_amnesia"].update(
        high="x")), 2, "audit/summary.json", "at `$.baseline.probe_amnesia.high`"),
    ("summary-rate-outside-its-interval", _json_edit("audit/summary.json", lambda s: s["by_fault"][0]["stored_loss"]
                                                     .update(rate=0.9)), 2, "audit/summary.json",
     "is not within its interval"),
    ("summary-by-fault-row-a-list", _json_edit("audit/summary.json", lambda s: s["by_fault"].__setitem__(0, [])), 2,
     "audit/summary.json", "Expected `object`, got `array` - at `$.by_fault[0]`"),
    ("summary-verdict-without-result", _verdict(result=None), 2, "audit/summary.json",
     "Object missing required field `result` - at `$.verdict`"),
    ("summary-verdict-rule-not-a-rule", _verdict(rules=[{"a": 1}]), 2, "audit/summary.json",
     "Object missing required field `gate` - at `$.verdict.rules[0]`"),
    ("summary-verdict-flipped-to-pass", _verdict(result="pass"), 2, "audit/summary.json",
     "$.verdict.result is 'pass' but its rules fail (stored_loss)"),
    ("summary-verdict-fail-naming-nothing", _verdict(failed=[]), 2, "audit/summary.json",
     "$.verdict.result is 'fail' but $.verdict.failed names no failed rule"),
    ("summary-foreign-keys-half", _json_edit("audit/summary.json", lambda s: {
        **s, "information": {"foreign_keys": {"not_goldfish": 1}}}), 2, "audit/summary.json",
     "at `$.information.foreign_keys`"),
    ("summary-problems-a-number", _json_edit("audit/summary.json", lambda s: {**s, "problems": 1e308}), 2,
     "audit/summary.json", "Expected `array`, got `float` - at `$.problems`"),
]


@pytest.fixture(scope="module")
def audited_run(tmp_path_factory):
    """A synthetic audited run (tests/support_report.py): three faults, three load steps, losses, a breakdown."""
    from oracle import breakdown
    from support_report import synthetic

    run = synthetic(tmp_path_factory.mktemp("audited") / "run", lost=6, probes_failed=3, crosstalk=1)
    breakdown.write(run)
    return run


@pytest.mark.parametrize("name, damage, code, file, fragment", REPORT_FILES, ids=[r[0] for r in REPORT_FILES])
def test_a_damaged_run_folder_file_is_a_warning_or_exit_2_never_a_traceback(name, damage, code, file, fragment,
                                                                            audited_run, tmp_path, capsys):
    import shutil
    from html import unescape

    from oracle.__main__ import main

    run = tmp_path / "run"
    shutil.copytree(audited_run, run)
    damage(run)
    assert main(["report", str(run), "--quiet"]) == code
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    if code == 2:  # the verdict: no report that looks like one; compare refuses it too
        assert_named(err, f"{run / file}: ", fragment)
        assert not (run / "report.html").exists()
        assert main(["compare", str(audited_run), str(run)]) == 2
        assert_named(capsys.readouterr().err, f"{run / file}: ", fragment)
        return
    html = unescape((run / "report.html").read_text())
    warnings = re.findall(r"<li>warning: (.*?)</li>", html, re.S)
    assert [w for w in warnings if w.startswith(str(run / file)) and fragment in w], warnings
    assert html.count('src="data:image/png;base64,') >= 3  # every chart still drawn
    assert "<h2>Verdict" in html


def test_the_corpus_holds_at_least_150_cases():
    cases = (len(PLANS) + len(OUTSTANDING) + 3 + len(BACKEND_OPTS) + len(SCRIPTS) + len(OPTIONS) + 1 +
             len(STORE_OPTIONS) + 5 + len(REPLIES) + len(JOURNAL_LINES) + len(JOURNAL_QUIRKS) + len(JOURNAL_FOLDERS) +
             len(TIMELINE) + len(STEPS) + len(TELEMETRY) + len(SNAPSHOTS) + len(REPORT_FILES))
    assert cases >= 150, cases


@pytest.mark.parametrize("value", [123, [1], {"a": 1}, True])
def test_a_run_id_in_run_json_that_is_not_text_is_refused(tmp_path, capsys, value):
    """It switched the check that the journal is this run's off: another run's journal PASSed (input hunt 15)."""
    from oracle.audit_cli import main

    from support_oracle import build_world, simple_specs, write_journal, write_snapshot

    run, world = tmp_path / "run", build_world(simple_specs(2))
    write_journal(run, world.records)
    write_snapshot(run, world)
    (run / "run.json").write_text(json.dumps({"run": value}))
    assert main([str(run)]) == 2
    assert_named(capsys.readouterr().err, str(run / "run.json"), "not a run id (text)")


def test_a_utf16_yaml_file_is_named_utf16_not_binary():
    """An editor's "Unicode" save of a plan: it said "not UTF-8 text (byte 0xff): is this a binary file?" (input hunt
    17)."""
    from contracts.yamldoc import YamlError, decode

    for data in ("faults: []\n".encode("utf-16"), "faults: []\n".encode("utf-16-be").join([b"\xfe\xff", b""])):
        with pytest.raises(YamlError, match=r"plan\.yaml:1: UTF-16 text \(its byte-order mark\), not UTF-8"):
            decode(data, "plan.yaml")
    with pytest.raises(YamlError, match="is this a binary file"):
        decode(b"\x80\x81", "plan.yaml")


def test_a_cluster_that_is_down_is_not_said_to_move_keys():
    import redis

    from oracle.audit import refused_command

    assert "whose cluster is down (CLUSTERDOWN)" in refused_command(redis.exceptions.ClusterDownError("down"))
    assert "which sent a key to another node" in refused_command(redis.exceptions.MovedError("3999 127.0.0.1:6381"))
