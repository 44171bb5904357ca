"""One client connection on the binary port: the core (socket I/O, framing, requests) and its
endpoints (producers, consumers), which reach it through ``ConnectionHandle``."""
