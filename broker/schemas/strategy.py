"""Pulsar's ``SchemaCompatibilityStrategy`` and how a topic's strategy is found.

A topic's strategy is its namespace's ``schema_compatibility_strategy``; when that is unset or
``UNDEFINED``, the namespace's older ``schema_auto_update_compatibility_strategy`` (Pulsar maps
it with ``fromAutoUpdatePolicy``); when both are unset, the broker's
``schemaCompatibilityStrategy`` (default FULL). Pulsar's namespaces carry
``schema_auto_update_compatibility_strategy = Full`` from birth, which hides the broker setting;
Magnetar stores only what an operator set, so the broker setting is the default it claims to be.
"""

from __future__ import annotations

import enum

__all__ = ["AUTO_UPDATE_STRATEGIES", "Strategy", "from_auto_update", "parse_strategy"]


class Strategy(enum.StrEnum):
    """Which existing versions a new schema must be compatible with, and in which direction.

    BACKWARD: the new schema reads data of the latest (consumers upgrade first); FORWARD: the
    latest reads the new schema's data (producers upgrade first); FULL: both. The
    ``_TRANSITIVE`` forms ask it of every version, not just the latest.
    """

    UNDEFINED = "UNDEFINED"
    ALWAYS_INCOMPATIBLE = "ALWAYS_INCOMPATIBLE"
    ALWAYS_COMPATIBLE = "ALWAYS_COMPATIBLE"
    BACKWARD = "BACKWARD"
    FORWARD = "FORWARD"
    FULL = "FULL"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"

    @property
    def transitive(self) -> bool:
        return self.name.endswith("_TRANSITIVE")

    @property
    def new_reads_old(self) -> bool:
        """BACKWARD's half: the new schema must read data written with the existing ones."""
        return self in (Strategy.BACKWARD, Strategy.BACKWARD_TRANSITIVE) or self.full

    @property
    def old_reads_new(self) -> bool:
        """FORWARD's half: the existing schemas must read data written with the new one."""
        return self in (Strategy.FORWARD, Strategy.FORWARD_TRANSITIVE) or self.full

    @property
    def full(self) -> bool:
        return self in (Strategy.FULL, Strategy.FULL_TRANSITIVE)


#: Pulsar's deprecated ``SchemaAutoUpdateCompatibilityStrategy`` names -> the strategy.
AUTO_UPDATE_STRATEGIES: dict[str, Strategy] = {
    "AutoUpdateDisabled": Strategy.ALWAYS_INCOMPATIBLE,
    "Backward": Strategy.BACKWARD,
    "Forward": Strategy.FORWARD,
    "Full": Strategy.FULL,
    "AlwaysCompatible": Strategy.ALWAYS_COMPATIBLE,
    "BackwardTransitive": Strategy.BACKWARD_TRANSITIVE,
    "ForwardTransitive": Strategy.FORWARD_TRANSITIVE,
    "FullTransitive": Strategy.FULL_TRANSITIVE,
}


def parse_strategy(value: object) -> Strategy:
    """The strategy named ``value``; ValueError for anything else."""
    if not isinstance(value, str) or value not in Strategy.__members__:
        choices = ", ".join(Strategy.__members__)
        raise ValueError(f"unknown schema compatibility strategy {value!r} (one of {choices})")
    return Strategy(value)


def from_auto_update(value: object) -> Strategy | None:
    """The strategy an auto-update policy stands for (None when unset)."""
    if value is None:
        return None
    return AUTO_UPDATE_STRATEGIES.get(str(value), Strategy.ALWAYS_INCOMPATIBLE)


def effective_strategy(namespace_value: object, auto_update_value: object, broker: str) -> Strategy:
    """The topic's strategy from its namespace's two policies and the broker setting."""
    if namespace_value is not None and namespace_value != Strategy.UNDEFINED:
        return parse_strategy(namespace_value)
    auto = from_auto_update(auto_update_value)
    if auto is not None:
        return auto
    strategy = parse_strategy(broker)
    # UNDEFINED as the broker setting means Pulsar's built-in default.
    return Strategy.FULL if strategy is Strategy.UNDEFINED else strategy
