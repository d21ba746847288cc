"""Importers and exporters: the dumps training runs write, and the shapes trainers read.

Formats (each module's docstring says what was verified about the format
and every decision the conversion makes):

========== ====== ====== ==========================================================
name       import export what
========== ====== ====== ==========================================================
jsonl      yes    yes    Rollscope's own episode JSONL, lossless
slime      yes    yes    slime ``--save-debug-rollout-data`` / ``--dump-details`` ``.pt``
areal      yes    yes    AReaL trajectory dump JSONL in; per-turn packed sequences out
areal-realhf no   yes    realhf ``MathMultiTurnAgent`` SequenceSample fields, one line per episode
verl       yes    yes    verl ``AgentLoopOutput`` rows out and in (``verl_agent_loop``); ``rollout_data_dir`` JSONL in
messages   yes    yes    OpenAI chat JSONL with tools and tool calls (SFT)
taubench   yes    no     tau-bench's ``run.py`` results: a JSON list of ``{task_id, reward, info, traj, trial}``
parquet    yes    yes    one row per episode, token arrays as list columns, lossless
========== ====== ====== ==========================================================

:func:`import_path` streams a file or folder into a store: malformed
records are reported (file, position, field) and skipped, never fatal; only
an unreadable or unsafe file raises. Foreign records get deterministic ids,
so importing the same dump twice adds nothing; episodes already in the
store are left as they are, except for the lossless formats (``jsonl``,
``parquet``), whose records are the authority and replace the stored copy
where its content differs. Either way a stored episode keeps its star, note
and tags (a record's own tags are added). Numbers follow one policy
(``records.numbers``): a reward that is not finite refuses the record, a
logprob that is not is unknown and marked. :func:`export` writes atomically.
``watch`` follows a run's dump folder as it grows.

Imports every layer below it (the loop's rewards, the checks' fan-out, the
store); the launch layer and the front ends sit above.
"""

from __future__ import annotations

import functools
import sys
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from ..checks.diagnosis import edited_after_check
from ..envs.outcomes import explain
from ..errors import ConfigError, FormatError, StoreError
from ..presets import LoopConfig
from ..records import textsafe
from ..records.episode import Episode
from ..store.filter import EpisodeFilter
from ..store.packing import PackedEpisode
from ..store.writes import BATCH_EPISODES
from ..tokens.tokenizer import Tokenizer
from . import areal, jsonl, messages, parquet, slime, taubench, verl, verl_agent_loop
from .base import ImportContext, LineRange, atomic_path
from .limits import MAX_RECORD_MB, is_over_limit, record_limit
from .loadnotes import LoadNotes
from .reimport import dump_changes, said, said_digest

Importer = Callable[[Path, ImportContext], Iterator[Episode]]
Exporter = Callable[[Iterable[Episode], Path], int]
StreamWriter = Callable[[Iterable[Episode], IO[str]], int]


def _text(write_stream: StreamWriter) -> Exporter:
    def exporter(episodes: Iterable[Episode], out: Path) -> int:
        with out.open("w", encoding="utf-8") as f:
            return write_stream(episodes, f)

    exporter.__doc__ = write_stream.__doc__
    return exporter


IMPORTERS: dict[str, Importer] = {
    "jsonl": jsonl.import_episodes,
    "slime": slime.read,
    "areal": areal.read,
    "verl": verl.read,
    "messages": messages.read,
    "parquet": parquet.read,
    "taubench": taubench.read,
}
# Formats that can also go to stdout (``-o -``).
STREAM_WRITERS: dict[str, StreamWriter] = {
    "jsonl": jsonl.write,
    "areal": areal.write_stream,
    "areal-realhf": areal.write_realhf,
    "messages": messages.write_stream,
    "verl": verl_agent_loop.write_stream,
}
EXPORTERS: dict[str, Exporter] = {
    **{name: _text(w) for name, w in STREAM_WRITERS.items()},
    "slime": slime.write,
    "parquet": parquet.write,
}
LOSSLESS = frozenset({"jsonl", "parquet"})
# Formats of token ids alone: an episode without ids (chat messages imported without a tokenizer) has nothing in them.
ON_IDS = frozenset({"slime", "areal", "areal-realhf", "verl"})
# Formats whose rows may not say the loop's knobs they ran with (``import --set``/``--config`` give them).
KNOBBED = frozenset({"verl"})
# Formats whose records carry their own tokenizer name (or need none).
SELF_DESCRIBED = frozenset({"jsonl", "parquet"})


@dataclass
class ImportReport:
    """What an import did: counts, the records it skipped (with why) and notes for the user."""

    fmt: str
    new: int = 0
    already_present: int = 0
    replaced: int = 0
    """Of those already present, how many a lossless format's record changed (written again, annotations kept)."""
    repeated: int = 0
    """Records an earlier record of this import was, id and content: stored once."""
    clashed: int = 0
    """Records with an earlier record's id and other content: skipped (listed in ``errors``), the first stored."""
    differing: Counter[str] = field(default_factory=Counter)
    """Of a foreign format's records already present, how many say otherwise than the stored copy, by field
    (``reimport.dump_changes``): left as they were, or written over it with ``replace_changed``."""
    differ: int = 0
    """How many records ``differing`` counts."""
    errors: list[FormatError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    tokenizer: str = ""
    checked: int = 0
    tokenizer_errors: dict[str, str] = field(default_factory=dict)

    @property
    def skipped(self) -> int:
        return len(self.errors)

    @property
    def imported(self) -> int:
        return self.new + self.already_present

    @property
    def unchanged(self) -> int:
        return self.already_present - self.replaced

    def summary(self) -> str:
        if self.fmt in LOSSLESS and self.already_present:
            kept = (f"{self.replaced} replaced: their content changed; {self.unchanged} unchanged; stars, notes and "
                    "tags kept")
        elif self.replaced:
            kept = (f"{self.replaced} replaced: the dump says otherwise in {self.fields()}; "
                    f"{self.already_present - self.replaced} left as they were; stars, notes and tags kept")
        elif self.differ:
            kept = (f"left as they were, though {self.differ} of them differ{'s' if self.differ == 1 else ''} from "
                    f"the dump in {self.fields()}: "
                    "--replace writes the dump's over them, stars, notes and tags kept")
        else:
            kept = "left as they were"
        over = sum(map(is_over_limit, self.errors))
        bad = self.skipped - over - self.clashed
        return (f"imported {self.new} new, {self.already_present} already present ({kept}), "
                f"{bad} malformed record{'' if bad == 1 else 's'} skipped"
                + (f", {over} over the record limit skipped" if over else "")
                + (f", {self.repeated} repeating an earlier record of this import whole (stored once)"
                   if self.repeated else "")
                + (f", {self.clashed} with an earlier record's id and other content skipped" if self.clashed else ""))

    def fields(self) -> str:
        """The fields ``differing`` counts, most first: ``reward (3), loss mask (1)``."""
        return ", ".join(f"{name} ({n})" for name, n in self.differing.most_common())


def _resolve_tokenizer(tokenizer: Tokenizer | str | None) -> tuple[Tokenizer | None, str]:
    if tokenizer is None:
        return None, ""
    if isinstance(tokenizer, str):
        from ..backends.tokenizers import load_tokenizer

        return load_tokenizer(tokenizer), tokenizer
    return tokenizer, str(getattr(tokenizer, "name_or_path", "") or "")


def check_knobbed(fmt: str, loop: LoopConfig | None) -> None:
    """ConfigError unless ``loop`` (``import --set``/``--config``) can be the knobs of ``fmt``'s rows."""
    if loop is not None and fmt not in KNOBBED:
        raise ConfigError(f"--set and --config give the knobs of verl's loop to --format verl rows, which do not "
                          f"record them; {fmt} records say what they ran with")
    if loop is not None and loop.token_mode != "verl":
        raise ConfigError(f"the knobs are token_mode={loop.token_mode}'s, but verl's AgentLoopOutput rows come from "
                          "verl's loop: give --set knobs of the verl-tool preset, or a --config with base verl-tool")


def import_path(
    path: str | Path, fmt: str, store: Any, *, tokenizer: Tokenizer | str | None = None, progress: bool = False, env: str | None = None,
    run_id: str | None = None, check: bool = False, fanout: Any = None, lines: LineRange | None = None,
    max_record_mb: float = MAX_RECORD_MB, loop: LoopConfig | None = None, batch: int = BATCH_EPISODES,
    replace_changed: bool = False, reward_key: str = "",
) -> ImportReport:
    """Import a file or folder in format ``fmt`` into ``store``.

    ``tokenizer`` is a loaded tokenizer or a folder / hub id (``--tokenizer``);
    it lets foreign dumps be tokenized and checked. ``env`` names the env the records ran in when they
    do not (``taubench:retail``; a messages record's own ``env`` comes first). ``run_id`` puts the new
    episodes in that run (with the rollout step each dump names: the run view's points). ``check`` runs
    the fidelity checks on each new episode before it is stored, on ``fanout``'s workers (an
    ``engine.checks.fanout.Fanout``; default: this process); without ``check``, a JSONL file is read on ``fanout``'s
    worker processes, each line parsed and packed into the rows the store writes (``jsonl.packed_episodes``), when it
    has more than one and the file is worth it (``jsonl.WORKERS_FROM_BYTES``). ``lines`` reads only part of a JSONL file (``watch``
    on a growing file). ``max_record_mb`` is the largest record read (a line, a sample, a row): a larger one is
    skipped and listed, read no further than the format allows. ``loop`` is the knobs verl's loop ran with
    (``--set``/``--config``), recorded on each ``verl`` row that does not carry its own; the verl checks read them.
    ``reward_key`` names the score of a reward model's dict that is the reward (``base.reward_value``).
    Malformed records are skipped and listed in the report; a missing, unreadable or
    unsafe file (a pickle that would run code) raises ``FormatError``; what was read before it is stored.
    Episodes are written a batch per transaction (``batch`` at most), each in a
    savepoint of its own: one that cannot be stored is listed, the rest kept. A foreign record of an episode
    stored already is left as it was; where it says otherwise (``reimport.dump_changes``: a re-scored dump) the
    report counts it, and ``replace_changed`` (``--replace``) writes it over the stored copy, annotations kept. A
    record whose id an earlier record of this import had is stored once (``repeated``), or skipped and listed when
    it says otherwise (``clashed``).
    """
    if fmt not in IMPORTERS:
        raise ConfigError(f"unknown import format {fmt!r}; one of {', '.join(IMPORTERS)}")
    p = Path(path)
    if not p.exists():
        raise FormatError("no such file", str(p))
    check_knobbed(fmt, loop)
    max_record = record_limit(max_record_mb)
    tok, name = _resolve_tokenizer(tokenizer)
    report = ImportReport(fmt)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=0, unit="rec", desc=f"import {fmt}", dynamic_ncols=True, file=sys.stderr)
    if env:
        from ..envs import ENVS

        if env not in ENVS:
            raise ConfigError(f"unknown env {env!r}; choose one of: {', '.join(ENVS)}")
    ctx = ImportContext(
        fmt, tok, name, env=env or "", errors=report.errors, notes=report.notes, files=report.files,
        on_progress=bar.update if bar is not None else None,
        on_total=(lambda n: setattr(bar, "total", (bar.total or 0) + n)) if bar is not None else None,
        lines=lines, max_record=max_record, loop=loop, reward_key=reward_key,
        # Chat records' ids were their lines before, slime samples of Rollscope's export their dump's, and tau-bench
        # tasks that raised those of empty conversations: looked up only where such episodes may be (a query a record).
        known=store.has_episode if fmt in ("messages", "slime", "taubench")
        and store.count_upto(EpisodeFilter(source=fmt), 1).n
        else None,
    )
    lossless = fmt in LOSSLESS
    replace = lossless or replace_changed
    stored: dict[str, tuple[list[int], set[str]]] = {}  # per file: [new, already there], their runs
    own_runs: Counter[str] = Counter()  # with ``run_id``: the episodes that name a run of their own, by run
    unchecked = 0  # new episodes no check ran on (a record read whole says whether one did)
    edited = 0  # of them, those whose record's checks were of other arrays (edited after the check)

    def count(ep: Episode | PackedEpisode, present: bool) -> None:
        # By the file it was read from: a packed episode's line names it, where its record may name another.
        file = ep.where.rsplit(":", 1)[0] if isinstance(ep, PackedEpisode) and ep.where else str(ep.source.file)
        counts, runs = stored.setdefault(file, ([0, 0], set()))
        counts[int(present)] += 1
        runs.add(ep.run_id or "")
        if run_id and ep.run_id != run_id:
            own_runs[ep.run_id or ""] += 1

    read_at: dict[str, list[str]] = {}  # where each record of an id is, in order, where its source does not say it

    def tick() -> None:
        if bar is not None:
            bar.update(1)

    def _again(ep: Episode, same: bool) -> None:
        """A record of an id an earlier record of this import had: stored once, or listed when it says otherwise."""
        if same:
            report.repeated += 1
            return
        report.clashed += 1
        ctx.skip(FormatError(f"episode {ep.id} again, with other content: an earlier record of this import has its id, "
                             "and is the one compared with the stored copy", ctx.at or str(ep.source.file or p)))

    mark = store.write_mark()  # what was stored before this import: a record of an id it wrote is one again
    first_said: dict[int, str] = {}  # of the ids stored before it, what the first record of each said (a digest)

    def new_ones() -> Iterator[Episode]:
        for ep in IMPORTERS[fmt](p, ctx):
            if run_id and not ep.run_id:
                ep = ep.evolve(run_id=run_id)
            if not lossless and store.stored_before(ep.id, mark):
                says, key = said_digest(ep), hash(ep.id)
                if key in first_said:  # this import's second record of an episode stored before it
                    _again(ep, first_said[key] == says)
                    tick()
                    continue
                first_said[key] = says
                changed = _changes(store, ep, own_ids=fmt == "slime")
                report.differ += bool(changed)
                report.differing.update(changed)
                if not (changed and replace_changed):
                    report.already_present += 1  # left as it is: not checked or written again
                    count(ep, True)
                    tick()
                    continue
            if not lossless and ep.outcome is None:  # a lossless record carries its own (read_episode fills old ones)
                ep = ep.evolve(outcome=explain(ep))
            if ctx.at and ep.source.file != ctx.at.rsplit(":", 1)[0]:
                read_at.setdefault(ep.id, []).append(ctx.at)
            yield ep

    episodes: Iterator[Episode] | Iterator[PackedEpisode]
    own = check and fanout is None  # a fan-out made here is closed here
    if check:
        from ..checks.fanout import Fanout, check_episodes

        fanout = fanout or Fanout(1)
        episodes = check_episodes(fanout, new_ones(), errors=report.tokenizer_errors)
    elif fmt == "jsonl":  # parsed and packed on the workers, when there are any and the file is worth it
        from ..checks.fanout import Fanout

        workers = fanout is not None and not fanout.inline and fanout.ray_address is None and lines is None and \
            jsonl.worth_workers(p)
        episodes = jsonl.packed_episodes(p, ctx, fanout if workers else Fanout(1), run_id)
    else:
        episodes = new_ones()
    try:
        for ep, state, error in store.save_batches(episodes, batch=batch, replace=replace, once=True,
                                                   same=None if lossless else _says_the_same):
            at = {ep.id: _first(read_at, ep.id)} if ep.id in read_at else {}  # held until its batch is written
            if error is not None:  # a bug in storing this one record: list it, import the rest
                ctx.skip(FormatError(textsafe.clean_text(f"could not be stored: {error}"), _where(ep, at)))
                continue
            if bar is not None:
                bar.update(1)
            if state == "repeated":
                report.repeated += 1
                continue
            if state == "clashed":
                report.clashed += 1
                ctx.skip(FormatError(
                    f"episode {ep.id} again, with other content: an earlier record of this import has its id, and is "
                    "the one stored" + ("; to store this one instead, import a file that holds it alone"
                                        if lossless else ""), _where(ep, at)))
                continue
            count(ep, state != "new")
            report.new += state == "new"
            report.already_present += state != "new"
            report.replaced += state == "replaced"
            if state in ("new", "replaced"):  # written from this record: checked as it says
                unchecked += not (ep.checked if isinstance(ep, PackedEpisode) else ep.checked is not None)
                edited += ep.edited_after_check if isinstance(ep, PackedEpisode) else edited_after_check(ep)
            report.checked += int(check)
    except FormatError as e:  # a file refused part way: say what of it is stored already, and where
        raise _stored_before(e, stored, store) from None
    finally:
        if bar is not None:
            bar.close()
        if own:
            fanout.close()
    if not (report.new or report.already_present or report.errors):
        report.notes.append(f"{p} holds no records: nothing imported")
    if unchecked:  # no findings listed for them yet, which reads as clean
        written = "new" if not report.replaced else "replaced" if not report.new else "new or replaced"
        report.notes.append(f"{unchecked:,} {written} episode{'s' if unchecked != 1 else ''} not checked: `rollscope check "
                            f"{store.path}` runs the fidelity checks (until then `ls` and Browse say \"not checked\" where the "
                            "findings go; --check checks as it imports)"
                            + (f"; {edited:,} of them held findings of other token arrays (changed after their "
                               "check): those findings were dropped" if edited else ""))
    if own_runs:
        n = sum(own_runs.values())
        report.notes.append(f"--run {run_id}: {n:,} episode{'s' if n != 1 else ''} name{'s' if n == 1 else ''} a run "
                            f"of {'its' if n == 1 else 'their'} own and kept it ({_few(sorted(own_runs))}); "
                            "--run puts in its run the episodes that name none, as a trainer's dump does")
    report.tokenizer = ctx.tokenizer_name
    if ctx.tokenizer is None and fmt not in SELF_DESCRIBED and not ctx.self_described and not any("tokenizer" in n for n in report.notes):
        report.notes.append("no tokenizer given (--tokenizer PATH_OR_ID): tokens are shown as ids and "
                            "token-level checks are skipped")
    return report


def _says_the_same(read: Episode, first: Episode) -> bool:
    """Whether a foreign record says what the first of its id in this import said (where it was read and when do
    not count)."""
    return not dump_changes(said(read), said(first))


def _changes(store: Any, ep: Episode, own_ids: bool) -> tuple[str, ...]:
    """Where a foreign record says otherwise than its stored copy (``reimport.dump_changes``); a stored copy that
    cannot be read differs (``--replace`` writes the record over it)."""
    try:
        return dump_changes(said(ep), store.ending_and_tokens(ep.id), own_ids)
    except StoreError:
        return ("the stored copy, which cannot be read",)


def _first(read_at: dict[str, list[str]], eid: str) -> str:
    """The first of ``eid``'s places, taken off the list (the list too when it was the last)."""
    places = read_at[eid]
    if len(places) == 1:
        del read_at[eid]
    return places.pop(0)


def _where(ep: Episode | PackedEpisode, read_at: dict[str, str]) -> str:
    """The file and line an episode was read from (``read_at``: by id, where its source names another)."""
    if isinstance(ep, PackedEpisode) and ep.where:
        return ep.where
    if ep.id in read_at:
        return read_at[ep.id]
    return f"{ep.source.file}:{ep.source.line}" if ep.source.line is not None else str(ep.source.file or "")


def _few(names: list[str], most: int = 4) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def _stored_before(e: FormatError, stored: dict[str, tuple[list[int], set[str]]], store: Any) -> FormatError:
    """``e`` saying how many episodes of its file were stored before it, and in which run (the same class, so an
    unsafe file stays an ``UnsafeFileError``)."""
    mine = [v for f, v in stored.items() if f and e.where.startswith(f)]
    new, present = (sum(counts[k] for counts, _ in mine) for k in (0, 1))
    if not new and not present:
        return e
    runs = sorted(set().union(*(r for _, r in mine)))
    named = [r for r in runs if r]
    where = (f"in run{'s' if len(named) > 1 else ''} {', '.join(named)}" if named else "") + (
        f"{' and ' if named else ''}in no run (import with --run NAME to put them in one)" if "" in runs else "")
    total = new + present
    said = (f"{e.detail}; {total} episode{'s' if total != 1 else ''} read from this file before that "
            f"{'are' if total != 1 else 'is'} stored in {getattr(store, 'path', 'the database')}, {where} "
            f"({new} new, {present} already there)")
    return type(e)(said, e.where, e.field)


def left_out(fmt: str, n: int) -> str:
    """The line an export in ``fmt`` says of what it left out of ``n`` episodes: their per-token entropy and top K,
    which only the lossless formats carry."""
    return (f"{fmt}: left out the per-token entropy and top-K alternatives of {n} episode{'s' if n != 1 else ''} "
            f"(the format has no place for them; jsonl and parquet keep them)")


def no_ids(fmt: str, n: int) -> str:
    """The line an export in ``fmt`` (a format of token ids) says of the ``n`` episodes it left out for holding none."""
    return (f"{fmt}: left out {n} episode{'s' if n != 1 else ''} that hold{'s' if n == 1 else ''} no token ids "
            f"(imported from chat messages without --tokenizer): {fmt} is token ids a trainer loads; `rollscope "
            "import --format messages --tokenizer NAME` tokenizes them, and jsonl and messages export them as they are")


def export(episodes: Iterable[Episode], fmt: str, out_path: str | Path, notes: list[str] | None = None,
           full_prompts: bool = False) -> int:
    """Write episodes in format ``fmt`` to ``out_path`` (``-``: stdout, text formats only).

    The file appears under its name only when complete: it is written to
    ``OUT.part`` and renamed. Returns the number of episodes written. A format that cannot carry what some
    episodes hold (their entropy and top K) adds one line saying so to ``notes``.
    ``full_prompts``: JSONL gives every turn's prompt text whole, not as pieces of the turn before.
    """
    if fmt not in LOSSLESS:
        dropped, idless = [0], [0]
        loading = LoadNotes(fmt)

        def counted(eps: Iterable[Episode]) -> Iterator[Episode]:
            for ep in eps:
                if fmt in ON_IDS and not ep.n_tokens:  # nothing a trainer of ids could load: left out, and said
                    idless[0] += 1
                    continue
                dropped[0] += ep.tokens.has_alternatives
                loading.see(ep)
                yield ep

        n = _export(counted(episodes), fmt, out_path, full_prompts)
        if notes is not None:
            notes += ([left_out(fmt, dropped[0])] if dropped[0] else []) + ([no_ids(fmt, idless[0])] if idless[0] else [])
            notes += loading.notes()
        return n
    return _export(episodes, fmt, out_path, full_prompts)


def _export(episodes: Iterable[Episode], fmt: str, out_path: str | Path, full_prompts: bool) -> int:
    if fmt not in EXPORTERS:
        raise ConfigError(f"unknown export format {fmt!r}; one of {', '.join(EXPORTERS)}")
    stream = STREAM_WRITERS.get(fmt)
    exporter = EXPORTERS[fmt]
    if full_prompts and fmt == "jsonl":
        stream = functools.partial(jsonl.write, full_prompts=True)
        exporter = _text(stream)
    if str(out_path) == "-":
        if stream is None:
            raise ConfigError(f"{fmt} is a binary format; give an output file with -o")
        return stream(episodes, sys.stdout)
    out = Path(out_path)
    if out.is_dir():
        raise ConfigError(f"{out} is a folder; give an output file name")
    if not out.parent.is_dir():
        raise ConfigError(f"no folder {out.parent}: create it first, or give -o a file in a folder that exists")
    with atomic_path(out) as tmp:
        n = exporter(episodes, tmp)
    return n


__all__ = [
    "EXPORTERS", "IMPORTERS", "LOSSLESS", "MAX_RECORD_MB", "STREAM_WRITERS", "Exporter", "ImportContext", "ImportReport", "Importer",
    "LineRange", "ON_IDS",
    "export", "import_path", "left_out", "no_ids",
]
