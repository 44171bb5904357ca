"""``magnetar-perf``: a load generator for Pulsar-protocol brokers, in the spirit of pulsar-perf.

Modules, one concept each:

* ``options``: the run's settings (``PerfOptions``), shared by the CLI and ``bench/``;
* ``frames``: pre-encoded SEND frames (sequence ids patched in place);
* ``receipts``: SEND_RECEIPTs read from their bytes, the codec as fallback;
* ``raw``: the raw pipelined producer (CONNECT/PRODUCER with the real codec, then frames);
* ``raw_consume``: the raw consumer (SUBSCRIBE + FLOW, whole entries counted);
* ``client_mode``: produce / consume / end-to-end through ``client.AsyncClient``;
* ``policies``: dedup on/off through the admin REST API;
* ``report``: HDR latency histogram, live progress (rich), the JSON summary;
* ``plot``: the PNG of a latency histogram (matplotlib, the ``plot`` extra);
* ``cli``: the ``magnetar-perf produce|consume|e2e`` command line.
"""
