"""Broker-level metadata kept on local disk: namespaces and policies, partitioned topics,
schemas, each one JSON document."""
