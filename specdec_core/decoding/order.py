"""What one round drafts, decided before it runs: the one plan type decode_round takes.

Three sources give one: the shape rule of tree / k = "auto" (it grows level by level and picks
the verified nodes: ShapeRule), a replayed schedule entry (its recorded growth and pick: Replay),
or the decode's fixed plan (a chain of k, a tree budget). Schedules are parsed at the decode's
boundary (speculative._check_schedule); a RoundOrder holds only checked values.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Union

from ..trace.schema import RoundPlan
from .shape import Replay, ShapeRule
from .tree import Shape


@dataclass(frozen=True)
class RoundOrder:
    """One round's drafting: its budget, whether its plan is recorded (a chain of k is not: its
    length says it), who decides while it grows (None: the budget alone) and why, in words."""
    shape: Shape
    recorded: bool
    decider: Union[ShapeRule, Replay, None] = None
    reason: Optional[str] = None

    @classmethod
    def fixed(cls, shape: Union[int, Shape], reason: Optional[str] = None) -> "RoundOrder":
        """A chain of k (an int; 0: one plain target step) or a tree budget (a Shape, recorded)."""
        if isinstance(shape, int):
            return cls(Shape(shape, shape), False, None, reason)
        return cls(shape, True, None, reason)

    @classmethod
    def by_rule(cls, rule: ShapeRule) -> "RoundOrder":
        """The shape rule's round: its budget now, its growth and pick as the round drafts."""
        return cls(rule.plan(), True, rule)

    @classmethod
    def replay(cls, entry: Union[int, RoundPlan]) -> "RoundOrder":
        """A checked k_schedule entry: a chain's k, or a RoundPlan replayed call for call."""
        if isinstance(entry, RoundPlan):
            replay = Replay(entry.levels, entry.keep) if entry.levels is not None or entry.keep is not None else None
            return cls(Shape(entry.nodes, entry.depth, entry.width, entry.frontier), True, replay,
                       "recorded schedule")
        return cls.fixed(entry, "recorded schedule")
