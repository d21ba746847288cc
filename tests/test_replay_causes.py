"""Replay says what changed: past a differing output to the end, the diff as paths, many episodes by cause.

Airline results are written here as tau-bench's ``run.py`` writes them, their
tool outputs produced by the ``tau_bench`` stand-in's own tools on an older
database whose addresses had ``province`` where they now have ``state``;
built-in retail episodes run live and then have a stored output altered.
Into both sets a few reward-changing differences are planted, and the
summary's counts are held to what was planted.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import pytest

from engine import ReplayResult, Store, replay_causes
from engine.cli import main
from tests.fakes import airline_result

DRIFT = "get_user_details output: `address.province` is now `address.state`"


def test_airline_results_recorded_on_an_older_database_are_summed_up_by_cause(tmp_path, fake_tau_bench, capsys):
    results = []
    # 12 read the user's record on the older database; in 2 of them the agent cancelled the wrong reservation
    # and the record says reward 1 (the task was annotated otherwise then): those no longer reproduce.
    planted = {(3, 0), (2, 1)}
    for k in range(12):
        i, trial = k % 8, k // 8
        results.append(airline_result(i, trial, older=True, reads_user=True, cancels=int((i, trial) in planted)))
    # 6 never read the user's record: nothing they saw changed.
    results += [airline_result(k, 5, older=True, reads_user=False) for k in range(6)]
    # 1 recorded the cancellation as text, which the tool no longer says.
    results.append(airline_result(7, 6, older=True, reads_user=False, text_cancel=True))
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    db = str(tmp_path / "x.db")
    assert main(["import", str(path), "--format", "taubench", "--db", db, "--quiet"]) == 0
    capsys.readouterr()

    assert main(["replay", "--db", db, "--where", "env=taubench:airline", "--json"]) == 1
    out = capsys.readouterr()
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert len(rows) == 19
    by_reward = {}
    for r in rows:
        by_reward.setdefault((r["recorded_reward"], r["replayed_reward"], r["reward_reproduced"]), []).append(r)
    assert {k: len(v) for k, v in by_reward.items()} == {(1.0, 1.0, True): 17, (1.0, 0.0, False): 2}
    # Every drifted episode went on to the end: the differing output is its first divergence, not its last.
    drifted = [r for r in rows if r["divergence"] and r["divergence"]["tool"] == "get_user_details"]
    assert len(drifted) == 12
    for r in drifted:
        (d,) = r["divergence"]["diff"]
        assert d["path"] == "address.province" and d["change"] == "renamed" and d["to"] == "address.state"
        assert d["stored"] == d["now"] and len(d["stored"]) == 2
        assert r["turns"][-1]["turn"] == 4 and all(t["ok"] for t in r["turns"][1:4])
    # The summary, on stderr with --json: one line a cause, the planted ones counted where they lie.
    lines = [line.strip() for line in out.err.splitlines()]
    assert lines[0] == ("19 episodes re-executed: 6 reproduced every output and the reward; "
                        "the reward reproduced in 17 of the 19 that reached the end")
    assert lines[1:] == [f"12 episodes: {DRIFT}; reward reproduced 10 of them",
                         "6 episodes reproduced every output and the reward",
                         "1 episode: cancel_reservation output: text differs; reward reproduced"]
    # The store keeps the new fields; a stored replay reads back with its diff.
    store = Store(db)
    ep_id = drifted[0]["episode_id"]
    stored = ReplayResult.from_dict(store.replays(ep_id)[0])
    assert (stored.recorded_reward, stored.replayed_reward, stored.reward_reproduced) == (1.0, 1.0, True)
    assert stored.divergence.diff[0].describe() == "`address.province` is now `address.state`"
    store.close()

    # One episode at a time: each differing turn says what changed as paths, then the reward's verdict.
    assert main(["replay", ep_id[:10], "--db", db, "--no-store"]) == 1
    one = capsys.readouterr().out
    assert "turn   0 DIFF  get_user_details output: `address.province` is now `address.state`" in one
    assert "the reward reproduces (1)" in one and '"address1"' not in one


def test_without_json_the_summary_is_printed_after_the_diverged_episodes(tmp_path, fake_tau_bench, capsys):
    results = [airline_result(0, 0, older=True, reads_user=True),
               airline_result(1, 0, older=False, reads_user=True)]
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    db = str(tmp_path / "x.db")
    main(["import", str(path), "--format", "taubench", "--db", db, "--quiet"])
    capsys.readouterr()
    assert main(["replay", "--db", db, "--where", "env=taubench:airline"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 4 and "diverged at turn 0 on observation (the output of get_user_details (call 1 of " \
        "this turn): `address.province` is now `address.state`); the reward reproduces (1)" in out[0]
    assert out[2:] == [f"  1 episode: {DRIFT}; reward reproduced",
                       "  1 episode reproduced every output and the reward"]


@pytest.fixture(scope="module")
def retail_runs(smol_tokenizer):
    """Live retail episodes (the scripted policy, no mistakes) that read a user's record."""
    from engine.backends.scripted import ScriptedBackend
    from engine.envs.retail import RetailEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS

    env = RetailEnv()
    found = []
    for task in env.tasks:
        be = ScriptedBackend(env.reference_reply, smol_tokenizer)
        ep = asyncio.run(run_episode(RetailEnv(), be, smol_tokenizer, PRESETS["tito"], task, preset="tito"))
        if any(c.name == "get_user_details" for t in ep.turns for c in t.tool_calls):
            found.append(ep)
        if len(found) == 8:
            return found
    raise AssertionError("fewer than 8 retail tasks read a user's record")


def _province(ep):
    """``ep`` as if recorded when the user's address said ``province``: each get_user_details output altered
    in its turn and in the conversation alike."""
    swap = {}
    turns = []
    for t in ep.turns:
        obs = []
        for m in t.observation:
            if m.role == "tool" and m.name == "get_user_details":
                user = json.loads(m.content)
                user["address"] = {("province" if k == "state" else k): v for k, v in user["address"].items()}
                swap[m.content] = json.dumps(user)
                m = replace(m, content=swap[m.content])
            obs.append(m)
        turns.append(replace(t, observation=tuple(obs)))
    msgs = tuple(replace(m, content=swap[m.content]) if m.role == "tool" and m.content in swap else m
                 for m in ep.messages)
    return ep.evolve(turns=tuple(turns), messages=msgs)


def test_built_in_retail_episodes_with_an_altered_output_go_on_and_count_the_planted_rewards(
        tmp_path, retail_runs, capsys):
    assert all(ep.reward == 1.0 for ep in retail_runs)
    store = Store(tmp_path / "r.db")
    altered = [_province(ep) for ep in retail_runs[:6]]
    # Two of them are planted with a recorded reward the env no longer gives.
    for k in (1, 4):
        ep = altered[k]
        altered[k] = ep.evolve(reward=0.0, turns=(*ep.turns[:-1], replace(ep.turns[-1], reward=0.0)))
    for ep in [*altered, *retail_runs[6:]]:
        store.save_episode(ep)
    store.close()
    assert main(["replay", "--db", str(tmp_path / "r.db"), "--where", "env=retail", "--json"]) == 1
    out = capsys.readouterr()
    rows = {r["episode_id"]: r for r in map(json.loads, out.out.splitlines())}
    for k, ep in enumerate(altered):
        r = rows[ep.id]
        assert r["reward_reproduced"] is (k not in (1, 4)), r
        assert (r["recorded_reward"], r["replayed_reward"]) == ((0.0 if k in (1, 4) else 1.0), 1.0)
        reads = [t.index for t in ep.turns if any(c.name == "get_user_details" for c in t.tool_calls)]
        assert [v["turn"] for v in r["turns"] if not v["ok"] and v["field"] == "observation"] == reads
        assert r["divergence"]["turn"] == reads[0]
        assert {t["turn"] for t in r["turns"]} == {t.index for t in ep.turns}  # on to the end
    lines = [line.strip() for line in out.err.splitlines()]
    assert lines[1:] == [f"6 episodes: {DRIFT}; reward reproduced 4 of them",
                         "2 episodes reproduced every output and the reward"]
    groups = replay_causes(ReplayResult.from_dict(r) for r in rows.values())
    assert [(g.n, g.reward_reproduced, g.reward_differs) for g in groups] == [(6, 4, 2), (2, 2, 0)]
    assert set(groups[0].episodes) == {ep.id for ep in altered}
