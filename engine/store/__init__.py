"""SQLite storage of runs and episodes: all the SQL there is.

- ``core``: the ``Store`` (opening, read-only too; bringing a file up to date; recovering; closing);
  ``readonly``: a file this process may not write, read with the changes its WAL holds;
- ``schema``: the tables; ``migrations``: the ordered, named steps from each earlier database schema;
- ``writes`` and ``reads``: episodes, turns, runs, tags, stars, notes and replays in and out;
- ``codec``: the compact form of token arrays and turns;
- ``runs``: per rollout step aggregates of training runs, and the files ``watch`` has read;
- ``index``: the slim episode index, its full-text search and aggregates; ``filter``: ``EpisodeFilter``
  (also ``--where``) and ``EpisodeSummary``; ``paging``: keyset page tokens and bounded counts.

Tables: ``meta`` (schema version), ``migrations`` (the steps applied), ``runs``, ``episodes`` (one row per
episode: filterable columns plus the rest of the record as JSON), ``turns`` (one row per turn),
``tokens`` (the token arrays), ``findings`` (an index of every finding, for filtering), ``tags``,
``replays`` and ``watched_files``.

Imports the records and the checks' diagnosis rules (the stored diagnosis column); nothing above.
"""

from __future__ import annotations

from .base import damaged
from .core import Store
from .filter import SORTABLE, EpisodeFilter, EpisodeSummary
from .index import Bins, BrowseStats, RewardBins, RewardStats, search_texts
from .paging import EpisodePage, MatchCount
from .runs import RunOverview, RunSummary, StepStats, WatchedFile
from .schema import DB_SCHEMA

__all__ = [
    "DB_SCHEMA", "SORTABLE", "Bins", "BrowseStats", "EpisodeFilter", "EpisodePage", "EpisodeSummary", "MatchCount", "RewardBins", "RewardStats", "RunOverview", "RunSummary", "StepStats", "Store", "WatchedFile",
    "damaged", "search_texts",
]
