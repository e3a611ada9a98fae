"""The verdict: one set of gate rules that turns what a run observed into PASS or FAIL.

Strict by default: every class of finding has a gate, and a gate allows nothing until the user
says how much is allowed — a count (``lost=3``) or a rate over the class's denominator
(``probe_amnesia=1%``). The same rules are evaluated at the end of a Locust run, by
``python -m oracle audit``, for the report's badge and by ``python -m oracle compare``; the result
and every rule (gate, observed count, rate, 95% interval, result) go into ``summary.json``.
The gate table and the spec grammar: docs/oracle.md "The verdict".
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from pathlib import Path

from contracts.codec import short
from oracle.metrics import wilson

PASS, FAIL = "pass", "fail"
OFF, UNMEASURED = "off", "not measured"
# the verdict of a run in which the target acknowledged nothing: no gate had anything to judge, so it is no PASS
NOTHING_ACKNOWLEDGED = ("nothing measured: no turn was acknowledged by the target (every turn failed: refused, "
                        "unreachable, timed out, or answered without a reply the options read; the errors say which)")
# its wording before: a bot that answered every turn, its replies unread (a --reply-where that keeps no piece), was
# said unreachable (bot hunts 15 and 16). An earlier summary's verdict still says it, and still measured nothing
NOTHING_ACKNOWLEDGED_BEFORE = ("nothing measured: no turn was acknowledged by the target (refused, unreachable or "
                               "always failing)")
NO_PROBE_ANSWERED = ("nothing measured of memory: {sent:,} recall probe(s) were sent and none was answered (each "
                     "failed, timed out or was still in flight when the test stopped: a bot that fails or hangs on "
                     "them; the errors say which)")
# the verdict of a run that sent no recall probe: the load ended before any conversation reached one (a bot that
# never remembers PASSed a 4-second run), or its script has none
NO_PROBE_SENT = ("nothing measured of memory: no recall probe was sent (the load ended before any conversation reached "
                 "one: run longer, or give a --script that probes sooner; a script with no probe by design: --gate "
                 "probe_amnesia=off)")
# the verdict of a run whose every recall probe was still in flight at its end: a bot slower than the load's tail (a
# 2.5 s answer under -t 4s) FAILed "a bot that hangs on them", though none had timed out
NO_PROBE_FINISHED = ("nothing measured of memory: every recall probe sent was still in flight when the test stopped "
                     "(cut short by its end; none timed out or failed): run longer, or give a --script that probes "
                     "sooner")
# the verdict of a run with no recall probe answered (a script without one) whose every history went unjudged: each key
# expired after its conversation ended, before the audit read it. It PASSed, having judged nothing (bot hunt 17)
NOTHING_JUDGED = ("nothing measured: no recall probe was answered and no stored history was judged (every key expired "
                  "after its conversation ended, before the audit read it): read the store sooner (a --settle shorter "
                  "than the keys' TTL) or during the run (--audit-every)")
# exit 2 when nothing else failed: the test measured nothing
UNMEASURED_RUN = (NOTHING_ACKNOWLEDGED, NOTHING_ACKNOWLEDGED_BEFORE, NO_PROBE_SENT, NO_PROBE_FINISHED, NOTHING_JUDGED)


class GateError(ValueError):
    """A gate spec that cannot be used; the message names the item (and file:line) that is wrong."""


@dataclass(frozen=True)
class Gate:
    name: str
    counts: str   # what one unit is, plural: "failed recall probes"
    over: str     # the denominator of its rate: "answered probes"


GATES: tuple[Gate, ...] = (
    Gate("probe_amnesia", "failed recall probes", "answered probes"),
    Gate("stored_loss", "acknowledged turns lost by the store", "acknowledged turns"),
    Gate("crosstalk", "sessions holding another session's data", "sessions"),
    Gate("duplicated", "turns whose user entry or reply is stored twice", "turns"),
    Gate("reordered", "sessions stored out of real-time order", "sessions"),
    Gate("corrupt", "stored entries that do not decode", "stored entries"),
    Gate("vanished", "sessions whose whole history is gone", "sessions"),
    Gate("expired", "sessions whose key expired", "sessions"),
    Gate("evicted", "sessions a full store evicted", "sessions"),
    Gate("unanswered", "turns stored without their reply", "acknowledged turns"),
    Gate("aborted", "refused turns stored anyway", "turns"),
    Gate("errors", "failed requests no fault was in force to explain", "turns no fault overlapped"),
    Gate("unreadable", "journal lines that are not a turn", "journal lines"),
)
BY_NAME = {g.name: g for g in GATES}
ALIASES = {"lost": "stored_loss", "amnesia": "probe_amnesia", "failed_probes": "probe_amnesia",
           "cross_talk": "crosstalk", "misrouted": "crosstalk", "failed_requests": "errors"}


@dataclass(frozen=True)
class Limit:
    """How much of a class a run may show: at most ``count`` findings, or a ``rate``; neither: off."""
    count: int | None = None
    rate: float | None = None

    @property
    def off(self) -> bool:
        return self.count is None and self.rate is None

    def allows(self, count: int, total: int) -> bool:
        if self.off:
            return True
        if self.count is not None:
            return count <= self.count
        # exactly, as the rate was written: 7 of 1,000 is at a limit of 0.7%, whose float is a hair below 0.007
        return total == 0 or Fraction(count, total) <= Fraction(repr(self.rate))

    def __str__(self) -> str:
        if self.off:
            return "off"
        if self.count is not None:
            return str(self.count)
        return f"{self.rate * 100:g}%"


ZERO = Limit(count=0)
BY_DESIGN = ("expired", "evicted")  # ways a session may go by design: its gate off, its turns are no stored loss
PROFILES: dict[str, dict[str, Limit]] = {
    "strict": {g.name: ZERO for g in GATES},
    # a chaos soak that tolerates a little of what faults cause, never cross-talk, corruption or aborted writes
    "lenient": {g.name: ZERO for g in GATES} | {
        "probe_amnesia": Limit(rate=0.01), "stored_loss": Limit(rate=0.001), "duplicated": Limit(rate=0.001),
        "reordered": Limit(rate=0.01), "unanswered": Limit(rate=0.001), "expired": Limit(rate=0.01),
        "errors": Limit(rate=0.01)},
    # nothing gates (``compare --gate off``: only "is the candidate worse than the base")
    "off": {g.name: Limit() for g in GATES},
}


@dataclass(frozen=True)
class Gates:
    """The limits in force and the spec they came from (shown in the verdict)."""
    limits: dict
    spec: str = "strict"

    def written_out(self) -> str:
        """Every gate with its limit, as a spec that needs nothing else to parse: what run.json keeps beside the spec
        as given, so that a re-audit judges with the limits the run had even when its gates file was edited or
        removed since (a gates file is named by its path)."""
        return ",".join(f"{name}={'off' if limit.off else limit.count if limit.count is not None else repr(limit.rate)}"
                        for name, limit in self.limits.items())

    def with_overrides(self, overrides: dict[str, Limit], note: str) -> "Gates":
        if not overrides:
            return self
        return Gates({**self.limits, **overrides}, f"{self.spec},{note}" if note else self.spec)


def gate_name(text: str, where: str) -> str:
    name = text.strip().lower().replace("-", "_")
    name = ALIASES.get(name, name)
    if name not in BY_NAME:
        raise GateError(f"{where}: unknown gate {short(text.strip())} (known: {', '.join(BY_NAME)}; "
                        f"aliases: {', '.join(ALIASES)})")
    return name


MAX_COUNT = 10 ** 9  # a count limit above this is no limit: a billion findings is beyond any run's turns


def parse_limit(text, where: str, gate: str | None = None, off: str | None = None) -> Limit:
    """``0`` or ``3`` (a count), ``1%`` or ``0.01`` (a rate), ``off``.

    ``gate``: the gate the limit is for (a spec's item, a gates file's line); a rate of 100% for it is refused:
    the gate could never fail, and a bot that forgot every probe PASSed ``--gate probe_amnesia=100%`` (and
    ``probe_amnesia=1.0``, a gates file's ``probe_amnesia: 100%``) while ``--max-probe-amnesia 1.0`` was refused.
    ``off``: how to turn that gate off where the limit was written (default ``--gate GATE=off``).

    ASCII digits only: Python's int() and float() also read ``１００`` (full-width), ``٣`` and ``1_000``, so a
    limit that looks like no number to the user's shell, CI file or eye was used as one. A count above
    ``MAX_COUNT`` is refused: no run reaches it, so ``probe_amnesia=99999999999999999999`` was a gate that
    could never fail, written as a number."""
    raw = str(text).strip().lower()
    if raw in ("off", "any", "none", "ignore"):
        return Limit()
    if not raw.isascii() or "_" in raw:
        raise GateError(f"{where}: {short(text)} is not a limit: write it in ASCII digits, without '_' (a count "
                        "like 0 or 3, a rate like 1% or 0.01, or off)")
    try:
        if raw.endswith("%"):  # the decimal divided, then rounded once: 0.7% is the float of 0.007, not of 0.7 / 100
            value, rate = float(Decimal(raw[:-1]) / 100), True
        elif any(c in raw for c in ".e"):
            value, rate = float(raw), True
        else:
            value, rate = int(raw), False
    except (ValueError, ArithmeticError):  # ArithmeticError: the Decimal of "abc" or "snan"
        raise GateError(f"{where}: {short(text)} is not a limit (a count like 0 or 3, a rate like 1% or 0.01, "
                        "or off)") from None
    if not math.isfinite(value) or value < 0 or (rate and value > 1):
        raise GateError(f"{where}: {short(text)} is out of range (a count >= 0, or a rate from 0% to 100%)")
    if rate and value >= 1 and gate is not None:  # `1` is a count (one allowed); `1.0` and `100%` allowed every one
        raise GateError(f"{where}: {short(text)} is a rate of 100%: the gate could never fail (for 1% write 0.01 or "
                        f"1%; to turn the gate off, {off or f'--gate {gate}=off'})")
    if not rate and value > MAX_COUNT:
        how = off or f"--gate {gate or 'GATE'}=off"
        raise GateError(f"{where}: {short(text)} is a count above {MAX_COUNT:,}, more than any run reaches: the gate "
                        f"could never fail (to turn it off, {how})")
    return Limit(rate=float(value)) if rate else Limit(count=int(value))


def parse_gates(spec: str | None, where: str = "--gate", shorthands: dict[str, Limit] | None = None) -> Gates:
    """``strict`` (default), ``lenient``, a YAML file, and ``name=limit`` items, comma-separated: a profile (or a
    file's ``profile:``) first, then the gates it changes, each once: ``lenient,probe_amnesia=0``. A profile
    after an item would reset it, and a gate set twice leaves one of the two ignored: both are refused.

    ``shorthands``: the ``--max-*`` options (``legacy_overrides``), applied over the spec: over a profile they
    change it, as an item would; a gate that an item (or a gates file) of the spec sets too is set twice, and
    one of the two was silently ignored (``--gate probe_amnesia=0 --max-probe-amnesia 0.5`` PASSed a run with
    47% failed probes): refused, naming both."""
    text = str(spec or "").strip() or "strict"
    limits = dict(PROFILES["strict"])
    set_by: dict[str, str] = {}  # gate -> the item that set it
    items = _items(text)
    for n, item in enumerate(items):
        if not item:  # `lenient,` / `a,,b`: a typo or an unset variable; the rest was used without a word
            raise GateError(f"{where} {short(text)}: an empty item (an unset variable?): remove the comma, or give a "
                            "profile, a gates file or name=limit there")
        profile = None
        if "=" in item and not Path(item).is_file():  # an existing file wins: `--gate /gates/g=v2.yaml`
            name, _, value = item.partition("=")
            gate = gate_name(name, f"{where} {short(item)}")
            given = {gate: parse_limit(value, f"{where} {short(item)}", gate, off=f"{where} {gate}=off")}
        elif item.lower() in PROFILES:
            profile, given = item.lower(), {}
        else:
            profile, given = _gates_file(item, where)
        if profile is not None:
            if n and all(i.lower() in PROFILES for i in items[:n]):  # `strict,strict`: "give it first" was the input
                raise GateError(f"{where} {short(text)}: gives more than one profile ({short(', '.join(items[:n + 1]))}); "
                                f"give one, first, then the gates it should change (e.g. {profile},errors=1%)")
            if n:
                raise GateError(f"{where} {short(text)}: {short(item)} sets every gate (the profile {profile}) "
                                f"after {short(','.join(items[:n]))}, which it would reset: give it first, "
                                f"{short(','.join([item] + items[:n] + items[n + 1:]))}")
            limits = dict(PROFILES[profile])
        for name, limit in given.items():
            if name in set_by:
                raise GateError(f"{where} {short(text)}: {short(item)} sets the {name} gate, which {set_by[name]} "
                                "sets already: keep one")
            limits[name], set_by[name] = limit, short(item)
    gates = Gates(limits, text)
    if not shorthands:
        return gates
    for name, limit in shorthands.items():
        if name in set_by:
            item = "" if set_by[name] == short(text) else f" (its item {set_by[name]})"
            raise GateError(f"{SHORTHANDS.get(name, name)} {limit} sets the {name} gate, which {where} "
                            f"{short(text)}{item} sets already: keep one")
    return gates.with_overrides(shorthands, ",".join(f"{name}={limit}" for name, limit in shorthands.items()))


def _items(text: str) -> list[str]:
    """The comma-separated items of a --gate value; a gates file whose path holds a comma is one item
    (``results/nightly,v2/gates.yaml,errors=off``): the split made it two pieces that were not files."""
    pieces, items, i = text.split(","), [], 0
    while i < len(pieces):
        j = next((j for j in range(len(pieces), i + 1, -1) if Path(",".join(pieces[i:j]).strip()).is_file()), i + 1)
        items.append(",".join(pieces[i:j]).strip())
        i = j
    return items


def _gates_file(path: str, where: str) -> tuple[str | None, dict[str, Limit]]:
    """A YAML mapping ``gate: limit``; an optional ``profile:`` key names the base profile. Returns (the
    profile or None, the gates the file sets)."""
    import yaml

    from contracts import yamldoc

    file = Path(path)
    if file.exists() and not file.is_file():
        raise GateError(f"{where}: {short(path)} is {'a folder' if file.is_dir() else 'not a regular file'}, not a "
                        "gates file (a YAML mapping gate: limit)")
    if not file.is_file():
        raise GateError(f"{where}: {short(path)} is neither a profile ({', '.join(PROFILES)}), nor name=limit, "
                        "nor a gates file that exists")
    try:
        _, root = yamldoc.load(file, "the gates file")  # plain data only, bounded, file:line on any error
    except yamldoc.YamlError as exc:
        raise GateError(str(exc)) from None
    if not isinstance(root, yaml.MappingNode):
        raise GateError(f"{file}:1: a gates file is a mapping of gate: limit (e.g. probe_amnesia: 1%)")
    out: dict[str, Limit] = {}
    profile = None
    set_at: dict[str, str] = {}  # gate -> the line that set it: a gate and its alias both set is one too many
    for key, value in root.value:
        line = f"{file}:{key.start_mark.line + 1}"
        if not isinstance(key, yaml.ScalarNode) or not isinstance(value, yaml.ScalarNode):
            raise GateError(f"{line}: each entry is `gate: limit` with plain values")
        if key.value == "profile":
            if value.value.lower() not in PROFILES:
                raise GateError(f"{line}: profile: {short(value.value)} is not one of {', '.join(PROFILES)}")
            profile = value.value.lower()
            continue
        name = gate_name(key.value, line)
        if why := _read_otherwise(value):
            raise GateError(f"{line}: {key.value}: {why}")
        if name in set_at:
            raise GateError(f"{line}: {short(key.value)} sets the {name} gate, which {set_at[name]} sets already: "
                            "keep one")
        limit = parse_limit(value.value, f"{line}: {key.value}", name, off=f"{key.value}: off")
        out[name], set_at[name] = limit, f"line {key.start_mark.line + 1}"
    return profile, out


def _read_otherwise(node) -> str | None:
    """Why a limit's YAML means something other than its text, which is what a limit is read from: ``010`` (8 in YAML
    1.1, refused in a plan too) or a tag (``!!float 1`` is a count of one here, a rate of 100% to YAML); or None."""
    import yaml

    from contracts import yamldoc

    if why := yamldoc.misread_number(node):
        return why
    implicit = yaml.resolver.Resolver().resolve(yaml.ScalarNode, node.value, (node.style is None, node.style is not None))
    if node.tag != implicit:
        return (f"the tag {yamldoc.shown_tag(node.tag)} is not read here (a limit is its text: 1 is a count, 1% or 0.01 a "
                f"rate): write {short(node.value)} without it")
    return None


SHORTHANDS = {"probe_amnesia": "--max-probe-amnesia", "stored_loss": "--max-stored-loss", "crosstalk": "--max-crosstalk"}


def legacy_overrides(max_probe_amnesia=None, max_stored_loss=None, max_crosstalk=None) -> dict[str, Limit]:
    """The older ``--max-*`` options as gate limits (rates for amnesia and loss, a session count for
    cross-talk); None leaves the gate as the spec set it."""
    out = {}
    for name, option, rate in (("probe_amnesia", "--max-probe-amnesia", max_probe_amnesia),
                               ("stored_loss", "--max-stored-loss", max_stored_loss)):
        if rate is not None:
            if not 0 <= float(rate) <= 1:  # NaN too
                raise GateError(f"{option} {short(rate)} is not a rate in [0, 1]")
            if float(rate) == 1:  # --gate probe_amnesia=1 allows one; this allowed every one to fail
                raise GateError(f"{option} {short(rate)} is a rate of 100%: the gate could never fail (for 1% write "
                                f"0.01 or 1%; to turn the gate off, --gate {name}=off)")
            out[name] = Limit(rate=float(rate))
    if max_crosstalk is not None:
        if int(max_crosstalk) < 0:
            raise GateError(f"--max-crosstalk {short(max_crosstalk)} is not a count >= 0")
        out["crosstalk"] = Limit(count=int(max_crosstalk))
    return out


def evaluate(observed: dict, gates: Gates) -> dict:
    """The verdict for ``observed`` (gate -> {"count", "total"}, or None when the run could not
    measure it): ``{"result", "gates", "rules": [...], "failed": [one line per failed rule]}``."""
    rules, failed = [], []
    for gate in GATES:
        limit = gates.limits.get(gate.name, ZERO)
        seen = observed.get(gate.name)
        rule = {"gate": gate.name, "counts": gate.counts, "over": gate.over, "limit": str(limit)}
        if seen is None:
            rule.update(count=None, total=None, rate=None, low=None, high=None, result=UNMEASURED)
        else:
            rule.update(wilson(seen["count"] - _by_design(gate.name, seen, gates), seen["total"]))
            rule["result"] = OFF if limit.off else PASS if limit.allows(rule["count"], rule["total"]) else FAIL
        rules.append(rule)
        if rule["result"] == FAIL:
            failed.append(rule_line(rule))
    return {"result": FAIL if failed else PASS, "gates": gates.spec, "rules": rules, "failed": failed}


def _by_design(gate: str, seen: dict, gates: Gates) -> int:
    """Lost turns of sessions gone in a way the gates allow (``expired=off``: the bot's TTL is by design), which
    stored_loss then does not count again: one cause, one count, and allowing it allows it."""
    if gate != "stored_loss":
        return 0
    return sum(int(seen.get(gone) or 0) for gone in BY_DESIGN if gates.limits.get(gone, ZERO).off)


def rule_line(rule: dict) -> str:
    """``stored_loss: 63 acknowledged turns lost by the store of 2,101 (3.00%, 95% CI 2.35%-3.82%) > allowed 0``."""
    if rule["count"] is None:
        return f"{rule['gate']}: not measured"
    share = "" if rule["rate"] is None else \
        f" ({rule['rate']:.2%}, 95% CI {rule['low']:.2%}-{rule['high']:.2%})"
    sign = ">" if rule["result"] == FAIL else "<="
    allowed = "" if rule["result"] in (OFF, UNMEASURED) else f" {sign} allowed {rule['limit']}"
    return f"{rule['gate']}: {rule['count']:,} {rule['counts']} of {rule['total']:,} {rule['over']}{share}{allowed}"


def of_summary(summary: dict, gates: Gates | None = None) -> dict:
    """The verdict of an audited summary: its own (when ``gates`` is None and it has one), else
    evaluated afresh with ``gates`` (compare, or a summary written before verdicts existed), keeping the failed
    requirements of its own (nothing acknowledged, a fault never healed ...) that ``gates`` does not waive."""
    earlier = summary.get("verdict")
    if gates is None and isinstance(earlier, dict):
        return earlier
    observed = summary.get("observed") or observed_from_metrics(summary)
    v = evaluate(observed, gates or parse_gates(None))
    waived = tuple(start for gate, start in WAIVED_BY.items() if gates and gates.limits.get(gate, ZERO).off)
    kept = [line for line in requirements(earlier) if not line.startswith(waived)] if isinstance(earlier, dict) else \
        unjudged_breaches(summary, observed, gates)
    if kept:
        v["result"], v["failed"] = FAIL, kept + v["failed"]
    if isinstance(earlier, dict) and earlier.get("unfinished_replies"):  # what the audit saw of the replies read
        v["unfinished_replies"] = earlier["unfinished_replies"]
    return v


def exit_code(v: dict) -> int:
    """The exit code of a verdict (README "Exit codes"): 0 pass; 2 when the test measured nothing (``unmeasured``) and
    nothing else failed: a target that acknowledged no turn (the `errors` gate fails with it under strict, for the
    requests it refused: a run that reached no bot is bad input, not a bug found), or a run that sent no recall
    probe; else 1 (refused turns stored anyway, say, are a finding)."""
    if v.get("result") != FAIL:
        return 0
    why = unmeasured(v)
    failed_gates = [r for r in v.get("rules") or [] if r.get("result") == FAIL
                    and not (why in (NOTHING_ACKNOWLEDGED, NOTHING_ACKNOWLEDGED_BEFORE) and r.get("gate") == "errors")]
    others = [line for line in requirements(v) if line not in UNMEASURED_RUN and not line.startswith(NO_QUIET[:20])]
    return 2 if why and not (failed_gates or others) else 1


def unmeasured(v: dict) -> str | None:
    """The line saying the test measured nothing (``UNMEASURED_RUN``) among the verdict's, or None."""
    return next((line for line in requirements(v) if line in UNMEASURED_RUN), None)


def require_measured(v: dict, acknowledged: int, probes: int, answered: int, gates: Gates,
                     scripted: int | None = None, cut: int = 0) -> dict:
    """Fail ``v`` (an ``evaluate`` result) for what no gate could measure: a target that acknowledged no
    turn, recall probes sent with none answered (``cut`` of them still in flight at the test's end: all of them is
    a test too short, not a bot that hangs), or none sent though the script has some (``scripted``: run.json's
    ``script_probes``; None: not known) (the last two unless the probe gate is off): a gate of nothing holds."""
    lines = [] if acknowledged else [NOTHING_ACKNOWLEDGED]  # which says it all: no probe either
    if acknowledged and not answered and not gates.limits.get("probe_amnesia", ZERO).off:
        lines += ([NO_PROBE_FINISHED] if cut >= probes else [NO_PROBE_ANSWERED.format(sent=probes)]) if probes \
            else [NO_PROBE_SENT] if scripted else []
        for rule in v["rules"] if lines else []:  # its 0 of 0 is no PASS beside the line saying so
            if rule.get("gate") == "probe_amnesia" and rule.get("result") == PASS:
                rule["result"] = UNMEASURED
    stored = next((r for r in v["rules"] if r.get("gate") == "stored_loss"), None)
    if acknowledged and not answered and not lines and stored is not None and stored.get("total") == 0 and \
            stored.get("result") == PASS:
        lines, stored["result"] = [NOTHING_JUDGED], UNMEASURED
    if lines:
        v["result"], v["failed"] = FAIL, lines + v["failed"]
    return v


MIN_QUIET_SHARE = 0.05  # the errors gate measures the turns no fault overlapped: fewer than this share is no measure
NO_QUIET = ("errors: not measured: the faults and their recovery margins overlapped {covered:,} of {turns:,} turns "
            "({share:.0%}), so the {excused:,} failed request(s) they excused cannot be told from failures of the bot's "
            "own; space the chaos plan's faults further apart than the recovery margin (5s unless `oracle audit "
            "--recovery` says otherwise), or allow it "
            "with --gate errors=off")


def require_quiet(v: dict, errors: int, errors_quiet: int, quiet: int, turns: int, gates: Gates) -> dict:
    """Fail ``v`` when requests failed under faults that left (almost) no quiet turn to measure the errors gate
    on: a plan firing faults closer together than their recovery margin (redis-client-kill every 4 s) would
    otherwise excuse every failed request, however many, and a bot failing half its turns would PASS."""
    excused = errors - errors_quiet
    if gates.limits.get("errors", ZERO).off or excused <= 0 or quiet >= MIN_QUIET_SHARE * turns:
        return v
    v["result"], v["failed"] = FAIL, v["failed"] + [NO_QUIET.format(
        covered=turns - quiet, turns=turns, share=(turns - quiet) / turns, excused=excused)]
    return v


# a requirement that a gate turned off waives: the gate, and the fixed start of the requirement's line
WAIVED_BY = {"probe_amnesia": "nothing measured of memory: ", "errors": NO_QUIET.split("{")[0]}


def requirements(v: dict) -> list[str]:
    """The failed lines of ``v`` that no gate's limit decides (require_measured, require_quiet, require_healed):
    a re-evaluation under other gates (``compare --gate``) keeps them, as they hold whatever the limits."""
    ruled = {rule_line(r) for r in v.get("rules") or [] if isinstance(r, dict) and r.get("result") == FAIL}
    return [line for line in v.get("failed") or [] if isinstance(line, str) and line not in ruled]


NOT_HEALED = ("chaos: fault {fault} ({kind} on {instance}) was never healed: no recover of it succeeded, so its target "
              "did not come back (run `python -m chaos heal RUN` if the run was killed, then audit again)")


def require_healed(v: dict, faults: list) -> dict:
    """Fail ``v`` for every fault the chaos timeline never saw healed (oracle.timeline.Fault with no end): a
    target that does not come back after a kill is a bug of its own (a bot that cannot restart), and a run
    that leaves its stack broken is no PASS."""
    lines = [NOT_HEALED.format(fault=f.fault, kind=f.kind, instance=f.instance) for f in faults if f.end is None]
    if lines:
        v["result"], v["failed"] = FAIL, v["failed"] + lines
    return v


NOT_APPLIED = ("chaos: {count} fault occurrence(s) of the plan did not apply (first: {first}), so this run tested less "
               "than its plan: start every target before the run (`python -m chaos validate PLAN --stack-state ...` "
               "says what each occurrence would hit), or take them out of the plan")


def require_applied(v: dict, unapplied: list[str]) -> dict:
    """Fail ``v`` when fault occurrences of the plan failed to apply (oracle.timeline.unapplied): a chaos run whose
    faults never happened PASSed green, while `python -m chaos run` of the same plan exits 1."""
    if unapplied:
        v["result"], v["failed"] = FAIL, v["failed"] + [NOT_APPLIED.format(count=len(unapplied), first=unapplied[0])]
    return v


def unjudged_breaches(summary: dict, observed: dict, gates: Gates | None) -> list[str]:
    """The failed rules (``breaches``) of a summary with no verdict whose gate its observations cannot judge again: a
    summary with neither verdict nor observations is judged on its three headline metrics, and a FAIL on a corrupt
    entry, still in its breaches, compared as PASS and was drawn with a PASS badge (input hunt 16). They stand,
    unless ``gates`` turns their gate off."""
    if "observed" in summary or not isinstance(summary.get("breaches"), list):
        return []
    return [line for line in summary["breaches"] if isinstance(line, str) and line.partition(":")[0] not in observed
            and not (gates and gates.limits.get(line.partition(":")[0], ZERO).off)]


def observed_from_metrics(summary: dict) -> dict:
    """Observations of a summary written before ``observed`` existed: the headline metrics only."""
    metrics = summary.get("metrics") or {}
    out = {}
    for name in ("probe_amnesia", "stored_loss", "crosstalk"):
        m = metrics.get(name)
        if isinstance(m, dict) and m.get("total") is not None:
            out[name] = {"count": int(m.get("count") or 0), "total": int(m["total"])}
    return out


CAUSES = {
    "misroute": "turns or their replies written under another session's key: missing where they belong, cross-talk "
                "where they landed",
    "lost": "acknowledged turns the store lost",
    "crosstalk": "entries of one session copied into another's history",
    "duplicated": "turns whose user entry or reply is stored more than once",
    "reordered": "sessions stored out of real-time order",
    "corrupt": "stored entries that do not decode",
    "vanished": "sessions whose whole history is gone",
    "expired": "sessions whose key expired",
    "evicted": "sessions a store under memory pressure evicted",
    "unanswered": "turns stored without their reply",
    "aborted": "refused turns stored anyway",
    "leak": "sessions answered with another session's data (in the reply itself)",
}
NO_CAUSE = ("errors", "unreadable")  # gates no finding explains: the headline names them as they are


def root_causes(causes: dict, misrouted_turns: int, failed_probes: int, leaked_sessions: int = 0) -> list[dict]:
    """The findings grouped by root cause, largest first: what the headline names (each counted once).
    ``leaked_sessions``: sessions whose replies carried another session's data (the journal's cross-talk)."""
    rows = [{"cause": "misroute", "count": misrouted_turns, "findings": int(causes.get("misroute", 0)),
             "text": CAUSES["misroute"]}] if misrouted_turns else []
    rows += [{"cause": cause, "count": int(n), "findings": int(n), "text": CAUSES.get(cause, cause)}
             for cause, n in causes.items() if n and cause != "misroute"]
    if failed_probes:
        rows.append({"cause": "amnesia", "count": int(failed_probes), "findings": 0,
                     "text": "recall probes the bot answered without the planted fact"})
    if leaked_sessions:
        rows.append({"cause": "leak", "count": int(leaked_sessions), "findings": 0, "text": CAUSES["leak"]})
    return sorted(rows, key=lambda r: -r["count"])


def word(v: dict) -> str:
    """The verdict in one word, as the badge says it: PASS, FAIL, or NOTHING MEASURED (exit 2)."""
    return "NOTHING MEASURED" if exit_code(v) == 2 else str(v["result"]).upper()


def headline(v: dict) -> str:
    """``FAIL — 63 acknowledged turns the store lost; 12 ...``, ``PASS — 12 gate(s) held, 1 off`` or ``NOTHING
    MEASURED — ...``.

    A gate that is off judged nothing, so it is counted as off, never as held: ``--gate off`` on a bot that
    forgot every probe said "PASS — 13 gate(s) held"."""
    if v["result"] == PASS:
        held = sum(r["result"] == PASS for r in v["rules"])
        off = sum(r["result"] == OFF for r in v["rules"])
        rest = len(v["rules"]) - held - off
        return (f"PASS — {held} gate(s) held" + (f", {off} off" if off else "")
                + (f", {rest} not measured" if rest else "") + ("" if held else " (nothing judged)"))
    if exit_code(v) == 2:  # as the badge says it: "FAIL" beside exit 2 read as a bug found (verdict hunt 14)
        return "NOTHING MEASURED — " + "; ".join(v["failed"])
    causes = [f"{r['count']:,} {r['text']}" for r in v.get("root_causes") or []]
    if causes:  # and the failed gates no finding explains
        causes += [f"{r['count']:,} {r['counts']}" for r in v["rules"] if r["gate"] in NO_CAUSE and r["result"] == FAIL]
    return "FAIL — " + "; ".join(causes or v["failed"])


UNREADABLE = "run.json unreadable"  # the key a reader puts in place of a run.json it could not read: why


# the run.json fields whether a verdict can be trusted is read from (``cut_short``, ``misread_replies``): the audit
# keeps a copy in its summary (``run_record``), for the readers of a folder whose run.json is gone since
TRUST_FIELDS = ("run", "phase", "start", "end", "workers_lost", "user_exceptions", "streamed_replies", "journal")


def trust_record(run: dict) -> dict:
    """The fields of run.json ``run`` that say whether its verdict can be trusted, as the summary keeps them."""
    return {name: run[name] for name in TRUST_FIELDS if name in run} if isinstance(run, dict) else {}


def trusted_exit_code(v: dict, run: dict) -> tuple[int, str | None]:
    """The exit code of verdict ``v`` of a run whose run.json is ``run``, and why it is not trusted (None when it
    is): a PASS, or nothing measured, of a run cut short (``cut_short``) is NOT TRUSTED, 3; a FAIL that found
    something stays a FAIL, 1, unless its replies were misread (``misread_replies``): NOT TRUSTED, 3. The one
    rule of ``oracle audit``, the report's badge and the run's own end."""
    code = exit_code(v)
    why = untrusted(code, run, v)
    return (3, why) if why else (code, None)


def untrusted(code: int, run: dict, v: dict | None = None) -> str | None:
    """Why exit code ``code`` (0, 1 or 2: a verdict's, ``v``) of a run whose run.json is ``run`` cannot be trusted: a
    FAIL whose replies were misread, a PASS or nothing measured of a run cut short. None when it can."""
    return misread_replies(run) or unfinished_replies(v) if code == 1 else cut_short(run)


def unfinished_replies(v: dict | None) -> str | None:
    """Why a FAIL cannot be trusted: on turns found unanswered, an assistant entry stored after the turn begins with
    the reply the client got and goes on (the audit's ``unfinished_replies``): the client read answers before the bot
    finished them (a poll that took a message still being written), so the turns found unanswered and the probes
    failed on half an answer may all be goldfish's misreading. A correct bot FAILed '83% probe amnesia, unanswered
    158' so (bot hunt 16). None when none was seen."""
    seen = v.get("unfinished_replies") if isinstance(v, dict) else None
    if not isinstance(seen, dict):
        return None
    if seen.get("same"):  # audit.one_reply_read
        return (f"{short(seen.get('count'))} turn(s) were found unanswered, and the reply the client read was "
                f"{short(seen.get('reply'), 60)} on every one of them, while the store holds other answers in their "
                f"place (as {short(seen.get('stored'), 60)}): the reply is not where the options read it "
                "(--reply-field names a field that is always the same, or the body is empty and the answer comes "
                "elsewhere, in a header say), so the FAIL cannot be trusted: point --reply-field / --reply-format at "
                "the answer")
    if seen.get("repeated"):  # checkers.repeated_pieces
        return (f"on {short(seen.get('count'))} turn(s) found unanswered, the reply the client got holds every piece of "
                f"the answer stored after the turn {short(seen.get('repeated'))} times over (first: "
                f"{short(seen.get('reply'), 60)} for {short(seen.get('stored'), 60)}): the stream carries each piece "
                "more than once (one event per level of a chain, as LangChain's astream_events does), so the FAIL "
                "cannot be trusted: keep only the model's pieces (--reply-where event=on_chat_model_stream, say)")
    return (f"on {short(seen.get('count'))} turn(s) found unanswered, the answer stored after the turn begins with the "
            f"reply the client got and goes on (first: {short(seen.get('reply'), 60)} of {short(seen.get('stored'), 100)})"
            ": the client read answers before the bot finished them (a poll that took a message still being written), "
            "so the FAIL cannot be trusted: keep only finished replies (--reply-where status=completed, say)")


def misread_replies(run: dict) -> str | None:
    """Why a FAIL cannot be trusted: the WebSocket bot sent another frame holding a reply after turns' replies
    (run.json's ``streamed_replies``, written at the end of the Locust run: locustfiles/socket_turns.py), so
    each turn took the first frame, a piece of a streamed answer or a late greeting, and the rest answered the
    next turns: the amnesia, unanswered and lost turns found may all be goldfish's misreading. None when none
    came. A PASS stays a PASS: each turn's frame held the reply, and recall passed on it."""
    seen = run.get("streamed_replies") if isinstance(run, dict) else None
    if not seen:
        return None
    if not isinstance(seen, dict):  # damaged: it said such frames came
        return (f"run.json's streamed_replies is damaged ({short(seen)}): the WebSocket bot may answer in several "
                "frames, so the FAIL cannot be trusted")
    return (f"--websocket: after {short(seen.get('count'))} turn(s)' reply the bot sent another frame holding the "
            f"reply field (first: {short(seen.get('first'), 160)}): it answers in several frames (a streamed answer) "
            "or greets late, each turn took the first frame, and the rest answered the next turns, so the FAIL "
            "cannot be trusted: name the frame that holds the whole answer with --reply-where (type=done, say), or "
            "leave a late greeting out (--reply-where type!=greeting); a bot that sends no frame with the whole "
            "answer cannot be judged over --websocket")


UNWHOLE_PHASES = ("load", "heal")  # a run's phases before its journal is whole (locustfiles/endofrun.py)
RUN_PHASES = ("idle", "load", "heal", "settle", "audit", "report", "done")  # every phase run.json records


def _ended(run: dict) -> bool:
    """run.json's ``end`` is a time (locustfiles/runfolder.py ``end_run``): "", false or a word is no end."""
    end = run.get("end")
    return isinstance(end, (int, float)) and not isinstance(end, bool) and end > 0


def _damaged(run: dict) -> str | None:
    """A field that says whether the run can be trusted, of a type or value no run writes: ``phase`` not a phase,
    ``workers_lost`` not an object with a count and ``all``, ``user_exceptions`` not an object with a count,
    ``journal.bytes`` not a size. It may have said the run was cut short."""
    phase, lost, raised = run.get("phase"), run.get("workers_lost"), run.get("user_exceptions")
    if phase is not None and phase not in RUN_PHASES:
        return f"phase is damaged ({short(phase)}): whether the run stopped before its journal was whole"
    if lost is not None and not (isinstance(lost, dict) and whole_count(lost.get("count")) and
                                 isinstance(lost.get("all"), bool)):
        return f"workers_lost is damaged ({short(lost)}): whether every Locust worker went missing"
    if raised is not None and not (isinstance(raised, dict) and whole_count(raised.get("count"))):
        return f"user_exceptions is damaged ({short(raised)}): whether Locust users raised exceptions"
    journal = run.get("journal")
    size = journal.get("bytes") if isinstance(journal, dict) else journal
    if journal is not None and not (isinstance(journal, dict) and (size is None or type(size) is int and size >= 0)):
        # the size the journal's completeness is checked against (audit.require_whole_journal): a line deleted since
        # PASSed, exit 0, beside a warning no terminal showed (input hunt 15)
        return f"journal.bytes is damaged ({short(size)}): whether the journal lost lines since the run ended"
    return None


def whole_count(value) -> bool:
    """A count the run writes in workers_lost and user_exceptions: a whole number above 0 (it writes the field only
    then). A negative, a fraction or text was printed as "-3 Locust worker(s) went missing" (input hunt 12)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def cut_short(run: dict) -> str | None:
    """Why even a held verdict cannot be trusted: Locust's users raised exceptions (run.json's
    ``user_exceptions``, written at the end of the Locust run), or Locust workers went missing
    (``workers_lost``: every one, which stopped the test early, or some, whose turns in flight and journal lines
    not yet sent are lost), so conversations were cut short, unjudged; or the run never ended, and stopped before its
    journal was whole (``phase`` load or heal, no ``end``: killed, or a full disk, after which the run itself said
    NO VERDICT and a later audit PASSed the part of the journal written). None when none happened. The run
    exits 3 for it; so do ``oracle audit`` and ``oracle compare`` of it, and its report's badge says
    NOT TRUSTED (a FAIL stays a FAIL)."""
    if not isinstance(run, dict):
        return None
    if run.get(UNREADABLE):
        return (f"{run[UNREADABLE]}, so whether Locust's users raised exceptions (which cut conversations short) "
                "cannot be told: repair it (a copy of it)")
    damaged = _damaged(run)
    if damaged:  # it may have said the run was cut short: a damaged field never reads as "it was not"
        return f"run.json's {damaged} cannot be told, so the verdict cannot be trusted: repair it (a copy of it)"
    phase = run.get("phase")
    started = run.get("start") is not None and "end" in run  # as the run writes it at its start: end null
    if not _ended(run) and (phase in UNWHOLE_PHASES or phase is None and started):
        return (f"run.json records no end, and the run was in its {short(phase or 'load')} phase: it is still going, "
                "or it stopped before its journal was whole (killed, or its run folder could not be written: a full "
                "disk), so turns it sent may be missing from the journal; run the test again")
    lost = run.get("workers_lost")
    if isinstance(lost, dict) and lost.get("all"):
        return (f"every Locust worker went missing ({short(lost.get('count'))}): the test stopped early, its "
                "conversations cut short, so the verdict cannot be trusted")
    if isinstance(lost, dict):  # a worker of several: a PASS of the rest said PASS, exit 0 (verdict hunt 14), while
        # the same loss of journal lines in a local run killed mid-load is NOT TRUSTED
        return (f"{short(lost.get('count'))} Locust worker(s) went missing during the test: the turns they had in "
                "flight and the journal lines they had not yet sent the master are not judged (the store may hold "
                "them), so the verdict cannot be trusted; run the test again")
    raised = run.get("user_exceptions")
    if raised is None:
        return None
    return (f"Locust users raised {short(raised.get('count'))} exception(s) (first: {short(raised.get('first'), 160)}): "
            "conversations were cut short, unjudged, so the verdict cannot be trusted")
