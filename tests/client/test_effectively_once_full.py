"""Issue #11's effectively-once test at full size: 200k messages, 10 SIGKILLs of the broker.

``test_effectively_once`` runs the same loop smaller (it is in the usual ``slow`` run); this
one is the issue's figure: our producer with ``send_timeout_millis=0`` sends 200 000 messages
(batched, then unbatched: one entry per message) while the broker subprocess is killed
and restarted 10 times; the official reader finds each message exactly once, in order. The
control runs the same loop with dedup off and must find duplicates, proving that the kills
made the producer resend messages the broker had already stored.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.client.test_effectively_once import run_loop

pytestmark = [pytest.mark.integration, pytest.mark.compat, pytest.mark.slow]

COUNT = 200_000
KILLS = 10


@pytest.mark.parametrize("batching", [True, False], ids=["batched", "unbatched"])
def test_200k_messages_are_stored_exactly_once_in_order_across_10_kills(
    tmp_path: Path, batching: bool
) -> None:
    outcome = run_loop(tmp_path / "data", dedup=True, count=COUNT, kills=KILLS, batching=batching)
    assert outcome.kills == KILLS
    assert outcome.errors == []
    assert len(outcome.acked) == COUNT  # send_timeout 0: every send ends acknowledged
    assert outcome.stored == list(range(1, COUNT + 1))  # once each, in order, no gap
    print(
        f"effectively-once full ({'batched' if batching else 'unbatched'}): {COUNT} messages, "
        f"{outcome.kills} kills, "
        f"{outcome.duplicate_receipts} resends answered -1:-1, {outcome.seconds:.1f} s"
    )


def test_200k_control_without_dedup_stores_duplicates(tmp_path: Path) -> None:
    outcome = run_loop(tmp_path / "data", dedup=False, count=COUNT, kills=KILLS, batching=True)
    assert outcome.kills == KILLS
    assert outcome.errors == []
    assert len(outcome.acked) == COUNT
    assert set(outcome.stored) == set(range(1, COUNT + 1))  # still nothing lost
    duplicates = len(outcome.stored) - len(set(outcome.stored))
    assert duplicates > 0, "no resend met a stored copy: the kills did not bite"
    print(
        f"control full: {duplicates} duplicates over {outcome.kills} kills, {outcome.seconds:.1f} s"
    )
