"""The verl-tool preset against a transcription of verl's ToolAgentLoop (tests/reference_verl.py).

Rollscope runs an episode; the transcription then runs on the very generations Rollscope's backend returned,
with its own fresh env as verl's tools and user. Prompt ids, response ids, mask, logprobs, the ids sent each
turn, turn scores and tool rewards must be equal, on the real Qwen3 tokenizer and a Qwen2.5-style template
(which injects a default system block). Then each of verl's traps, on the tokens.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
from collections.abc import Sequence
from typing import Any

import pytest

from engine.backends.base import GenerationRequest
from engine.backends.scripted import ScriptedBackend
from engine.checks import CheckOptions, with_checks
from engine.envs import gsm8k
from engine.envs.math import MathEnv
from engine.envs.retail import RetailEnv
from engine.errors import EnvError
from engine.formats import jsonl
from engine.loop import verl as verl_loop
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import RESPOND, Action, Episode, Message, Status
from engine.tokens import verl as vt
from tests import reference_verl as ref

TOKENIZERS = ["qwen3_tokenizer", "qwen25_tokenizer"]
TEASE = '<tool_call>\n{"name": "teleport", "arguments": {"to": "Zürich"}}\n</tool_call>'
WIDE = {"prompt_length": "8192", "response_length": "4096"}


class Policy:
    """The scripted policy, replies overridden at chosen turns, each generated token given its own logprob."""

    name = "scripted"

    def __init__(self, env_cls: Any, tok: Any, overrides: dict[int, str] | None = None, rate: float = 0.0,
                 seed: int = 1) -> None:
        self.overrides = overrides or {}
        ref_env = env_cls()

        def reply(task_id: str, history: Sequence[Message], rng: random.Random, mistake_rate: float) -> str:
            t = sum(1 for m in history if m.role == "assistant")
            if t in self.overrides:
                return self.overrides[t]
            return str(ref_env.reference_reply(task_id, history, rng, mistake_rate))

        self.inner = ScriptedBackend(reply, tok, mistake_rate=rate, seed=seed)
        self.requests: list[GenerationRequest] = []

    async def generate(self, request: GenerationRequest):
        self.requests.append(request)
        g = await self.inner.generate(request)
        import dataclasses

        return dataclasses.replace(g, logprobs=tuple(-0.01 * (i + 1) - 0.001 * request.turn for i in range(len(g.token_ids))))

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()


def run(env_cls: Any, tok: Any, task: int = 0, overrides: dict[int, str] | None = None, rate: float = 0.0,
        seed: int = 1, **knobs: Any) -> tuple[Episode, Policy]:
    env = env_cls()
    backend = Policy(env_cls, tok, overrides, rate, seed)
    config = PRESETS["verl-tool"].with_settings({k: str(v) for k, v in knobs.items()})
    ep = asyncio.run(run_episode(env, backend, tok, config, env.tasks[task], preset="verl-tool"))
    return ep, backend


def reference(ep: Episode, tok: Any, env_cls: Any) -> dict[str, Any]:
    """verl's loop on the episode's generations, with a fresh env as its tools and its user."""
    cfg = ep.config.loop
    gens = iter([t.generation for t in ep.turns])
    env = env_cls()
    system = env.system_prompt(ep.task_id)
    messages = ([{"role": "system", "content": system}] if system else []) + [
        {"role": m.role, "content": m.content} for m in env.reset(ep.task_id)]

    async def generate(prompt_ids: list[int]) -> tuple[list[int], list[float] | None]:
        g = next(gens)
        return list(g.token_ids), list(g.logprobs) if cfg.calculate_log_probs else None

    async def execute(name: str, args: Any) -> tuple[str, float]:
        res = env.step(Action(name, args))
        return "".join(m.content for m in res.observation), res.reward

    async def interaction(msgs: list[dict]) -> tuple[bool, str, float]:
        if env_cls is MathEnv:
            return ref.gsm8k_generate_response(msgs, str(env.task(ep.task_id).solutions[0]))
        content = msgs[-1]["content"]
        res = env.step(Action(RESPOND, {"content": content}, content))
        return res.done, "".join(m.content for m in res.observation), res.reward

    loop = ref.Loop(tok, list(env.tools), response_length=cfg.response_length,
                    max_assistant_turns=cfg.max_assistant_turns, max_user_turns=cfg.max_user_turns,
                    max_parallel_calls=cfg.max_parallel_calls, max_tool_response_length=cfg.max_tool_response_length,
                    tool_response_truncate_side=cfg.tool_response_truncate_side,
                    apply_chat_template_kwargs=json.loads(cfg.apply_chat_template_kwargs))
    return asyncio.run(loop.run(messages, generate, execute, interaction))


def assert_equal(ep: Episode, backend: Policy, want: dict[str, Any]) -> None:
    p = ep.prompt_len
    ids = ep.tokens.ids.tolist()
    assert ids[:p] == want["prompt_ids"]
    assert ids[p:] == want["response_ids"]
    assert ep.tokens.loss_mask.tolist()[p:] == want["response_mask"]
    lps = ep.tokens.logprobs.tolist()[p:]
    if want["response_logprobs"] is None:
        assert all(math.isnan(x) for x in lps)
    else:
        assert lps == pytest.approx(want["response_logprobs"])
    assert [list(r.prompt_ids) for r in backend.requests] == want["sent"]
    last = ep.turns[-1].info["verl"]
    assert last["turn_scores"] == want["extra_fields"]["turn_scores"]
    assert last["tool_rewards"] == want["extra_fields"]["tool_rewards"]
    assert last["user_turns"] + last["assistant_turns"] + 1 == want["num_turns"]
    # The record's raw tool outputs are what verl's _call_tool saw before truncation, round by round.
    assert [list(t.raw_observation) for t in ep.turns if t.raw_observation] == want["raw_observation"]
    assert not any("raw_observation" in t.info for t in ep.turns)
    # Each answering turn holds exactly one user message, the interaction's answer; done only on the reply the
    # interaction ended the episode with.
    answering = [t for t in ep.turns if t.observation and not t.raw_observation]
    assert all(len(t.observation) == 1 and t.observation[0].role == "user" for t in answering)
    assert [t.observation[0].content for t in answering] == want["answers"]
    assert [t.done for t in ep.turns] == [False] * (ep.n_turns - 1) + [want["ended_by_interaction"]]


@pytest.mark.parametrize("tname", TOKENIZERS)
def test_retail_equals_verl(request, tname):
    tok = request.getfixturevalue(tname)
    statuses = set()
    for task, rate, logprobs in ((0, 0.0, "false"), (1, 0.4, "true"), (2, 0.4, "true")):
        ep, backend = run(RetailEnv, tok, task, rate=rate, seed=task + 3, calculate_log_probs=logprobs, **WIDE)
        statuses.add(ep.status)
        assert ep.n_turns >= 3 and any(t.raw_observation for t in ep.turns)
        assert_equal(ep, backend, reference(ep, tok, RetailEnv))
    assert Status.COMPLETED in statuses


@pytest.mark.parametrize("tname", TOKENIZERS)
def test_math_equals_verl_boxed_and_hashes(request, tname):
    tok = request.getfixturevalue(tname)
    for task, overrides in ((0, {}), (1, {0: "The answer is 3.", 1: "#### 2"}), (2, None)):
        ep, backend = run(MathEnv, tok, task, overrides=overrides, rate=0.5, seed=task, calculate_log_probs="true")
        assert_equal(ep, backend, reference(ep, tok, MathEnv))


@pytest.mark.parametrize("tname", TOKENIZERS)
def test_small_response_length_cuts_a_reply_and_refuses_a_tool_result(request, tname):
    tok = request.getfixturevalue(tname)
    # A reply cut in the middle: the response is cut at response_length.
    ep, backend = run(RetailEnv, tok, 0, prompt_length=8192, response_length=70, calculate_log_probs="true")
    assert_equal(ep, backend, reference(ep, tok, RetailEnv))
    assert len(ep.tokens) == ep.prompt_len + 70 and ep.status is Status.TRUNCATED
    cut = [f for f in with_checks(ep, CheckOptions(tokenizer=tok)).all_findings() if f.kind == "response_cut_trained"]
    assert len(cut) == 1 and cut[0].evidence["cut_tokens"] > 0
    # A tool result that would reach response_length is not appended, though the tool ran.
    refused = None
    for n in range(60, 200, 7):
        ep, backend = run(RetailEnv, tok, 0, prompt_length=8192, response_length=n)
        assert_equal(ep, backend, reference(ep, tok, RetailEnv))
        if "refused_tokens" in ep.turns[-1].info:
            refused = ep
            break
    assert refused is not None and refused.turns[-1].raw_observation
    assert refused.segments[-1].kind == "assistant"


@pytest.mark.parametrize("side,marker", [("left", "...(truncated)"), ("right", "(truncated)..."),
                                         ("middle", "...(truncated)...")])
def test_long_tool_output_truncated_on_each_side(qwen3_tokenizer, side, marker):
    ep, backend = run(RetailEnv, qwen3_tokenizer, 0, max_tool_response_length=40, tool_response_truncate_side=side,
                      **WIDE)
    assert_equal(ep, backend, reference(ep, qwen3_tokenizer, RetailEnv))
    turn = next(t for t in ep.turns if t.info.get("truncated"))
    raw, text = turn.raw_observation[0], turn.observation[0].content
    assert len(raw) > 40 and turn.info["truncated"] == [len(raw)]
    want = {"left": raw[:40] + marker, "right": marker + raw[-40:], "middle": raw[:20] + marker + raw[-20:]}[side]
    assert text == want


def test_malformed_call_two_calls_and_unknown_tool(qwen25_tokenizer, qwen3_tokenizer):
    two = ('<tool_call>\n{"name": "find_user_id_by_email", "arguments": {"email": "nobody@example.com"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "x"}}\n</tool_call>')
    overrides = {0: '<tool_call>\n{"name": "find_user_id_by_email"}\n</tool_call>',  # no arguments: dropped
                 1: two,
                 2: '<tool_call>\n{"name": "teleport", "arguments": {"to": "Zürich"}}\n</tool_call>'}
    for tok in (qwen25_tokenizer, qwen3_tokenizer):
        ep, backend = run(RetailEnv, tok, 0, overrides=overrides, **WIDE)
        assert_equal(ep, backend, reference(ep, tok, RetailEnv))
        t0, t1, t2 = ep.turns[:3]
        # The malformed call is dropped; with no valid call the reply goes to the user (the interaction).
        assert t0.info["dropped"][0]["why"].endswith("no arguments") and t0.raw_observation == ()
        assert t0.observation[0].role == "user"
        assert not t0.findings  # the checks name the dropped call on its tokens (tests/test_checks_verl.py)
        # Two calls, max_parallel_calls 1: the second never runs.
        assert len(t1.raw_observation) == 1 and "max_parallel_calls=1" in t1.info["dropped"][0]["why"]
        assert t1.info["dropped"][0]["call"]["name"] == "get_user_details"
        # An unknown tool answers verl's error text, never truncated, tool reward 0.0.
        assert t2.observation[0].content == "Error when executing tool: 'teleport'"
        assert t2.raw_observation == ("Error when executing tool: 'teleport'",)


def test_no_newline_after_im_end_and_the_system_block_cut(qwen3_tokenizer, qwen25_tokenizer):
    for tok in (qwen3_tokenizer, qwen25_tokenizer):
        ep, _ = run(RetailEnv, tok, 0, **WIDE)
        text = tok.decode(ep.tokens.ids[ep.prompt_len:].tolist())
        assert "<|im_end|><|im_start|>user\n" in text and "<|im_end|>\n<|im_start|>user" not in text
        # Every answer starts right at its own turn: the default system block was cut away whole.
        for seg in ep.segments:
            if seg.kind in ("user", "tool"):
                assert tok.decode(ep.tokens.ids[seg.start:seg.end].tolist()).startswith("<|im_start|>user\n")
        assert "You are Qwen" not in text
    assert vt.system_prompt_ids(qwen3_tokenizer) == []
    block = qwen25_tokenizer.decode(vt.system_prompt_ids(qwen25_tokenizer))
    assert block == "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"


def test_enable_thinking_false_through_the_chat_template_kwargs(qwen3_tokenizer):
    kw = '{"enable_thinking": false}'
    ep, backend = run(MathEnv, qwen3_tokenizer, 1, overrides={0: "It is 3."}, apply_chat_template_kwargs=kw)
    assert ep.config.loop.apply_chat_template_kwargs == kw
    assert_equal(ep, backend, reference(ep, qwen3_tokenizer, MathEnv))
    user = next(s for s in ep.segments if s.kind == "user")
    # The answer's own render carries the empty think block of the next generation prompt.
    assert qwen3_tokenizer.decode(ep.tokens.ids[user.start:user.end].tolist()).endswith(
        "<|im_start|>assistant\n<think>\n\n</think>\n\n")


def test_gsm8k_interaction_flexible_and_verls_strict_score(smol_tokenizer):
    truth = str(MathEnv().task(MathEnv().tasks[0]).solutions[0])
    boxed = f"So the answer is \\boxed{{{truth}}}."
    # The interaction prefixes '#### ' and takes the last number: a boxed answer is "correct" there...
    assert verl_loop.gsm8k_interaction(boxed, truth) == (True, "Your response is correct!", 1.0)
    assert ref.gsm8k_generate_response([{"role": "assistant", "content": boxed}], truth)[0] is True
    # ...while verl's default gsm8k reward (strict) refuses it: no '#### N'.
    assert gsm8k.gsm8k_score(boxed, truth) == ref.compute_score(boxed, truth) == 0.0
    assert gsm8k.gsm8k_score(f"#### {truth}", truth) == 1.0
    for text in (f"#### 1,{truth}", f"#### {truth}.0", "x" * 400 + f"#### {truth}", f"#### {truth}" + "x" * 300,
                 f"#### 3 then #### {truth}", "no number", "#### -.", f"$ #### ${truth}"):
        for method in ("strict", "flexible"):
            assert gsm8k.gsm8k_extract(text, method) == ref.extract_solution(text, method), (text, method)
    wrong = verl_loop.gsm8k_interaction("I think 0.", "7")
    assert wrong == (False, "Your response is incorrect! You need to reflect on your answer and try again.", 0.0)
    ep, _ = run(MathEnv, smol_tokenizer, 0, overrides={0: boxed})
    info = ep.turns[0].info
    assert info["strict_score"] == 0.0 and info["ours"]["success"] is True and ep.turns[0].reward == 1.0
    assert ep.ground_truth == truth and "ground_truth" not in info["verl"]


def test_tool_schemas_are_verls_pydantic_dump():
    tools = list(RetailEnv().tools)
    ours = vt.verl_tool_schemas(tools)
    theirs = [ref.OpenAIFunctionToolSchema.model_validate(t).model_dump(exclude_unset=True, exclude_none=True)
              for t in tools]
    assert json.dumps(ours) == json.dumps(theirs)  # key order too
    nested = [p for t in tools for p in t["function"]["parameters"]["properties"].values() if "items" in p]
    assert nested and not any("items" in p for t in ours for p in t["function"]["parameters"]["properties"].values())
    with pytest.raises(vt.SchemaRefused, match="required"):
        vt.verl_tool_schema({"type": "function", "function": {"name": "f", "description": "d",
                                                              "parameters": {"type": "object", "properties": {}}}})


def test_a_prompt_longer_than_prompt_length_fails_naming_both_and_the_knob(qwen3_tokenizer):
    ep, backend = run(RetailEnv, qwen3_tokenizer, 0)
    assert ep.status is Status.FAILED and not backend.requests and ep.n_turns == 0
    assert f"the prompt is {ep.prompt_len} tokens" in ep.reason and "prompt_length=512" in ep.reason
    assert "--set prompt_length=" in ep.reason and ep.prompt_len > 2500


def test_termination_order_and_turn_limits(smol_tokenizer):
    ep, _ = run(MathEnv, smol_tokenizer, 0, overrides={0: "no", 1: "no", 2: "no"}, max_assistant_turns=2)
    assert ep.n_turns == 2 and ep.reason == "reached max_assistant_turns=2"
    ep, _ = run(MathEnv, smol_tokenizer, 0, overrides={0: "no", 1: "no", 2: "no"}, max_user_turns=1)
    assert ep.n_turns == 2 and ep.reason == "reached max_user_turns=1"


def test_a_reply_the_final_cut_removes_whole_ends_at_the_tokens_and_round_trips(smol_tokenizer):
    # The first reply and the user's answer already pass response_length=9: the cut keeps 9 response tokens,
    # so the second reply has none left, and its turn's prompt_len sits at the end of the array.
    ep, _ = run(MathEnv, smol_tokenizer, 0, overrides={0: "The answer is 3.", 1: "The answer is 4."},
                response_length=9, prompt_length=4096)
    n = len(ep.tokens)
    assert n == ep.prompt_len + 9 and ep.status is Status.TRUNCATED
    assert [t.prompt_len for t in ep.turns][-1] == n
    assert all(0 <= t.prompt_len <= n for t in ep.turns)
    # The first turn's segments (its reply, the user's answer) were laid before the cut: it reaches them too.
    assert max(seg.end for seg in ep.turns[0].segments) == n
    assert all(seg.start < seg.end <= n for t in ep.turns for seg in t.segments)
    back = jsonl.parse_line(jsonl.dumps(ep), "verl.jsonl:1")
    assert [t.prompt_len for t in back.turns] == [t.prompt_len for t in ep.turns]
    assert back.tokens.ids.tolist() == ep.tokens.ids.tolist()


def test_the_server_budget_is_prompt_plus_response_length_minus_the_context(smol_tokenizer):
    ep, backend = run(MathEnv, smol_tokenizer, 0, overrides={0: "no"}, prompt_length=512, response_length=64)
    first = backend.requests[0]
    assert first.sampling.max_new_tokens == min(512 + 64 - ep.prompt_len, first.sampling.max_new_tokens)
    assert backend.requests[1].sampling.max_new_tokens == 512 + 64 - len(backend.requests[1].prompt_ids)


def test_env_failure_in_a_tool_is_verls_error_text(qwen3_tokenizer, monkeypatch):
    real = RetailEnv.step

    def step(self, action):
        if action.name == "find_user_id_by_email":
            raise EnvError("database is down")
        return real(self, action)

    monkeypatch.setattr(RetailEnv, "step", step)
    ep, _ = run(RetailEnv, qwen3_tokenizer, 0, **WIDE)
    turn = next(t for t in ep.turns if t.raw_observation)
    assert turn.observation[0].content == "Error when executing tool: database is down"
    assert turn.info["verl"]["tool_rewards"][-1] == 0.0


def test_presets_shows_verls_knobs_rewards_and_the_prompt_length_warning(capsys, tmp_path):
    from engine.cli.main import main
    from engine.presets import load_config_file

    assert main(["presets", "verl-tool"]) == 0
    out = capsys.readouterr().out
    for line in ("response_length = 512", "prompt_length = 512", "max_assistant_turns = None",
                 "max_user_turns = None", "max_parallel_calls = 1", "max_tool_response_length = 256",
                 "tool_response_truncate_side = 'middle'", "format = 'hermes'", "calculate_log_probs = False",
                 "apply_chat_template_kwargs = '{}'"):
        assert f"  {line}\n" in out
    assert "verl's gsm8k interaction score (verl's" in out and "math checker" in out and "ours" in out
    assert "retail and tau-bench prompts (about 2,900 tokens" in out and "--set prompt_length=4096" in out
    cfg = PRESETS["verl-tool"].with_settings({"max_user_turns": "3", "tool_response_truncate_side": "left",
                                              "apply_chat_template_kwargs": '{"enable_thinking": false}'})
    assert (cfg.max_user_turns, cfg.tool_response_truncate_side) == (3, "left")
    f = tmp_path / "v.json"
    f.write_text(json.dumps({"base": "verl-tool", "knobs": {"response_length": 1024, "calculate_log_probs": True}}))
    name, cfg = load_config_file(f)
    assert (name, cfg.response_length, cfg.calculate_log_probs) == ("verl-tool", 1024, True)
    from engine.errors import ConfigError

    for bad in ({"tool_response_truncate_side": "top"}, {"apply_chat_template_kwargs": "[1]"},
                {"response_length": "0"}):
        with pytest.raises(ConfigError):
            PRESETS["verl-tool"].with_settings(bad)
    ep, _ = run(MathEnv, _smol(), 0, max_user_turns=4)
    assert ep.config.loop.to_dict()["max_user_turns"] == 4 and ep.preset == "verl-tool"


def _smol() -> Any:
    from engine.backends.tokenizers import load_tokenizer

    return load_tokenizer(None)


@pytest.mark.parametrize("tname", TOKENIZERS)
def test_taubench_under_verl_tool_equals_verl(request, tname, fake_tau_bench):
    """A tau-bench env under verl-tool: its tools as verl's schemas render them, its user as the interaction."""
    from engine.envs.taubench import TauBenchEnv

    tok = request.getfixturevalue(tname)

    def make() -> TauBenchEnv:
        return TauBenchEnv("retail")

    for task, overrides in ((0, {}), (1, {1: TEASE}), (2, {})):
        ep, backend = run(make, tok, task, overrides=overrides, calculate_log_probs="true", **WIDE)
        assert ep.env == "taubench:retail" and ep.preset == "verl-tool" and ep.n_turns >= 3
        assert_equal(ep, backend, reference(ep, tok, make))
        prompt = tok.decode(ep.tokens.ids[: ep.prompt_len].tolist())
        for schema in vt.verl_tool_schemas(make().tools):
            assert json.dumps(schema, ensure_ascii=False) in prompt  # the pydantic dump, as verl's template gets it
        assert ep.tools == tuple(make().tools) and any(t.raw_observation for t in ep.turns)
        answers = [t.observation[0].content for t in ep.turns if t.observation and not t.raw_observation]
        assert answers and ep.turns[-1].done == (ep.status is Status.COMPLETED)
        if overrides:
            assert "Error when executing tool: 'teleport'" in ep.turns[1].raw_observation
        else:
            assert ep.status is Status.COMPLETED and ep.reward == 1.0


def test_rollscope_run_taubench_under_verl_tool(tmp_path):
    import os
    import subprocess
    import sys

    from tests.conftest import FAKE_TAUBENCH, ROOT

    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{FAKE_TAUBENCH}"}
    db = tmp_path / "t.db"
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "run", "--env", "taubench:retail", "--preset", "verl-tool",
                           "--tasks", "0:3", "--mistake-rate", "0", "--set", "prompt_length=8192", "--db", str(db),
                           "--quiet"], capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "3 episodes (completed 3), mean reward 1.000" in proc.stdout
    from engine.store import Store

    store = Store(db)
    try:
        eps = list(store.iter_episodes())
    finally:
        store.close()
    assert {e.preset for e in eps} == {"verl-tool"} and all(e.config.loop.token_mode == "verl" for e in eps)
    assert all(e.config.loop.prompt_length == 8192 and any(t.raw_observation for t in e.turns) for e in eps)


def test_replay_reproduces_verl_episodes_and_names_what_changed(qwen3_tokenizer):
    """Replay makes each turn's answer as verl's loop made it (its tool messages cut as verl cuts them, an unknown
    tool's error, the gsm8k interaction on math): a verl-tool episode reproduces, where the env's own words read as
    a divergence at turn 0 of every episode; a stored answer that differs is named at its turn."""
    from dataclasses import replace

    from engine.loop.replay import replay_stored

    two = ('<tool_call>\n{"name": "find_user_id_by_email", "arguments": {"email": "nobody@example.com"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "x"}}\n</tool_call>')
    overrides = {1: two, 2: '<tool_call>\n{"name": "teleport", "arguments": {"to": "Zürich"}}\n</tool_call>'}
    retail, _ = run(RetailEnv, qwen3_tokenizer, 0, overrides=overrides, max_tool_response_length="40", **WIDE)
    assert retail.turns[2].observation[0].content == "Error when executing tool: 'teleport'"
    assert any(t.info.get("truncated") for t in retail.turns)  # a tool output cut at 40 characters
    math_ep, _ = run(MathEnv, qwen3_tokenizer, 1, overrides={0: "I think it is 99999."}, **WIDE)
    assert any(t.observation and t.observation[0].content == verl_loop.VERL_GSM8K_WRONG for t in math_ep.turns)
    for ep in (retail, math_ep):
        res = asyncio.run(replay_stored(ep))
        assert res.reproducible and res.reproduced, (ep.env, res.headline())
        assert res.reward_reproduced and res.replayed_reward == ep.turns[-1].reward
    # A stored tool output that differs from what the env says now: named at its turn, the rest reproduces.
    k = next(t.index for t in retail.turns if t.raw_observation and not t.observation[0].content.startswith("Error"))
    changed = [replace(t, observation=(Message("tool", "{}"),)) if t.index == k else t for t in retail.turns]
    res = asyncio.run(replay_stored(retail.evolve(turns=tuple(changed))))
    assert not res.reproduced and res.divergence is not None and res.divergence.turn == k
    assert res.divergence.field == "observation" and res.reward_reproduced
    # A stored interaction answer that is not verl's: named too.
    k = next(t.index for t in math_ep.turns if t.observation)
    changed = [replace(t, observation=(Message("user", "Your answer is correct."),)) if t.index == k else t
               for t in math_ep.turns]
    res = asyncio.run(replay_stored(math_ep.evolve(turns=tuple(changed))))
    assert res.divergence is not None and (res.divergence.turn, res.divergence.field) == (k, "observation")
