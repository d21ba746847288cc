"""An episode as the rows the store writes for it, made without the database.

``pack_episode`` is everything of writing a whole episode that needs no database: the index columns, the compact
turn and token rows (``codec``), the finding rows and the digests of the search texts. The store writes a
``PackedEpisode`` in a few statements (``Writes._write_packed``); an import made on worker processes packs there
(``formats.jsonl.pack_lines``) and sends the rows, which cost a fraction of an ``Episode`` to send, so the
writing process does little but SQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..checks.diagnosis import edited_after_check
from ..errors import StoreError
from ..records import marks, numbers
from ..records.alternatives import entropy_figures
from ..records.episode import Episode, Status, Turn
from ..records.provenance import Source
from . import codec
from .index import search_texts, text_digests
from .schema import diagnosis_columns

# Episode fields that live in their own columns rather than in the JSON blob.
_COLUMN_FIELDS = {
    "id", "run_id", "env", "task_id", "group_id", "sample_index", "preset", "status", "reason", "reward",
    "parent_id", "fork_turn", "starred", "note", "created_at", "schema_version", "tags", "turns", "tokens",
}

FINDING_COLUMNS = ("episode_id", "turn", "kind", "severity", "token_start", "token_end", "message", "evidence")


@dataclass(slots=True)
class PackedEpisode:
    """The rows of one whole episode, as ``pack_episode`` makes them."""

    id: str
    run_id: str | None
    source: Source
    n_tokens: int
    row: dict[str, Any]
    """The ``episodes`` row."""
    turns: list[tuple[str, int, float | None, int, str | bytes]]
    """The ``turns`` rows: episode id, index, reward, done, ``codec.pack_turn``."""
    tokens: bytes
    """``codec.pack_tokens`` of the episode's arrays."""
    findings: list[tuple[Any, ...]]
    """The ``findings`` rows (``FINDING_COLUMNS``), the episode's then each turn's."""
    search: list[tuple[int, list[bytes]]]
    """Each search part (``index.search_texts``) and the digests of its texts."""
    bodies: dict[bytes, str]
    """Each digest's text, as stored (made safe for UTF-8)."""
    tags: tuple[str, ...]
    where: str = ""
    """The position of the record it was read from (a JSONL file's line): where an import says it could not be
    stored."""
    failed: str = ""
    """Why the episode could not be packed (``pack_episode(..., failed_ok=True)``): it is listed, not stored."""
    reread: Callable[[], Episode] | None = None
    """The episode again, whole (set where the record it was read from is at hand): what a re-import compares with
    the stored copy."""
    line_bytes: int = 0
    """The size of the record kept for ``reread``."""
    checked: bool = False
    """Whether a check ran on it (``Episode.checked``): an import counts those it stores unchecked."""
    edited_after_check: bool = False
    """Whether its record's checks were dropped as it was read, its arrays edited after them
    (``diagnosis.edited_after_check``)."""

    def episode(self) -> Episode:
        if self.reread is None:
            raise StoreError(f"episode {self.id} is stored already and its record cannot be read again to compare")
        return self.reread()


def held_bytes(item: Episode | PackedEpisode) -> int:
    """About the characters of text an episode holds (its tokens are counted apart): what bounds a batch's memory.
    A packed one holds its turns and texts as stored, and the record kept to read it again."""
    if isinstance(item, PackedEpisode):
        return sum(len(t[4]) for t in item.turns) + sum(map(len, item.bodies.values())) + item.line_bytes
    return sum(len(m.content) for m in item.messages) + sum(
        len(t.prompt_text or "") + (len(t.generation.text) if t.generation is not None else 0) for t in item.turns)


def episode_row(ep: Episode, pid: int) -> dict[str, Any]:
    """The ``episodes`` row of ``ep``; ``pid`` is the process writing it, kept for a running episode (whether it is
    still being written)."""
    bad = numbers.bad_rewards(ep)
    if bad:  # SQLite would keep a NaN as NULL, and nothing downstream reads it: refused, whoever sends it
        raise StoreError(f"episode {ep.id}: field {bad[0][0]!r} {numbers.not_finite(bad[0][1])}")
    d = ep.to_dict(include_tokens=False, include_turns=False)
    data = {k: v for k, v in d.items() if k not in _COLUMN_FIELDS}
    all_findings = ep.all_findings()
    diag, root_kinds = diagnosis_columns(all_findings)
    n_entropy, entropy_micronats, n_low_entropy = entropy_figures(ep.tokens.entropy)
    return {
        "id": ep.id,
        "run_id": ep.run_id,
        "env": ep.env,
        "task_id": ep.task_id,
        "group_id": ep.group_id,
        "sample_index": ep.sample_index,
        "preset": ep.preset,
        "model": ep.backend.label if ep.backend is not None else "",
        "status": ep.status.value,
        "reason": ep.reason,
        "reward": ep.reward,
        "n_turns": ep.n_turns,
        "n_tokens": ep.n_tokens,
        "n_trainable": ep.tokens.n_trainable,
        "prompt_len": ep.prompt_len,
        "created_at": ep.created_at,
        "updated_at": time.time(),
        "parent_id": ep.parent_id,
        "fork_turn": ep.fork_turn,
        "starred": int(ep.starred),
        "note": ep.note,
        "source": ep.source.kind,
        "n_findings": sum(1 for f in all_findings if f.severity.value != "info"),  # errors and warnings: what
        # ``check`` and ``show`` list by default; a note (what a check could not look at) is not one
        "n_errors": sum(1 for f in all_findings if f.severity.value == "error"),
        "diagnosis": diag,
        "root_kinds": root_kinds,
        "rollout_step": ep.source.rollout_step,
        "outcome": ep.outcome.kind if ep.outcome is not None else None,
        "n_entropy": n_entropy,
        "entropy_micronats": entropy_micronats,
        "n_low_entropy": n_low_entropy,
        "checked": ep.checked,
        "pid": pid if ep.status is Status.RUNNING else None,
        "schema_version": ep.schema_version,
        "data": codec.pack_json(data),
    }


def finding_rows(ep: Episode, turn: int | None = None) -> list[tuple[Any, ...]]:
    """The ``findings`` rows of ``ep`` (``FINDING_COLUMNS``), or of one of its turns."""
    found = ([(f, f.turn) for f in ep.findings] + [(f, t.index) for t in ep.turns for f in t.findings]
             if turn is None else [(f, turn) for f in ep.turns[turn].findings])
    return [(ep.id, t, f.kind, f.severity.value, f.token_start, f.token_end, f.message,
             json.dumps(f.evidence, default=str)) for f, t in found]


def turn_row(ep: Episode, turn: Turn, spans: bool) -> tuple[str, int, float | None, int, str | bytes]:
    """The ``turns`` row of ``turn`` in the compact form (``codec.pack_turn``). ``spans``: let the generation
    refer to the episode's arrays; only where those arrays are written with it, as final (a live episode's arrays may
    still be re-rendered by a later turn)."""
    k = turn.index - 1
    before = ep.turns[k] if 0 <= k < len(ep.turns) and ep.turns[k].index == k else None
    return (ep.id, turn.index, turn.reward, int(turn.done), codec.pack_turn(turn, ep.tokens if spans else None, before))


def pack_episode(ep: Episode, pid: int, failed_ok: bool = False) -> PackedEpisode:
    """Every row of a whole episode (``pid``: the process that writes it). An infinite logprob is stored unknown and
    marked (``marks.unknown_logprobs``). An episode that cannot be stored (a reward that is not a finite number)
    raises, or with ``failed_ok`` comes back empty, saying why in ``failed``."""
    try:
        marked = marks.unknown_logprobs(ep)
        parts = search_texts(marked)
        digest_of, bodies = text_digests(x for _, texts in parts for x in texts)
        return PackedEpisode(
            id=marked.id, run_id=marked.run_id, source=marked.source, n_tokens=marked.n_tokens,
            row=episode_row(marked, pid),
            turns=[turn_row(marked, t, spans=True) for t in marked.turns],
            tokens=codec.pack_tokens(marked.tokens),
            findings=finding_rows(marked),
            search=[(part, list(dict.fromkeys(digest_of[x] for x in texts if x in digest_of))) for part, texts in parts],
            bodies=bodies,
            tags=tuple(marked.tags),
            checked=marked.checked is not None,
            edited_after_check=edited_after_check(marked),
        )
    except Exception as e:  # noqa: BLE001 - said of this episode alone, as the store says it
        if not failed_ok or isinstance(e, MemoryError):  # out of memory is the process's, not the episode's
            raise
        return PackedEpisode(id=ep.id, run_id=ep.run_id, source=ep.source, n_tokens=ep.n_tokens, row={}, turns=[],
                             tokens=b"", findings=[], search=[], bodies={}, tags=(), failed=f"{type(e).__name__}: {e}")
