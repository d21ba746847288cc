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
    assert lines[1:] == [f"⚑ 12 episodes: {DRIFT}; reward reproduced 10 of them",
                         "⚑ 1 episode: cancel_reservation output: text differs; reward reproduced"]
    # Each line carries its episode's cause; a differing output is said by its diff alone, not two dumps.
    assert all(r["cause"] == DRIFT and r["causes"] == [DRIFT] for r in drifted)
    turn0 = drifted[0]["turns"][0]
    assert "stored" not in turn0 and "now" not in turn0 and turn0["diff"]
    assert all("stored" in t for t in drifted[0]["turns"][1:])  # the turns as recorded keep their keys
    # The store keeps the new fields; a stored replay reads back with its diff.
    store = Store(db)
    ep_id = drifted[0]["episode_id"]
    stored = ReplayResult.from_dict(store.replays(ep_id)[0])
    assert (stored.recorded_reward, stored.replayed_reward, stored.reward_reproduced) == (1.0, 1.0, True)
    assert stored.divergence.diff[0].describe() == "`address.province` is now `address.state`"
    store.close()

    # One episode at a time: the verdict in one line, then each turn, a differing one as paths; no summary.
    assert main(["replay", ep_id[:10], "--db", db, "--no-store"]) == 1
    one = capsys.readouterr().out.splitlines()
    assert one[0] == (f"{ep_id}: diverged at turn 0, get_user_details output: `address.province` is now "
                      "`address.state`; the reward reproduces (1); the user was replayed from the record")
    assert one[1] == "  turn   0 DIFF  get_user_details output: `address.province` is now `address.state`"
    assert len(one) == 1 + len(drifted[0]["turns"]) and not any("re-executed" in line for line in one)


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
    assert len(out) == 3 and out[0].endswith(": diverged at turn 0, get_user_details output: `address.province` "
                                             "is now `address.state`; the reward reproduces (1); the user was "
                                             "replayed from the record")
    assert out[1] == ("2 episodes re-executed: 1 reproduced every output and the reward; "
                      "the reward reproduced in 2 of the 2 that reached the end")
    assert out[2:] == [f"  ⚑ 1 episode: {DRIFT}; reward reproduced"]
    # Quiet: the summary alone.
    assert main(["replay", "--db", db, "--where", "env=taubench:airline", "--no-store", "-q"]) == 1
    assert capsys.readouterr().out.splitlines() == out[1:]
    # A filter that matches nothing is no success: it says which filter, and exits 2.
    assert main(["replay", "--db", db, "--where", "env=nosuch", "--no-store"]) == 2
    err = capsys.readouterr().err
    assert "no episode matches --where env=nosuch" in err


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
    assert lines[1:] == [f"⚑ 6 episodes: {DRIFT}; reward reproduced 4 of them"]
    groups = replay_causes(ReplayResult.from_dict(r) for r in rows.values())
    assert [(g.n, g.reward_reproduced, g.reward_differs, g.first) for g in groups] == [(6, 4, 2, 6)]
    assert set(groups[0].episodes) == {ep.id for ep in altered}


def _airline_db(tmp_path, results, capsys):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results), encoding="utf-8")
    db = str(tmp_path / "x.db")
    assert main(["import", str(path), "--format", "taubench", "--db", db, "--quiet"]) == 0
    capsys.readouterr()
    return db


TEXT = "cancel_reservation output: text differs"


def test_an_episode_counts_under_every_cause_it_shows_whatever_else_it_shows(tmp_path, fake_tau_bench, capsys):
    db = _airline_db(tmp_path, [
        airline_result(0, 0, older=True, reads_user=True),                     # the rename alone
        airline_result(1, 0, older=True, reads_user=True, text_cancel=True),   # the rename, then the text
        airline_result(2, 0, older=True, reads_user=False, text_cancel=True),  # the text alone
    ], capsys)
    assert main(["replay", "--db", db, "--where", "env=taubench:airline", "-q"]) == 1
    lines = [line.strip() for line in capsys.readouterr().out.splitlines()]
    # One line a cause: the rename is the first divergence of both its episodes, the text of one of its two.
    assert lines[1:] == [f"⚑ 2 episodes: {DRIFT}; reward reproduced 2 of them",
                         f"⚑ 2 episodes: {TEXT}; reward reproduced 2 of them (the first divergence in 1 of them)"]


def test_causes_do_not_depend_on_the_order_they_came_in():
    from engine import TurnVerdict, output_diff

    def out(tool, stored, now, turn):
        return TurnVerdict(turn, False, "observation", stored, now, "", tool, output_diff(stored, now))

    user = out("get_user_details", '{"address": {"province": "TX", "zip": "78750"}}',
               '{"address": {"state": "TX", "zip": "78750"}}', 0)
    both = out("get_user_details", '{"address": {"province": "TX", "zip": "78750"}}',
               '{"address": {"state": "TX", "zip": "00000"}}', 0)
    order = out("get_order_details", '{"status": "pending", "total": 30.5}', '{"status": "cancelled", "total": 30.5}', 0)

    def result(eid, *vs):
        vs = tuple(replace(v, turn=k) for k, v in enumerate(vs))
        return ReplayResult(eid, True, False, vs, vs[0], recorded_reward=1.0, replayed_reward=1.0)

    rs = [result("a", user, order), result("b", order, user), result("c", both)]
    assert rs[0].causes == (DRIFT, "get_order_details output: `status` changed")
    assert rs[2].causes == (DRIFT, "get_user_details output: `address.zip` changed")
    groups = {g.cause: (g.n, g.first, set(g.episodes)) for g in replay_causes(rs)}
    assert groups == {DRIFT: (3, 2, {"a", "b", "c"}),
                      "get_order_details output: `status` changed": (2, 1, {"a", "b"}),
                      "get_user_details output: `address.zip` changed": (1, 1, {"c"})}


def test_a_float_reward_that_differs_in_its_last_bits_reproduces(tmp_path, fake_tau_bench, capsys):
    # The record says 1.0000000000000002 (a sum of parts rounded otherwise), the env now 1.0: one reward.
    db = _airline_db(tmp_path, [airline_result(0, 0, older=False, reads_user=True, reward=1.0 + 2 ** -52)], capsys)
    assert main(["replay", "--db", db, "--where", "env=taubench:airline", "--json"]) == 0
    (row,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert row["kind"] == "reproduced" and row["reward_reproduced"] is True and row["cause"] is None
    res = ReplayResult("e", True, False, recorded_reward=0.3, replayed_reward=0.1 + 0.2)
    assert res.reward_reproduced is True and "the reward reproduces (0.3)" in res.reward_verdict()


def test_until_compares_no_reward_and_says_so(tmp_path, fake_tau_bench, capsys):
    db = _airline_db(tmp_path, [airline_result(0, 0, older=False, reads_user=True),
                                airline_result(1, 0, older=True, reads_user=True)], capsys)
    store = Store(db)
    same, drifted = sorted(store.iter_episodes(), key=lambda e: e.task_id)
    store.close()
    assert main(["replay", same.id, "--db", db, "--until", "1", "--no-store"]) == 0
    one = capsys.readouterr().out.splitlines()
    assert one[0] == (f"{same.id}: turns 0-1 reproduced; reward not compared (--until); "
                      "the user was replayed from the record")
    assert len(one) == 3 and "reward reproduced" not in "\n".join(one)
    assert main(["replay", "--db", db, "--where", "env=taubench:airline", "--until", "1", "--json"]) == 1
    out = capsys.readouterr()
    rows = [json.loads(line) for line in out.out.splitlines()]
    assert all(r["recorded_reward"] is None and r["replayed_reward"] is None and r["reward_reproduced"] is None
               for r in rows)
    assert [line.strip() for line in out.err.splitlines()] == [
        "2 episodes re-executed, turns 0-1: 1 reproduced every output; reward not compared (--until)",
        f"⚑ 1 episode: {DRIFT}; reward not compared (--until)"]
    assert ReplayResult.from_dict(rows[1] if rows[1]["episode_id"] == drifted.id else rows[0]).summary().endswith(
        "; reward not compared (--until); the user was replayed from the record")


def test_many_diverged_episodes_are_listed_up_to_a_limit_before_the_summary(tmp_path, fake_tau_bench, capsys):
    from engine.cli.replay import LISTED

    db = _airline_db(tmp_path, [airline_result(k % 8, k // 8, older=True, reads_user=True)
                                for k in range(LISTED + 3)], capsys)
    assert main(["replay", "--db", db, "--where", "env=taubench:airline", "--no-store"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert len(out) == LISTED + 3 and out[LISTED] == "… and 3 more diverged episodes (--json lists each)"
    assert out[-1].strip() == f"⚑ {LISTED + 3} episodes: {DRIFT}; reward reproduced {LISTED + 3} of them"
