"""Processes that chaos acts on and the tools both the reference stack and chaos use on them:
the state file of members (registry), HAProxy's runtime API (haproxy), a user's targets file (file),
and Redis behind Sentinel: roles, sync, failover, restore (sentinel)."""
