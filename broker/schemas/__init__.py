"""Schema compatibility, as Pulsar's schema registry decides it.

``strategy.py`` names the strategies and finds a topic's; ``avro_compat.py`` is Avro's schema
resolution (can a reader schema read what a writer schema wrote), pure; ``checks.py`` applies a
strategy to one schema type (Avro and JSON through ``avro_compat``, Protobuf-native by root
message, KeyValue by its halves, everything else by type); ``registry.py`` is where a PRODUCER,
SUBSCRIBE or GET_OR_CREATE_SCHEMA brings a schema to a topic's versions.
"""
