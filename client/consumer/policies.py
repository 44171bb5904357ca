"""The official small option enums of ``subscribe`` and ``create_reader``: the subscription type
(with both spellings of Key_Shared) and the crypto failure action.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = ["ConsumerCryptoFailureAction", "ConsumerType"]


class ConsumerType(IntEnum):
    """The official ``pulsar.ConsumerType`` (values of ``CommandSubscribe.SubType``).

    The official enum spells the fourth type ``KeyShared``; the wire enum (and this client
    before) ``Key_Shared``: both are the same member.
    """

    Exclusive = 0
    Shared = 1
    Failover = 2
    Key_Shared = 3
    KeyShared = 3


class ConsumerCryptoFailureAction(IntEnum):
    """The official ``pulsar.ConsumerCryptoFailureAction``: what a consumer does with an
    encrypted message it cannot decrypt (``client.consumer.entries``). FAIL: hold it (not
    handed out, not acknowledged: redelivered to the next consumer); DISCARD: acknowledge it
    with ``DecryptionError``; CONSUME: hand it out still encrypted (a batch as one message)."""

    FAIL = 0
    DISCARD = 1
    CONSUME = 2
