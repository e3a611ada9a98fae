"""The oracle: reads stored histories back and judges them against the journal (Jepsen's checker)."""
