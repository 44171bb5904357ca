"""Compaction (issue #14): the compactor that writes a topic's compacted view, and readCompacted
reads from it."""
