"""tau-bench's own results imported and re-executed with the user replayed from the record.

The results files are written here in the shape tau-bench's ``run.py``
writes (a JSON list of ``{task_id, reward, info, traj, trial}``, ``traj``
being OpenAI messages), and re-executed against the ``tau_bench`` package
in ``tests/fake_taubench`` (Sierra's when it is installed instead).
"""

from __future__ import annotations

import asyncio
import copy
import json

from engine import Store, formats
from engine.loop.replay import replay_stored
from tests.fakes import openai_tool_call, tau_cancel_result


def _import(tmp_path, results, env=None):
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results, indent=2), encoding="utf-8")
    store = Store(tmp_path / "x.db")
    report = formats.import_path(path, "taubench", store, env=env)
    return store, report


def test_tau_bench_results_import_with_env_task_and_reward(tmp_path, fake_tau_bench):
    other = tau_cancel_result(trial=1)
    other["traj"][0]["content"] = "# Policy\nNo domain named here."
    store, report = _import(tmp_path, [tau_cancel_result(), other, {"task_id": 1}])
    assert report.new == 1 and [str(e) for e in report.errors] == [
        f"{tmp_path / 'results.json'}: result 1: field 'traj': cannot tell the tau-bench domain from the policy "
        "text (the system message): give --env taubench:retail or --env taubench:airline",
        f"{tmp_path / 'results.json'}: result 2: field 'reward': missing"]
    (ep,) = store.iter_episodes()
    assert (ep.env, ep.task_id, ep.reward, ep.sample_index, ep.source.kind) == ("taubench:retail", "0", 1.0, 0, "taubench")
    assert ep.source.details["info"] == {"reward_info": {"db_match": True}}
    assert [m.role for m in ep.messages][:4] == ["system", "user", "assistant", "tool"]
    assert ep.messages[2].tool_calls[0].arguments == {"name": "Ana Ito", "zip": "10001"}
    assert ep.tokens.ids.size == 0  # no tokenizer: messages only
    # --env names it when the policy text does not; importing again adds nothing.
    again = tmp_path / "again"
    again.mkdir()
    store2, report2 = _import(again, [other], env="taubench:airline")
    assert report2.new == 1 and next(store2.iter_episodes()).env == "taubench:airline"
    report3 = formats.import_path(tmp_path / "results.json", "taubench", store)
    assert report3.new == 0 and report3.already_present == 1
    store.close()
    store2.close()


def test_an_imported_trajectory_is_re_executed_with_the_recorded_user(tmp_path, fake_tau_bench):
    store, _ = _import(tmp_path, [tau_cancel_result()])
    ep = next(store.iter_episodes())
    res = asyncio.run(replay_stored(ep))
    assert res.reproducible and res.reproduced and res.user == "recorded", res.summary()
    assert len(res.turns) == 4 and res.summary().endswith(
        "reproduced: 4 turns, every tool output and the final reward as recorded; the user was replayed from the record")
    store.close()


def test_a_changed_tool_output_is_the_first_divergence(tmp_path, fake_tau_bench):
    changed = tau_cancel_result()
    changed["traj"][7]["content"] = json.dumps({"status": "cancelled", "total": 31.0, "reason": "no longer needed"})
    store, _ = _import(tmp_path, [changed])
    res = asyncio.run(replay_stored(next(store.iter_episodes())))
    assert res.reproducible and not res.reproduced and res.kind == "diverged:observation"
    d = res.divergence
    assert d.turn == 2 and '"total": 31.0' in d.stored and '"total": 30.5' in d.now
    assert "diverged at turn 2, cancel_pending_order output: `total` changed: 31.0 -> 30.5" in res.summary()
    assert d.note == "the output of cancel_pending_order (call 1 of this turn)"
    assert "the user was replayed from the record" in res.summary()
    store.close()


def test_a_changed_final_reward_is_a_divergence_on_the_reward(tmp_path, fake_tau_bench):
    store, _ = _import(tmp_path, [tau_cancel_result(reward=0.0)])
    res = asyncio.run(replay_stored(next(store.iter_episodes())))
    assert res.kind == "diverged:reward" and (res.divergence.stored, res.divergence.now) == (0.0, 1.0)
    store.close()


def test_the_cli_imports_and_replays_tau_bench_results(tmp_path, fake_tau_bench, monkeypatch):
    from engine.cli import main

    path = tmp_path / "results.json"
    bad = copy.deepcopy(tau_cancel_result(trial=1))
    bad["traj"][3]["content"] = "someone_else"
    path.write_text(json.dumps([tau_cancel_result(), bad]), encoding="utf-8")
    db = str(tmp_path / "x.db")
    assert main(["import", str(path), "--format", "taubench", "--db", db, "--quiet"]) == 0
    assert main(["replay", "--db", db, "--where", "env=taubench:retail"]) == 1


def test_calls_without_a_recorded_output_were_never_executed(tmp_path, fake_tau_bench):
    # tau-bench's tool-calling agent executes a message's first call only; the record has one output.
    two = tau_cancel_result()
    two["traj"][2]["tool_calls"].append(openai_tool_call("c9", "cancel_pending_order", {"order_id": "#A2", "reason": "x"}))
    store, _ = _import(tmp_path, [two])
    res = asyncio.run(replay_stored(next(store.iter_episodes())))
    assert res.reproduced, res.summary()
    store.close()


def test_an_imported_trajectory_forks_at_any_turn_with_the_user_of_choice(tmp_path, fake_tau_bench, smol_tokenizer):
    from engine.backends.scripted import ScriptedBackend
    from engine.envs.taubench import TauBenchEnv
    from engine.loop import fork as forking

    store, _ = _import(tmp_path, [tau_cancel_result()])
    parent = next(store.iter_episodes())
    backend = ScriptedBackend(TauBenchEnv("retail").reference_reply, smol_tokenizer)

    async def go(k, user):
        return await forking.fork(parent, k, backend, smol_tokenizer, user=user)

    # At turn 3: the two tool calls and the question to the user are replayed from the record, the
    # user's recorded answer included; the env's outputs match the record's.
    hand = asyncio.run(go(3, "scripted"))
    assert hand.report.ok and hand.report.replayed == 3 and hand.turn == 3, hand.report.summary()
    assert any("imported with it" in n for n in hand.report.notes)
    msgs = [m for m in hand.episode().messages if m.role == "user"]
    assert [m.content for m in msgs] == ["Hi, I'm Ana Ito (zip 10001) and I want to cancel an order.",
                                         "Order #A1, I no longer need it. Yes."]
    assert hand.episode().turns[2].generation.model == "imported"
    # From there on the env's own user answers: the agent closes, it stops, and the db matches (reward 1).
    turn = asyncio.run(hand.commit("Done: #A1 is cancelled. Is there anything else I can help you with?"))
    assert turn.done and turn.reward == 1.0 and "###STOP###" in turn.observation[0].content
    # A record whose tool output differs from the env's now is a divergence of the fork, at its turn.
    changed = tau_cancel_result()
    changed["traj"][3]["content"] = "someone_else"
    (tmp_path / "c").mkdir()
    store2, _ = _import(tmp_path / "c", [changed])
    hand = asyncio.run(forking.fork(next(store2.iter_episodes()), 2, backend, smol_tokenizer))
    assert not hand.report.ok and hand.report.divergences[0].turn == 0
    assert hand.report.divergences[0].field == "observation"
    store.close()
    store2.close()


def test_the_recorded_user_answers_while_the_conversation_matches_then_the_person(tmp_path, smol_tokenizer):
    from engine.backends.scripted import ScriptedBackend
    from engine.envs.retail import RetailEnv
    from engine.loop import fork as forking
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS

    env = RetailEnv()
    backend = ScriptedBackend(env.reference_reply, smol_tokenizer)
    live = asyncio.run(run_episode(RetailEnv(), backend, smol_tokenizer, PRESETS["tito"], env.tasks[0],
                                   preset="tito", tokenizer_name="smollm2"))
    responds = [t for t in live.turns if t.action is not None and t.action.is_respond and t.observation]
    assert len(responds) >= 2, "the task talks to the user at least twice"
    # The same episode as an import: messages only, its env named.
    out = tmp_path / "m.jsonl"
    from engine import formats

    formats.export([live], "messages", out)
    store = Store(tmp_path / "x.db")
    formats.import_path(out, "messages", store, env="retail")
    parent = next(store.iter_episodes())
    assert not parent.source.live and parent.env == "retail"
    k = responds[0].index
    hand = asyncio.run(forking.fork(parent, k, backend, smol_tokenizer, user="recorded"))
    assert hand.report.ok, hand.report.summary()
    first = responds[0].action.text
    # Saying what the record says gets the recorded reply, no person needed.
    assert hand.plays_user and not hand.needs_user_reply(first)
    turn = asyncio.run(hand.commit(first))
    assert turn.observation[0].content == responds[0].observation[0].content
    # Saying something else leaves the record: the person writes the reply.
    assert hand.needs_user_reply("Something the record never said.")
    turn = asyncio.run(hand.commit("Something the record never said.", "A reply of my own."))
    assert turn.observation[0].content == "A reply of my own."
    store.close()


def test_a_results_file_with_a_byte_order_mark_reads_and_a_bad_byte_is_placed_in_the_file(tmp_path, fake_tau_bench):
    import pytest

    text = json.dumps([tau_cancel_result()], indent=2).encode()
    path = tmp_path / "results.json"
    path.write_bytes(b"\xef\xbb\xbf" + text)
    store = Store(tmp_path / "x.db")
    assert formats.import_path(path, "taubench", store).new == 1
    # The byte named is the file's own: counted from its start, the byte order mark included.
    at = 3 + text.index(b"Ana")
    path.write_bytes(b"\xef\xbb\xbf" + text[: at - 3] + b"\xff" + text[at - 2:])
    with pytest.raises(formats.FormatError) as e:
        formats.import_path(path, "taubench", store)
    assert e.value.detail == f"not UTF-8 text (byte {at})" and path.read_bytes()[at] == 0xFF
    store.close()
