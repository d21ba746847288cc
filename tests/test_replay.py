"""Re-executing stored episodes against their envs."""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.loop.replay import replay
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from tests.toolenv import PriceEnv


def run(make_env, tok, preset, task, mistake_rate=0.0, seed=0, **cfg):
    be = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=mistake_rate, seed=seed)
    return asyncio.run(run_episode(make_env(), be, tok, PRESETS[preset].with_(**cfg), task, preset=preset))


@pytest.mark.parametrize("preset", ["areal-math", "tito", "slime-tau"])
def test_math_episodes_reproduce(smol_tokenizer, preset):
    for i, task in enumerate(MathEnv().tasks[:4]):
        ep = run(MathEnv, smol_tokenizer, preset, task, mistake_rate=0.5, seed=i, max_turns=4)
        res = asyncio.run(replay(ep, MathEnv))
        assert res.reproducible and res.reproduced, res.summary()
        assert [v.turn for v in res.turns] == [t.index for t in ep.turns]


def test_tool_env_with_parse_errors_and_env_errors_reproduces(smol_tokenizer):
    ep = run(PriceEnv, smol_tokenizer, "tito", "fig", mistake_rate=1.0, max_turns=3)
    assert any(t.parse_error for t in ep.turns)
    assert asyncio.run(replay(ep, PriceEnv)).reproduced
    crash = run(lambda: PriceEnv(fail_on="fig"), smol_tokenizer, "tito", "fig")
    res = asyncio.run(replay(crash, lambda: PriceEnv(fail_on="fig")))
    assert res.reproduced and "raised again" in res.turns[-1].note
    fixed = asyncio.run(replay(crash, PriceEnv))  # the env no longer fails: a divergence
    assert not fixed.reproduced and fixed.divergence.field == "env_error"


def test_changed_problem_data_diverges_at_the_right_turn(tmp_path, smol_tokenizer):
    probs = tmp_path / "p.jsonl"
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 2+2?", "solutions": ["4"]}) + "\n")
    ep = run(lambda: MathEnv(probs), smol_tokenizer, "areal-math", "q", mistake_rate=0.0)
    assert all(t.reward == 1.0 for t in ep.turns)
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 2+2?", "solutions": ["5"]}) + "\n")
    res = asyncio.run(replay(ep, lambda: MathEnv(probs)))
    assert not res.reproduced
    d = res.divergence
    assert d.turn == 0 and d.field == "observation"
    assert "correct" in d.stored[0]["content"] and "wrong" in d.now[0]["content"]
    assert asyncio.run(replay(ep, lambda: MathEnv(probs), until=0)).divergence.turn == 0


def test_changed_prompt_text_diverges_before_any_turn(tmp_path, smol_tokenizer):
    probs = tmp_path / "p.jsonl"
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is 2+2?", "solutions": ["4"]}) + "\n")
    ep = run(lambda: MathEnv(probs), smol_tokenizer, "tito", "q")
    probs.write_text(json.dumps({"query_id": "q", "prompt": "What is two plus two?", "solutions": ["4"]}) + "\n")
    res = asyncio.run(replay(ep, lambda: MathEnv(probs)))
    assert res.divergence.field == "first_observation" and res.divergence.turn == 0


def test_taubench_episode_reproduces(fake_tau_bench, smol_tokenizer):
    from engine.envs.taubench import TauBenchEnv

    make = lambda: TauBenchEnv("retail")  # noqa: E731
    for preset in ("slime-tau", "tito"):
        ep = run(make, smol_tokenizer, preset, "1")
        assert ep.reward == 1.0
        assert asyncio.run(replay(ep, make)).reproduced


@pytest.mark.parametrize("preset", ["slime-tau", "tito"])
def test_retail_episodes_reproduce_and_llm_user_is_refused_up_front(smol_tokenizer, preset):
    from engine.envs.retail import RetailEnv

    for i, task in enumerate(RetailEnv().tasks[:6]):
        ep = run(RetailEnv, smol_tokenizer, preset, task, mistake_rate=0.3, seed=i)
        res = asyncio.run(replay(ep, RetailEnv))
        assert res.reproduced, res.summary()

    class FakeUserBackend:
        name = "fake"

        def describe(self):
            return {"name": "fake"}

    llm = asyncio.run(replay(ep, lambda: RetailEnv(user="llm", user_backend=FakeUserBackend(),
                                                    user_tokenizer=smol_tokenizer)))
    assert not llm.reproducible and "model plays the user" in llm.reason


def test_retail_data_changed_after_the_run_diverges_where_it_is_read(smol_tokenizer):
    from engine.envs.retail import RetailEnv

    env = RetailEnv()
    ep = next(
        e for e in (run(RetailEnv, smol_tokenizer, "slime-tau", t) for t in env.tasks[:20])
        if any(t.tool_calls and t.tool_calls[0].name == "get_order_details" for t in e.turns)
    )
    turn = next(t for t in ep.turns if t.tool_calls and t.tool_calls[0].name == "get_order_details")
    order_id = turn.tool_calls[0].arguments["order_id"]

    class ChangedData(RetailEnv):
        def reset(self, task_id):
            out = super().reset(task_id)
            self.db["orders"][order_id]["status"] = "cancelled" if self.db["orders"][order_id]["status"] != "cancelled" else "pending"
            return out

    res = asyncio.run(replay(ep, ChangedData))
    assert not res.reproduced
    assert res.divergence.turn == turn.index and res.divergence.field == "observation"
    # It goes on past the differing output to the end: every stored turn is compared, and the final reward.
    assert sorted({v.turn for v in res.turns}) == [t.index for t in ep.turns]
    assert all(v.ok for v in res.turns if v.turn < turn.index)
    d = res.divergence
    assert d.tool == "get_order_details" and [(c.path, c.change) for c in d.diff] == [("status", "changed")]
    assert d.causes == ("get_order_details output: `status` changed",)
    assert res.recorded_reward == ep.turns[-1].reward == 1.0
    assert res.replayed_reward == 0.0 and res.reward_reproduced is False
    assert "the reward does not reproduce (recorded 1, now 0)" in res.summary()


def test_replay_cli_single_and_batch(tmp_path):
    import os
    import subprocess

    from engine.store import Store

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env,
                              timeout=300)

    db = tmp_path / "r.db"
    probs = tmp_path / "p.jsonl"
    probs.write_text("".join(json.dumps({"query_id": f"q{i}", "prompt": f"What is {i}+{i}?", "solutions": [str(2 * i)]})
                             + "\n" for i in range(3)))
    assert cli("run", "--env", "math", "--problems", str(probs), "--tasks", "all", "--mistake-rate", "0.3",
               "--db", str(db), "--quiet").returncode == 0
    batch = cli("replay", "--db", str(db), "--where", "env=math", "--json")
    assert batch.returncode == 0, batch.stderr
    rows = [json.loads(line) for line in batch.stdout.splitlines()]
    assert len(rows) == 3 and all(r["kind"] == "reproduced" for r in rows)
    store = Store(db)
    first = rows[0]["episode_id"]
    assert store.replays(first)[0]["kind"] == "reproduced"
    before = store.get_episode(first)

    # the answers change after the run: every episode diverges, and says where
    probs.write_text("".join(json.dumps({"query_id": f"q{i}", "prompt": f"What is {i}+{i}?", "solutions": [str(2 * i + 1)]})
                             + "\n" for i in range(3)))
    one = cli("replay", first[:8], "--db", str(db))
    assert one.returncode == 1
    # wrong answers stay wrong; the first turn that was right is where it diverges
    flips = next(t.index for t in before.turns if t.reward == 1.0)
    assert f"diverged at turn {flips}, observation: `[0].content` changed" in one.stdout and "DIFF" in one.stdout
    assert "re-executed" not in one.stdout + one.stderr  # one episode: its verdict is whole, no summary
    assert store.get_episode(first) == before  # stored ids and records do not change
    assert len(store.replays(first)) == 2
    # None that can be re-executed (the problems file gone): nothing was compared, which is no divergence.
    probs.unlink()
    gone = cli("replay", "--db", str(db), "--where", "env=math", "--no-store")
    assert gone.returncode == 2 and "0 of 3 episodes re-executed" in gone.stdout, gone.stdout + gone.stderr
    assert cli("replay", first[:8], "--db", str(db), "--where", "env=math").returncode == 2  # id and --where: refused


@pytest.mark.parametrize("preset", ["slime-tau", "tito"])
def test_the_recorded_user_replays_live_retail_episodes_as_the_env_user_does(smol_tokenizer, preset):
    # On episodes whose user was the env's own (deterministic) one, replaying the user from the record must
    # agree with the plain replay: every episode reproduces, tool output for tool output and reward.
    from engine.envs.retail import RetailEnv
    from engine.loop.replay import replay_recorded

    for i, task in enumerate(RetailEnv().tasks[:6]):
        ep = run(RetailEnv, smol_tokenizer, preset, task, mistake_rate=0.3, seed=i)
        res = asyncio.run(replay_recorded(ep, RetailEnv))
        assert res.reproduced and res.user == "recorded", res.summary()
        assert res.turns, "at least one turn reached the env"


def test_a_model_played_user_is_replayed_from_the_record_by_replay_stored(smol_tokenizer):
    from dataclasses import replace

    from engine.envs.retail import RetailEnv
    from engine.loop.replay import replay_stored

    ep = run(RetailEnv, smol_tokenizer, "slime-tau", RetailEnv().tasks[1])
    llm = ep.evolve(config=replace(ep.config, env=replace(ep.config.env, user="llm")))
    res = asyncio.run(replay_stored(llm))
    assert res.reproducible and res.reproduced and res.user == "recorded", res.summary()
    assert "the user was replayed from the record" in res.summary()


def test_reward_fields_when_the_env_fails_or_raises_again_as_stored(smol_tokenizer):
    # The env now fails where the record went on: the record's final reward is known, the env's is not.
    ep = run(PriceEnv, smol_tokenizer, "tito", "apple")
    assert ep.reward == 1.0 and len(ep.turns) == 2
    down = asyncio.run(replay(ep, lambda: PriceEnv(fail_on="apple")))
    assert down.divergence.field == "env_error" and down.divergence.turn == 0
    assert (down.recorded_reward, down.replayed_reward, down.reward_reproduced) == (1.0, None, None)
    assert down.summary().endswith("; the final reward was not reached")
    # The env raises again, exactly as stored: the record ended there too, with that turn's reward.
    crash = run(lambda: PriceEnv(fail_on="fig"), smol_tokenizer, "tito", "fig")
    again = asyncio.run(replay(crash, lambda: PriceEnv(fail_on="fig")))
    assert again.reproduced and "raised again" in again.turns[-1].note
    assert (again.recorded_reward, again.replayed_reward, again.reward_reproduced) == (crash.turns[-1].reward,) * 2 + (True,)
    assert "not reached" not in again.summary()


class NeverDone(PriceEnv):
    """The shop as changed since the run: an answer no longer ends the conversation."""

    def step(self, action):
        return replace(super().step(action), done=False)


class ClosesEarly(PriceEnv):
    """The shop as changed since the run: a price look-up ends the conversation, with half the reward."""

    def step(self, action):
        res = super().step(action)
        return replace(res, reward=0.5, done=True) if action.name == "get_price" else res


def test_reward_fields_when_the_env_ends_the_episode_elsewhere(smol_tokenizer):
    ep = run(PriceEnv, smol_tokenizer, "tito", "pear")
    assert [(t.reward, t.done) for t in ep.turns] == [(0.0, False), (1.0, True)]
    # The env no longer ends the episode where the record does: its reward there is no final one.
    never = asyncio.run(replay(ep, NeverDone))
    assert [(v.turn, v.field) for v in never.differences] == [(1, "done")]
    assert (never.recorded_reward, never.replayed_reward, never.reward_reproduced) == (1.0, None, None)
    assert never.summary().endswith("; the final reward was not reached")
    # It ends the episode before the record does: its final reward is compared with the record's.
    early = asyncio.run(replay(ep, ClosesEarly))
    assert [(v.turn, v.field) for v in early.differences] == [(0, "reward"), (0, "done")]
    assert early.differences[1].note == "the env ended the episode before the record does"
    assert (early.recorded_reward, early.replayed_reward, early.reward_reproduced) == (1.0, 0.5, False)
    assert len(early.turns) == 2  # it stopped there: no turn 1 to compare


def test_a_turn_reward_that_differs_in_its_last_bits_is_the_same_reward(smol_tokenizer):
    ep = run(PriceEnv, smol_tokenizer, "tito", "kiwi")
    last = ep.turns[-1]
    assert last.reward == 1.0
    bits = ep.evolve(turns=(*ep.turns[:-1], replace(last, reward=1.0 + 2 ** -52)))
    res = asyncio.run(replay(bits, PriceEnv))
    assert res.kind == "reproduced" and res.reward_reproduced is True, res.summary()


def test_the_episode_reward_is_compared_as_the_loop_makes_it_of_the_env_rewards(smol_tokenizer):
    """AReaL's loop trains on the first turn's return of shaped rewards, not the env's last reward: the replay
    compares that, made again of the replayed env's rewards, with the record's; a record whose reward does not
    follow from its own env rewards (a reward assembled wrong, or edited) diverges on it, once."""
    ep = next(e for i, task in enumerate(MathEnv().tasks[:6])
              if (e := run(MathEnv, smol_tokenizer, "areal-math", task, mistake_rate=0.5, seed=i, max_turns=4))
              and e.reward != e.turns[-1].reward)
    res = asyncio.run(replay(ep, MathEnv))
    assert res.kind == "reproduced" and (res.recorded_reward, res.replayed_reward) == (ep.reward, ep.reward)
    assert res.reward_verdict() == f"the reward reproduces ({ep.reward:g})"
    # --until at or past the last turn is the whole episode, its reward compared; before it, the reward is not.
    from engine.loop.replay import replay_stored

    for until, whole in ((ep.n_turns - 1, True), (ep.n_turns + 5, True), (ep.n_turns - 2, False)):
        cut = asyncio.run(replay_stored(ep, until))
        assert cut.reproduced and (cut.until is None, cut.reward_reproduced) == ((True, True) if whole else
                                                                                 (False, None)), until

    edited = ep.evolve(reward=ep.reward + 2)
    off = asyncio.run(replay(edited, MathEnv))
    assert off.kind == "diverged:episode_reward" and [(v.turn, v.field) for v in off.differences] == \
        [(ep.n_turns - 1, "episode_reward")]
    assert (off.recorded_reward, off.replayed_reward, off.reward_reproduced) == (ep.reward + 2, ep.reward, False)
    assert off.causes == ("the episode's reward does not follow from the env's by the loop's rule",)
    assert off.summary() == (
        f"{ep.id}: diverged at turn {ep.n_turns - 1}, episode reward: stored {ep.reward + 2!r}, now {ep.reward!r} (the "
        "record's reward does not follow from the env's rewards by its loop's rule: each turn's shaped as AReaL does "
        "(scale 1, bias 0), then the first turn's return, discount 1)")

    # A turn's env reward that differs explains the episode's: it is the one difference said.
    first = ep.turns[0]
    drifted = ep.evolve(turns=(replace(first, reward=1.0 - first.reward), *ep.turns[1:]))
    moved = asyncio.run(replay(drifted, MathEnv))
    assert [v.field for v in moved.differences] == ["reward"] and moved.divergence.turn == 0
