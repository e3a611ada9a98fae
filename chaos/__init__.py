"""The chaos controller: faults on a schedule, always healed, logged on a timeline (Jepsen's nemesis)."""
