"""``python -m locustfiles [Locust's options]``: Locust, with goldfish's options known before it parses.

``locust -f locustfiles/chat.py --help`` prints Locust's help before Locust imports the locustfile (Locust
issue #2917), so options a locustfile adds never show there. Here goldfish's options are registered first,
so ``python -m locustfiles --help`` lists them in their groups, after Locust's own. Anything else runs as
``locust`` would; without ``-f`` the locustfile is locustfiles/chat.py.
"""
from __future__ import annotations

import sys
from pathlib import Path


def main() -> None:
    from locustfiles import hooks  # noqa: F401 - registers goldfish's options on Locust's parser
    from locust.main import main as locust_main

    args = sys.argv[1:]
    if not any(a in ("-f", "--locustfile") or a.startswith(("--locustfile=", "-f=")) for a in args):
        args = ["-f", str(Path(__file__).resolve().parent / "chat.py"), *args]
    sys.argv = ["locust", *args]
    locust_main()


if __name__ == "__main__":
    main()
