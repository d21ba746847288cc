"""The compact stored form (token arrays, turns) and the named migrations, on real SQLite files."""

from __future__ import annotations

import asyncio
import shutil
import sqlite3
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.errors import StoreError
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Generation, Turn
from engine.records.token_arrays import TokenArrays
from engine.store import DB_SCHEMA, EpisodeFilter, Store, codec, migrations

GOLDEN = Path(__file__).parent / "golden"


def _exact(a: TokenArrays, b: TokenArrays) -> bool:
    """Equal bit for bit (NaN where NaN), dtypes included."""
    return (a.ids.dtype == b.ids.dtype and a.logprobs.dtype == b.logprobs.dtype
            and a.ids.tobytes() == b.ids.tobytes() and a.loss_mask.tobytes() == b.loss_mask.tobytes()
            and a.versions.tobytes() == b.versions.tobytes()
            and np.array_equal(np.isnan(a.logprobs), np.isnan(b.logprobs))
            and a.logprobs[~np.isnan(a.logprobs)].tobytes() == b.logprobs[~np.isnan(b.logprobs)].tobytes())


CASES = {
    "empty": TokenArrays(),
    "one token": TokenArrays([7], [1], [-0.5], [3]),
    "all NaN": TokenArrays([1, 2, 3], [0, 0, 0]),
    "odd floats": TokenArrays([0, 151_643, 2**31 - 1, 5, 6, 7], [1, 0, 1, 1, 0, 1],
                              [-0.0, 0.0, -np.inf, 1e-45, -3.4e38, np.nan], [-1, -1, 0, 0, 2**31 - 1, -5]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_edge_arrays_round_trip_exactly(name):
    t = CASES[name]
    assert _exact(codec.unpack_tokens(codec.pack_tokens(t)), t)


def test_an_episode_shaped_array_round_trips_and_is_small():
    rng = np.random.default_rng(1)
    n = 8000
    mask = np.zeros(n, dtype=np.uint8)
    for a in range(300, n, 900):
        mask[a:a + 600] = 1  # generated turns between prompt, tool and user tokens
    lps = np.where(mask == 1, np.log(rng.random(n) * 0.99 + 0.01), np.nan).astype(np.float32)
    versions = np.where(mask == 1, np.repeat(np.arange(n // 1000), 1000)[:n], -1)
    t = TokenArrays(rng.integers(0, 151_000, n), mask, lps, versions)
    blob = codec.pack_tokens(t)
    assert _exact(codec.unpack_tokens(blob), t)
    trainable = int(mask.sum())
    # ids carry ~17 bits each; logprobs 4 bytes on trainable tokens; mask and versions next to nothing
    assert len(blob) < 2.4 * n + 3.8 * trainable, len(blob)


def test_a_damaged_blob_is_a_store_error_not_a_wrong_episode():
    blob = codec.pack_tokens(CASES["odd floats"])
    for bad in (blob[:10], b"XXXX" + blob[4:], blob[:-3], blob[:16] + b"\0" * (len(blob) - 16)):
        with pytest.raises(StoreError):
            codec.unpack_tokens(bad)


def test_generation_logprobs_are_float32_as_the_arrays_are():
    g = Generation("x", (1, 2, 3), (-0.1, None, -1e-9))  # a server's float64s; None for an unknown one
    assert g.logprobs[0] == float(np.float32(-0.1)) and np.isnan(g.logprobs[1])
    assert g == Generation.from_dict(g.to_dict())


def _math_episode(tok, mode: str, seed: int = 0):
    be = ScriptedBackend(MathEnv().reference_reply, tok, mistake_rate=0.5, seed=seed)
    cfg = PRESETS["areal-math"].with_(token_mode=mode)
    return asyncio.run(run_episode(MathEnv(), be, tok, cfg, MathEnv().tasks[seed], preset="areal-math"))


def test_turns_refer_to_the_arrays_only_where_they_hold_the_generation(tmp_path, smol_tokenizer):
    tito, retok = _math_episode(smol_tokenizer, "tito"), _math_episode(smol_tokenizer, "retokenize", 1)
    for ep in (tito, retok):
        turn = ep.turns[1]
        d = turn.to_dict()
        packed = codec.unpack_json(codec.pack_turn(turn, ep.tokens, ep.turns[0]))
        start = next(x.start for x in ep.turns[1].segments if x.kind == "assistant")
        n = len(ep.turns[1].generation.token_ids)
        if ep is tito:  # the generation is the arrays' span
            assert packed["generation"]["token_ids"] == {"$span": [start, start + n]}
            assert packed["generation"]["logprobs"] == {"$span": [start, start + n]}
        else:  # where the arrays hold re-encoded ids other than those generated, the turn keeps its own
            turn = replace(turn, generation=replace(turn.generation,
                                                    token_ids=tuple(i + 1 for i in turn.generation.token_ids)))
            d = turn.to_dict()
            packed = codec.unpack_json(codec.pack_turn(turn, ep.tokens, ep.turns[0]))
            assert packed["generation"]["token_ids"] == d["generation"]["token_ids"]
            assert packed["generation"]["logprobs"] == d["generation"]["logprobs"]
        assert codec.unpack_turn(codec.pack_turn(turn, ep.tokens, ep.turns[0]), ep.tokens,
                                 ep.turns[0].to_dict()) == d
    store = Store(tmp_path / "x.db")
    store.save_episodes([tito, retok])
    assert store.get_episode(tito.id) == tito and store.get_episode(retok.id) == retok
    store.close()


def test_a_prompt_that_extends_the_last_is_stored_as_pieces_and_an_older_row_reads_as_it_is():
    long = "<|im_start|>system\n" + "policy " * 40
    before = Turn(index=0, prompt_text=long, prompt_len=0, generation=Generation("reply " * 10))
    turn = Turn(index=1, prompt_text=long + "reply " * 10 + "more", prompt_len=0, generation=None)
    packed = codec.unpack_json(codec.pack_turn(turn, None, before))
    assert packed["prompt_text"] == {"$pieces": [[0, len(long) + 60], "more"]}
    assert codec.unpack_turn(codec.pack_turn(turn, None, before), TokenArrays(), before.to_dict()) == turn.to_dict()
    with pytest.raises(StoreError, match="previous turn has no prompt text"):
        codec.unpack_turn(codec.pack_turn(turn, None, before), TokenArrays(), None)
    # The form database schema 8 wrote: the length of the previous prompt kept, and the rest.
    old = codec.pack_json({**turn.to_dict(), "prompt_text": {"$extends": len(long), "rest": "reply " * 10 + "more"}})
    assert codec.unpack_turn(old, TokenArrays(), before.to_dict()) == turn.to_dict()
    with pytest.raises(StoreError, match="previous prompt"):
        codec.unpack_turn(old, TokenArrays(), None)


def test_a_live_episode_reads_the_same_turn_by_turn_and_finished(tmp_path, smol_tokenizer):
    store = Store(tmp_path / "live.db")
    ep = _math_episode(smol_tokenizer, "retokenize", 2)
    for k in range(ep.n_turns):  # as the runner stores it: each turn with the arrays as they stand
        now = ep.evolve(turns=ep.turns[: k + 1])
        store.save_turn(now, ep.turns[k])
    assert store.get_episode(ep.id).turns == ep.turns
    store.finish_episode(ep)
    assert store.get_episode(ep.id) == ep
    store.close()


# -- migrations --------------------------------------------------------------------


def test_every_migration_is_applied_once_and_recorded(tmp_path):
    store = Store(tmp_path / "new.db")
    assert store.applied == [m.name for m in migrations.MIGRATIONS]
    names = [n for n, _ in migrations.history(store.db)]
    assert names == [m.name for m in migrations.MIGRATIONS]
    store.close()
    again = Store(tmp_path / "new.db")
    assert again.applied == [] and again.db.execute("SELECT value FROM meta WHERE key='db_schema'").fetchone()[0] \
        == str(DB_SCHEMA)
    again.close()


@pytest.mark.parametrize("golden, first", [("dbschema2.sqlite", "0003_diagnosis"), ("dbschema3.sqlite", "0004_browse_index"),
                                           ("dbschema4.sqlite", "0007_rollout_steps"),
                                           ("dbschema5.sqlite", "0009_search_context"),
                                           ("dbschema6.sqlite", "0011_outcomes"),
                                           ("dbschema7.sqlite", "0012_episode_stats"),
                                           ("dbschema8.sqlite", "0013_run_time_index"),
                                           ("dbschema9.sqlite", "0014_prompt_pieces"),
                                           ("dbschema10.sqlite", "0015_summed_outcomes"),
                                           ("dbschema11.sqlite", "0016_entropy_stats"),
                                           ("dbschema12.sqlite", "0017_chart_stats"),
                                           ("dbschema13.sqlite", "0021_search_filled_by_writer"),
                                           ("dbschema14.sqlite", "0025_checked")])
def test_a_database_of_an_earlier_schema_gets_the_steps_it_lacks(tmp_path, golden, first):
    path = tmp_path / golden
    shutil.copy(GOLDEN / golden, path)
    before = sqlite3.connect(path)
    n = before.execute("SELECT COUNT(*) FROM episodes").fetchone()[0]
    packed = golden not in ("dbschema2.sqlite", "dbschema3.sqlite")
    raw = {r[0]: r[1:] for r in before.execute(
        f"SELECT episode_id, {'packed' if packed else 'ids, loss_mask, logprobs, versions'} FROM tokens")}
    before.close()
    store = Store(path)
    names = [m.name for m in migrations.MIGRATIONS]
    assert store.applied == names[names.index(first):]
    # The steps the file had are recorded as applied by the earlier version (before the table existed: no time).
    had_table = golden not in ("dbschema2.sqlite", "dbschema3.sqlite")
    assert [(n, t is None) for n, t in migrations.history(store.db)][: names.index(first)] == \
        [(n, not had_table or n < "0004") for n in names[: names.index(first)]]
    assert store.count() == n
    for eid, blobs in raw.items():  # rows written before keep their arrays as they were, and read as they are
        want = codec.unpack_tokens(blobs[0]) if packed else TokenArrays.from_blobs(*blobs)
        assert store.get_episode(eid).tokens == want
    store.close()


def test_a_failed_step_leaves_the_file_as_it_was_and_is_tried_again(tmp_path, monkeypatch):
    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN / "dbschema3.sqlite", path)

    def boom(db):
        db.execute("ALTER TABLE tokens ADD COLUMN packed BLOB")
        raise RuntimeError("disk pulled")

    steps = list(migrations.MIGRATIONS)
    k = next(i for i, m in enumerate(steps) if m.name == "0006_packed_tokens")
    steps[k] = migrations.Migration(steps[k].name, steps[k].schema, boom, steps[k].doc)
    monkeypatch.setattr(migrations, "MIGRATIONS", tuple(steps))
    with pytest.raises(RuntimeError, match="disk pulled"):
        Store(path)
    conn = sqlite3.connect(path)
    cols = {r[1] for r in conn.execute("PRAGMA table_info(tokens)")}
    done = {r[0] for r in conn.execute("SELECT name FROM migrations")}
    conn.close()
    assert "packed" not in cols  # rolled back with the step
    assert "0005_run_pids" in done and "0006_packed_tokens" not in done  # the steps before it stay done
    monkeypatch.undo()
    store = Store(path)
    assert store.applied == ["0006_packed_tokens", "0007_rollout_steps", "0008_watched_files", "0009_search_context",
                             "0010_finite_numbers", "0011_outcomes", "0012_episode_stats",
                             "0013_run_time_index", "0014_prompt_pieces", "0015_summed_outcomes",
                             "0016_entropy_stats", "0017_chart_stats", "0018_status_sort_indexes", "0019_listing_stats",
                             "0020_chart_totals", "0021_search_filled_by_writer", "0022_counts_at_commit",
                             "0023_episodes_found_by_the_browse_index", "0024_findings_counted_without_notes",
                             "0025_checked"]
    assert store.count() == 10
    store.close()


def _this_schema(tmp_path):
    """The latest golden database brought to this version's schema (opened once, writable)."""
    path = tmp_path / "now.sqlite"
    shutil.copy(GOLDEN / "dbschema6.sqlite", path)
    Store(path).close()
    return path


def test_a_database_of_this_schema_opens_with_nothing_to_apply(tmp_path):
    path = _this_schema(tmp_path)
    store = Store(path, read_only=True)  # nothing pending: a read-only copy opens
    assert store.count() == 10 and migrations.pending(store.db) == []
    store.close()
    store = Store(path)
    assert store.applied == []
    store.close()


def test_a_database_lacking_only_a_repair_opens_read_only_and_is_repaired_on_a_writable_open(tmp_path):
    path = _this_schema(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM migrations WHERE name = '0010_finite_numbers'")
    conn.close()
    store = Store(path, read_only=True)  # only a repair pending (it changes rows, not tables): a read-only copy opens
    assert store.count() == 10 and [m.name for m in migrations.pending(store.db)] == ["0010_finite_numbers"]
    store.close()
    store = Store(path)
    assert store.applied == ["0010_finite_numbers"] and store.repaired == []  # nothing in it to repair
    store.close()


def test_rollout_steps_are_filled_from_the_stored_sources_of_a_schema_4_file(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN / "dbschema4.sqlite", path)
    conn = sqlite3.connect(path)
    eid, data = conn.execute("SELECT id, data FROM episodes ORDER BY id LIMIT 1").fetchone()
    d = codec.unpack_json(data)
    d["source"] = {**d["source"], "kind": "slime", "details": {"rollout_id": 7, "rollout_step": 7}}
    with conn:
        conn.execute("UPDATE episodes SET source = 'slime', data = ? WHERE id = ?", [codec.pack_json(d), eid])
    conn.close()
    store = Store(path)
    assert "0007_rollout_steps" in store.applied
    assert store.db.execute("SELECT id, rollout_step FROM episodes WHERE rollout_step IS NOT NULL").fetchall() == [(eid, 7)]
    assert [s.id for s in store.list_episodes(EpisodeFilter(rollout_step=7))] == [eid]  # the browse index has it too
    ep = store.get_episode(eid)
    store.save_episode(ep.evolve(source=replace(ep.source, details={"rollout_step": 8})))  # the triggers copy it
    assert store.list_episodes(EpisodeFilter(rollout_step=8))[0].rollout_step == 8
    store.close()


def test_a_read_only_copy_of_an_older_file_names_the_steps_it_lacks(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN / "dbschema3.sqlite", path)
    with pytest.raises(StoreError, match="0004_browse_index, 0005_run_pids, 0006_packed_tokens"):
        Store(path, read_only=True)


def test_a_database_indexed_before_search_scopes_leaves_system_prompts_out_after_its_first_open(tmp_path):
    path = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN / "dbschema5.sqlite", path)
    store = Store(path)
    assert "0009_search_context" in store.applied
    [first, *_] = store.list_episodes(EpisodeFilter(env="retail"))
    phrase = next(m.content for m in store.get_episode(first.id).messages if m.role == "system")[:40]
    n_retail = store.count(EpisodeFilter(env="retail"))
    assert store.count(EpisodeFilter(text=phrase, env="retail")) == 0
    assert store.count(EpisodeFilter(text=phrase, env="retail", search_context=True)) == n_retail
    store.close()
