"""The goldfish Locust entry: ``locust -f locustfiles/chat.py --host URL [options]``.

Users hold scripted conversations (locustfiles/conversation.py), every turn is journaled and
judged online, and the end-of-run seam heals chaos and audits (locustfiles/endofrun.py).
Options: ``python -m locustfiles --help`` lists them in their groups ("goldfish: ..."); plain
``locust -f locustfiles/chat.py --help`` cannot (Locust prints its help before it imports a locustfile).
Guide: docs/locust.md.
"""
from locustfiles import hooks  # noqa: F401 - registers options and event listeners
from locustfiles.conversation import ChatUser  # noqa: F401 - the User class Locust runs
from locustfiles.shapes import StepLoadShape  # noqa: F401 - opt-in via --step-users/--steps
