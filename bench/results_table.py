"""The markdown table of ``bench/README.md``'s "Latest results", from a ``make bench`` document.

.venv/bin/python bench/results_table.py [bench/results/latest.json]
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

DEFAULT = Path(__file__).resolve().parent / "results" / "latest.json"


def figure(value: dict[str, Any]) -> str:
    return f"**{value['median']:,}** ({value['min']:,}-{value['max']:,})"


def met(flag: bool) -> str:
    return "yes" if flag else "no"


def _tail_edges(p5: dict[str, Any]) -> str:
    """The tailing ratio's two edges (``scenarios._TailRun``), when the run recorded them."""
    if "tailing_end_lag_ms" not in p5:
        return ""
    return (
        f" (first dispatch {figure(p5['tailing_first_dispatch_ms'])} ms, "
        f"end lag {figure(p5['tailing_end_lag_ms'])} ms)"
    )


def rows(d: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    limits, p1, p2, p3, p4 = d["machine_limits"], d["P1"], d["P2"], d["P3"], d["P4"]
    p5, p6, p7, p8 = d["P5"], d["P6"], d["P7"], d["P8"]
    dispatch = p5["dispatch_to_ingest"]
    return [
        (
            "limits",
            "`dd conv=fdatasync`, 1 GiB",
            figure(limits["dd_conv_fdatasync_mb_s"]) + " MB/s",
            "—",
            "",
        ),
        (
            "limits",
            "4 KiB append + fdatasync",
            figure(limits["append_4k_fdatasync_per_s"]) + " /s",
            "—",
            "",
        ),
        (
            "P1",
            "durable ingest, batches of 1000 x 100 B",
            f"{figure(p1['mb_per_s'])} MB/s = **{p1['ratio_to_dd_fdatasync']}** of dd; "
            f"broker CPU {figure(p1['broker_cpu_us_per_message'])} µs/msg",
            "≥ 0.5",
            met(p1["goal_met"]),
        ),
        (
            "P2",
            "durable ingest, unbatched 100 B",
            f"{figure(p2['entries_per_s'])} entries/s; broker CPU "
            f"{figure(p2['broker_cpu_us_per_entry'])} µs/entry, broker busy "
            f"{p2['broker_cpu_share']['median']:.0%} of its core",
            "≥ 150k/s, ≤ 6.7 µs",
            met(p2["goal_met"]),
        ),
        (
            "P3",
            "dedup on / off",
            f"on {figure(p3['dedup_on_entries_per_s'])}, off "
            f"{figure(p3['dedup_off_entries_per_s'])} entries/s: **{p3['ratio_on_to_off']}**; "
            f"off costs {figure(p3['dedup_off_broker_cpu_us_per_entry'])} µs/entry",
            "≥ 0.95",
            met(p3["goal_met"]),
        ),
        (
            "P4",
            "publish latency at 10k msgs/s",
            f"p50 {figure(p4['p50_ms'])}, p99 {figure(p4['p99_ms'])}, "
            f"p99.9 {figure(p4['p99.9_ms'])} ms",
            "p99 ≤ 2 ms",
            met(p4["goal_met"]),
        ),
        (
            "P5",
            "tailing dispatch / ingest",
            f"ingest {figure(p5['ingest_msgs_per_s'])}, dispatch "
            f"{figure(p5['tailing_dispatch_msgs_per_s'])} msgs/s: {figure(dispatch)}"
            + _tail_edges(p5),
            "≥ 1.0",
            met(dispatch["median"] >= 1.0),
        ),
        (
            "P5",
            "catch-up read vs cold dd",
            f"{figure(p5['catch_up_read_mb_s'])} vs {figure(p5['cold_dd_read_mb_s'])} MB/s: "
            f"**{p5['catch_up_to_cold_dd']}**",
            "≥ 0.5",
            met(p5["catch_up_to_cold_dd"] >= 0.5),
        ),
        (
            "P6",
            f"topic load, {p6['entries']:,} entries, {p6['producers']:,} producers",
            f"with snapshot {figure(p6['with_snapshot_s'])} s; without "
            f"{figure(p6['without_snapshot_s'])} s",
            "≤ 0.5 s with a snapshot",
            met(p6["goal_met"]),
        ),
        (
            "P7",
            f"RSS, {p7['producers']:,} producers tracked by dedup",
            f"{figure(p7['dedup_producers_rss_mib'])} MiB "
            f"(+{p7['dedup_producers_delta_mib']['median']} over the idle broker)",
            "≤ 100 MiB",
            met(p7["dedup_producers_rss_mib"]["median"] <= 100),
        ),
        (
            "P7",
            f"RSS, {p7['connections']:,} idle connections",
            f"{figure(p7['idle_connections_rss_mib'])} MiB "
            f"(+{p7['idle_connections_delta_mib']['median']} over the idle broker)",
            "≤ 500 MiB",
            met(p7["idle_connections_rss_mib"]["median"] <= 500),
        ),
        (
            "P8",
            "official client, batched 100 B",
            f"{figure(p8['batched_100b_msgs_per_s'])} msgs/s "
            f"({p8['batched_100b_mb_per_s']['median']} MB/s); broker "
            f"{figure(p8['batched_broker_cpu_us_per_msg'])} µs/msg",
            "—",
            "",
        ),
        (
            "P8",
            "official client, unbatched 100 B",
            f"{figure(p8['unbatched_100b_msgs_per_s'])} msgs/s; broker "
            f"{figure(p8['unbatched_broker_cpu_us_per_msg'])} µs/msg",
            "—",
            "",
        ),
        (
            "P8",
            "official client at 10k msgs/s",
            f"p50 {figure(p8['latency_10k_per_s_p50_ms'])}, "
            f"p99 {figure(p8['latency_10k_per_s_p99_ms'])}, "
            f"p99.9 {figure(p8['latency_10k_per_s_p99.9_ms'])} ms",
            "—",
            "",
        ),
    ]


def _peer_text(peer: dict[str, Any]) -> str:
    return (
        f"**{peer['cpu_ratio_magnetar_to_pulsar_lite']}** (without fsync "
        f"{peer['cpu_ratio_magnetar_nosync_to_pulsar_lite']})"
    )


def _keys_text(keys: dict[str, Any]) -> str:
    return (
        f"**{keys['keyed_over_unkeyed']}** (by round "
        f"{'-'.join(map(str, keys['keyed_over_unkeyed_per_round'][::2]))})"
        + (
            f", window full **{keys['keyed_over_unkeyed_full_window']}** (by round "
            f"{'-'.join(map(str, keys['keyed_over_unkeyed_full_window_per_round'][::2]))})"
            if "keyed_over_unkeyed_full_window" in keys
            else ""
        )
        + f"; **{keys['bytes_per_key']}** B"
    )


def _cluster_text(cluster: dict[str, Any]) -> str:
    return (
        f"**{cluster['ratio_2_vs_1']}** ({cluster['two_brokers_mb_s']} against "
        f"{cluster['one_broker_mb_s']} MB/s; partitions per broker "
        f"{cluster['partitions_per_broker']})"
        + (
            f"; the one disk allows at most {cluster['disk_ceiling_2_vs_1']} (dd "
            f"{cluster['dd_fdatasync_mb_s']} MB/s)"
            if "disk_ceiling_2_vs_1" in cluster
            else ""
        )
    )


# Issue #26's figures outside P1-P8: (document part, the key that says it was measured, what
# the figure is, how its value reads, the goal).
_ISSUE_26: tuple[tuple[str, str, str, Callable[[dict[str, Any]], str], str], ...] = (
    (
        "peer",
        "cpu_ratio_magnetar_to_pulsar_lite",
        "broker CPU per unbatched message, Magnetar / pulsar-lite",
        _peer_text,
        "≤ 1.0",
    ),
    (
        "keys",
        "keyed_over_unkeyed",
        "idempotency keys: keyed / unkeyed publish; bytes per key",
        _keys_text,
        "≥ 0.9; ≤ 100",
    ),
    (
        "cluster",
        "ratio_2_vs_1",
        "durable ingest, 2 brokers / 1, default bundles",
        _cluster_text,
        "≥ 1.8",
    ),
)


def issue_26_rows(d: dict[str, Any]) -> list[tuple[str, str, str, str, str]]:
    """The figures of issue #26 that a document holds (``--only`` may leave some out)."""
    found: list[tuple[str, str, str, str, str]] = []
    for name, marker, what, text, goal in _ISSUE_26:
        part = d.get(name, {})
        if marker in part:
            found.append((name, what, text(part), goal, met(part["goal_met"])))
    return found


def render(d: dict[str, Any]) -> str:
    lines = ["| id | figure | median (min-max) of 3 runs | goal | met |", "|---|---|---|---|---|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows(d) + issue_26_rows(d)]
    p2 = d["P2"]
    lines += [
        "",
        f"Generator (P2): {figure(p2['generator_cpu_us_per_entry'])} µs of its own CPU per "
        f"entry, so one core drives ≈ {figure(p2['generator_ceiling_entries_per_s'])} "
        f"entries/s; {p2['receipts_on_fast_path']:,} receipts took the fast path, "
        f"{p2['receipts_decoded']} frames went to the codec.",
    ]
    return "\n".join(lines)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    print(render(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
