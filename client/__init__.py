"""Magnetar client library (asyncio-native, with a blocking facade)."""
