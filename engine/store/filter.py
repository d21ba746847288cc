"""What the episode table filters and sorts by: ``EpisodeFilter`` and ``EpisodeSummary``.

Shared by the store, the CLI's ``--where`` and the dashboard's Browse.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from ..errors import ConfigError
from ..records.episode import FINDING_KINDS, Status
from ..records.outcome import OUTCOME_KINDS
from .index import text_clause

_YES = ("1", "true", "yes")
_NO = ("0", "false", "no")
NEEDS_SQL = "json_extract(evidence, '$.needs') IS NOT NULL"
"""A ``not_checked`` finding row whose check lacked what a person can give (``checks.base.skip``'s ``needs``)."""
_WHOLE = ("whole", "full", "fully", "all")  # --where checked=whole: every check ran
_PART = ("part", "partly", "partial")  # checked=part: one could not run


@dataclass(frozen=True)
class EpisodeSummary:
    """One row of the episode table."""

    id: str
    env: str
    task_id: str
    status: str
    reward: float
    n_turns: int
    n_tokens: int
    n_trainable: int
    preset: str
    model: str
    run_id: str | None
    sample_index: int
    created_at: float
    starred: bool
    n_findings: int
    source: str
    group_id: str | None = None
    n_errors: int = 0
    diagnosis: str | None = None  # the root findings in one line ("; " between roots)
    root_kinds: str | None = None  # their kinds, in the same order, as ",kind,kind,"
    rollout_step: int | None = None  # the trainer's rollout step an imported episode came from
    outcome: str | None = None  # the kind of its outcome (why it earned its reward); None while it runs
    checked: str | None = None  # the checks' version that ran on it; None: none ran, so finding nothing means nothing;
    # "?" of a read-only file from before schema 15, which does not say (read as checked, as that version showed it)
    tags: tuple[str, ...] = ()
    reason: str = ""  # why the episode ended ("reached max_turns=4", "the env said done", an abort's message)

    @property
    def unchecked(self) -> bool:
        """As ``Episode.unchecked``: it has ended and no check ran on it."""
        return self.checked is None and self.status != "running"

    def diagnosis_parts(self) -> list[tuple[str, str]]:
        """(kind, phrase) per root, as stored."""
        kinds = [k for k in (self.root_kinds or "").split(",") if k]
        texts = (self.diagnosis or "").split("; ") if self.diagnosis else []
        return list(zip(kinds, texts, strict=False)) if len(kinds) == len(texts) else [("", t) for t in texts]

    # Read from the tags and episodes tables for a page's rows, not from the browse index.
    PAGE_LOOKUPS: ClassVar[tuple[str, ...]] = ("tags", "reason")

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> EpisodeSummary:
        return cls(**{f.name: row[f.name] for f in fields(cls) if f.name in row})


@dataclass(frozen=True)
class EpisodeFilter:
    """What Browse, ``ls`` and ``export`` filter episodes by."""

    env: str | None = None
    task_id: str | None = None
    status: tuple[str, ...] = ()
    reward_min: float | None = None
    reward_max: float | None = None
    run_id: str | None = None
    preset: str | None = None
    source: str | None = None
    starred: bool | None = None
    tags: tuple[str, ...] = ()
    finding_kind: str | None = None
    root_kind: str | None = None  # a root finding of this kind
    min_turns: int | None = None
    max_turns: int | None = None
    ids: tuple[str, ...] = ()
    text: str | None = None
    search_context: bool = False  # the text search looks in system prompts and tool schemas too
    has_findings: bool | None = None  # any finding at all (True) or none (False)
    checked: bool | None = None  # the fidelity checks ran on it (True) or did not (False: no findings means nothing)
    every_check: bool | None = None  # every check could run on it (True) or one could not (False: a ``not_checked``
    # note, such as a check that needs a tokenizer run without one): its findings are those of the checks that ran
    group_id: str | None = None
    has_tokens: bool | None = None  # holds token ids (True) or none (False: chat messages imported without a tokenizer)
    family: str | None = None  # this episode and its forks
    rollout_step: int | None = None
    outcome: tuple[str, ...] = ()  # outcome kinds (``records.outcome.OUTCOME_KINDS``)

    @classmethod
    def from_where(cls, clauses: Sequence[str]) -> EpisodeFilter:
        """Parse ``key=value`` clauses: ``status=completed,truncated``, ``reward>=0.5``, ``tag=x``."""
        kw: dict[str, Any] = {}
        for clause in clauses:
            one: dict[str, Any] = {}
            for op in (">=", "<=", "="):
                if op in clause:
                    key, _, value = clause.partition(op)
                    key, value = key.strip(), value.strip()
                    break
            else:
                raise ConfigError(f"--where {clause!r}: expected key=value, reward>=X or reward<=X")
            if not value:
                raise ConfigError(f"--where {clause!r}: no value after {op!r} (an empty value would match every "
                                  "episode, or none)")
            try:
                if key == "reward":
                    bound = float(value)
                    if not math.isfinite(bound):
                        raise ConfigError(f"--where {clause!r}: a reward bound is a finite number, not {value!r}")
                    if op == "=":
                        one["reward_min"] = one["reward_max"] = bound
                    else:
                        one["reward_min" if op == ">=" else "reward_max"] = bound
                elif key == "status":
                    bad = [s for s in value.split(",") if s not in {x.value for x in Status}]
                    if bad:
                        raise ConfigError(f"--where status: unknown status {bad[0]!r}; one of {', '.join(x.value for x in Status)}")
                    one["status"] = tuple(value.split(","))
                elif key in ("tag", "tags"):
                    one["tags"] = tuple(value.split(","))
                elif key == "id":
                    one["ids"] = tuple(value.split(","))
                elif key == "checked" and value.lower() in _WHOLE + _PART:
                    one["checked"], one["every_check"] = True, value.lower() in _WHOLE
                elif key in ("starred", "checked"):
                    if value.lower() not in _YES + _NO:
                        raise ConfigError(f"--where {clause!r}: {key} is true or false (or yes/no, 1/0"
                                          + (", or whole/part: every check ran, or one could not" if key == "checked"
                                             else "") + f"), not {value!r}")
                    one[key] = value.lower() in _YES
                elif key in ("turns", "min_turns") and op in (">=", "="):
                    one["min_turns"] = int(value)
                    if op == "=":
                        one["max_turns"] = int(value)
                elif key in ("turns", "max_turns") and op == "<=":
                    one["max_turns"] = int(value)
                elif key in ("step", "rollout_step") and op == "=":
                    one["rollout_step"] = int(value)
                elif key == "outcome":
                    bad = [k for k in value.split(",") if k not in OUTCOME_KINDS]
                    if bad:
                        raise ConfigError(f"--where outcome: unknown kind {bad[0]!r}; one of {', '.join(OUTCOME_KINDS)}")
                    one["outcome"] = tuple(value.split(","))
                elif key in ("family", "forks_of"):
                    one["family"] = value
                elif key in ("finding", "finding_kind", "root", "root_kind"):
                    if value not in FINDING_KINDS:
                        near = difflib.get_close_matches(value, FINDING_KINDS, n=1)
                        raise ConfigError(f"--where {key}: unknown finding kind {value!r}"
                                          + (f" (did you mean {near[0]}?)" if near else "")
                                          + f"; one of {', '.join(sorted(FINDING_KINDS))}")
                    one["root_kind" if key.startswith("root") else "finding_kind"] = value
                elif key in ("text_all", "text+context"):  # system prompts and tool schemas too
                    one["text"], one["search_context"] = value, True
                elif key in ("env", "task_id", "task", "run_id", "run", "preset", "source", "text"):
                    one[{"task": "task_id", "run": "run_id"}.get(key, key)] = value
                else:
                    raise ConfigError(
                        f"--where {clause!r}: unknown key {key!r}; use env, task, status, reward, run, preset, "
                        "source, tag, starred, checked, turns, step, finding, root, outcome, family, id, text (messages, tool calls, "
                        "errors) or text_all (system prompts and tool schemas too)"
                    )
            except ValueError:
                raise ConfigError(f"--where {clause!r}: {value!r} is not a number") from None
            _merge(kw, one, clause)
        return cls(**kw)

    # The filters whose columns ``episode_stats`` counts by (``schema.STATS_KEY``).
    STATS_FILTERS: ClassVar[frozenset[str]] = frozenset({
        "env", "status", "reward_min", "reward_max", "run_id", "preset", "min_turns", "max_turns", "rollout_step",
        "outcome"})

    # The filters whose columns the Browse charts' other aggregates count by (``schema.CHART_KEY``).
    CHART_FILTERS: ClassVar[frozenset[str]] = frozenset({
        "env", "status", "reward_min", "reward_max", "run_id", "preset", "outcome"})

    def answered_by(self, filters: frozenset[str]) -> bool:
        """Whether this filter sets none but ``filters``, so ``sql()`` selects the rows of aggregates kept by those
        columns as it selects the episodes."""
        return all(f.name in filters or getattr(self, f.name) == f.default for f in fields(self))

    @property
    def on_stats(self) -> bool:
        """Whether the maintained aggregates (``episode_stats``) answer this filter: it filters on their columns
        alone, so ``sql()`` selects their rows as it selects the episodes."""
        return self.answered_by(self.STATS_FILTERS)

    @property
    def on_chart_stats(self) -> bool:
        """Whether ``length_stats``, ``task_stats`` and ``group_stats`` answer this filter (``CHART_FILTERS``)."""
        return self.answered_by(self.CHART_FILTERS)

    def sql(self) -> tuple[str, list[Any]]:
        where: list[str] = []
        args: list[Any] = []

        def add(cond: str, *vals: Any) -> None:
            where.append(cond)
            args.extend(vals)

        if self.env:
            add("env = ?", self.env)
        if self.task_id:
            add("task_id = ?", self.task_id)
        if self.status:
            add(f"status IN ({','.join('?' * len(self.status))})", *self.status)
        if self.reward_min is not None:
            add("reward >= ?", self.reward_min)
        if self.reward_max is not None:
            add("reward <= ?", self.reward_max)
        if self.run_id:
            add("run_id = ?", self.run_id)
        if self.preset:
            add("preset = ?", self.preset)
        if self.source:
            add("source = ?", self.source)
        if self.starred is not None:
            add("starred = ?", int(self.starred))
        for tag in self.tags:
            add("id IN (SELECT episode_id FROM tags WHERE tag = ?)", tag)
        if self.finding_kind:
            add("id IN (SELECT episode_id FROM findings WHERE kind = ?)", self.finding_kind)
        if self.root_kind:
            add("instr(root_kinds, ?) > 0", f",{self.root_kind},")
        if self.min_turns is not None:
            add("n_turns >= ?", self.min_turns)
        if self.max_turns is not None:
            add("n_turns <= ?", self.max_turns)
        if self.ids:
            add(f"id IN ({','.join('?' * len(self.ids))})", *self.ids)
        if self.has_findings is not None:
            add("n_findings > 0" if self.has_findings else "n_findings = 0")
        if self.checked is not None:
            add("checked IS NOT NULL" if self.checked else "checked IS NULL")
        if self.every_check is not None:
            add(f"id {'NOT ' if self.every_check else ''}IN (SELECT episode_id FROM findings WHERE kind = 'not_checked' "
                f"AND {NEEDS_SQL})")
        if self.group_id:
            add("group_id = ?", self.group_id)
        if self.has_tokens is not None:
            add("n_tokens > 0" if self.has_tokens else "n_tokens = 0")
        if self.rollout_step is not None:
            add("rollout_step = ?", self.rollout_step)
        if self.outcome:
            add(f"outcome IN ({','.join('?' * len(self.outcome))})", *self.outcome)
        if self.family:
            # an episode and every fork of it, so they list together
            add("id = ? OR id IN (SELECT id FROM episode_index WHERE parent_id = ?)", self.family, self.family)
        if self.text and self.text.strip():
            add(*text_clause(self.text.strip(), self.search_context))
        return (" AND ".join(f"({w})" for w in where) or "1"), args


def _merge(kw: dict[str, Any], one: dict[str, Any], clause: str) -> None:
    """Add one ``--where`` clause's fields to those before it: every clause must hold, so tags add up, lists of
    statuses, outcomes and ids are met by both, bounds narrow, and a key given another value is refused (an episode
    has one env)."""
    for key, value in one.items():
        if key not in kw or kw[key] == value:
            kw[key] = value
        elif key == "tags":
            kw[key] = tuple(dict.fromkeys((*kw[key], *value)))
        elif key in ("status", "outcome", "ids"):
            both = tuple(v for v in kw[key] if v in value)
            if not both:
                what = {"ids": "id"}.get(key, key)
                raise ConfigError(f"--where {clause!r}: no {what} is in both this clause and the one before "
                                  f"({','.join(kw[key])}): all clauses must hold, so none would match")
            kw[key] = both
        elif key in ("reward_min", "min_turns"):
            kw[key] = max(kw[key], value)
        elif key in ("reward_max", "max_turns"):
            kw[key] = min(kw[key], value)
        else:
            raise ConfigError(f"--where {clause!r}: {key} is given twice ({kw[key]!r} before): all clauses must hold, "
                              "and an episode has one")


SORTABLE = (
    "created_at", "reward", "n_turns", "n_tokens", "env", "task_id", "status", "n_findings", "id",
    "n_trainable", "preset", "model", "run_id", "group_id", "sample_index", "starred", "source", "n_errors",
    "rollout_step", "outcome",
)
