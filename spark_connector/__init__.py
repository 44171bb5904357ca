"""Spark connector: format("dedup-topic") (Python Data Source API)."""
