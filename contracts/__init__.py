"""The contracts between goldfish's parts, each defined once, imported by producer and consumer.

- ``contracts.tokens``    session ids, turn tokens, fact nonces (and the patterns that find them)
- ``contracts.journal``   the journal record: one struct, encoded by the Locust writer, decoded by the oracle
- ``contracts.codec``     the JSON codec every file of a run folder is written and read with
- ``contracts.redis_url`` a store URL (plain or Sentinel) -> a redis-py client, for the bots and the oracle
- ``contracts.jsonl``     the one JSONL reader: one torn-last-line rule, bad lines named ``file:line``
- ``contracts.durations`` the one duration grammar (options, plans, scripts)
- ``contracts.runfolder`` the run folder's paths
- ``contracts.console``   the entry points' console: what a terminal cannot encode is escaped

Nothing here imports another goldfish package: locustfiles, chaos and oracle all import it.
The formats themselves are described in docs/CONTRACTS.md.
"""
