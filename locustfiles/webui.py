"""The goldfish tab in Locust's web UI, built only from Locust's extension points (as in Locust's
examples/extend_web_ui.py and examples/web_ui_cache_stats.py):

- ``web_ui.template_args``: ``extended_tabs`` / ``extended_tables`` declare the tab and its columns, and
  ``extended_csv_files`` adds a link to the last run's report.html to the "Download Data" tab;
- its rows ride on ``/stats/requests`` (``extended_stats``, added by an ``after_request`` hook), so the tab
  refreshes with Locust's own polling: the run folder and its phase, live counts per session outcome (from
  the journal, locustfiles/live.py), the chaos timeline (in force now, applied and healed), and after the
  stop the verdict with each rule and the report's address;
- Flask routes under ``/goldfish``: ``status`` (the same as JSON), ``runs/<run>/<file>`` (serves each run
  folder of this process: report.html, Locust's own report), ``report`` (the last run's report.html);
- a ``before_request`` hook on ``/swarm`` checks goldfish's options as the form sends them (script, gates,
  the store reached as the audit connects, chaos plan against its backend) and refuses a start with one clear
  message, before any load.
"""
from __future__ import annotations

import time
from argparse import Namespace
from pathlib import Path

from flask import Blueprint, jsonify, redirect, request, send_from_directory
from locust.runners import STATE_RUNNING, STATE_SPAWNING

from contracts import codec
from contracts.runfolder import RunFolder
from locustfiles import endofrun, options
from locustfiles.script import ScriptError, load_script
from oracle import AuditOptionError, reach_store

TAB = "goldfish"
STRUCTURE = [{"key": "section", "title": "Section"}, {"key": "item", "title": "What"},
             {"key": "value", "title": "Value"}, {"key": "detail", "title": "Detail"}]
LOCUST_FORM_KEYS = {"user_count", "spawn_rate", "host", "user_classes", "run_time", "profile", "shape_class"}


def install(environment, rt) -> None:
    web_ui = environment.web_ui
    app = web_ui.app
    base = (getattr(environment.parsed_options, "web_base_path", None) or "").rstrip("/")
    # Flask (jsonify) and Jinja (the page's |tojson) sort JSON keys by default, which put goldfish's options
    # in the start form in alphabetical order; unsorted, the form lists them in the order options.py adds them
    app.json.sort_keys = False
    app.jinja_env.policies["json.dumps_kwargs"] = {"sort_keys": False}
    web_ui.template_args.update(
        extended_tabs=[{"title": "Goldfish", "key": TAB}],
        extended_tables=[{"key": TAB, "structure": STRUCTURE}],
        extended_csv_files=[{"href": f"{base}/goldfish/report", "title": "goldfish: report.html of the last run"},
                            {"href": f"{base}/goldfish/status", "title": "goldfish: the tab as JSON"}])
    page = Blueprint("goldfish", __name__, url_prefix=f"{base}/goldfish")

    @app.after_request
    def _extend_stats(response):
        if request.endpoint != "locust.request_stats" or not response.is_json:
            return response
        data = {**response.json, "extended_stats": [{"key": TAB, "data": rows(rt, base, environment)}]}
        response.set_data(app.json.dumps(data))
        return response

    @app.before_request
    def _check_start():
        if request.endpoint != "locust.swarm" or request.method != "POST":
            return None
        if environment.runner is not None and environment.runner.state in (STATE_RUNNING, STATE_SPAWNING):
            return None  # an edit of the running test: its options are fixed at its start
        problem = check_form(environment.parsed_options, request.form)
        if problem:
            endofrun.say(f"error: {problem} (the test was not started)")
            return jsonify({"success": False, "message": f"goldfish: {problem}", "host": environment.host})
        return None

    @page.route("/status")
    @web_ui.auth_required_if_enabled
    def status():
        return jsonify(status_of(rt, base, environment))

    @page.route("/report")
    @web_ui.auth_required_if_enabled
    def last_report():
        done = [run for run in rt.end.runs if run.report is not None]
        if not done:
            return "goldfish: no report yet (a report is written when a test with --store-url stops)", 404
        return redirect(f"{base}/goldfish/runs/{done[-1].settings.run_id}/report.html")

    @page.route("/runs/<run_id>/<path:name>")
    @web_ui.auth_required_if_enabled
    def run_file(run_id: str, name: str):
        run = next((r for r in rt.end.runs if r.settings.run_id == run_id), None)
        if run is None:
            return f"goldfish: no run {run_id!r} in this Locust process", 404
        return send_from_directory(Path(run.run_dir).resolve(), name)

    app.register_blueprint(page)


def check_form(parsed: Namespace, form) -> str | None:
    """What is wrong with the options the start form sends (converted as Locust's /swarm converts them), or None."""
    values = dict(vars(parsed))
    for key, value in form.items():
        if key in LOCUST_FORM_KEYS or key not in values:
            continue
        current = values[key]
        try:
            if isinstance(current, bool):
                values[key] = value == "true"
            elif current is None or isinstance(current, list):
                values[key] = value if current is None else form.getlist(key)
            else:
                values[key] = type(current)(value)
        except ValueError:
            return f"--{key.replace('_', '-')}: {value!r} is not a {type(current).__name__}"
    try:
        settings = options.Settings.from_options(Namespace(**values))
        load_script(settings.script)
        if settings.store is not None and not settings.no_audit:  # as the command line's (locustfiles/hooks.py)
            reach_store(settings.store)
        endofrun.check_chaos(settings)
    except (options.OptionError, ScriptError, AuditOptionError) as exc:
        return str(exc)
    except Exception as exc:  # noqa: BLE001 - PlanError, an unreachable chaos backend
        return f"chaos plan {values.get('chaos')}: {exc}"
    return None


# ---- what the tab shows ---------------------------------------------------------------------------

def status_of(rt, base: str = "", environment=None) -> dict:
    end = rt.end
    return {"phase": end.phase, "counts": rt.live.counts() if end.run is not None else {},
            "runs": [{"run": r.settings.run_id, "dir": r.run_dir, "phase": r.phase, "verdict": r.result,
                      "exit_code": r.final, "interrupted": r.interrupted, "untrusted": r.untrusted,
                      "report": f"{base}/goldfish/runs/{r.settings.run_id}/report.html" if r.report else None}
                     for r in end.runs],
            "rows": rows(rt, base, environment)}


def rows(rt, base: str = "", environment=None) -> list[dict]:
    """The tab's rows: (section, what, value, detail), in reading order."""
    out: list[dict] = []

    def row(section, item, value="", detail=""):
        # Locust's table sorts rows by "name" until a column is clicked: the index keeps reading order
        out.append({"name": f"{len(out):03d}", "section": section, "item": item, "value": value,
                    "detail": detail})

    end = rt.end
    run = end.run
    if run is None:
        row("run", "no test yet", "", "each start opens its own run folder, arms the chaos plan and starts a "
                                      "fresh journal; each stop heals, audits and judges it")
        return out
    s = run.settings
    elapsed = (run.ended or time.time()) - run.started
    row("run", "folder", s.run_id, f"{run.phase} · {elapsed:.0f} s · label {s.label} · script "
                                   f"{Path(s.script).name} · gates {s.gates.spec}")
    runner = getattr(environment, "runner", None)
    _count_rows(row, rt.live.counts(), runner.stats.total.num_requests if runner is not None else None)
    _rolling_rows(row, run)
    _chaos_rows(row, run)
    _verdict_rows(row, run, base)
    for earlier in reversed(end.runs[:-1]):
        link = f" · {base}/goldfish/runs/{earlier.settings.run_id}/report.html" if earlier.report else ""
        row("earlier run", earlier.settings.run_id, _shown(earlier), f"exit code {earlier.final}{link}")
    return out


def _shown(run) -> str:
    """A run's verdict as the tab shows it: NOT TRUSTED when its gates held but its Locust users raised
    exceptions (it exits 3), or it FAILed on WebSocket replies that came in several frames, as the report's
    badge says."""
    if run.untrusted or run.result == "pass" and run.final == endofrun.EXIT_AUDIT:
        return "NOT TRUSTED"
    return (run.result or run.interrupted or "no verdict").upper()


def _count_rows(row, c: dict, requests: int | None) -> None:
    answered = c.get("probes_answered", 0)
    rate = f" ({c.get('probes_amnesia', 0) / answered:.1%})" if answered else ""
    row("turns", "journaled", c.get("turns", 0),
        f"ok {c.get('ok', 0)} · refused {c.get('fail', 0)} · indeterminate {c.get('info', 0)} · interrupted by "
        f"the stop {c.get('interrupted', 0)} (journaled as indeterminate; not a request in Locust's totals)")
    if requests is not None:
        row("turns", "requests in Locust's totals", requests,
            "the Aggregated row: one per turn that was sent and answered or failed (journaled minus interrupted; "
            "a worker's reach the master with its stats reports)")
    row("probes", "answered", answered, f"recalled {c.get('probes_passed', 0)} · amnesia "
                                        f"{c.get('probes_amnesia', 0)}{rate}")
    row("cross-talk", "replies carrying another session's data", c.get("crosstalk_replies", 0),
        "which session leaked is in the journal (crosstalk)")
    row("sessions", "all", c.get("sessions", 0), "conversations started in this test")
    for key, what in (("sessions_amnesia", "with amnesia (a failed probe)"),
                      ("sessions_crosstalk", "with cross-talk"),
                      ("sessions_info", "with indeterminate turns (timeout, 5xx, reset)"),
                      ("sessions_clean", "clean")):
        row("sessions", what, c.get(key, 0))


def _rolling_rows(row, run) -> None:
    """The rolling audit's progress (--audit-every; oracle/follow.py writes it after each pass)."""
    if run.settings.audit_every <= 0:
        return
    path = RunFolder(run.run_dir).rolling_progress
    try:
        p = codec.load_document(path)
    except (OSError, ValueError):
        row("rolling audit", "sessions judged", 0, f"every {run.settings.audit_every:g} s; no pass yet")
        return
    findings = ", ".join(f"{k} {v}" for k, v in sorted((p.get("findings") or {}).items())) or "none"
    row("rolling audit", "sessions judged", p.get("sessions", 0),
        f"{p.get('passes', 0)} passes, every {run.settings.audit_every:g} s · {p.get('waiting', 0)} ended "
        f"and settling · findings so far: {findings}")


def _chaos_rows(row, run) -> None:
    s = run.settings
    if not s.chaos:
        row("chaos", "plan", "none", "no faults in this test (the --chaos option, also in the start form)")
        return
    planned = len(run.controller.plan.faults) if run.controller is not None else 0
    row("chaos", "plan", Path(s.chaos).name, f"{planned} fault(s), armed from its beginning at the test start "
                                             f"on backend {s.chaos_backend}; everything is healed at the stop")
    from oracle import load_faults

    problems: list[str] = []  # failed applies and damaged lines: the audit's own pairing and checks
    try:
        faults = load_faults(Path(s.run_dir), problems)
    except OSError as exc:  # chaos.jsonl is a folder or a FIFO: say so, the page still shows
        faults, problems = [], [f"cannot read {exc.filename}: {exc.strerror}"]
    now = [f"{f.kind} on {f.instance}" for f in faults if f.end is None]
    row("chaos", "in force now", ", ".join(now) or "nothing")
    for f in faults:
        at = lambda t: f"+{t - run.started:.1f} s"  # noqa: E731
        healed = "in force" if f.end is None else f"healed {at(f.end)}" + (f" ({f.via})" if f.via else "")
        row("chaos", f.fault, f"{f.kind} on {f.instance}", f"applied {at(f.start)} · {healed}")
    for problem in problems:
        row("chaos", "problem", "", problem)


def _verdict_rows(row, run, base: str) -> None:
    from oracle import rule_line

    if run.verdict is None:
        if run.interrupted:
            row("verdict", "none", "INTERRUPTED", f"{run.interrupted} after the load; run.json says how to finish")
        elif run.phase == endofrun.LOAD:
            row("verdict", "when the test stops", "", "heal, settle, audit, report and the verdict")
        elif run.phase == endofrun.DONE:
            row("verdict", "none", f"exit code {run.final}", "nothing to judge (see the log)")
        else:
            row("verdict", "in progress", run.phase, "the stop heals, settles, audits and judges this test")
        return
    v = run.verdict
    audited = run.report is not None or RunFolder(run.run_dir).summary.exists()
    cut_short = " · Locust users raised exceptions: conversations were cut short, unjudged"
    row("verdict", "result", _shown(run), f"gates {v['gates']} · exit code {run.final}"
        + (f" · {run.untrusted}" if run.untrusted else cut_short if _shown(run) == "NOT TRUSTED" else "")
        + ("" if audited else " · online, from the journal: the store was not audited"))
    for rule in v["rules"]:
        if rule["result"] in ("pass", "fail"):
            row("verdict", rule["gate"], rule["result"], rule_line(rule))
    unjudged = [f"{r['gate']} ({r['result']})" for r in v["rules"] if r["result"] not in ("pass", "fail")]
    if unjudged:
        row("verdict", "not judged", len(unjudged), ", ".join(unjudged))
    where = f"{base}/goldfish/runs/{run.settings.run_id}"
    locust_report = f"Locust's own: {where}/locust/report.html"
    if run.report is not None:
        row("report", "report.html", f"{where}/report.html", locust_report)
    else:
        row("report", "report.html", "none", f"a report needs the audit (--store-url) · {locust_report}")
