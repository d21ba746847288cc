"""A fork of an imported episode, whose record holds no loop settings, runs under a turn limit its conversation
fits in (its env's usual preset's, or the parent's own turns), and says so: the loop's default of 5 turns ended a
fork of a longer retail conversation as truncated, reward 0, with a perfect policy."""

from __future__ import annotations

import asyncio

from engine import formats
from engine.backends.scripted import ScriptedBackend
from engine.checks import CheckOptions, with_checks
from engine.cli import main
from engine.envs.retail import RetailEnv
from engine.loop.fork import parent_loop
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Severity, Status
from engine.store import Store


def test_a_fork_of_an_imported_conversation_is_not_cut_by_the_loops_default_turn_limit(tmp_path, smol_tokenizer, capsys):
    env = RetailEnv()
    ep = asyncio.run(run_episode(env, ScriptedBackend(env.reference_reply, smol_tokenizer), smol_tokenizer,
                                 PRESETS["slime-tau"], env.tasks[0], preset="slime-tau", tokenizer_name="smollm2"))
    assert ep.status is Status.COMPLETED and ep.reward == 1.0 and ep.n_turns > 5
    path = tmp_path / "chat.jsonl"
    formats.export([ep], "messages", path)
    db = tmp_path / "r.db"
    store = Store(db)
    formats.import_path(path, "messages", store, tokenizer=smol_tokenizer, env="retail")
    (parent,) = store.iter_episodes()
    store.close()
    assert parent.config.loop is None and parent_loop(parent).max_turns == PRESETS["slime-tau"].max_turns

    code = main(["fork", parent.id, "--turn", "2", "--samples", "1", "--mistake-rate", "0", "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "holds no loop settings" in out and f"max_turns={PRESETS['slime-tau'].max_turns}" in out
    store = Store(db)
    (fork,) = [e for e in store.iter_episodes() if e.parent_id == parent.id]
    store.close()
    assert fork.status is Status.COMPLETED and fork.reward == 1.0 and fork.n_turns > 5, (fork.status, fork.reason)
    # the replayed replies carry no logprobs, as their record held none: said, not an error of the fork's data
    found = with_checks(fork, CheckOptions(tokenizer=smol_tokenizer)).all_findings()
    missing = [f for f in found if f.kind == "logprobs_missing"]
    assert [f.severity for f in missing] == [Severity.INFO], [(f.kind, f.severity, f.message) for f in found]
    assert "replayed from an imported record that holds none" in missing[0].message
    assert not [f for f in found if f.severity is Severity.ERROR], [(f.kind, f.message) for f in found]

    # The same command again samples the next seeds: new forks, not the stored ones over again
    code = main(["fork", parent.id, "--turn", "2", "--samples", "2", "--mistake-rate", "0.5", "--db", str(db)])
    out = capsys.readouterr().out
    assert code == 0 and "1 seed of --seed 0 already sampled the forks stored at this turn" in out, out
    store = Store(db)
    forks = [e for e in store.iter_episodes() if e.parent_id == parent.id]
    store.close()
    seeds = [e.config.sampling.seed for e in forks]
    assert len(forks) == 3 and len(set(seeds)) == 3, seeds
