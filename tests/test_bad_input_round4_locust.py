"""A Locust run whose chaos acts on another stack than the one it tests (fourth bad-input hunt)."""
from __future__ import annotations

import pytest

from support_chaos import chaos_stack  # noqa: F401 - fixture

pytestmark = pytest.mark.timeout(240)


def test_chaos_on_another_stack_than_the_one_tested_is_warned_at_the_start_and_with_the_verdict(chaos_stack,
                                                                                                 tmp_path):
    """--stack-state named one stack while --host and --store-url named another: the plan killed the first
    stack's bots and the run PASSed with no warning. Now the run says so when it starts and beside its verdict;
    a run on the stack itself, or straight on one of its bots, is not warned about."""
    from support_locust import quick_script, run_locust
    from test_contract_paths_cookies import bot

    from locustfiles.endofrun import chaos_elsewhere
    from oracle import StoreOptions

    plan = tmp_path / "plan.yaml"
    plan.write_text("faults:\n  - {kind: pause, target: bot-1, at: 1s, duration: 500ms}\n")
    state = chaos_stack.state_dir / "state.json"
    with bot("plain") as url:
        done = run_locust(url, tmp_path / "run", "--script", quick_script(tmp_path), "--chaos", plan,
                          "--stack-state", state, "--http-url", f"{url}/history/{{session}}", "--role-field", "role",
                          "--content-field", "content", "--settle", "0", "--no-audit", time_s="3s")
    port = url.rsplit(":", 1)[1]
    warning = (f"warning: chaos acts on the stack of {state} (its bots at loopback:{chaos_stack.state()['url'].rsplit(':', 1)[1]}, "
               f"but this run's --host is loopback:{port})")
    assert done.output.count(warning) == 2, done.output[-3000:]
    assert "no report.html (no audit: --no-audit)" in done.output  # it said --store-url, which was given

    class Settings:  # what the run's settings hold of it
        chaos, chaos_backend, stack_state = str(plan), "local", str(state)
        store = StoreOptions(url=chaos_stack.state()["store_url"])

    assert chaos_elsewhere(Settings, chaos_stack.state()["url"]) is None
    assert chaos_elsewhere(Settings, chaos_stack.state()["url"].replace("127.0.0.1", "localhost")) is None
    bot_port = chaos_stack.state()["members"]["bot-1"]["port"]
    assert chaos_elsewhere(Settings, f"http://127.0.0.1:{bot_port}") is None  # one of its bots, past the balancer
    Settings.store = StoreOptions(url="redis://127.0.0.1:1/0")
    assert "but this run's --store-url is loopback:1" in chaos_elsewhere(Settings, chaos_stack.state()["url"])
