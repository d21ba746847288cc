"""Why an episode earned its reward: the ``Outcome`` the env that scored it computes (``engine.envs.outcomes``).

Kinds by env:

- tool envs (retail, taubench), compared with the task's reference writes, in this order of precedence:
  ``not_called`` (a reference write no call matches, and the agent never called that tool),
  ``wrong_arguments`` (that write's tool was called, with other arguments), ``extra_write`` (every
  reference write made, and a write the reference lacks), ``missing_output`` (the database matched, an
  output the task requires was never said), ``success``;
- math: ``correct``, ``wrong_answer``, ``no_boxed`` (no ``\\boxed{}`` to check), ``cut_by_length`` (the
  scored turn hit the length limit before any answer), ``right_answer_not_scored`` (a right answer in a turn
  that was not the scored one), and where the reward sums every turn's (``every_turn``: AReaL's fixed turns,
  the first turn's return) ``some_turns_wrong`` (right at some turns, wrong at others: each counted);
- anything else: ``other``, with the env's own reason as text.
"""

from __future__ import annotations

import typing
from dataclasses import dataclass
from typing import Any, Literal

from .reading import Fields
from .textsafe import from_json_safe, json_safe

OutcomeKind = Literal[
    "success", "not_called", "wrong_arguments", "extra_write", "missing_output",
    "correct", "wrong_answer", "no_boxed", "cut_by_length", "right_answer_not_scored", "some_turns_wrong", "other",
]
OUTCOME_KINDS: tuple[str, ...] = typing.get_args(OutcomeKind)
# The kinds that say the episode earned its reward (the rest say why it did not).
PASSING_KINDS = frozenset({"success", "correct"})
# Each kind as people read it: the one wording every view (panel, Browse, the Runs legend, the CLI) uses.
OUTCOME_LABELS: dict[str, str] = {
    "success": "success", "not_called": "not called", "wrong_arguments": "wrong arguments",
    "extra_write": "extra write", "missing_output": "missing output", "correct": "correct",
    "wrong_answer": "wrong answer", "no_boxed": "no \\boxed{}", "cut_by_length": "cut by length",
    "right_answer_not_scored": "right answer not scored", "some_turns_wrong": "some turns wrong", "other": "other",
}
# One colour a kind, no two alike, so a run that mixes kinds reads apart in a stacked chart: greens for the
# passing kinds, grey for ``other`` and lime for ``some_turns_wrong`` (neither pass nor fail), distinct warm and cool hues for the failures.
OUTCOME_COLORS: dict[str, str] = {
    "success": "#16a34a", "correct": "#0d9488", "not_called": "#dc2626", "wrong_arguments": "#ea580c",
    "extra_write": "#a16207", "missing_output": "#0891b2", "wrong_answer": "#be185d", "no_boxed": "#7c3aed",
    "cut_by_length": "#2563eb", "right_answer_not_scored": "#c026d3", "some_turns_wrong": "#65a30d",
    "other": "#6b7280",
}
# The kinds that say neither pass nor fail: another env's own reason, and a reward summed over right and wrong turns.
NEITHER_KINDS = frozenset({"other", "some_turns_wrong"})


def kind_label(kind: str) -> str:
    """How ``kind`` reads in every view (an unknown kind as itself)."""
    return OUTCOME_LABELS.get(kind, kind)


def kind_passed(kind: str) -> bool | None:
    """True for the kinds that earned the reward, False for those that say why it was not earned, None for
    ``other`` (another env's own reason, which says neither) and ``some_turns_wrong`` (a reward summed over right
    and wrong turns: part earned, part not)."""
    if kind in NEITHER_KINDS:
        return None
    return kind in PASSING_KINDS


@dataclass(frozen=True)
class OutcomeCall:
    """A tool call named by an outcome: the reference's or the agent's."""

    name: str
    """The tool."""
    arguments: dict[str, Any]
    """Its arguments."""

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "arguments": json_safe(self.arguments)}

    @classmethod
    def from_fields(cls, f: Fields) -> OutcomeCall:
        return cls(name=f.text("name"), arguments=f.obj("arguments"))


@dataclass(frozen=True)
class DbChange:
    """One place where the final database differs from the one the reference actions produce."""

    table: str
    """The database's table (users, orders, reservations, ...)."""
    key: str
    """The record's key in that table (an order id, a user id)."""
    field: str
    """The field that differs, dotted into nested objects (address.zip); "" when the whole record is missing
    on one side."""
    got: Any
    """The value in the episode's database (null where it has none)."""
    expected: Any
    """The value in the reference database (null where it has none)."""

    def to_dict(self) -> dict[str, Any]:
        return {"table": self.table, "key": self.key, "field": self.field, "got": json_safe(self.got),
                "expected": json_safe(self.expected)}

    @classmethod
    def from_fields(cls, f: Fields) -> DbChange:
        return cls(table=f.text("table"), key=f.text("key"), field=f.text("field"),
                   got=from_json_safe(f.raw("got")), expected=from_json_safe(f.raw("expected")))


@dataclass(frozen=True)
class MathAnswer:
    """What the math checker made of one turn."""

    turn: int
    """The turn."""
    extracted: str | None
    """The answer the checker took from the reply's last \\boxed{} (null: none)."""
    correct: bool
    """math-verify's verdict against the reference."""
    finish_reason: str
    """Why the reply ended (length: the token limit cut it)."""

    def to_dict(self) -> dict[str, Any]:
        return {"turn": self.turn, "extracted": self.extracted, "correct": self.correct,
                "finish_reason": self.finish_reason}

    @classmethod
    def from_fields(cls, f: Fields) -> MathAnswer:
        return cls(turn=f.integer("turn"), extracted=f.text_or_none("extracted"), correct=f.boolean("correct"),
                   finish_reason=f.text("finish_reason"))


@dataclass(frozen=True)
class Outcome:
    """Why the episode earned its reward, computed by the env that scored it, at the turn where it happened."""

    kind: OutcomeKind
    """What decided the reward (see the kinds in engine/records/outcome.py)."""
    turn: int | None
    """The turn of the agent's call (or answer) that decided it; null when no turn did (a call never made)."""
    expected: OutcomeCall | None
    """The reference's call the agent missed or got wrong; null when none."""
    taken: OutcomeCall | None
    """The agent's call: the closest to the expected one, or the write the reference lacks; null when none."""
    differing_arguments: tuple[str, ...]
    """The argument keys where the taken call differs from the expected one."""
    missing_outputs: tuple[str, ...]
    """Outputs the task requires that the agent never said."""
    db_diff: tuple[DbChange, ...]
    """Where the final database differs from the reference database (empty when it matches or was not
    replayed)."""
    answers: tuple[MathAnswer, ...]
    """Math: what the checker extracted from each turn, and its verdict."""
    reference_answer: str | None
    """Math: the reference answer (null for other envs)."""
    text: str
    """The outcome in one sentence (for any other env, the env's own reason)."""
    every_turn: bool = False
    """Math: the reward counts every turn's answer (the first turn's return, each turn's reward summed: AReaL's
    fixed turns), not the last answer alone."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind, "turn": self.turn,
            "expected": None if self.expected is None else self.expected.to_dict(),
            "taken": None if self.taken is None else self.taken.to_dict(),
            "differing_arguments": list(self.differing_arguments), "missing_outputs": list(self.missing_outputs),
            "db_diff": [c.to_dict() for c in self.db_diff], "answers": [a.to_dict() for a in self.answers],
            "reference_answer": self.reference_answer, "text": self.text, "every_turn": self.every_turn,
        }

    @classmethod
    def from_fields(cls, f: Fields) -> Outcome:
        exp, taken = f.sub_or_none("expected"), f.sub_or_none("taken")
        return cls(
            kind=typing.cast(OutcomeKind, f.choice("kind", OUTCOME_KINDS)),
            turn=f.int_or_none("turn"),
            expected=None if exp is None else OutcomeCall.from_fields(exp),
            taken=None if taken is None else OutcomeCall.from_fields(taken),
            differing_arguments=f.texts("differing_arguments"),
            missing_outputs=f.texts("missing_outputs"),
            db_diff=tuple(DbChange.from_fields(c) for c in f.subs("db_diff")),
            answers=tuple(MathAnswer.from_fields(a) for a in f.subs("answers")),
            reference_answer=f.text_or_none("reference_answer"),
            text=f.text("text"),
            every_turn=f.boolean("every_turn"),
        )

    @property
    def passed(self) -> bool | None:
        """Whether the kind says the reward was earned (``kind_passed``): None for ``other``."""
        return kind_passed(self.kind)

    @property
    def scored_turn(self) -> int | None:
        """Math: the turn whose answer the checker scored (the last one answered); None for other envs."""
        return self.answers[-1].turn if self.answers else None

    @property
    def scored_turns(self) -> tuple[int, ...]:
        """Math: the turns whose answers the reward counts: every one where ``every_turn``, else the last; none for
        ``other`` (a record that does not say how its reward counts the answers)."""
        if self.kind == "other":
            return ()
        if self.every_turn:
            return tuple(a.turn for a in self.answers)
        return (self.answers[-1].turn,) if self.answers else ()

    @property
    def other_tool(self) -> bool:
        """Both calls named and the agent called another tool than the reference's."""
        return self.expected is not None and self.taken is not None and self.expected.name != self.taken.name

    @classmethod
    def other(cls, text: str, turn: int | None = None) -> Outcome:
        """An env's own reason, as text."""
        return cls("other", turn, None, None, (), (), (), (), None, text)
