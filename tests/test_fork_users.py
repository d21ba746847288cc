"""Who plays the user after a fork or in a new conversation: a model, or the record then another user."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from engine import formats
from engine.backends.base import SamplingParams
from engine.backends.scripted import ScriptedBackend
from engine.envs.retail import RetailEnv
from engine.envs.retail.user import USER_SYSTEM
from engine.errors import ConfigError
from engine.launch.plan import BackendSettings, UserSettings, fork_seed, plan_fork, plan_step
from engine.loop import fork as forking
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Generation, Message, Status
from engine.store import Store
from tests.fakes import tau_cancel_result
from tests.servers import FIXED_REPLY, ProtocolServer


class RecordingUserModel:
    """A backend for the user's part: answers each request with the next line and keeps the requests."""

    name = "user-model"

    def __init__(self, *replies: str) -> None:
        self.replies = list(replies)
        self.requests: list[Any] = []

    async def generate(self, request: Any) -> Generation:
        self.requests.append(request)
        return Generation(text=self.replies.pop(0) if self.replies else "Okay.")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


@pytest.fixture(scope="module")
def retail_parent(smol_tokenizer):
    env = RetailEnv()
    backend = ScriptedBackend(env.reference_reply, smol_tokenizer)
    ep = asyncio.run(run_episode(RetailEnv(), backend, smol_tokenizer, PRESETS["slime-tau"], env.tasks[0],
                                 preset="slime-tau", tokenizer_name="smollm2"))
    assert ep.status is Status.COMPLETED and ep.reward == 1.0
    return ep


def _responds(ep):
    return [t for t in ep.turns if t.action is not None and t.action.is_respond and t.observation]


def test_a_model_plays_the_user_after_a_fork_and_carries_on_the_replayed_conversation(retail_parent, smol_tokenizer):
    policy = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer)
    said = _responds(retail_parent)
    k = said[0].index + 1  # the first exchange with the user is replayed
    model = RecordingUserModel("Actually, I changed my mind. ###STOP###")

    async def go():
        hand = await forking.fork(retail_parent, k, policy, smol_tokenizer, user="llm", user_backend=model)
        assert hand.report.ok, hand.report.summary()
        assert not hand.plays_user and not hand.needs_user_reply("Anything else?")
        assert model.requests == []  # the replayed turns took the recorded replies
        turn = await hand.commit("Could you tell me which order you mean?")
        return hand, turn

    hand, turn = asyncio.run(go())
    assert "a model plays the user from the fork on" in hand.report.notes
    assert turn.observation == (Message("user", "Actually, I changed my mind. ###STOP###"),) and turn.done
    (request,) = model.requests
    msgs = list(request.messages)
    # The model's conversation is the one the episode had: the customer's prompt for this task, the recorded
    # opening, the replayed exchange (agent -> the model's user turns, the customer -> its assistant turns).
    assert msgs[0].role == "system" and msgs[0].content.startswith(USER_SYSTEM.split("{")[0])
    assert msgs[2] == Message("assistant", retail_parent.messages[1].content)
    assert Message("user", said[0].action.text) in msgs
    assert Message("assistant", said[0].observation[0].content) in msgs
    assert msgs[-1] == Message("user", "Could you tell me which order you mean?")
    ep = hand.to_save()
    assert ep.config.user == "llm" and not ep.source.user_by_hand and ep.parent_id == retail_parent.id


def test_the_recorded_user_hands_over_to_the_simulated_user_or_a_model(retail_parent, smol_tokenizer):
    policy = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer)
    said = _responds(retail_parent)
    k = said[0].index

    # Then the simulated user: no person is asked, even off the record.
    hand = asyncio.run(forking.fork(retail_parent, k, policy, smol_tokenizer, user="recorded", then="scripted"))
    assert not hand.plays_user
    assert "the recorded user answers while the conversation matches the record, then the env's simulated user" \
        in hand.report.notes
    turn = asyncio.run(hand.commit(said[0].action.text))
    assert turn.observation[0].content == said[0].observation[0].content
    turn = asyncio.run(hand.commit("Is there anything else I can help you with?"))
    assert turn.done and "###STOP###" in turn.observation[0].content  # the scripted user's own words

    # Then a model: the model is asked only once the conversation leaves the record.
    model = RecordingUserModel("Hm, that is not what I asked.")
    hand = asyncio.run(forking.fork(retail_parent, k, policy, smol_tokenizer, user="recorded", then="llm",
                                    user_backend=model))
    turn = asyncio.run(hand.commit(said[0].action.text))
    assert turn.observation[0].content == said[0].observation[0].content and model.requests == []
    turn = asyncio.run(hand.commit("Something the record never said."))
    assert turn.observation[0].content == "Hm, that is not what I asked." and len(model.requests) == 1
    assert Message("assistant", said[0].observation[0].content) in model.requests[0].messages
    assert hand.to_save().config.user == "llm"


def test_a_model_user_needs_a_model_and_only_the_recorded_user_hands_over(retail_parent, smol_tokenizer, tmp_path):
    policy = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer)
    with pytest.raises(ConfigError, match="choose the user model"):
        asyncio.run(forking.fork(retail_parent, 1, policy, smol_tokenizer, user="llm"))
    with pytest.raises(ConfigError, match="one of scripted, llm, human"):
        asyncio.run(forking.fork(retail_parent, 1, policy, smol_tokenizer, user="recorded", then="recorded"))
    store = Store(tmp_path / "x.db")
    store.save_episode(retail_parent)
    with pytest.raises(ConfigError, match="only the recorded user hands over"):
        plan_fork(store, retail_parent.id, 1, "scripted>llm", "", BackendSettings("scripted"))
    store.close()


def test_the_dashboard_plan_forks_with_a_model_user_on_an_sglang_server(retail_parent, smol_tokenizer, tmp_path):
    """The production path: the user model is an sglang server (here one speaking its protocol)."""
    store = Store(tmp_path / "x.db")
    store.save_episode(retail_parent)
    k = _responds(retail_parent)[0].index
    with ProtocolServer(tokenizer=smol_tokenizer, fault="fixed") as server:
        start = plan_fork(store, retail_parent.id, k, "llm", "", BackendSettings("scripted"),
                          UserSettings("llm", url=server.url))
        hand = asyncio.run(start.start())
        turn = asyncio.run(hand.commit("Which order would you like to cancel?"))
        assert turn.observation == (Message("user", FIXED_REPLY),)
        assert server.calls["/generate"] == 1
        path, body = server.bodies[-1]
        sent = smol_tokenizer.decode(body["input_ids"]) if "input_ids" in body else body["text"]
        assert path == "/generate" and "Which order would you like to cancel?" in sent
        # A new conversation, too, may have its user played by the model.
        start = plan_step("retail", "0", "tito", "", "llm", BackendSettings("scripted"),
                          UserSettings("llm", url=server.url))
        hand = asyncio.run(start.start())
        turn = asyncio.run(hand.commit("Hello! What can I do for you?"))
        assert turn.observation == (Message("user", FIXED_REPLY),) and hand.episode().config.user == "llm"
    with pytest.raises(ConfigError, match="cannot reach|refused|not reachable|connect"):
        plan_fork(store, retail_parent.id, k, "llm", "", BackendSettings("scripted"),
                  UserSettings("llm", url=server.url))
    store.close()


# -- tau-bench's envs -----------------------------------------------------------


def test_a_model_plays_a_tau_bench_user_after_a_fork_and_tau_bench_scores_the_end(fake_tau_bench, tmp_path, smol_tokenizer):
    from engine.envs.taubench import TauBenchEnv

    traj = tau_cancel_result()["traj"][:6]  # up to the user's answer to the question before cancelling
    path = tmp_path / "results.json"
    path.write_text(json.dumps([{"task_id": 0, "reward": 0.0, "info": {}, "traj": traj, "trial": 0}]))
    store = Store(tmp_path / "x.db")
    formats.import_path(path, "taubench", store, env="taubench:retail")
    parent = next(store.iter_episodes())
    policy = ScriptedBackend(TauBenchEnv("retail").reference_reply, smol_tokenizer)
    model = RecordingUserModel("No, that's all. ###STOP###")
    hand = asyncio.run(forking.fork(parent, 2, policy, smol_tokenizer, user="llm", user_backend=model))
    assert hand.report.ok and hand.report.replayed == 2, hand.report.summary()
    turn = asyncio.run(hand.commit("Is there anything else I can help you with?"))
    # tau-bench's own step heard the model's reply: it ended the episode and scored it (nothing cancelled).
    assert turn.observation == (Message("user", "No, that's all. ###STOP###"),) and turn.done and turn.reward == 0.0
    msgs = model.requests[0].messages
    assert msgs[2] == Message("assistant", traj[1]["content"])
    assert Message("assistant", traj[5]["content"]) in msgs
    assert hand.to_save().config.user == "llm"
    store.close()


def test_a_person_plays_a_tau_bench_user_in_a_new_conversation(fake_tau_bench, smol_tokenizer):
    from engine.envs.taubench import TauBenchEnv

    env = TauBenchEnv("retail")
    policy = ScriptedBackend(env.reference_reply, smol_tokenizer)
    hand = forking.start(env, policy, smol_tokenizer, PRESETS["tito"], "0", user="human")
    assert hand.plays_user and hand.episode().messages[1].content == env._env.tasks[0].instruction
    turn = asyncio.run(hand.commit("Anything else?", "No, bye. ###STOP###"))
    assert turn.done and turn.observation[0].content == "No, bye. ###STOP###"
    assert hand.to_save().config.user == "human"


@pytest.mark.parametrize("user", ["human", "scripted"])
def test_a_conversation_saved_with_the_users_message_last_checks_clean(smol_tokenizer, user):
    # Saved from Step mid-conversation: the user's reply and the next generation prompt are laid down, no reply yet.
    env = RetailEnv()
    policy = ScriptedBackend(env.reference_reply, smol_tokenizer)
    hand = forking.start(env, policy, smol_tokenizer, PRESETS["tito"], env.tasks[0], user=user)
    for _ in range(8):
        text = hand.text_of(asyncio.run(hand.generate()))
        reply = "I also want to know the price." if hand.needs_user_reply(text) else None
        turn = asyncio.run(hand.commit(text, reply))
        if hand.episode().messages[-1].role == "user":
            break
    assert not turn.done and hand.episode().messages[-1].role == "user"
    saved = hand.to_save()
    assert saved.status.value == "interrupted"
    errors = [f for f in saved.all_findings() if f.severity.value == "error"]
    assert not errors, [(f.kind, f.message) for f in errors]


def test_a_fork_samples_as_the_step_form_says_and_its_record_keeps_it(retail_parent, smol_tokenizer, tmp_path):
    store = Store(tmp_path / "x.db")
    store.save_episode(retail_parent)
    assert retail_parent.config.sampling.max_new_tokens != 40
    form = BackendSettings("scripted", temperature=0.5, top_p=0.9, max_new_tokens=40, seed=11)
    start = plan_fork(store, retail_parent.id, 1, "scripted", "", form)
    hand = asyncio.run(start.start())
    asyncio.run(hand.commit(hand.text_of(asyncio.run(hand.generate()))))
    sampling = hand.to_save().config.sampling
    # the seed is the fork's own, made from the form's as `rollscope fork --seed 11` makes its first sample's
    assert (sampling.temperature, sampling.top_p, sampling.max_new_tokens) == (0.5, 0.9, 40)
    assert sampling.seed == fork_seed(retail_parent.id, 11, 0) != 11
    assert all(len(t.generation.token_ids) <= 40 for t in hand.episode().turns[1:] if t.generation is not None)
    store.close()


def test_a_fork_from_the_step_form_with_the_parents_seed_does_not_sample_the_parent_again(tmp_path, smol_tokenizer):
    """The form's seed is the parent's (both the form's default): the fork's replies are not the parent's, replayed."""
    be = ScriptedBackend(RetailEnv().reference_reply, smol_tokenizer, mistake_rate=0.5, seed=0)
    parent = asyncio.run(run_episode(RetailEnv(), be, smol_tokenizer, PRESETS["slime-tau"], RetailEnv().tasks[0],
                                     preset="slime-tau", sampling=SamplingParams(seed=0)))
    store = Store(tmp_path / "x.db")
    store.save_episode(parent)
    form = BackendSettings("scripted", mistake_rate=0.5, seed=parent.config.sampling.seed)
    played = []
    for _ in range(2):  # the same form twice: the same fork, so a fork is reproduced by its seed
        hand = asyncio.run(plan_fork(store, parent.id, 0, "scripted", "", form).start())
        played.append([])
        while not hand.done and len(played[-1]) < 3:
            gen = asyncio.run(hand.generate())
            played[-1].append(gen.token_ids)
            asyncio.run(hand.commit(hand.text_of(gen)))
    assert played[0] == played[1]
    assert played[0] != [t.generation.token_ids for t in parent.turns[:len(played[0])]]
    store.close()
