"""``export --format areal`` writes an episode of AReaL's MultiTurnWorkflow as the one sequence its
``_run_one_episode`` returns (every id, each reply trained, the episode's reward), not a row per turn, and such a
row reads back as that episode; an episode of another loop is still a row per turn."""

from __future__ import annotations

import asyncio
import json

import numpy as np

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.formats import export, import_path
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.store import Store


def _run(tok, preset, seed):
    env = MathEnv()
    backend = ScriptedBackend(env.reference_reply, tok, mistake_rate=1.0, seed=seed)
    return asyncio.run(run_episode(env, backend, tok, PRESETS[preset], env.tasks[seed], preset=preset,
                                   tokenizer_name="smollm2"))


def test_a_multiturn_workflow_episode_is_one_row_and_reads_back_whole(tmp_path, smol_tokenizer):
    workflow, per_turn = _run(smol_tokenizer, "areal-multiturn", 1), _run(smol_tokenizer, "areal-math", 2)
    assert workflow.n_turns == 2 and per_turn.n_turns > 1
    out = tmp_path / "rows.jsonl"
    assert export([workflow, per_turn], "areal", out) == 2
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    mine = [r for r in rows if r["episode_id"] == workflow.id]
    assert len(mine) == 1 and len(rows) == 1 + per_turn.n_turns
    (row,) = mine
    t = workflow.tokens
    assert row["input_ids"] == t.ids.tolist() and row["loss_mask"] == t.loss_mask.tolist()
    assert row["rewards"] == workflow.reward and len(row["logprobs"]) == len(row["input_ids"])
    assert all(x == 0.0 for x, m in zip(row["logprobs"], row["loss_mask"]) if m == 0)
    assert np.count_nonzero(np.diff(np.asarray(row["loss_mask"])) == 1) == 2  # both replies trained, in one row
    st = Store(tmp_path / "back.db")
    report = import_path(out, "areal", st)
    back = [e for e in st.iter_episodes() if e.source.details.get("episode_id") == workflow.id]
    st.close()
    assert report.new == 1 + per_turn.n_turns and len(back) == 1
    (ep,) = back
    assert ep.tokens.ids.tolist() == t.ids.tolist() and ep.tokens.loss_mask.tolist() == t.loss_mask.tolist()
    assert ep.n_turns == 2 and ep.reward == workflow.reward
    assert [x.generation.finish_reason for x in ep.turns] == [x.generation.finish_reason for x in workflow.turns]
    # what the row wrote 0.0 on (nothing trained there) reads back unknown, as it was
    assert np.array_equal(ep.tokens.logprobs, t.logprobs, equal_nan=True)
    # exported again, it is one row again
    again = tmp_path / "again.jsonl"
    export([ep], "areal", again)
    assert len(again.read_text(encoding="utf-8").splitlines()) == 1


def test_realhf_gives_one_reward_a_sequence(smol_tokenizer):
    """A last reply that never reached the tokens (slime returns before adding a reply that ends the episode on a
    parse error; verl cuts at response_length) has no sequence, so no reward: realhf checks one a sequence."""
    from dataclasses import replace

    from engine.formats.areal import realhf_sample

    ep = _run(smol_tokenizer, "areal-math", 2)
    cut = ep.evolve(turns=(*ep.turns[:-1], replace(ep.turns[-1], segments=())))
    for e in (ep, cut):
        r = realhf_sample(e)
        assert len(r["rewards"]) == len(r["packed_input_ids"]) == len(r["seq_no_eos_mask"])
    assert len(realhf_sample(cut)["rewards"]) == ep.n_turns - 1
    assert realhf_sample(cut)["rewards"] == [float(x) for x in ep.returns[:-1]]
