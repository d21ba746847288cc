"""What a re-execution found (``replay``): a verdict per turn compared (``TurnVerdict``), and the episode's
(``ReplayResult``), in words the CLI, the dashboard and the summary over many episodes (``analysis/replays.py``) share."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from .outputdiff import OutputChange, output_diff, shape, short
from .rewards import same_reward

FIELDS = ("system_prompt", "first_observation", "observation", "reward", "done", "env_error")


LABELS = {"observation": "observation", "first_observation": "opening message", "system_prompt": "system prompt",
          "reward": "reward", "done": "done flag", "env_error": "env error", "episode_reward": "episode reward"}
"""How a verdict names what differs when no tool's output does."""
REWARD_ALONE = "every output as recorded, the reward differs"


@dataclass(frozen=True)
class TurnVerdict:
    """One turn's comparison, or one differing output of it: ``tool`` names the call whose output differs
    and ``diff`` says what changed, path by path (:func:`output_diff`)."""

    turn: int
    ok: bool
    field: str = ""
    stored: Any = None
    now: Any = None
    note: str = ""
    tool: str = ""
    diff: tuple[OutputChange, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"turn": self.turn, "ok": self.ok, "field": self.field}
        if not self.paths:  # a diff says what changed; the two dumps would only repeat it at length
            d["stored"], d["now"] = self.stored, self.now
        d["note"] = self.note
        if not self.ok:
            d["tool"] = self.tool
            d["diff"] = [c.to_dict() for c in self.diff]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> TurnVerdict:
        return cls(int(d["turn"]), bool(d["ok"]), d.get("field", ""), d.get("stored"), d.get("now"), d.get("note", ""),
                   str(d.get("tool") or ""), tuple(OutputChange.from_dict(c) for c in d.get("diff") or ()))

    @property
    def what(self) -> str:
        """What differs, as a label: ``get_user_details output``, or the field (``reward``, ``opening message``)."""
        return f"{self.tool} output" if self.tool else LABELS.get(self.field, self.field)

    @property
    def causes(self) -> tuple[str, ...]:
        """What differs, in words that are the same for every episode the same change hit (values left out):
        one cause per path and kind of change of a differing output (``get_user_details output:
        `address.province` is now `address.state```), else one naming the field."""
        if self.ok:
            return ()
        if self.field == "observation":
            what = f"{self.tool} output" if self.tool else "the env's answer"
            return tuple(f"{what}: {p}" for p in shape(self.diff)) or (f"{what} differs",)
        if self.field == "env_error":
            now = str(self.now or "")
            return (("the env raised " + now.split(":")[0]) if now else "the env no longer raises the stored error",)
        if self.field == "done":
            return (self.note or "the env ends the episode elsewhere",)
        return ({"reward": "the reward", "system_prompt": "the system prompt",
                 "first_observation": "the opening message",
                 "episode_reward": "the episode's reward does not follow from the env's by the loop's rule"}
                .get(self.field, self.field),)

    @property
    def paths(self) -> bool:
        """Whether the difference is best said path by path (an output, a message), not as two values."""
        return bool(self.diff) and self.field in ("observation", "first_observation")

    def describe(self) -> str:
        """The differences in one line: paths, not dumps."""
        return "; ".join(c.describe() for c in self.diff) if self.paths else f"stored {short(self.stored)}, now {short(self.now)}"


def _differing(turn: int, field: str, stored: Any, now: Any, note: str = "", tool: str = "") -> TurnVerdict:
    return TurnVerdict(turn, False, field, stored, now, note, tool, output_diff(stored, now))


@dataclass(frozen=True)
class ReplayResult:
    """The verdict of one re-execution.

    ``divergence`` is the first difference; ``turns`` holds every turn compared and every later difference
    too, since a replay goes on past a differing output to the end. ``recorded_reward`` is the episode's reward,
    ``replayed_reward`` the one its loop makes of the replayed env's rewards (None where the replay did not get
    that far, or stopped at ``until``); with the user replayed from the record, the env's last reward on both sides.
    """

    episode_id: str
    reproducible: bool  # False when the env cannot reproduce by design (a model plays the user)
    reproduced: bool
    turns: tuple[TurnVerdict, ...] = ()
    divergence: TurnVerdict | None = None
    reason: str = ""
    until: int | None = None
    created_at: float = field(default_factory=time.time)
    user: str = "env"
    """Who answered as the user: ``env`` (the env's own user) or ``recorded`` (the record's messages)."""
    recorded_reward: float | None = None
    replayed_reward: float | None = None

    @property
    def kind(self) -> str:
        if not self.reproducible:
            return "not_reproducible"
        if self.reproduced:
            return "reproduced"
        return f"diverged:{self.divergence.field if self.divergence else 'unknown'}"

    @property
    def reward_reproduced(self) -> bool | None:
        """Whether the final reward is the recorded one; None when either is unknown."""
        if self.recorded_reward is None or self.replayed_reward is None:
            return None
        return same_reward(self.recorded_reward, self.replayed_reward)

    @property
    def differences(self) -> tuple[TurnVerdict, ...]:
        return tuple(v for v in self.turns if not v.ok)

    @property
    def divergence_index(self) -> int | None:
        """Where the first divergence lies in ``turns``."""
        return next((i for i, v in enumerate(self.turns) if not v.ok), None)

    def _causing(self) -> tuple[TurnVerdict, ...]:
        """The differences that name a cause: a differing reward only when nothing else differs, since a
        differing output explains it."""
        diffs = self.differences
        return tuple(v for v in diffs if v.field != "reward") or diffs

    @property
    def causes(self) -> tuple[str, ...]:
        """Every cause this episode shows, once each, in the order met (see :attr:`TurnVerdict.causes`)."""
        found = tuple(dict.fromkeys(c for v in self._causing() for c in v.causes))
        return (REWARD_ALONE,) if found == ("the reward",) else found

    @property
    def first_causes(self) -> tuple[str, ...]:
        """The causes of the first divergence (the first differing output where the reward differs after it)."""
        causing = self._causing()
        if not causing:
            return ()
        return (REWARD_ALONE,) if causing[0].field == "reward" else causing[0].causes

    def to_dict(self) -> dict[str, Any]:
        return {
            "episode_id": self.episode_id, "reproducible": self.reproducible, "reproduced": self.reproduced,
            "kind": self.kind, "turns": [t.to_dict() for t in self.turns],
            "divergence": None if self.divergence is None else self.divergence.to_dict(),
            "reason": self.reason, "until": self.until, "created_at": self.created_at, "user": self.user,
            "recorded_reward": self.recorded_reward, "replayed_reward": self.replayed_reward,
            "reward_reproduced": self.reward_reproduced,
            "cause": "; ".join(self.first_causes) or None, "causes": list(self.causes),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ReplayResult:
        div = d.get("divergence")

        def reward(key: str) -> float | None:
            v = d.get(key)
            return None if v is None else float(v)

        return cls(
            episode_id=str(d["episode_id"]), reproducible=bool(d["reproducible"]), reproduced=bool(d["reproduced"]),
            turns=tuple(TurnVerdict.from_dict(t) for t in d.get("turns") or ()),
            divergence=None if div is None else TurnVerdict.from_dict(div), reason=str(d.get("reason", "")),
            until=d.get("until"), created_at=float(d.get("created_at", 0.0)), user=str(d.get("user", "env")),
            recorded_reward=reward("recorded_reward"), replayed_reward=reward("replayed_reward"),
        )

    def reward_verdict(self) -> str:
        """Whether the final reward reproduces, in words."""
        if self.until is not None:
            return "reward not compared (--until)"
        ok = self.reward_reproduced
        if ok is None:
            return "the final reward was not reached" if self.recorded_reward is not None else ""
        if ok:
            return f"the reward reproduces ({self.replayed_reward:g})"
        return f"the reward does not reproduce (recorded {self.recorded_reward:g}, now {self.replayed_reward:g})"

    def headline(self) -> str:
        """One line saying what the re-execution found, the values left to the per-turn table: ``diverged at
        turn 0, get_user_details output; 1 more difference after it; the reward reproduces (1)``."""
        return self._line(detail=False)

    def summary(self) -> str:
        """The headline with the episode and the first divergence's changes: what ``rollscope replay`` prints."""
        if not self.reproducible:
            return f"{self.episode_id}: cannot be re-executed exactly: {self.reason}"
        return f"{self.episode_id}: {self._line(detail=True)}"

    def _line(self, detail: bool) -> str:
        if not self.reproducible:
            return "cannot be re-executed exactly"
        by = "; the user was replayed from the record" if self.user == "recorded" else ""
        rw = self.reward_verdict()
        if self.reproduced:
            if self.until is not None:
                return f"turns 0-{self.until} reproduced; {rw}{by}"
            if self.user == "recorded":
                what = "every tool output and the final reward as recorded"
            else:
                what = "every observation, reward and done flag as stored"
            if self.reward_reproduced is None and rw:
                what = what.replace(" and the final reward", "") + f"; {rw}"
            return f"reproduced: {len(self.turns)} turns, {what}{by}"
        d = self.divergence
        if d is None:
            return "diverged" + (f"; {rw}" if rw else "") + by
        head = f"diverged at turn {d.turn}, {d.what}"
        if detail:
            head += f": {d.describe()}" + (f" ({d.note})" if d.note and d.field in ("reward", "done", "episode_reward")
                                           else "")
        later = len(self.differences) - 1
        more = f"; {later} more difference{'s' if later != 1 else ''} after it" if later > 0 else ""
        said = d.field in ("reward", "episode_reward") and self.until is None  # the reward's verdict is the head's
        return head + more + (f"; {rw}" if rw and not said else "") + by
