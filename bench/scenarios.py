"""P1-P8 of issue #17, each a function returning its figures (median of ``runs`` with range).

Every broker is a fresh subprocess on a fresh data directory, pinned to CPU 0 (default
settings: dedup on, fsync before every receipt); the generator (``client.perf``, in this
process) runs on CPU 1. ``Scale`` holds every size, so the suite can be shrunk or grown.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pulsar
import uvloop
from hdrh.histogram import HdrHistogram

from bench import ledger_builder, machine
from bench.bench_client_produce import official
from bench.pinned_broker import cpu_seconds, pid_of, rss_bytes, start_pinned
from broker.storage.paths import topic_directory
from client.perf.cli import produce_run
from client.perf.options import Dedup, PerfOptions
from client.perf.raw import run_raw_produce
from client.perf.raw_consume import run_raw_consume
from client.perf.report import Recorder, decode_histogram, new_histogram
from protocol import commands
from protocol._pb import PulsarApi_pb2 as pb
from protocol.enums import InitialPosition
from protocol.framing import FrameDecoder
from protocol.topic_name import TopicName
from tests.helpers import BrokerProcess

MIB = 1024 * 1024


@dataclass(frozen=True)
class Scale:
    runs: int = 3
    dd_mib: int = 1024
    append_seconds: float = 3.0
    # Batches of 1000 x 100 B: 1 GB per run, what dd writes (dd_mib). At 200 MB (earlier builds)
    # a run lasted 0.2 s, and its start (connection, producer, window fill) weighed on it.
    p1_messages: int = 10_000_000
    p2_messages: int = 300_000
    p4_seconds: float = 10.0
    p5_messages: int = 1_000_000  # batches of 100 x 100 B
    p6_entries: int = 1_000_000
    p6_producers: int = 10_000
    p7_producers: int = 100_000
    p7_connections: int = 10_000
    p8_batched_messages: int = 300_000
    p8_unbatched_messages: int = 100_000


def spread(values: list[float], digits: int = 1) -> dict[str, Any]:
    """Median and range of a figure's runs."""
    return {
        "median": round(statistics.median(values), digits),
        "min": round(min(values), digits),
        "max": round(max(values), digits),
        "runs": [round(v, digits) for v in values],
    }


@contextmanager
def broker_on(root: Path, *settings: str) -> Iterator[BrokerProcess]:
    data_dir = Path(tempfile.mkdtemp(prefix="data-", dir=root))
    broker = start_pinned(data_dir, *settings)
    try:
        yield broker
    finally:
        broker.terminate()


def raw_options(broker: BrokerProcess, **overrides: Any) -> PerfOptions:
    base = PerfOptions(
        url=broker.url,
        admin_url=broker.http,
        topics=(f"bench-{uuid.uuid4().hex[:8]}",),
        raw=True,
        window=1000,
        progress_interval=0,
        count=1,
    )
    return replace(base, **overrides)


def measured_produce(broker: BrokerProcess, options: PerfOptions) -> dict[str, Any]:
    """One produce run, with the broker's CPU time over it."""
    pid = pid_of(broker)
    cpu = cpu_seconds(pid)
    result = uvloop.run(produce_run(options))
    broker_cpu = cpu_seconds(pid) - cpu
    if result["errors"] or result["mismatched_receipts"]:
        raise RuntimeError(f"run failed: {result}")
    result["broker_cpu_s"] = broker_cpu
    result["broker_cpu_us_per_entry"] = broker_cpu / max(result["entries"], 1) * 1e6
    result["broker_cpu_share"] = broker_cpu / result["seconds"]
    return result


# --- machine ---------------------------------------------------------------------------


def machine_limits(root: Path, scale: Scale) -> dict[str, Any]:
    dd = [machine.dd_fdatasync_mb_s(root, scale.dd_mib) for _ in range(scale.runs)]
    syncs = [machine.append_fdatasync_per_s(root, scale.append_seconds) for _ in range(scale.runs)]
    return {
        "dd_conv_fdatasync_mb_s": spread(dd),
        "dd_size_mib": scale.dd_mib,
        "append_4k_fdatasync_per_s": spread(syncs, 0),
    }


# --- P1-P4 -----------------------------------------------------------------------------


def p1_batched_ingest(root: Path, scale: Scale, dd_mb_s: float) -> dict[str, Any]:
    mb_s, cpu = [], []
    with broker_on(root) as broker:
        for _ in range(scale.runs):
            options = raw_options(
                broker, count=scale.p1_messages, batch_messages=1000, size=100, dedup=Dedup.ON
            )
            result = measured_produce(broker, options)
            mb_s.append(result["mb_per_s"])
            cpu.append(result["broker_cpu_us_per_entry"] / 1000)
    ratio = statistics.median(mb_s) / dd_mb_s
    return {
        "what": "raw generator, batches of 1000 x 100 B, dedup on, fsync on, 1000 in flight",
        "messages_per_run": scale.p1_messages,
        "mb_per_s": spread(mb_s),
        "broker_cpu_us_per_message": spread(cpu, 3),
        "ratio_to_dd_fdatasync": round(ratio, 3),
        "goal": ">= 0.5",
        "goal_met": ratio >= 0.5,
    }


def p2_p3_unbatched(root: Path, scale: Scale) -> tuple[dict[str, Any], dict[str, Any]]:
    """P2 (dedup on) and P3 (on vs off), interleaved run by run so disk drift hits both."""
    runs: dict[Dedup, list[dict[str, Any]]] = {Dedup.ON: [], Dedup.OFF: []}
    with broker_on(root) as broker:
        for _ in range(scale.runs):
            for dedup in (Dedup.ON, Dedup.OFF):
                options = raw_options(broker, count=scale.p2_messages, size=100, dedup=dedup)
                runs[dedup].append(measured_produce(broker, options))
    on = [r["entries_per_s"] for r in runs[Dedup.ON]]
    off = [r["entries_per_s"] for r in runs[Dedup.OFF]]
    cpu_on = [r["broker_cpu_us_per_entry"] for r in runs[Dedup.ON]]
    rate = statistics.median(on)
    p2 = {
        "what": "raw generator, unbatched 100 B, dedup on, fsync on, 1000 in flight",
        "entries_per_run": scale.p2_messages,
        "entries_per_s": spread(on, 0),
        "broker_cpu_us_per_entry": spread(cpu_on, 2),
        "broker_cpu_share": spread([r["broker_cpu_share"] for r in runs[Dedup.ON]], 2),
        "generator_cpu_us_per_entry": spread(
            [r["generator_cpu_us_per_entry"] for r in runs[Dedup.ON]], 2
        ),
        "generator_ceiling_entries_per_s": spread(
            [1e6 / r["generator_cpu_us_per_entry"] for r in runs[Dedup.ON]], 0
        ),
        "receipts_on_fast_path": sum(r["receipts_fast_path"] for r in runs[Dedup.ON]),
        "receipts_decoded": sum(r["receipts_decoded"] for r in runs[Dedup.ON]),
        "latency_us_p50": spread([r["latency_us"]["p50"] for r in runs[Dedup.ON]], 0),
        "goal": ">= 150000 entries/s, <= 6.7 us broker CPU per entry",
        "goal_met": rate >= 150_000 and statistics.median(cpu_on) <= 6.7,
    }
    ratio = rate / statistics.median(off)
    p3 = {
        "what": "P2's workload with the topic's dedup policy on, then off (admin REST)",
        "dedup_on_entries_per_s": spread(on, 0),
        "dedup_off_entries_per_s": spread(off, 0),
        "dedup_off_broker_cpu_us_per_entry": spread(
            [r["broker_cpu_us_per_entry"] for r in runs[Dedup.OFF]], 2
        ),
        "ratio_on_to_off": round(ratio, 3),
        "goal": ">= 0.95",
        "goal_met": ratio >= 0.95,
    }
    return p2, p3


def p4_latency(root: Path, scale: Scale) -> tuple[dict[str, Any], list[HdrHistogram]]:
    results = []
    with broker_on(root) as broker:
        for _ in range(scale.runs):
            options = raw_options(
                broker, count=0, duration=scale.p4_seconds, rate=10_000, size=100, dedup=Dedup.ON
            )
            results.append(measured_produce(broker, options))
    figures = {
        f"{key}_ms": spread([r["latency_us"][key] / 1000 for r in results], 3)
        for key in ("p50", "p99", "p99.9")
    }
    p99 = figures["p99_ms"]["median"]
    return (
        {
            "what": "raw generator at a fixed 10,000 msgs/s, unbatched 100 B, dedup + fsync on; "
            "latency = SEND written to receipt read",
            "seconds_per_run": scale.p4_seconds,
            "achieved_msgs_per_s": spread([r["msgs_per_s"] for r in results], 0),
            **figures,
            "goal": "p99 <= 2 ms",
            "goal_met": p99 <= 2.0,
            "histograms_hdr": [r["histogram_hdr"] for r in results],
        },
        [decode_histogram(r["histogram_hdr"]) for r in results],
    )


# --- P5 --------------------------------------------------------------------------------


def _segment_files(data_dir: Path, topic: str) -> list[Path]:
    directory = topic_directory(data_dir, TopicName.parse(topic))
    files = []
    for path in sorted(directory.rglob("*")):
        if path.is_file():
            with path.open("rb") as handle:
                if handle.read(4) == b"MGSG":
                    files.append(path)
    return files


#: The tailing consumer's permits (messages): 100 entries of P5's batches in flight, against the
#: producer's 1000 (``raw_options``' window). A consumer refills at half its window, as Java's
#: does, so this figure is bound by that FLOW round trip on the broker's one core.
P5_CONSUMER_WINDOW = 10_000


@dataclass(frozen=True)
class _TailRun:
    """One tailing run: both rates and the run's two edges. The consumer's rate counts from
    its first entry to its last, the producer's from its first send to its last receipt, so
    the ratio is ``1 + (first_dispatch - end_lag) / run``: a consumer that keeps up gives
    1.0 give or take these two edges, whatever the run's length (see ``p5_dispatch``)."""

    ingest: float  # messages/s
    dispatch: float  # messages/s
    first_dispatch_ms: float  # from the first send to the consumer's first entry
    end_lag_ms: float  # from the producer's last receipt to the consumer's last entry

    @property
    def ratio(self) -> float:
        return self.dispatch / self.ingest


async def _tail(options: PerfOptions, window: int) -> tuple[Recorder, Recorder]:
    consumer_options = replace(
        options, initial_position=InitialPosition.Earliest, duration=120.0, window=window
    )
    produced, received = Recorder(), Recorder()
    consuming = asyncio.create_task(run_raw_consume(consumer_options, received))
    await run_raw_produce(options, produced)
    await consuming
    return produced, received


def _tail_run(options: PerfOptions, messages: int, window: int) -> _TailRun:
    produced, received = uvloop.run(_tail(options, window))
    if received.messages != messages:
        raise RuntimeError(f"tailing consumer got {received.messages} messages")
    assert produced.finished is not None
    assert received.finished is not None
    return _TailRun(
        ingest=produced.messages / produced.elapsed,
        dispatch=received.messages / received.elapsed,
        first_dispatch_ms=(received.started - produced.started) * 1e3,
        end_lag_ms=(received.finished - produced.finished) * 1e3,
    )


def p5_dispatch(root: Path, scale: Scale) -> dict[str, Any]:
    runs: list[_TailRun] = []
    catch_up, cold_dd = [], []
    # The same run with the consumer given as much in flight as the producer (1000 entries of
    # 100 messages): what is left of the gap once the consumer's FLOW round trip is out of it.
    matched_ratios = []
    with broker_on(root) as broker:
        for _ in range(scale.runs):
            matched = raw_options(broker, count=scale.p5_messages, batch_messages=100, size=100)
            matched_ratios.append(_tail_run(matched, scale.p5_messages, matched.window * 100).ratio)
            options = raw_options(broker, count=scale.p5_messages, batch_messages=100, size=100)
            runs.append(_tail_run(options, scale.p5_messages, P5_CONSUMER_WINDOW))
            topic = TopicName.parse(options.topics[0]).full_name
            files = _segment_files(broker.data_dir, topic)
            machine.drop_from_page_cache(files)
            reader = replace(
                options,
                subscription="catch-up",
                initial_position=InitialPosition.Earliest,
                duration=120.0,
                window=10_000,
            )
            recorder = Recorder()
            uvloop.run(run_raw_consume(reader, recorder))
            catch_up.append(recorder.payload_bytes / recorder.elapsed / 1e6)
            cold_dd.append(machine.cold_dd_read_mb_s(files))
    ratio = statistics.median(run.ratio for run in runs)
    read_ratio = statistics.median(catch_up) / statistics.median(cold_dd)
    return {
        "what": "raw producer (batches of 100 x 100 B, max rate, 1000 entries in flight) and a "
        "raw consumer (10,000 permits, refilled at half) tailing the same topic in one process "
        "(and once more with 100,000 permits, as much in flight as the producer); then a new "
        "subscription reads the topic from the start "
        "with the segment files dropped from the page cache (posix_fadvise DONTNEED), against "
        "dd bs=1M of the same files, dropped the same way",
        "messages_per_run": scale.p5_messages,
        "ingest_msgs_per_s": spread([run.ingest for run in runs], 0),
        "tailing_dispatch_msgs_per_s": spread([run.dispatch for run in runs], 0),
        "dispatch_to_ingest": spread([run.ratio for run in runs], 3),
        # The ratio's two edges (see ``_TailRun``): a consumer falling behind shows as an end
        # lag growing with the run; one keeping up, as a few milliseconds at any length.
        "tailing_first_dispatch_ms": spread([run.first_dispatch_ms for run in runs], 2),
        "tailing_end_lag_ms": spread([run.end_lag_ms for run in runs], 2),
        "consumer_window_messages": P5_CONSUMER_WINDOW,
        "dispatch_to_ingest_window_as_producer": spread(matched_ratios, 3),
        "catch_up_read_mb_s": spread(catch_up),
        "cold_dd_read_mb_s": spread(cold_dd),
        "catch_up_to_cold_dd": round(read_ratio, 3),
        "goal": "dispatch/ingest >= 1.0 and catch-up >= 50% of cold dd",
        "goal_met": ratio >= 1.0 and read_ratio >= 0.5,
    }


# --- P6, P7 ----------------------------------------------------------------------------


async def _connect(broker: BrokerProcess) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", broker.port)
    writer.write(commands.connect("magnetar-bench"))
    await _expect(reader, pb.BaseCommand.CONNECTED)
    return reader, writer


async def _expect(reader: asyncio.StreamReader, kind: int) -> pb.BaseCommand:
    decoder = FrameDecoder()
    while True:
        decoder.feed(await reader.read(65536))
        for frame in decoder:
            if frame.type == kind:
                return frame.command
            if frame.type == pb.BaseCommand.ERROR:
                raise RuntimeError(f"broker error: {frame.command.error}")


async def _load_topic(broker: BrokerProcess, topic: str, name: str) -> tuple[float, int]:
    """Seconds from PRODUCER to PRODUCER_SUCCESS on a topic not loaded yet, and the
    producer's last sequence id as dedup recovered it."""
    reader, writer = await _connect(broker)
    try:
        started = time.perf_counter()
        writer.write(commands.producer(topic, 1, 1, producer_name=name))
        success = await asyncio.wait_for(_expect(reader, pb.BaseCommand.PRODUCER_SUCCESS), 300)
        return time.perf_counter() - started, success.producer_success.last_sequence_id
    finally:
        writer.close()


def _prepared_topic(root: Path, topic: str, entries: int, producers: int, snapshot: bool) -> Path:
    source = Path(tempfile.mkdtemp(prefix="ledger-", dir=root)) / "data"
    directory = ledger_builder.build_topic(source, topic, entries, producers)
    ledger_builder.add_dedup_cursor(directory, entries, producers, snapshot)
    return source


def p6_load_time(root: Path, scale: Scale) -> dict[str, Any]:
    topic = "persistent://public/default/p6-load"
    entries, producers = scale.p6_entries, scale.p6_producers
    built = time.perf_counter()
    sources = {
        snapshot: _prepared_topic(root, topic, entries, producers, snapshot)
        for snapshot in (True, False)
    }
    built = time.perf_counter() - built
    expected = ledger_builder.highest_sequence_ids(entries, producers)
    name = ledger_builder.producer_name(0)
    seconds: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(scale.runs):
        for snapshot, source in sources.items():
            data_dir = Path(tempfile.mkdtemp(prefix="p6-", dir=root)) / "data"
            ledger_builder.copy_topic(source, data_dir)
            machine.drop_from_page_cache(_segment_files(data_dir, topic))
            broker = start_pinned(data_dir)
            try:
                took, last = uvloop.run(_load_topic(broker, topic, name))
            finally:
                broker.terminate()
            if last != expected[name]:
                raise RuntimeError(f"dedup recovered {last} for {name}, not {expected[name]}")
            seconds[snapshot].append(took)
    with_snapshot = statistics.median(seconds[True])
    return {
        "what": "PRODUCER to PRODUCER_SUCCESS on a freshly started broker (topic not loaded, "
        "segment files dropped from the page cache): ledger open + dedup recovery; the "
        "ledger is written with the storage API; the recovered last sequence id is checked",
        "entries": entries,
        "producers": producers,
        "build_seconds": round(built, 1),
        "with_snapshot_s": spread(seconds[True], 3),
        "without_snapshot_s": spread(seconds[False], 3),
        "goal": "<= 0.5 s with a snapshot",
        "goal_met": with_snapshot <= 0.5,
    }


async def _hold_connections(broker: BrokerProcess, count: int) -> list[asyncio.StreamWriter]:
    writers: list[asyncio.StreamWriter] = []
    for start in range(0, count, 500):
        opened = await asyncio.gather(*(_connect(broker) for _ in range(min(500, count - start))))
        writers += [writer for _, writer in opened]
    return writers


async def _idle_connections_rss(broker: BrokerProcess, count: int) -> tuple[int, int]:
    pid = pid_of(broker)
    before = rss_bytes(pid)
    writers = await _hold_connections(broker, count)
    await asyncio.sleep(1.0)  # settle: let the broker finish every handshake's bookkeeping
    after = rss_bytes(pid)
    for writer in writers:
        writer.close()
    return before, after


def p7_memory(root: Path, scale: Scale) -> dict[str, Any]:
    topic = "persistent://public/default/p7-producers"
    producers = scale.p7_producers
    source = _prepared_topic(root, topic, producers, producers, snapshot=True)
    tracked_total, tracked_delta, idle_total, idle_delta = [], [], [], []
    for _ in range(scale.runs):
        data_dir = Path(tempfile.mkdtemp(prefix="p7-", dir=root)) / "data"
        ledger_builder.copy_topic(source, data_dir)
        broker = start_pinned(data_dir)
        try:
            pid = pid_of(broker)
            before = rss_bytes(pid)
            uvloop.run(_load_topic(broker, topic, ledger_builder.producer_name(0)))
            after = rss_bytes(pid)
            tracked_total.append(after / MIB)
            tracked_delta.append((after - before) / MIB)
        finally:
            broker.terminate()
        with broker_on(root) as broker:
            before, after = uvloop.run(_idle_connections_rss(broker, scale.p7_connections))
            idle_total.append(after / MIB)
            idle_delta.append((after - before) / MIB)
    return {
        "what": "broker RSS (/proc VmRSS) after loading a topic whose dedup state tracks N "
        "producers (one entry each, snapshot on the dedup cursor), and with M idle "
        "connections (CONNECT done, nothing else); 'delta' is the growth over the idle broker",
        "producers": producers,
        "connections": scale.p7_connections,
        "dedup_producers_rss_mib": spread(tracked_total),
        "dedup_producers_delta_mib": spread(tracked_delta),
        "idle_connections_rss_mib": spread(idle_total),
        "idle_connections_delta_mib": spread(idle_delta),
        "goal": "<= 100 MiB (producers) and <= 500 MiB (connections), total RSS",
        "goal_met": statistics.median(tracked_total) <= 100
        and statistics.median(idle_total) <= 500,
    }


# --- P8 --------------------------------------------------------------------------------


def _official_latency(url: str, seconds: float, rate: float) -> HdrHistogram:
    """The official client at a fixed rate, unbatched: send_async to callback, in us."""
    client = pulsar.Client(url, logger=pulsar.ConsoleLogger(pulsar.LoggerLevel.Error))
    histogram = new_histogram()
    lock = threading.Lock()
    producer = client.create_producer(
        f"bench-{uuid.uuid4().hex[:8]}",
        batching_enabled=False,
        block_if_queue_full=True,
        max_pending_messages=1000,
        send_timeout_millis=0,
    )
    payload = bytes(100)

    def callback_for(sent_at: float) -> Callable[[Any, Any], None]:
        def done(_result: Any, _message_id: Any) -> None:
            micros = max(int((time.perf_counter() - sent_at) * 1e6), 1)
            with lock:
                histogram.record_value(micros)

        return done

    started = time.perf_counter()
    sent = 0
    while time.perf_counter() - started < seconds:
        ahead = started + sent / rate - time.perf_counter()
        if ahead > 0:
            time.sleep(ahead)
        producer.send_async(payload, callback_for(time.perf_counter()))
        sent += 1
    producer.flush()
    client.close()
    return histogram


def p8_official(root: Path, scale: Scale) -> tuple[dict[str, Any], list[HdrHistogram]]:
    batched, unbatched, cpu_batched, cpu_unbatched, p50, p99, p999 = [], [], [], [], [], [], []
    histograms = []
    payload = bytes(100)
    with broker_on(root) as broker:
        pid = pid_of(broker)
        for _ in range(scale.runs):
            cpu = cpu_seconds(pid)
            result = official(broker.url, scale.p8_batched_messages, payload, True)
            cpu_batched.append((cpu_seconds(pid) - cpu) / scale.p8_batched_messages * 1e6)
            batched.append(result["msgs_per_s"])
            cpu = cpu_seconds(pid)
            result = official(broker.url, scale.p8_unbatched_messages, payload, False)
            cpu_unbatched.append((cpu_seconds(pid) - cpu) / scale.p8_unbatched_messages * 1e6)
            unbatched.append(result["msgs_per_s"])
            histogram = _official_latency(broker.url, scale.p4_seconds, 10_000)
            histograms.append(histogram)
            p50.append(histogram.get_value_at_percentile(50) / 1000)
            p99.append(histogram.get_value_at_percentile(99) / 1000)
            p999.append(histogram.get_value_at_percentile(99.9) / 1000)
    return (
        {
            "what": "pulsar-client 3.13 (C++ core) on CPU 1, same broker settings: P1's shape "
            "(default batching: up to 1000 msgs / 10 ms), P2's shape (unbatched, 1000 pending), "
            "P4's shape (10k msgs/s, unbatched)",
            "batched_100b_msgs_per_s": spread(batched, 0),
            "batched_100b_mb_per_s": spread([m * 100 / 1e6 for m in batched], 2),
            "batched_broker_cpu_us_per_msg": spread(cpu_batched, 2),
            "unbatched_100b_msgs_per_s": spread(unbatched, 0),
            "unbatched_broker_cpu_us_per_msg": spread(cpu_unbatched, 2),
            "latency_10k_per_s_p50_ms": spread(p50, 3),
            "latency_10k_per_s_p99_ms": spread(p99, 3),
            "latency_10k_per_s_p99.9_ms": spread(p999, 3),
            "latency_histograms_hdr": [histogram.encode().decode() for histogram in histograms],
        },
        histograms,
    )
