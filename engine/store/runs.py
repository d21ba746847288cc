"""Training runs as the store sees them: per rollout step aggregates, and what ``rollscope watch`` has read.

Part of the ``Store`` (it inherits ``RunQueries``). A run here is a ``run_id`` whose episodes carry a
``rollout_step`` (imported from a trainer's dumps, or read by ``watch``); the run view plots these
aggregates, one point per step, to show when the data went wrong.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ..records.alternatives import MICRONATS
from .base import StoreBase


@dataclass(frozen=True)
class StepStats:
    """One rollout step of a run: its episodes' reward, how they ended, their length and root findings."""

    step: int
    n: int
    reward_mean: float
    reward_min: float
    reward_max: float
    truncated: int
    """Episodes that ended truncated (a length limit)."""
    aborted: int
    """Episodes that ended aborted or failed."""
    response_tokens: float
    """Mean trainable (generated) tokens per episode."""
    with_errors: int
    """Episodes with at least one root error finding."""
    root_kinds: dict[str, int] = field(default_factory=dict)
    """Episodes per root finding kind."""
    outcomes: dict[str, int] = field(default_factory=dict)
    """Episodes per outcome kind (why they earned their reward), most first."""
    entropy_tokens: int = 0
    """Generated tokens with a known entropy (recorded with ``--top-logprobs``, or filled by
    ``--recompute-logprobs``); 0: the step's entropy is unknown."""
    entropy_mean: float | None = None
    """Their mean entropy (nats); None when none is known."""
    near_zero_entropy: int = 0
    """How many of them have an entropy under ``alternatives.NEAR_ZERO_ENTROPY`` (the model all but certain)."""
    unchecked: int = 0
    """Finished episodes no check ran on (imported without ``--check``) and without an error (one the loop found an
    error in has one, checked or not): their root errors are unknown."""

    @property
    def truncated_rate(self) -> float:
        return self.truncated / self.n if self.n else 0.0

    @property
    def aborted_rate(self) -> float:
        return self.aborted / self.n if self.n else 0.0

    @property
    def checked(self) -> int:
        """The episodes whose root errors are known: those the checks ran on, the running ones, and those with an
        error (at least ``with_errors``)."""
        return self.n - self.unchecked

    @property
    def error_rate(self) -> float | None:
        """The share of the checked episodes with at least one root error finding; None when no check ran on any."""
        return self.with_errors / self.checked if self.checked else None

    @property
    def near_zero_rate(self) -> float | None:
        """The share of the step's tokens with a known entropy whose entropy is near zero; None when none is known."""
        return self.near_zero_entropy / self.entropy_tokens if self.entropy_tokens else None


@dataclass(frozen=True)
class RunSummary:
    """A run with rollout steps: how many episodes and steps, the newest step, when it last grew."""

    run_id: str
    n_episodes: int
    n_steps: int
    first_step: int
    last_step: int
    updated_at: float


@dataclass(frozen=True)
class RunOverview:
    """One run as the Runs tab lists it: every run (launched, imported, watched, the demo's), what it ran and how
    it went. Episodes stored without a run (an import without ``--run``) make the row whose ``run_id`` is None."""

    run_id: str | None
    started: float
    n_episodes: int
    envs: str
    presets: str
    policies: str
    mean_reward: float
    with_errors: int
    """Episodes with a root error."""
    status: str
    """The run row's status (``running``, ``finished``, ``failed``, ``interrupted``), or ``imported`` (no row)."""
    unchecked: int = 0
    """Finished episodes no check ran on and without an error: their root errors are unknown."""


@dataclass(frozen=True)
class WatchedFile:
    """What ``watch`` knows of one dump file: its size and time when read, how far it got, what it held."""

    path: str
    run_id: str
    fmt: str
    size: int
    mtime: float
    offset: int
    """Bytes read (a JSONL file is read up to its last complete line)."""
    lines: int
    """Lines read (JSONL)."""
    state: str
    """``done`` (read whole), ``partial`` (a JSONL file read up to ``offset``), ``waiting`` (still being
    written) or ``failed`` (``message`` says why)."""
    n_episodes: int = 0
    n_skipped: int = 0
    message: str = ""
    updated_at: float = 0.0


class RunQueries(StoreBase):
    """Per-step aggregates of runs, and the ``watched_files`` table."""

    def runs_with_steps(self) -> list[RunSummary]:
        """Every run whose episodes carry rollout steps, the most recently grown first."""
        # Counted from the maintained aggregates; each run's newest time is one step of the index by run then time.
        rows = self.browse_query(
            "SELECT s.run_id, SUM(n), COUNT(DISTINCT rollout_step), MIN(rollout_step), MAX(rollout_step), "
            "(SELECT MAX(created_at) FROM episode_index i WHERE i.run_id = s.run_id AND i.rollout_step IS NOT NULL) "
            f"FROM {self._stats_rows()} s WHERE rollout_step IS NOT NULL AND run_id IS NOT NULL "
            "GROUP BY s.run_id ORDER BY 6 DESC, 1")
        return [RunSummary(str(r[0]), int(r[1]), int(r[2]), int(r[3]), int(r[4]), float(r[5] or 0)) for r in rows]

    def has_run(self, run_id: str) -> bool:
        """Whether ``run_id`` names a run here already (a run row, or episodes imported into it)."""
        conn, lock = self._point_reader()
        with lock:
            return bool(conn.execute("SELECT 1 FROM runs WHERE id = ? UNION ALL SELECT 1 FROM episode_index "
                                     "WHERE run_id = ? LIMIT 1", [run_id, run_id]).fetchall())

    def run_overview(self, limit: int = 500) -> list[RunOverview]:
        """Every run, the newest first: its envs, presets and policies, episodes, mean reward, and how many
        episodes have a root error."""
        # Counts, rewards, envs, presets and errors from the maintained aggregates, the models from ``run_models``, and
        # each run's first time from one step of the index by run then time: a row a run, whatever its size.
        models = "SELECT GROUP_CONCAT(model, char(31)) FROM run_models m WHERE m.run_id IS s.run_id" \
            if self._has_table("run_models") else \
            "SELECT GROUP_CONCAT(model, char(31)) FROM (SELECT DISTINCT model FROM episode_index m " \
            "WHERE m.run_id IS s.run_id)"
        rows = self.browse_query(
            "SELECT s.run_id, (SELECT MIN(created_at) FROM episode_index i WHERE i.run_id IS s.run_id), SUM(n), "
            # A comma in a name is kept apart from the commas between names (char(30) stands for it meanwhile).
            "GROUP_CONCAT(DISTINCT replace(env, ',', char(30))), GROUP_CONCAT(DISTINCT replace(preset, ',', char(30))), "
            f"({models}), SUM(reward * n) / SUM(CASE WHEN reward IS NOT NULL THEN n END), SUM(with_errors), "
            "(SELECT status FROM runs r WHERE r.id = s.run_id), SUM(unchecked) "
            f"FROM {self._stats_rows()} s GROUP BY s.run_id ORDER BY 2 DESC, 1 LIMIT ?", [limit])
        return [RunOverview(None if r[0] is None else str(r[0]), float(r[1] or 0), int(r[2]), _listed(r[3], ","),
                            _listed(r[4], ","), _listed(r[5], "\x1f"),
                            float(r[6] or 0), int(r[7] or 0), str(r[8] or "imported"), int(r[9] or 0)) for r in rows]

    def step_stats(self, run_id: str) -> list[StepStats]:
        """One ``StepStats`` per rollout step of ``run_id``, in step order: counts, rewards, statuses, tokens and
        outcomes and entropy figures from the maintained aggregates (``episode_stats``), root findings from the
        episodes with errors."""
        stats = self._stats_rows()
        rows = self.browse_query(
            # The mean of the rewards there are (AVG's): a row of episodes without a reward is left out of it.
            "SELECT rollout_step, SUM(n), SUM(reward * n) / SUM(CASE WHEN reward IS NOT NULL THEN n END), MIN(reward), "
            "MAX(reward), "
            "SUM(n * (status = 'truncated')), SUM(n * (status IN ('aborted', 'failed'))), 1.0 * SUM(trainable) / SUM(n), "
            "SUM(n_entropy), SUM(entropy_micronats), SUM(n_low_entropy), SUM(unchecked) "
            f"FROM {stats} WHERE run_id = ? AND rollout_step IS NOT NULL GROUP BY rollout_step "
            "ORDER BY rollout_step", [run_id])
        kinds: dict[int, Counter[str]] = {}
        errors: Counter[int] = Counter()
        for step, root_kinds in self.browse_query(
                "SELECT rollout_step, root_kinds FROM episode_index WHERE run_id = ? AND rollout_step IS NOT NULL "
                "AND n_errors > 0 AND root_kinds IS NOT NULL AND root_kinds != ''", [run_id]):
            errors[int(step)] += 1
            kinds.setdefault(int(step), Counter()).update(k for k in str(root_kinds).split(",") if k)
        outcomes: dict[int, Counter[str]] = {}
        for step, kind, n in self.browse_query(
                f"SELECT rollout_step, outcome, SUM(n) FROM {stats} WHERE run_id = ? AND rollout_step IS NOT "
                "NULL AND outcome IS NOT NULL GROUP BY rollout_step, outcome", [run_id]):
            outcomes.setdefault(int(step), Counter())[str(kind)] = int(n)
        return [
            StepStats(step=int(r[0]), n=int(r[1]), reward_mean=float(r[2] or 0), reward_min=float(r[3] or 0),
                      reward_max=float(r[4] or 0), truncated=int(r[5] or 0), aborted=int(r[6] or 0),
                      response_tokens=float(r[7] or 0), with_errors=errors[int(r[0])],
                      root_kinds=dict(kinds.get(int(r[0]), Counter()).most_common()),
                      outcomes=dict(outcomes.get(int(r[0]), Counter()).most_common()),
                      entropy_tokens=int(r[8] or 0),
                      entropy_mean=int(r[9] or 0) / MICRONATS / int(r[8]) if r[8] else None,
                      near_zero_entropy=int(r[10] or 0), unchecked=int(r[11] or 0))
            for r in rows
        ]

    def episodes_stamp(self) -> tuple[int, int, float, int]:
        """(episodes, newest row, newest ``created_at``, episodes running): it changes when episodes are
        added or removed and when a running one ends, so a page that polls it knows when to refresh.
        Answered from the maintained aggregates and indexes: cheap at any size."""
        count = "SELECT IFNULL(SUM(n), 0) FROM episode_total" if self._has_table("episode_total") else \
            "SELECT COUNT(*) FROM episode_index"
        # One aggregate a subquery: SQLite answers a lone MAX from an index, two together by reading every row.
        row = self.browse_query(
            f"SELECT ({count}), (SELECT MAX(rid) FROM episode_index), (SELECT MAX(created_at) FROM episode_index), "
            "(SELECT COUNT(*) FROM episode_index WHERE status = 'running')")[0]
        return int(row[0]), int(row[1] or 0), float(row[2] or 0), int(row[3] or 0)

    def watched_file(self, path: str) -> WatchedFile | None:
        conn, lock = self._point_reader()
        with lock:
            rows = conn.execute(
                "SELECT path, run_id, fmt, size, mtime, offset, lines, state, n_episodes, n_skipped, message, updated_at "
                "FROM watched_files WHERE path = ?", [path]).fetchall()
        return _watched(rows[0]) if rows else None

    def watched_files(self, run_id: str | None = None) -> list[WatchedFile]:
        """The files ``watch`` has seen (of one run, or all), in the order they were last read."""
        where, args = ("WHERE run_id = ?", [run_id]) if run_id else ("", [])
        conn, lock = self._point_reader()
        with lock:
            rows = conn.execute(
                "SELECT path, run_id, fmt, size, mtime, offset, lines, state, n_episodes, n_skipped, message, updated_at "
                f"FROM watched_files {where} ORDER BY updated_at", args).fetchall()
        return [_watched(r) for r in rows]

    def record_watched(self, f: WatchedFile) -> None:
        row: dict[str, Any] = {**f.__dict__, "updated_at": time.time()}
        with self._writing("record a watched file"):
            cols = list(row)
            self.db.execute(
                f"INSERT OR REPLACE INTO watched_files ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})",
                [row[c] for c in cols])


def _watched(row: Any) -> WatchedFile:
    return WatchedFile(str(row[0]), str(row[1] or ""), str(row[2] or ""), int(row[3] or 0), float(row[4] or 0),
                       int(row[5] or 0), int(row[6] or 0), str(row[7] or ""), int(row[8] or 0), int(row[9] or 0),
                       str(row[10] or ""), float(row[11] or 0))


def _listed(values: str | None, sep: str) -> str:
    """A run's distinct envs, presets or models, in order, as the runs list shows them."""
    return ",".join(sorted({v.replace("\x1e", ",") for v in (values or "").split(sep)} - {""}))
