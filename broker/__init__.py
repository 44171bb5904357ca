"""Magnetar broker: asyncio server speaking the Pulsar binary protocol."""
