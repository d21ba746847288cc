"""The loop's statuses, rewards and traces, driven by the scripted policy."""

from __future__ import annotations

import asyncio

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.errors import BackendError
from engine.loop.rewards import areal_shape, discounted_returns
from engine.loop.stepper import Stepper, run_episode
from engine.presets import PRESETS, LoopConfig
from engine.records.episode import Generation, Status
from tests.toolenv import PriceEnv


def run(env, backend, tok, preset, task, **cfg):
    return asyncio.run(run_episode(env, backend, tok, PRESETS[preset].with_(**cfg), task, preset=preset))


def test_areal_math_fixed_turns_and_returns(smol_tokenizer):
    env = MathEnv()
    be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.5, seed=11)
    ep = run(env, be, smol_tokenizer, "areal-math", env.tasks[2])
    assert ep.status is Status.COMPLETED and ep.n_turns == 5
    raw = [t.reward for t in ep.turns]
    assert set(raw) <= {0.0, 1.0}
    assert list(ep.turn_rewards) == [areal_shape(r) for r in raw]
    # realhf's MathMultiTurnAgent defaults turn_level_discount to 1.0
    assert list(ep.returns) == pytest.approx(discounted_returns(ep.turn_rewards, 1.0))
    assert ep.reward == pytest.approx(ep.returns[0])
    # feedback after every turn but the last
    assert [m.role for m in ep.messages].count("user") == 1 + 4
    for t in ep.turns:
        assert t.generation is not None and t.generation.finish_reason == "stop"
        assert t.action is not None and t.action.is_respond
        assert t.observation and t.observation[0].role == "user"
        assert "total_s" in t.timings
        assert t.prompt_len == t.segments[0].start


def test_stop_on_success(smol_tokenizer):
    env = MathEnv()
    be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.0)
    ep = run(env, be, smol_tokenizer, "areal-math", env.tasks[0], stop_on_success=True)
    assert ep.n_turns == 1 and ep.status is Status.COMPLETED and ep.reason == "success"


def test_truncated_at_max_turns(smol_tokenizer):
    env = MathEnv()
    be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=1.0)
    ep = run(env, be, smol_tokenizer, "tito", env.tasks[0], max_turns=3)
    assert ep.status is Status.TRUNCATED and ep.n_turns == 3 and ep.reward == 0.0
    assert any(f.kind == "truncated_episode" for f in ep.all_findings())


def test_tool_episode_completes_with_tool_messages(smol_tokenizer):
    env = PriceEnv()
    be = ScriptedBackend(PriceEnv().reference_reply, smol_tokenizer)
    ep = run(env, be, smol_tokenizer, "tito", "fig")
    assert ep.status is Status.COMPLETED and ep.reward == 1.0
    assert ep.turns[0].tool_calls[0].name == "get_price"
    assert ep.turns[0].tool_calls[0].arguments == {"item": "fig"}
    tool_msg = ep.turns[0].observation[0]
    assert tool_msg.role == "tool" and tool_msg.name == "get_price" and '"price": 11' in tool_msg.content
    assert [s.kind for s in ep.segments if s.turn == 0] == ["prompt", "assistant", "tail", "tool"]


def test_parse_error_abort_vs_feedback(smol_tokenizer):
    be = ScriptedBackend(PriceEnv().reference_reply, smol_tokenizer, mistake_rate=1.0)  # malformed JSON tool call
    aborted = run(PriceEnv(), be, smol_tokenizer, "tito", "fig", on_parse_error="abort")
    assert aborted.status is Status.ABORTED and "parse error" in aborted.reason
    assert aborted.turns[-1].parse_error and "invalid JSON" in aborted.turns[-1].parse_error
    assert any(f.kind == "tool_call_parse_error" for f in aborted.all_findings())
    fed = run(PriceEnv(), be, smol_tokenizer, "tito", "fig", on_parse_error="feedback", max_turns=2)
    assert fed.status is Status.TRUNCATED
    assert "could not parse your tool call" in fed.turns[0].observation[0].content


def test_env_exception_aborts_with_traceback(smol_tokenizer):
    be = ScriptedBackend(PriceEnv().reference_reply, smol_tokenizer)
    ep = run(PriceEnv(fail_on="fig"), be, smol_tokenizer, "tito", "fig")
    assert ep.status is Status.ABORTED and "price database is down" in ep.reason
    f = next(f for f in ep.all_findings() if f.kind == "env_error")
    assert "EnvError" in f.evidence["traceback"]


class BrokenBackend:
    name = "broken"

    async def generate(self, request):
        raise BackendError("connection refused by http://127.0.0.1:9")

    def describe(self):
        return {"name": self.name}


def test_backend_error_aborts(smol_tokenizer):
    ep = run(MathEnv(), BrokenBackend(), smol_tokenizer, "tito", MathEnv().tasks[0])
    assert ep.status is Status.ABORTED and "connection refused" in ep.reason and ep.n_turns == 0
    assert ep.prompt_len > 0 and len(ep.tokens) == ep.prompt_len


def test_length_stop_is_a_truncated_turn(smol_tokenizer):
    from engine.backends.base import SamplingParams

    env = MathEnv()
    be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer)
    ep = asyncio.run(run_episode(env, be, smol_tokenizer, PRESETS["tito"].with_(max_turns=2), env.tasks[0],
                                 sampling=SamplingParams(max_new_tokens=4)))
    assert ep.turns[0].generation.finish_reason == "length" and len(ep.turns[0].generation.token_ids) == 4
    assert any(f.kind == "truncated_turn" for f in ep.turns[0].findings)


def test_stepper_commit_of_edited_text(smol_tokenizer):
    env = MathEnv()
    be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=1.0, seed=2)
    st = Stepper(env, be, smol_tokenizer, LoopConfig(max_turns=3), env.tasks[0])
    st.start()
    gen = asyncio.run(st.generate())
    assert st.turns == []  # nothing committed yet
    answer = env.task(env.tasks[0]).solutions[0]
    turn = asyncio.run(st.commit(st.edited(f"Fixed: \\boxed{{{answer}}}")))
    assert turn.reward == 1.0 and st.done and st.status is Status.COMPLETED
    assert turn.generation.model == "manual" and turn.generation.text != gen.text
    assert isinstance(turn.generation, Generation)
