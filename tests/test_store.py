"""The SQLite store, on real files in tmp dirs."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.errors import ConfigError, StoreError
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Status
from engine.store import EpisodeFilter, Store
from tests.toolenv import PriceEnv


@pytest.fixture(scope="module")
def episodes(smol_tokenizer):
    out = []
    env = MathEnv()
    for i, mode in enumerate(["tito", "retokenize"]):
        be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.5, seed=i)
        for task in env.tasks[:3]:
            cfg = PRESETS["areal-math"].with_(token_mode=mode)
            out.append(asyncio.run(run_episode(MathEnv(), be, smol_tokenizer, cfg, task, preset="areal-math")))
    be = ScriptedBackend(PriceEnv().reference_reply, smol_tokenizer)
    out.append(asyncio.run(run_episode(PriceEnv(fail_on="kiwi"), be, smol_tokenizer, PRESETS["tito"], "kiwi", preset="tito")))
    return out


def test_round_trip_is_exact(tmp_path, episodes):
    db = tmp_path / "r.db"
    store = Store(db)
    for ep in episodes:
        store.save_episode(ep)
    store.close()
    again = Store(db)
    for ep in episodes:
        back = again.get_episode(ep.id)
        assert back == ep
        assert back.tokens.ids.dtype.name == "int32" and back.tokens.loss_mask.dtype.name == "uint8"
    # WAL mode; the token arrays packed in one compressed blob, the turns compressed and referring to them
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    raw, packed = conn.execute("SELECT ids, packed FROM tokens WHERE episode_id = ?", [episodes[0].id]).fetchone()
    assert raw is None and packed[:4] == b"RSTK" and len(packed) < 4 * len(episodes[0].tokens)
    import json

    import zstandard

    turn = json.loads(zstandard.ZstdDecompressor().decompress(
        conn.execute("SELECT data FROM turns WHERE episode_id = ? AND idx = 0", [episodes[0].id]).fetchone()[0]))
    assert "$span" in turn["generation"]["token_ids"]  # tito: the generation is the episode's span


def test_filters_sort_and_page(tmp_path, episodes):
    store = Store(tmp_path / "f.db")
    for ep in episodes:
        store.save_episode(ep)
    assert store.count() == len(episodes)
    aborted = store.list_episodes(EpisodeFilter(status=("aborted",)))
    assert [e.id for e in aborted] == [episodes[-1].id]
    assert store.count(EpisodeFilter(env="math")) == 6
    hi = store.list_episodes(order_by="reward", descending=True, limit=2)
    assert hi[0].reward >= hi[1].reward
    page2 = store.list_episodes(order_by="reward", descending=True, limit=2, offset=2)
    assert not {e.id for e in hi} & {e.id for e in page2}
    assert store.count(EpisodeFilter(finding_kind="env_error")) == 1
    assert store.count(EpisodeFilter.from_where(["status=completed", "env=math"])) == 6
    assert store.count(EpisodeFilter(text="database is down")) == 1
    store.set_tags(episodes[0].id, ["keep", "bug"])
    store.set_starred(episodes[0].id, True)
    store.set_note(episodes[0].id, "look at turn 2")
    assert store.count(EpisodeFilter(tags=("keep",))) == 1
    back = store.get_episode(episodes[0].id)
    assert back.tags == ("bug", "keep") and back.starred and back.note == "look at turn 2"
    with pytest.raises(ConfigError):
        store.list_episodes(order_by="reward; DROP TABLE episodes")
    with pytest.raises(ConfigError):
        EpisodeFilter.from_where(["colour=red"])
    assert store.count(EpisodeFilter.from_where(["starred=yes"])) == 1
    assert store.count(EpisodeFilter.from_where(["starred=False"])) == len(episodes) - 1
    # Every clause must hold, repeated keys too: tags add up, lists are met by both, bounds narrow, and one value
    # given twice differently is refused, not the last one kept.
    where = EpisodeFilter.from_where
    assert where(["tag=keep", "tag=bug"]) == EpisodeFilter(tags=("keep", "bug"))
    assert store.count(where(["tag=keep", "tag=bug"])) == 1 and store.count(where(["tag=keep", "tag=nope"])) == 0
    assert where(["status=completed,truncated", "status=truncated,aborted"]) == EpisodeFilter(status=("truncated",))
    assert where(["reward>=0.2", "reward>=0.5", "reward<=0.9", "reward<=2"]) == EpisodeFilter(reward_min=0.5,
                                                                                          reward_max=0.9)
    assert where(["env=math", "env=math"]) == EpisodeFilter(env="math")
    for clauses, said in ((["env=math", "env=retail"], r"env is given twice \('math' before\)"),
                          (["status=completed", "status=aborted"], "no status is in both")):
        with pytest.raises(ConfigError, match=said):
            where(clauses)
    with pytest.raises(ConfigError, match="starred is true or false .*not 'maybe'"):  # not read as false
        EpisodeFilter.from_where(["starred=maybe"])
    # No value, or a bound that is no finite number, is refused: it matched every episode (env=, text=) or none
    # (tag=, reward>=nan) without a word.
    for clause in ("starred=", "env=", "text=", "tag=", "reward>="):
        with pytest.raises(ConfigError, match="no value after"):
            EpisodeFilter.from_where([clause])
    for clause in ("reward>=nan", "reward<=inf", "reward=-Infinity"):
        with pytest.raises(ConfigError, match="a reward bound is a finite number"):
            EpisodeFilter.from_where([clause])
    # A finding kind misspelt is refused, not read as "no such episode".
    assert store.count(EpisodeFilter.from_where(["finding=env_error"])) == 1
    assert store.count(EpisodeFilter.from_where(["root=env_error"])) == 1
    for clause, near in (("finding=env_err", " (did you mean env_error?)"), ("root=bogus", "")):
        with pytest.raises(ConfigError) as e:
            EpisodeFilter.from_where([clause])
        assert str(e.value).startswith(f"--where {clause.split('=')[0]}: unknown finding kind {clause.split('=')[1]!r}"
                                       f"{near}; one of answer_extraction_failed, ")


def test_per_turn_commit_and_interrupted_recovery(tmp_path, smol_tokenizer):
    """A process killed mid-episode leaves its finished turns; reopening marks it interrupted."""
    db = tmp_path / "crash.db"
    script = f"""
import asyncio, os, sys
sys.path.insert(0, {str(os.getcwd())!r})
from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.backends.tokenizers import load_tokenizer
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.store import Store
store = Store({str(db)!r})
tok = load_tokenizer(None)
def hook(ep, turn):
    store.save_turn(ep, turn)
    if turn.index == 2:
        os._exit(9)   # die like a killed process, mid-episode
env = MathEnv()
asyncio.run(run_episode(env, ScriptedBackend(MathEnv().reference_reply, tok, 0.5), tok, PRESETS["areal-math"], env.tasks[0], on_turn=hook))
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 9, proc.stderr
    store = Store(db)
    [row] = store.list_episodes()
    assert row.status == "interrupted" and row.n_turns == 3
    ep = store.get_episode(row.id)
    assert ep.status is Status.INTERRUPTED and len(ep.turns) == 3
    assert len(ep.tokens) > ep.prompt_len


def test_running_episode_of_live_process_is_left_alone(tmp_path, episodes):
    store = Store(tmp_path / "live.db")
    running = episodes[0].evolve(status=Status.RUNNING)
    store.save_turn(running, running.turns[0])
    assert Store(tmp_path / "live.db").get_episode(running.id).status is Status.RUNNING


def test_unreadable_databases(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreError, match="cannot open"):
        Store(junk)
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE foo (x)")
    with pytest.raises(StoreError, match="not a Rollscope database"):
        Store(other)
    with pytest.raises(StoreError, match="does not exist"):
        Store(tmp_path / "missing.db", create=False)
    with pytest.raises(StoreError, match="no episode"):
        Store(tmp_path / "empty.db").get_episode("nope")


def test_family_filter_lists_an_episode_with_its_forks(tmp_path, episodes):
    store = Store(tmp_path / "fam.db")
    parent = episodes[0]
    store.save_episode(parent)
    for i, other in enumerate(episodes[1:3]):
        store.save_episode(other.evolve(id=f"fork{i}", parent_id=parent.id, fork_turn=i + 1))
    store.save_episode(episodes[3])
    ids = {e.id for e in store.list_episodes(EpisodeFilter.from_where([f"family={parent.id}"]))}
    assert ids == {parent.id, "fork0", "fork1"}
    # The CLI takes a unique prefix, as id= and show do; one that matches nothing, or two, is refused.
    from engine.cli.common import where

    assert {e.id for e in store.list_episodes(where(store, [f"family={parent.id[:6]}"]))} == ids
    with pytest.raises(StoreError, match="no episode 'zzzz'"):
        where(store, ["family=zzzz"])
    with pytest.raises(StoreError, match="fork"):
        where(store, ["family=fork"])
