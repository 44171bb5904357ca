"""The publish path: from an accepted SEND to a durable entry (admission, PIP-6 dedup,
idempotency keys, PIP-68 producer access, the group commit)."""
