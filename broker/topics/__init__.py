"""Topics: the persistent topic that coordinates publishing and dispatch, non-persistent topics,
their policies, positions, counters and message expiry."""
