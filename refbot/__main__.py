"""`python -m refbot up|down|status|serve|demo` — see docs/refbot.md.

Exit codes: 0 done; 1 could not (already up, a program missing, a member failed to
start, `status` with a member down); 2 bad arguments (unknown mode, a --port in use, ...);
3 `status` with nothing up. `down` with nothing up says so and exits 0, so it is safe in
cleanup scripts.
"""
from __future__ import annotations

import argparse
import os
import signal
import sys

from contracts.console import not_empty
from refbot.config import ConfigError, MODES, log_level

MODE_HELP = "memory mode: " + ", ".join(f"{m}:N" if p else m for m, p in MODES.items())


def _stack_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--replicas", type=int, default=3, help="bot replicas (default 3)")
    p.add_argument("--mode", default="correct", help=MODE_HELP)
    p.add_argument("--releases", default="v1",
                   help="release label per replica, comma-separated (one label applies to all), e.g. v1,v1,v2")
    p.add_argument("--persistence", default="none", help="redis persistence: none, rdb, aof-everysec, aof-always")
    p.add_argument("--think-ms", type=float, default=30.0, help="model think time (default 30)")
    p.add_argument("--jitter-ms", type=float, default=20.0, help="extra random think time, 0..N ms (default 20)")
    p.add_argument("--flush-ms", type=float, default=1000.0, help="fire-and-forget write delay (default 1000)")
    p.add_argument("--port", type=int, help="HAProxy's port (default: a free one)")
    p.add_argument("--redis-port", type=int, help="redis-server's port (default: a free one)")
    p.add_argument("--lb-retries", type=int, default=0,
                   help="HAProxy retries+redispatch on connection failure (default 0: failures stay visible)")
    p.add_argument("--maxmemory", metavar="SIZE",
                   help="redis-server's memory limit, e.g. 8mb (default: none); with --maxmemory-policy a cache")
    p.add_argument("--maxmemory-policy", metavar="POLICY",
                   help="what redis does at the limit: noeviction (writes fail, the default), allkeys-lru, "
                        "allkeys-lfu, allkeys-random, volatile-lru, volatile-lfu, volatile-random, volatile-ttl")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds each member may take to become healthy")
    p.add_argument("--redis", default="single",
                   help="redis topology: single (one redis-server) or sentinel (primary, replica, three sentinels)")
    p.add_argument("--save", help="RDB save points with --persistence rdb, Redis's syntax (default '1 1'; "
                                  "'3600 1' leaves snapshots to BGSAVE)")
    p.add_argument("--wait-replicas", type=int, default=0,
                   help="bots WAIT for N replicas after each write and fail the turn (503) when fewer confirm")
    p.add_argument("--wait-ms", type=float, default=100.0, help="WAIT's timeout in ms (default 100)")


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="python -m refbot", description="The reference chatbot and its local stack.")
    sub = top.add_subparsers(dest="command", required=True)
    state_help = "state directory (default $REFBOT_STATE_DIR or .stack)"
    p_up = sub.add_parser("up", help="start redis-server, N bot replicas and HAProxy")
    _stack_flags(p_up)
    state_dir = not_empty("$REFBOT_STATE_DIR or .stack")
    p_up.add_argument("--state-dir", type=state_dir, help=state_help)
    p_down = sub.add_parser("down", help="stop everything `up` started")
    p_down.add_argument("--state-dir", type=state_dir, help=state_help)
    p_status = sub.add_parser("status", help="show each member; non-zero exit if any is down")
    p_status.add_argument("--state-dir", type=state_dir, help=state_help)
    p_demo = sub.add_parser("demo", help="up, a scripted conversation through HAProxy, down")
    _stack_flags(p_demo)
    p_demo.add_argument("--state-dir", type=not_empty("a temporary one"),
                        help="state directory (default: a temporary one)")
    p_serve = sub.add_parser("serve", help="serve one bot replica (flags override REFBOT_* env vars)")
    for flag, env in [("--host", "REFBOT_HOST"), ("--port", "REFBOT_PORT"), ("--mode", "REFBOT_MODE"),
                      ("--release", "REFBOT_RELEASE"), ("--replica", "REFBOT_REPLICA"),
                      ("--redis-url", "REFBOT_REDIS_URL"), ("--think-ms", "REFBOT_THINK_MS"),
                      ("--jitter-ms", "REFBOT_JITTER_MS"), ("--ttl", "REFBOT_TTL"),
                      ("--window", "REFBOT_WINDOW"), ("--flush-ms", "REFBOT_FLUSH_MS"),
                      ("--key-prefix", "REFBOT_KEY_PREFIX"), ("--wait-replicas", "REFBOT_WAIT_REPLICAS"),
                      ("--wait-ms", "REFBOT_WAIT_MS")]:
        p_serve.add_argument(flag, dest=env, help=f"sets {env}")
    return top


def save_points(text: str) -> bool:
    """redis.conf's ``save``: pairs of SECONDS (at least 1) and CHANGES, space-separated, or '' (none)."""
    numbers = [n for n in text.split(" ") if n]
    return (len(numbers) % 2 == 0 and all(n.isascii() and n.isdigit() for n in numbers)
            and all(n.strip("0") for n in numbers[::2]))  # no int(): 5,000 digits would raise


def options(args):
    from refbot.stack import StackOptions
    if args.save is not None and not save_points(args.save):  # else redis-server's config error, exit 1
        raise ConfigError(f"--save {args.save!r} is not Redis save points: pairs of SECONDS CHANGES (whole numbers, "
                          "seconds at least 1), e.g. '3600 1 300 100', or '' for none")
    log_level(os.environ)  # the replicas inherit it: refused here, not as "bot-1 exited while starting"
    return StackOptions(replicas=args.replicas, mode=args.mode,
                        releases=[r.strip() for r in args.releases.split(",")], persistence=args.persistence,
                        think_ms=args.think_ms, jitter_ms=args.jitter_ms, flush_ms=args.flush_ms,
                        state_dir=args.state_dir, port=args.port, redis_port=args.redis_port,
                        lb_retries=args.lb_retries, maxmemory=args.maxmemory,
                        maxmemory_policy=args.maxmemory_policy, timeout=args.timeout, redis=args.redis,
                        save=args.save, wait_replicas=args.wait_replicas, wait_ms=args.wait_ms)


def serve(args) -> int:
    for key, value in vars(args).items():
        if key.startswith("REFBOT_") and value is not None:
            os.environ[key] = str(value)
    from refbot.config import Config
    config = Config.from_env()  # fail fast with a clear message before uvicorn starts
    import uvicorn
    uvicorn.run("refbot.app:create_app", factory=True, host=config.host, port=config.port, workers=1,
                log_level=config.log_level, access_log=False)
    return 0


def missing_stack() -> str | None:
    """Why the reference bot cannot run here (its packages are the `stack` extra), or None."""
    import importlib.util
    missing = [m for m in ("fastapi", "uvicorn", "langchain_core", "langchain_community")
               if importlib.util.find_spec(m) is None]
    return (f"the reference bot needs {', '.join(missing)}, which the core install leaves out: install "
            f"goldfish[stack] (pip install -e '.[stack]', or make demo)") if missing else None


def _terminate_as_interrupt(*_):
    raise KeyboardInterrupt  # SIGTERM during up/demo cleans up exactly like Ctrl-C


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.command in ("serve", "up", "demo") and (why := missing_stack()):
        print(f"refbot: error: {why}", file=sys.stderr)
        return 2
    if args.command in ("up", "demo"):
        signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    from refbot import stack
    from targets import registry as state
    try:
        if args.command == "serve":
            return serve(args)
        if args.command == "up":
            stack.up(options(args))
            return 0
        if args.command == "demo":
            from refbot.demo import demo
            demo(options(args))
            return 0
        if args.command == "down":
            if stack.down(args.state_dir) is None:
                print(f"refbot: nothing is up in {state.state_dir(args.state_dir)} (no state file); nothing to stop")
            return 0
        if args.command == "status":
            rows = stack.status(args.state_dir)
            if rows is None:
                print(f"refbot: nothing is up in {state.state_dir(args.state_dir)} (no state file)", file=sys.stderr)
                return 3
            print(stack.format_status(rows))
            down = [r["name"] for r in rows if not r["healthy"]]
            if down:
                print(f"down: {', '.join(down)}", file=sys.stderr)
            return 1 if down else 0
    except (ConfigError, stack.BadOption) as exc:
        print(f"refbot: error: {exc}", file=sys.stderr)
        return 2
    except (stack.StackError, state.StateError, state.MemberUnhealthy) as exc:
        print(f"refbot: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("refbot: interrupted (anything started was stopped)", file=sys.stderr)
        return 130
    return 2


if __name__ == "__main__":
    from contracts.console import escape_unencodable

    escape_unencodable()  # an ASCII terminal or log: a dash or a path's é escaped, no crash
    sys.exit(main())
