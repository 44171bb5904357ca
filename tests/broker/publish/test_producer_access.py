"""Tests of the PIP-68 access-mode state machine (broker.publish.producer_access).

Scenario names X1..X9 follow reliability.md §1.6 (Pulsar's ExclusiveProducerTest).  X5 (topic
deleted) is the "requested epoch above ours" case; X7 (client timeout while queued) is a property
of the Queued answer being immediate, covered by the queue tests; X8 (consumers do not count as
writers) does not apply here: consumers are not modelled by this state machine at all.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from broker.publish.producer_access import (
    Admitted,
    CheckLiveness,
    EpochBump,
    ProducerAccess,
    Promotion,
    Queued,
    Rejected,
)
from protocol.enums import ProducerAccessMode

SHARED = ProducerAccessMode.Shared
EXCLUSIVE = ProducerAccessMode.Exclusive
WAIT = ProducerAccessMode.WaitForExclusive
FENCING = ProducerAccessMode.ExclusiveWithFencing
EXCLUSIVE_MODES = [EXCLUSIVE, WAIT, FENCING]


def admitted(decision: object) -> Admitted[int]:
    assert isinstance(decision, Admitted), decision
    return decision


def rejected(decision: object) -> Rejected:
    assert isinstance(decision, Rejected), decision
    return decision


# ------------------------------------------------------------------------ basics


@pytest.mark.parametrize("mode", EXCLUSIVE_MODES)
def test_first_exclusive_producer_gets_epoch_zero_like_java(mode: ProducerAccessMode) -> None:
    access: ProducerAccess[int] = ProducerAccess()
    assert admitted(access.request(1, "p1", mode, "c1")) == Admitted(0, epoch_changed=True)
    assert access.topic_epoch == 0
    assert access.holder == 1
    assert access.may_publish(1)


def test_shared_producers_coexist_and_carry_the_current_epoch() -> None:
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=4)
    assert admitted(access.request(1, "s1", SHARED, "c1")) == Admitted(4, epoch_changed=False)
    assert admitted(access.request(2, "s2", SHARED, "c2")) == Admitted(4, epoch_changed=False)
    assert access.may_publish(1)
    assert access.may_publish(2)
    assert access.holder is None


def test_negative_stored_epoch_is_refused() -> None:
    with pytest.raises(ValueError, match="epoch"):
        ProducerAccess(topic_epoch=-1)


def test_known_handle_cannot_request_twice() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    access.request(1, "p1", EXCLUSIVE, "c1")
    access.request(2, "p2", WAIT, "c2")
    with pytest.raises(ValueError, match="already known"):
        access.request(1, "p1-again", SHARED, "c1")
    with pytest.raises(ValueError, match="already known"):
        access.request(2, "p2-again", SHARED, "c2")


def test_remove_is_idempotent_and_ignores_unknown_handles() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    access.request(1, "p1", SHARED, "c1")
    assert access.remove(1) is None
    assert access.remove(1) is None
    assert access.remove(99) is None
    assert not access.may_publish(1)


# ------------------------------------------------------------------------ X1, X2


def test_x1_second_exclusive_is_fenced_shared_is_busy_and_topic_frees_on_close() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p1", EXCLUSIVE, "c1"))

    second = rejected(access.request(2, "p2", EXCLUSIVE, "c2"))
    assert second.code == "ProducerFenced"
    assert second.message == "Topic has an existing exclusive producer: p1"

    shared = rejected(access.request(3, "p3", SHARED, "c2"))
    assert shared == Rejected("ProducerBusy", "Topic has an existing exclusive producer: p1")

    assert access.remove(1) is None
    assert admitted(access.request(4, "p4", EXCLUSIVE, "c2")) == Admitted(1, epoch_changed=True)
    assert access.holder == 4


def test_x2_exclusive_is_fenced_by_existing_shared_producers() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "s1", SHARED, "c1"))
    assert access.request(2, "p2", EXCLUSIVE, "c2") == Rejected(
        "ProducerFenced", "Topic has existing shared producers"
    )
    assert access.topic_epoch is None, "a refused producer must not move the epoch"


# ------------------------------------------------------------------------ X3, X4, X5


@pytest.mark.parametrize("mode", EXCLUSIVE_MODES)
def test_x3_reconnecting_with_the_same_epoch_keeps_exclusivity_without_increment(
    mode: ProducerAccessMode,
) -> None:
    access: ProducerAccess[int] = ProducerAccess()
    epoch = admitted(access.request(1, "p1", mode, "c1")).topic_epoch
    assert access.remove(1) is None  # the connection dropped

    again = admitted(access.request(2, "p1", mode, "c2", requested_topic_epoch=epoch))
    assert again == Admitted(epoch, epoch_changed=False)
    assert access.may_publish(2)


@pytest.mark.parametrize("mode", EXCLUSIVE_MODES)
def test_x3_reconnect_after_topic_reload_uses_the_persisted_epoch(mode: ProducerAccessMode) -> None:
    reloaded: ProducerAccess[int] = ProducerAccess(topic_epoch=3)
    assert reloaded.request(1, "p1", mode, "c1", requested_topic_epoch=3) == Admitted(3, False)


def test_x4_epoch_incremented_behind_the_holders_back_fences_it() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p1", EXCLUSIVE, "c1"))

    bump = access.increment_epoch()
    assert bump == EpochBump(topic_epoch=1, fence=(1,), failed_waiters=(), promotion=None)
    assert access.is_fenced(1)
    assert not access.may_publish(1)

    # The client reconnects with the epoch it was given and is refused for good.
    assert access.request(2, "p1", EXCLUSIVE, "c1", requested_topic_epoch=0) == Rejected(
        "ProducerFenced", "Topic epoch has already moved. Current epoch: 1, Producer epoch: 0"
    )


@pytest.mark.parametrize("mode", EXCLUSIVE_MODES)
def test_x4_stale_epoch_after_reload_is_fenced_in_every_exclusive_mode(
    mode: ProducerAccessMode,
) -> None:
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=5)
    refused = rejected(access.request(1, "p1", mode, "c1", requested_topic_epoch=4))
    assert refused.code == "ProducerFenced"
    assert "Topic epoch has already moved" in refused.message
    assert access.topic_epoch == 5


def test_a_brand_new_producer_without_epoch_competes_normally_after_fencing() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p1", EXCLUSIVE, "c1"))
    access.increment_epoch()
    assert access.request(2, "p1", EXCLUSIVE, "c1") == Admitted(2, epoch_changed=True)


def test_x5_requested_epoch_above_ours_is_adopted() -> None:
    # The topic was deleted and recreated under p1: our epoch restarts, p1 still knows 7.
    access: ProducerAccess[int] = ProducerAccess()
    assert access.request(1, "p1", EXCLUSIVE, "c1", requested_topic_epoch=7) == Admitted(7, True)
    assert access.topic_epoch == 7


def test_increment_epoch_on_a_fresh_topic_starts_at_zero_and_spares_shared_producers() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "s1", SHARED, "c1"))
    assert access.increment_epoch() == EpochBump(0, (), (), None)
    assert access.may_publish(1)


# ------------------------------------------------------------------------ X6, X7: the queue


def test_x6_waiters_are_promoted_in_fifo_order() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    assert admitted(access.request(1, "p1", WAIT, "c1")).topic_epoch == 0
    assert access.request(2, "p2", WAIT, "c2") == Queued(0)
    assert access.request(3, "p3", WAIT, "c3") == Queued(1)
    assert not access.may_publish(2)

    assert access.remove(1) == Promotion(2, topic_epoch=1, epoch_changed=True)
    assert access.may_publish(2)
    assert access.is_waiting(3)
    assert not access.may_publish(3)

    assert access.remove(2) == Promotion(3, topic_epoch=2, epoch_changed=True)
    assert access.may_publish(3)
    assert access.stats().waiters == ()


def test_waiter_that_disconnects_leaves_the_queue() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p1", EXCLUSIVE, "c1"))
    access.request(2, "p2", WAIT, "c2")
    access.request(3, "p3", WAIT, "c3")

    assert access.remove(2) is None
    assert access.stats().waiters == ("p3",)
    assert access.remove(1) == Promotion(3, topic_epoch=1, epoch_changed=True)
    # The name of a waiter that left is free again.
    assert access.request(4, "p2", SHARED, "c2") == Rejected(
        "ProducerBusy", "Topic has an existing exclusive producer: p3"
    )


def test_waiter_reconnecting_with_its_epoch_keeps_it_on_promotion() -> None:
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=2)
    admitted(access.request(1, "p1", SHARED, "c1"))
    assert access.request(2, "p2", WAIT, "c2", requested_topic_epoch=2) == Queued(0)
    assert access.remove(1) == Promotion(2, topic_epoch=2, epoch_changed=False)


def test_waiter_outrun_by_an_earlier_waiters_promotion_is_failed_not_promoted() -> None:
    # Found by the stateful test: Java would promote w2 later and *lower* the epoch to 0.
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=0)
    admitted(access.request(1, "s", SHARED, "c1"))
    assert access.request(2, "w1", WAIT, "c2") == Queued(0)
    assert access.request(3, "w2", WAIT, "c3", requested_topic_epoch=0) == Queued(1)

    promotion = access.remove(1)
    assert promotion == Promotion(2, topic_epoch=1, epoch_changed=True, failed_waiters=(3,))
    assert access.is_fenced(3)
    assert access.remove(2) is None
    assert access.topic_epoch == 1


def test_waiters_behind_shared_producers_block_new_shared_and_take_over_when_they_leave() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "s1", SHARED, "c1"))
    admitted(access.request(2, "s2", SHARED, "c1"))
    assert access.request(3, "w", WAIT, "c2") == Queued(0)

    # PR #9554: a Shared producer must not slip in ahead of a queued exclusive one.
    assert access.request(4, "s3", SHARED, "c3") == Rejected(
        "ProducerBusy", "Topic has an existing exclusive producer: w"
    )
    assert rejected(access.request(5, "e", EXCLUSIVE, "c3")).code == "ProducerFenced"

    assert access.remove(1) is None
    assert access.remove(2) == Promotion(3, topic_epoch=0, epoch_changed=True)


def test_increment_epoch_fails_waiters_it_made_stale_and_promotes_the_next() -> None:
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=0)
    admitted(access.request(1, "p1", EXCLUSIVE, "c1", requested_topic_epoch=0))
    assert access.request(2, "p2", WAIT, "c2", requested_topic_epoch=0) == Queued(0)
    assert access.request(3, "p3", WAIT, "c3") == Queued(1)

    bump = access.increment_epoch()
    assert bump == EpochBump(
        topic_epoch=2,
        fence=(1,),
        failed_waiters=(2,),
        promotion=Promotion(3, topic_epoch=2, epoch_changed=True),
    )
    assert access.is_fenced(2)
    assert access.may_publish(3)


# ------------------------------------------------------------------------ X9: fencing take-over


def test_x9_fencing_closes_the_holder_and_fails_every_waiter() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p1", EXCLUSIVE, "c1"))
    access.request(2, "p2", WAIT, "c2")
    access.request(3, "p3", WAIT, "c3")

    takeover = admitted(access.request(4, "f", FENCING, "c4"))
    assert takeover == Admitted(1, epoch_changed=True, fence=(1,), failed_waiters=(2, 3))
    for old in (1, 2, 3):
        assert access.is_fenced(old)
        assert not access.may_publish(old)
    # Closing the fenced holder afterwards promotes none of the failed waiters.
    assert access.remove(1) is None
    assert access.holder == 4

    # p1 reconnects with its old epoch: refused forever.
    assert rejected(access.request(5, "p1", EXCLUSIVE, "c1", 0)).code == "ProducerFenced"


def test_x9_fencing_also_closes_shared_producers() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "s1", SHARED, "c1"))
    admitted(access.request(2, "s2", SHARED, "c2"))
    access.request(3, "w", WAIT, "c3")

    takeover = admitted(access.request(4, "s1", FENCING, "c4"))  # even a same-name one
    assert takeover == Admitted(0, epoch_changed=True, fence=(1, 2), failed_waiters=(3,))
    assert access.stats().shared_producers == 0
    assert access.stats().fenced == 3


def test_x9_fencing_with_a_stale_epoch_disturbs_nobody() -> None:
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=3)
    admitted(access.request(1, "p1", EXCLUSIVE, "c1", requested_topic_epoch=3))
    refused = rejected(access.request(2, "f", FENCING, "c2", requested_topic_epoch=2))
    assert refused.code == "ProducerFenced"
    assert access.may_publish(1)
    assert not access.is_fenced(1)


def test_x9_fencing_that_asks_for_the_current_epoch_still_moves_past_the_fenced() -> None:
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=3)
    admitted(access.request(1, "p1", EXCLUSIVE, "c1", requested_topic_epoch=3))
    takeover = admitted(access.request(2, "f", FENCING, "c2", requested_topic_epoch=3))
    assert takeover.topic_epoch == 4
    assert rejected(access.request(3, "p1", EXCLUSIVE, "c1", 3)).code == "ProducerFenced"


def test_x9_fencing_on_a_free_topic_is_a_plain_reconnect() -> None:
    access: ProducerAccess[int] = ProducerAccess(topic_epoch=3)
    assert access.request(1, "f", FENCING, "c1", requested_topic_epoch=3) == Admitted(3, False)


# ------------------------------------------------------------------------ same-name producers


def test_same_name_shared_on_the_same_connection_is_busy() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p", SHARED, "c1"))
    assert access.request(2, "p", SHARED, "c1") == Rejected(
        "ProducerBusy", "Producer with name 'p' is already connected"
    )


def test_same_name_on_another_connection_checks_liveness_then_refuses_if_alive() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p", SHARED, "c1"))
    assert access.request(2, "p", SHARED, "c2") == CheckLiveness(1)
    assert access.request(2, "p", SHARED, "c2", confirmed_alive=1) == Rejected(
        "ProducerBusy", "Producer with name 'p' is already connected"
    )


def test_same_name_on_a_dead_connection_is_evicted_and_replaced() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p", SHARED, "c1"))
    assert access.request(2, "p", SHARED, "c2") == CheckLiveness(1)
    assert access.remove(1) is None
    assert admitted(access.request(2, "p", SHARED, "c2")).epoch_changed is False
    assert access.may_publish(2)
    assert not access.may_publish(1)


def test_exclusive_holder_on_a_half_open_connection_does_not_block_its_reconnect() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    epoch = admitted(access.request(1, "p", EXCLUSIVE, "c1")).topic_epoch
    assert access.request(2, "p", EXCLUSIVE, "c2", epoch) == CheckLiveness(1)
    assert access.remove(1) is None
    assert access.request(2, "p", EXCLUSIVE, "c2", epoch) == Admitted(epoch, False)


def test_exclusive_same_name_alive_is_refused_by_the_access_rule() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p", EXCLUSIVE, "c1"))
    refused = rejected(access.request(2, "p", EXCLUSIVE, "c2", confirmed_alive=1))
    assert refused.code == "ProducerFenced"


def test_same_name_waiter_on_another_connection_is_checked_too() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "h", EXCLUSIVE, "c1"))
    access.request(2, "w", WAIT, "c2")
    assert access.request(3, "w", WAIT, "c3") == CheckLiveness(2)
    assert access.request(3, "w", WAIT, "c3", confirmed_alive=2) == Rejected(
        "ProducerBusy", "Producer with name 'w' is already connected"
    )
    assert access.remove(2) is None
    assert access.request(3, "w", WAIT, "c3") == Queued(0)


def test_liveness_confirmation_is_for_one_handle_only() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p", SHARED, "c1"))
    assert access.remove(1) is None
    admitted(access.request(5, "p", SHARED, "c3"))
    # A confirmation about the old handle 1 says nothing about the new holder of the name.
    assert access.request(2, "p", SHARED, "c2", confirmed_alive=1) == CheckLiveness(5)


# ------------------------------------------------------------------------ epochs and stats


def test_epoch_is_monotonic_across_holders() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    seen = []
    for handle in range(1, 6):
        seen.append(admitted(access.request(handle, f"p{handle}", EXCLUSIVE, "c")).topic_epoch)
        access.remove(handle)
    assert seen == [0, 1, 2, 3, 4]


def test_stats_report_holder_waiters_and_fenced() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p1", EXCLUSIVE, "c1"))
    access.request(2, "p2", WAIT, "c2")
    access.request(3, "p3", WAIT, "c3")
    stats = access.stats()
    assert (stats.topic_epoch, stats.holder, stats.waiters) == (0, "p1", ("p2", "p3"))
    assert (stats.shared_producers, stats.fenced) == (0, 0)
    admitted(access.request(4, "f", FENCING, "c4"))
    assert access.stats().fenced == 3
    assert access.stats().holder == "f"


def test_fenced_handle_is_rejected_if_asked_again() -> None:
    access: ProducerAccess[int] = ProducerAccess()
    admitted(access.request(1, "p1", EXCLUSIVE, "c1"))
    access.increment_epoch()
    assert access.request(1, "p1", SHARED, "c1") == Rejected(
        "ProducerFenced", "Producer was fenced"
    )


# ------------------------------------------------------------------------ stateful property test


class AccessMachine(RuleBasedStateMachine):
    """Random request / remove / increment sequences against the PIP-68 invariants."""

    def __init__(self) -> None:
        super().__init__()
        self.access: ProducerAccess[int] = ProducerAccess()
        self.next_handle = 1
        self.modes: dict[int, ProducerAccessMode] = {}
        self.requested: dict[int, int | None] = {}
        self.ever_published: set[int] = set()
        self.lost: set[int] = set()  # could publish once, cannot any more
        self.last_epoch = -1

    # -- rules

    @initialize(stored_epoch=st.sampled_from([None, 0, 5]))
    def load_topic(self, stored_epoch: int | None) -> None:
        # A topic that never had an exclusive producer, or one reloaded with a stored epoch.
        self.access = ProducerAccess(topic_epoch=stored_epoch)

    @rule(
        name=st.sampled_from(["a", "b", "c", "d", "e"]),
        connection=st.integers(0, 2),
        # WaitForExclusive twice as often: queues are where the interesting orderings live.
        mode=st.sampled_from([SHARED, EXCLUSIVE, WAIT, WAIT, FENCING]),
        # Offsets from the current epoch: mostly "no epoch" (a new producer) and "the current
        # one" (a reconnect), sometimes stale or ahead.
        epoch_offset=st.sampled_from([None, None, 0, 0, -1, -2, 1]),
        peer_alive=st.booleans(),
    )
    def request(
        self,
        name: str,
        connection: int,
        mode: ProducerAccessMode,
        epoch_offset: int | None,
        peer_alive: bool,
    ) -> None:
        handle = self.next_handle
        self.next_handle += 1
        self.modes[handle] = mode
        current = self.access.topic_epoch
        requested = None
        if epoch_offset is not None and current is not None:
            requested = max(0, current + epoch_offset)
        self.requested[handle] = requested

        decision = self.access.request(handle, name, mode, connection, requested)
        for _ in range(4):
            if not isinstance(decision, CheckLiveness):
                break
            if peer_alive:
                decision = self.access.request(
                    handle, name, mode, connection, requested, confirmed_alive=decision.existing
                )
            else:
                self._check_promotion(self.access.remove(decision.existing))
                decision = self.access.request(handle, name, mode, connection, requested)
        assert not isinstance(decision, CheckLiveness), "liveness checks must terminate"

        if isinstance(decision, Admitted):
            assert self.access.may_publish(handle)
            if requested is not None and mode is not ProducerAccessMode.Shared:
                assert requested >= self.last_epoch, "a stale epoch was admitted"
            for fenced in decision.fence + decision.failed_waiters:
                assert self.access.is_fenced(fenced)
        elif isinstance(decision, Queued):
            assert mode is ProducerAccessMode.WaitForExclusive
            assert self.access.is_waiting(handle)
        else:
            assert not self.access.may_publish(handle)
            assert not self.access.is_waiting(handle)

    @rule(data=st.data())
    def remove(self, data: st.DataObject) -> None:
        # Mostly a live producer or waiter (closing or disconnecting); sometimes any handle ever
        # issued, which exercises removing what is already gone.
        live = [
            h
            for h in range(1, self.next_handle)
            if self.access.is_registered(h) or self.access.is_waiting(h)
        ]
        issued = st.integers(1, self.next_handle - 1) if self.next_handle > 1 else st.nothing()
        choice = st.sampled_from(live) | issued if live else issued
        if self.next_handle == 1:
            return
        handle = data.draw(choice)
        self._check_promotion(self.access.remove(handle))
        assert not self.access.may_publish(handle)
        assert not self.access.is_waiting(handle)

    @rule()
    def increment_epoch(self) -> None:
        bump = self.access.increment_epoch()
        assert bump.topic_epoch == self.access.topic_epoch
        for fenced in bump.fence + bump.failed_waiters:
            assert self.access.is_fenced(fenced)
        self._check_promotion(bump.promotion)

    def _check_promotion(self, promotion: Promotion[int] | None) -> None:
        if promotion is not None:
            assert self.modes[promotion.handle] is ProducerAccessMode.WaitForExclusive
            assert promotion.topic_epoch == self.access.topic_epoch
            assert self.access.may_publish(promotion.handle)
            for failed in promotion.failed_waiters:
                assert self.access.is_fenced(failed)

    # -- invariants

    @invariant()
    def epoch_never_decreases(self) -> None:
        epoch = self.access.topic_epoch
        current = -1 if epoch is None else epoch
        assert current >= self.last_epoch
        self.last_epoch = current

    @invariant()
    def single_writer(self) -> None:
        publishers = [h for h in range(1, self.next_handle) if self.access.may_publish(h)]
        exclusive = [h for h in publishers if self.modes[h] is not ProducerAccessMode.Shared]
        assert len(exclusive) <= 1
        if exclusive:
            assert publishers == exclusive, "shared producers next to an exclusive one"
            assert self.access.holder == exclusive[0]

    @invariant()
    def lost_access_is_never_regained(self) -> None:
        for handle in range(1, self.next_handle):
            publishing = self.access.may_publish(handle)
            if self.access.is_fenced(handle):
                assert not publishing
            if publishing:
                assert handle not in self.lost
                self.ever_published.add(handle)
            elif handle in self.ever_published:
                self.lost.add(handle)

    @invariant()
    def no_stuck_waiters(self) -> None:
        stats = self.access.stats()
        if stats.waiters:
            assert stats.holder is not None or stats.shared_producers > 0

    @invariant()
    def no_stale_waiter(self) -> None:
        # A waiter whose epoch the topic moved past can never be admitted: it must be failed
        # at once, not left queued (Java would later promote it and lower the epoch).
        for handle in range(1, self.next_handle):
            requested = self.requested[handle]
            if self.access.is_waiting(handle) and requested is not None:
                assert requested >= self.last_epoch


AccessMachine.TestCase.settings = settings(max_examples=300, stateful_step_count=50, deadline=None)
TestAccessMachine = AccessMachine.TestCase
