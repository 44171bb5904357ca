"""Dispatch: a subscription per cursor, its consumers, and how entries reach them (the dispatch
loop, acknowledgements with PIP-54 ack sets, redelivery, delayed delivery, Key_Shared, the entry
loader)."""
