"""``builtin:postgres``: a source (snapshot, then change data capture) and a destination (exactly once)."""
