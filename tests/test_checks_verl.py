"""verl's traps named by the checks at the token, on real runs of the verl-tool preset.

Each trap is read off the episode's data (ids, mask, knobs, the template rendered again): the finding's kind,
turn and first token are computed here from the episode's own segments and generations, its root and
consequence links asserted, and the same generations replayed under ``tito`` get none of these kinds.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from engine.checks import CheckOptions, raw_observations, with_checks
from engine.checks.diagnosis import consequences, diagnosis, roots
from engine.envs.math import MathEnv
from engine.envs.retail import RetailEnv
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Episode, Finding, Generation, Severity
from engine.store import Store
from engine.tokens import verl as vt
from tests import reference_verl as ref
from tests.fakes import Replay
from tests.templates import DATED_STYLE, SMOLLM3_STYLE
from tests.test_verl_preset import WIDE, run

VERL_KINDS = {"im_end_newline_missing", "system_cut_wrong", "think_kept", "response_cut_trained",
              "tool_result_truncated", "tool_call_dropped", "strict_score_refused"}


def checked(ep: Episode, tok: Any) -> list[Finding]:
    """The episode's findings after the checks, which checking the checked episode again leaves as they are."""
    once = with_checks(ep, CheckOptions(tokenizer=tok))
    again = with_checks(once, CheckOptions(tokenizer=tok))
    assert [f.to_dict() for f in again.all_findings()] == [f.to_dict() for f in once.all_findings()]
    return list(once.all_findings())


def of(found: list[Finding], kind: str) -> list[Finding]:
    return [f for f in found if f.kind == kind]


def under_tito(ep: Episode, env_cls: Any, tok: Any) -> list[Finding]:
    """The same generations through the tito preset, checked."""
    env = env_cls()
    gens = [t.generation for t in ep.turns if t.generation is not None]
    tito = asyncio.run(run_episode(env, Replay(gens), tok, PRESETS["tito"], ep.task_id, preset="tito"))
    assert tito.n_turns >= 1
    return checked(tito, tok)


def answer_starts(ep: Episode) -> list[int]:
    """Where each answer verl appended after a reply starts (from the segments)."""
    return [s.start for s in ep.segments if s.kind in ("user", "tool")]


@pytest.mark.parametrize("tname", ["qwen3_tokenizer", "qwen25_tokenizer", "smol_tokenizer"])
def test_missing_newline_after_im_end_is_one_run_level_root(request, tmp_path, tname):
    tok = request.getfixturevalue(tname)
    store = Store(tmp_path / "v.db")
    for task in range(3):
        ep, _ = run(RetailEnv if task < 2 else MathEnv, tok, task, rate=0.3, seed=task,
                    calculate_log_probs="true" if task == 1 else "false", **WIDE)
        found = checked(ep, tok)
        [nl] = of(found, "im_end_newline_missing")
        starts = answer_starts(ep)
        assert nl.token_start == starts[0] and nl.turn == 0 and nl.caused_by is None
        assert nl.evidence["positions"] == starts  # every answer, each right after the reply's <|im_end|>
        assert all(ep.tokens.ids[p - 1] == tok.convert_tokens_to_ids("<|im_end|>") for p in starts)
        assert nl.evidence["template_gives"].startswith("<|im_end|>\n<|im_start|>user")
        assert nl.evidence["ids_give"].startswith("<|im_end|><|im_start|>user")
        # The rendering check sees the same token; it follows from the newline, as does nothing else.
        [tnr] = of(found, "tokens_not_rendering")
        assert tnr.token_start == nl.token_start and tnr.caused_by == nl.id
        assert [r.kind for r in roots(found) if r.severity is Severity.ERROR] == ["im_end_newline_missing"]
        assert not of(found, "system_cut_wrong")  # these templates' default block is what verl measured
        store.save_episode(with_checks(ep, CheckOptions(tokenizer=tok)).evolve(id=f"v{task:015d}", run_id="runV"))
        assert not VERL_KINDS & {f.kind for f in under_tito(ep, RetailEnv if task < 2 else MathEnv, tok)}
    # Said once for the run: every episode has it.
    assert "im_end_newline_missing" in store.run_level_kinds(["runV"])["runV"][1]
    store.close()


def _copy(tok: Any) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tok.name_or_path)


@pytest.mark.parametrize("style,kwargs,kind", [
    (SMOLLM3_STYLE, '{"enable_thinking": false}', "lost"),
    (DATED_STYLE, '{"date_string": "Thursday, 26 November 2026, 15:00 UTC"}', "left"),
], ids=["smollm3-no-thinking-loses", "dated-leaves-system-text"])
def test_the_system_cut_that_took_the_wrong_length(qwen3_tokenizer, style, kwargs, kind):
    import json

    tok = _copy(qwen3_tokenizer)
    tok.chat_template = style
    ep, _ = run(MathEnv, tok, 1, overrides={0: "It is 3."}, apply_chat_template_kwargs=kwargs, **WIDE)
    found = checked(ep, tok)
    [cut] = of(found, "system_cut_wrong")
    first = answer_starts(ep)[0]
    assert cut.token_start == first and cut.turn == 0 and cut.caused_by is None and cut.severity is Severity.ERROR
    # What verl measured (its initialize_system_prompt, transcribed) and this render's own block.
    measured = len(ref.initialize_system_prompt(tok))
    answer = ep.turns[0].observation[0].content
    full = vt._ids(tok.apply_chat_template([{"role": "user", "content": answer}], add_generation_prompt=True,
                                           tokenize=True, **json.loads(kwargs)))
    block = full.index(tok.convert_tokens_to_ids("<|im_start|>"), 1)
    assert (cut.evidence["cut"], cut.evidence["block"]) == (measured, block)
    assert (measured > block) == (kind == "lost")
    text = tok.decode(full[min(measured, block) : max(measured, block)])
    assert cut.evidence[kind] == text
    if kind == "lost":
        assert text.startswith("<|im_start|>user\nYour response is incorrect!")
    else:
        assert text.endswith("You are a helpful assistant.<|im_end|>\n")
        assert tok.decode(ep.tokens.ids[first : first + cut.evidence["tokens"]].tolist()) == text
    assert len(cut.evidence["positions"]) == len(answer_starts(ep)) or kind == "lost"
    # The rendering and mask findings from there on fold under it; the newline is a root of its own.
    for f in found:
        if f.kind in ("tokens_not_rendering", "mask_misaligned") and f.token_start == first:
            assert f.caused_by == cut.id
    assert {r.kind for r in roots(found) if r.severity is Severity.ERROR} <= {"system_cut_wrong",
                                                                            "im_end_newline_missing"}
    assert not VERL_KINDS & {f.kind for f in under_tito(ep, MathEnv, tok)}


class Thinking:
    """A reasoning model: each reply opens with a <think> block; wrong twice, then the reference answer."""

    name = "thinking"

    def __init__(self, tok: Any) -> None:
        self.tok, self.env = tok, MathEnv()

    async def generate(self, request: Any) -> Generation:
        import random

        answer = "It is 3." if request.turn < 2 else self.env.reference_reply(
            request.task_id, request.messages, random.Random(0), 0.0)
        text = f"<think>\nTurn {request.turn}: check the arithmetic twice.\n</think>\n\n{answer}<|im_end|>"
        ids = self.tok.encode(text, add_special_tokens=False)
        return Generation(text=text, token_ids=tuple(ids), logprobs=tuple(-0.25 for _ in ids), finish_reason="stop")

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


def test_think_blocks_the_template_drops_are_kept(qwen3_tokenizer):
    tok = qwen3_tokenizer
    env = MathEnv()
    config = PRESETS["verl-tool"].with_settings({"prompt_length": "4096"})
    ep = asyncio.run(run_episode(env, Thinking(tok), tok, config, env.tasks[1], preset="verl-tool"))
    replies = [s for s in ep.segments if s.kind == "assistant"]
    assert len(replies) == 3
    found = checked(ep, tok)
    [think] = of(found, "think_kept")
    open_id = tok.convert_tokens_to_ids("<think>")
    assert ep.tokens.ids[replies[0].start] == open_id
    assert think.token_start == replies[0].start and think.turn == 0 and think.caused_by is None
    assert think.evidence["positions"] == [s.start for s in replies[:-1]]  # every reply a later turn reads
    assert think.evidence["turns"] == [0, 1]
    assert think.evidence["template_gives"] == "It is 3."  # reply 0's text, the template's think block dropped
    assert think.evidence["kept"] == "<think>\nTurn 0: check the arithmetic twice.\n</think>"
    assert not VERL_KINDS & {f.kind for f in under_tito(ep, MathEnv, tok)}


def test_enable_thinking_false_keeps_the_empty_think_block_of_each_generation_prompt(qwen3_tokenizer):
    tok = qwen3_tokenizer
    ep, _ = run(MathEnv, tok, 1, overrides={0: "It is 3."}, apply_chat_template_kwargs='{"enable_thinking": false}',
                **WIDE)
    found = checked(ep, tok)
    [think] = of(found, "think_kept")
    first = next(s for s in ep.segments if s.kind == "assistant")
    # The empty think block the generation prompt wrote before reply 0 (the prompt's last tokens).
    assert tok.decode(ep.tokens.ids[think.token_start : first.start].tolist()) == "<think>\n\n</think>\n\n"
    assert think.turn == 0 and think.evidence["turns"] == [0]
    # Reply 0 held against the template's reply 0 (the episode ends on a generation prompt, its own empty think
    # block, which is no reply of the conversation).
    assert think.evidence["template_gives"] == "It is 3."
    # The empty think block is template text, never trained: the mask check says nothing of it.
    assert not of(found, "mask_misaligned") and not of(found, "system_cut_wrong")


def test_a_reply_cut_by_response_length_is_trained_up_to_the_cut(qwen3_tokenizer):
    tok = qwen3_tokenizer
    ep, _ = run(RetailEnv, tok, 0, prompt_length=8192, response_length=70, calculate_log_probs="true")
    n = len(ep.tokens)
    last = [s for s in ep.segments if s.kind == "assistant"][-1]
    assert n == ep.prompt_len + 70 and last.end == n and ep.tokens.loss_mask[last.start : n].all()
    found = checked(ep, tok)
    [cut] = of(found, "response_cut_trained")
    gen = ep.turns[last.turn].generation.token_ids
    assert (cut.token_start, cut.token_end, cut.turn) == (last.start, n, last.turn) and cut.evidence["cut_at"] == n
    assert cut.evidence["kept"] == n - last.start and cut.evidence["cut_tokens"] == len(gen) - (n - last.start)
    assert cut.caused_by is None and cut.severity is Severity.WARNING
    assert not of(found, "truncated_turn")  # one finding for one cut
    # The episode ended there for the same reason: one diagnosis entry, the cut.
    [ended] = of(found, "truncated_episode")
    assert "response_length=70" in ended.message and ended.caused_by == cut.id
    assert [r.kind for r in roots(found) if r.severity is not Severity.INFO] == ["im_end_newline_missing",
                                                                                 "response_cut_trained"]
    assert "the episode was cut" not in diagnosis(found) and "response_length" in diagnosis(found)
    assert not of(found, "retokenization_drift")  # the kept ids are the generated ones, up to the cut
    # A reply that ends on its <|im_end|> exactly at the limit is whole; in a record without its generations
    # (a row verl wrote) and without a tokenizer to tell its end-of-turn id, the check says it did not look
    # rather than calling it cut.
    truth = str(MathEnv().task(MathEnv().tasks[0]).solutions[0])
    one, _ = run(MathEnv, tok, 0, overrides={0: f"#### {truth}"}, max_assistant_turns=1, **WIDE)
    assert one.tokens.ids[-1] == tok.convert_tokens_to_ids("<|im_end|>") and one.tokens.loss_mask[-1] == 1
    exact = one.evolve(turns=(), segments=(), messages=one.messages[:-1], config=dataclasses.replace(
        one.config, loop=dataclasses.replace(one.config.loop, response_length=len(one.tokens) - one.prompt_len)))
    assert not of(checked(exact, tok), "response_cut_trained")
    blind = list(with_checks(exact, CheckOptions()).all_findings())
    assert not of(blind, "response_cut_trained")
    assert [f.message for f in blind if f.evidence.get("check") == "response_cut_trained"] == \
        ["response_cut_trained: not checked: no tokenizer to tell a reply's end-of-turn token"]
    # A reply that ends inside the budget is not cut.
    whole, _ = run(RetailEnv, tok, 0, **WIDE)
    assert not of(checked(whole, tok), "response_cut_trained")
    assert not VERL_KINDS & {f.kind for f in under_tito(ep, RetailEnv, tok)}


def test_a_truncated_tool_result_is_info_on_its_tokens_with_the_raw_length(qwen3_tokenizer):
    tok = qwen3_tokenizer
    ep, _ = run(RetailEnv, tok, 0, max_tool_response_length=40, tool_response_truncate_side="left", **WIDE)
    found = checked(ep, tok)
    cut = of(found, "tool_result_truncated")
    turns = [t for t in ep.turns if (raw_observations(t) or [""])[0][40:]]
    assert [f.turn for f in cut] == [t.index for t in turns] and turns
    for f, t in zip(cut, turns, strict=True):
        seg = next(s for s in ep.segments if s.kind == "tool" and s.turn == t.index)
        assert seg.start < f.token_start < f.token_end < seg.end and f.severity is Severity.INFO
        # On the tool's own text, not on the answer's markup around it.
        assert _spells(tok, ep, f, t.observation[0].content)
        assert f.evidence["raw_length"] == len(raw_observations(t)[0]) and f.evidence["kept"] == 40
    # Two results in one answer: each on its own tokens (the same text twice).
    call = '<tool_call>\n{"name": "get_order_details", "arguments": {"order_id": "#W3479475"}}\n</tool_call>'
    both, _ = run(RetailEnv, tok, 0, overrides={3: f"{call}\n{call}"}, max_parallel_calls=2,
                  max_tool_response_length=40, tool_response_truncate_side="left", **WIDE)
    pair = [f for f in of(checked(both, tok), "tool_result_truncated") if f.turn == 3]
    texts = [m.content for m in both.turns[3].observation]
    assert len(pair) == 2 and texts[0] == texts[1] and pair[0].token_end <= pair[1].token_start
    assert all(_spells(tok, both, f, text) for f, text in zip(pair, texts, strict=True))
    # Without the raw outputs (an import that lacks them) the marker still says so, the raw length unknown.
    field = {"raw_observation": ()} if hasattr(ep.turns[0], "raw_observation") else {}
    bare = ep.evolve(turns=tuple(dataclasses.replace(t, info={k: v for k, v in t.info.items()
                                                             if k != "raw_observation"}, **field)
                                 for t in ep.turns))
    again = of(checked(bare, tok), "tool_result_truncated")
    assert [f.turn for f in again] == [f.turn for f in cut] and all(f.evidence["raw_length"] is None for f in again)
    # Short results are not said.
    whole, _ = run(RetailEnv, tok, 0, max_tool_response_length=100000, **WIDE)
    assert not of(checked(whole, tok), "tool_result_truncated")
    assert not VERL_KINDS & {f.kind for f in under_tito(ep, RetailEnv, tok)}


def _spells(tok: Any, ep: Episode, f: Finding, text: str) -> bool:
    """Whether the finding's tokens spell ``text``, give or take the newline a token shares with it."""
    got = tok.decode(ep.tokens.ids[f.token_start : f.token_end].tolist())
    return text in got and len(got) <= len(text) + 2 and "<" not in got.replace(text, "")


def test_dropped_tool_calls_say_which_and_why_on_their_tokens(tmp_path, qwen3_tokenizer, qwen25_tokenizer):
    two = ('<tool_call>\n{"name": "find_user_id_by_email", "arguments": {"email": "nobody@example.com"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "x"}}\n</tool_call>')
    overrides = {0: '<tool_call>\n{"name": "find_user_id_by_email"}\n</tool_call>', 1: two}
    for tok in (qwen3_tokenizer, qwen25_tokenizer):
        ep, _ = run(RetailEnv, tok, 0, overrides=overrides, **WIDE)
        found = checked(ep, tok)
        drops = of(found, "tool_call_dropped")
        assert [f.turn for f in drops] == [0, 1]  # one finding a turn, none from the loop beside it
        # Checked again as `rollscope check` does, from the stored record its last check wrote: the same findings.
        store = Store(tmp_path / f"{len(tok)}.db")
        again = ep
        for k in range(3):
            store.save_episode(with_checks(again, CheckOptions(tokenizer=tok)).evolve(id=f"d{k:015d}", run_id="runD"))
            again = store.get_episode(f"d{k:015d}")
            assert [f.to_dict() for f in again.all_findings()] == [f.to_dict() for f in found]
        store.close()
        open_id = tok.convert_tokens_to_ids("<tool_call>")
        a0, a1 = (next(s for s in ep.segments if s.kind == "assistant" and s.turn == k) for k in (0, 1))
        opens1 = [i for i in range(a1.start, a1.end) if ep.tokens.ids[i] == open_id]
        assert drops[0].token_start == a0.start and ep.tokens.ids[a0.start] == open_id
        assert drops[1].token_start == opens1[1]  # the second call, the one past max_parallel_calls
        assert drops[0].evidence["dropped"][0]["why"] == "the hermes parser drops it: no arguments"
        assert drops[1].evidence["dropped"][0]["call"]["name"] == "get_user_details"
        assert "max_parallel_calls=1" in drops[1].message and "get_user_details" in drops[1].message
        # The loop's record agrees with what the checks read off the ids.
        assert [d["why"] for d in ep.turns[1].info["dropped"]] == [d["why"] for d in drops[1].evidence["dropped"]]
        # One cause recurring: the second follows from the first.
        assert drops[0].caused_by is None and drops[1].caused_by == drops[0].id
        assert consequences(found, drops[0]) == [drops[1]]
        assert not VERL_KINDS & {f.kind for f in under_tito(ep, RetailEnv, tok)}


def test_a_boxed_answer_our_checker_accepts_and_verls_strict_score_refuses(smol_tokenizer, qwen3_tokenizer):
    for tok in (smol_tokenizer, qwen3_tokenizer):
        truth = str(MathEnv().task(MathEnv().tasks[0]).solutions[0])
        ep, _ = run(MathEnv, tok, 0, overrides={0: f"So the answer is \\boxed{{{truth}}}."})
        found = checked(ep, tok)
        [strict] = of(found, "strict_score_refused")
        a0 = next(s for s in ep.segments if s.kind == "assistant")
        assert strict.turn == 0 and strict.caused_by is None and a0.start < strict.token_start < a0.end
        assert tok.decode(ep.tokens.ids[strict.token_start : a0.end].tolist()).lstrip().startswith("\\boxed")
        assert strict.evidence["extracted"] == truth and strict.evidence["strict"] is None
        assert strict.evidence["flexible"] == truth  # what verl's interaction took: "correct" there
        # Said as the record shows it: the interaction's verdict and reward, then the reward manager's score.
        assert ep.turns[0].reward == 1.0 and ep.turns[0].observation[0].content == "Your response is correct!"
        assert "verl's gsm8k interaction (flexible score) accepted it, reward 1;" in strict.message
        assert "verl's reward manager on gsm8k data (strict score: the last '#### N' in the last 300 characters " \
            "of the response) would give 0" in strict.message
        # '#### N' is what the strict score takes: nothing to say.
        hashes, _ = run(MathEnv, tok, 0, overrides={0: f"So the answer is \\boxed{{{truth}}}.\n#### {truth}"})
        assert not of(checked(hashes, tok), "strict_score_refused")
        assert not VERL_KINDS & {f.kind for f in under_tito(ep, MathEnv, tok)}


def test_a_record_without_its_turns_is_checked_from_its_ids_mask_and_knobs(qwen3_tokenizer):
    """What a verl dump holds: ids, mask, the knobs; no turn records, no segments. The traps read the same."""
    tok = _copy(qwen3_tokenizer)
    tok.chat_template = DATED_STYLE
    two = ('<tool_call>\n{"name": "find_user_id_by_email", "arguments": {"email": "nobody@example.com"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "x"}}\n</tool_call>')
    kw = '{"date_string": "Thursday, 26 November 2026, 15:00 UTC"}'
    for knobs in ({"response_length": "4096"}, {"response_length": "300"}):
        ep, _ = run(RetailEnv, tok, 0, overrides={1: two}, apply_chat_template_kwargs=kw, prompt_length=8192,
                    max_tool_response_length=40, **knobs)
        first = next(i for i, m in enumerate(ep.messages) if m.role == "assistant")
        bare = ep.evolve(turns=(), segments=(), messages=ep.messages[:first])
        live = {(f.kind, f.token_start, f.turn) for f in checked(ep, tok) if f.kind in VERL_KINDS}
        found = checked(bare, tok)
        assert {(f.kind, f.token_start, f.turn) for f in found if f.kind in VERL_KINDS} == live
        kinds = {k for k, _, _ in live}
        assert {"im_end_newline_missing", "system_cut_wrong", "tool_call_dropped"} <= kinds
        cut_short = knobs["response_length"] == "300"
        assert ("response_cut_trained" in kinds) == cut_short and ("tool_result_truncated" in kinds) != cut_short
        assert all(f.evidence["raw_length"] is None for f in of(found, "tool_result_truncated"))


def test_an_answer_the_cut_ate_whole_is_named_where_it_should_start(qwen3_tokenizer):
    tok = _copy(qwen3_tokenizer)
    tok.chat_template = SMOLLM3_STYLE
    truth = str(MathEnv().task(MathEnv().tasks[0]).solutions[0])
    # Right at once: verl's answer ("Your response is correct!") is shorter than the cut, so nothing of it is
    # appended; the episode ends on the reply.
    ep, _ = run(MathEnv, tok, 0, overrides={0: f"#### {truth}"}, apply_chat_template_kwargs='{"enable_thinking": false}',
                **WIDE)
    reply = next(s for s in ep.segments if s.kind == "assistant")
    assert ep.turns[0].observation and reply.end == len(ep.tokens) and ep.tokens.loss_mask[-1] == 1
    [cut] = of(checked(ep, tok), "system_cut_wrong")
    assert cut.token_start == len(ep.tokens) - 1 and cut.turn == 0
    assert cut.evidence["lost"] == "<|im_start|>user\nYour response is correct!<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n"
    assert cut.evidence["cut"] == len(ref.initialize_system_prompt(tok)) > cut.evidence["block"]
    assert not VERL_KINDS & {f.kind for f in under_tito(ep, MathEnv, tok)}


def test_the_newline_is_said_once_for_a_run_whose_other_episodes_it_cannot_apply_to(tmp_path, capsys, qwen3_tokenizer):
    from engine.cli import main

    tok = qwen3_tokenizer
    truth = str(MathEnv().task(MathEnv().tasks[0]).solutions[0])
    wrong = [run(MathEnv, tok, k, overrides={0: "It is 3."}, **WIDE)[0] for k in (1, 2)]
    # One reply allowed: verl ends the episode before the interaction answers.
    at_once, _ = run(MathEnv, tok, 0, overrides={0: f"#### {truth}"}, max_assistant_turns=1, **WIDE)
    refused, _ = run(MathEnv, tok, 3, prompt_length=16)  # verl's dataset refuses the prompt
    assert len(refused.tokens) == refused.prompt_len and at_once.tokens.loss_mask[-1] == 1
    store = Store(tmp_path / "r.db")
    for i, ep in enumerate([*wrong, at_once, refused]):
        store.save_episode(ep.evolve(id=f"m{i:015d}", run_id="runM"))
    # A run where one episode has it and one cannot: nothing to say for the run.
    for i, ep in enumerate([wrong[0], at_once]):
        store.save_episode(ep.evolve(id=f"o{i:015d}", run_id="runO"))
    store.close()
    assert main(["check", str(tmp_path / "r.db"), "--tokenizer", tok.name_or_path]) == 1
    out = capsys.readouterr().out
    *body, summary = out.splitlines()
    assert "run runM: im_end_newline_missing in all 2 episodes it applies to (2 could not be checked for it)" in out
    assert "im_end_newline_missing (run-level) 2" in summary and "run-level: im_end_newline_missing" in summary
    assert "run runO:" not in out and "im_end_newline_missing 1" in summary
    # The episodes it cannot apply to say so (and nothing else of it); the dashboard's rule agrees with the CLI's.
    store = Store(tmp_path / "r.db")
    for i in (2, 3):
        found = store.get_episode(f"m{i:015d}").all_findings()
        assert [f.message for f in found if "im_end_newline_missing" in f.message] == \
            ["im_end_newline_missing: not checked: no answer follows a reply"]
    levels = store.run_level_kinds(["runM", "runO"])
    assert "im_end_newline_missing" in levels["runM"][1] and "im_end_newline_missing" not in levels.get("runO", (0, []))[1]
    store.close()


def test_verl_rows_imported_without_their_knobs_say_so_and_take_them_from_set_or_config(tmp_path, capsys,
                                                                                        qwen3_tokenizer):
    """Rows verl wrote (no Rollscope record): the checks assume verl's defaults and say so; the knobs the run set,
    given to import as `run` takes them (--set, --config), are recorded and checked with."""
    import json

    from engine.cli import main
    from engine.formats.verl_agent_loop import row

    tok = qwen3_tokenizer
    two = ('<tool_call>\n{"name": "find_user_id_by_email", "arguments": {"email": "nobody@example.com"}}\n</tool_call>\n'
           '<tool_call>\n{"name": "get_user_details", "arguments": {"user_id": "x"}}\n</tool_call>')
    kw = '{"enable_thinking": false}'
    no_thinking, _ = run(MathEnv, tok, 1, overrides={0: "It is 3."}, apply_chat_template_kwargs=kw, **WIDE)
    parallel, _ = run(RetailEnv, tok, 0, overrides={1: two}, max_parallel_calls=2, **WIDE)
    assert not of(checked(parallel, tok), "tool_call_dropped")  # both calls ran
    files = {}
    for name, ep in (("thinking", no_thinking), ("parallel", parallel)):
        r = row(ep)
        del r["extra_fields"]["rollscope"]  # as verl writes it
        files[name] = tmp_path / f"{name}.jsonl"
        files[name].write_text(json.dumps(r) + "\n")
    config = tmp_path / "knobs.json"
    config.write_text(json.dumps({"base": "verl-tool", "knobs": {**WIDE, "max_parallel_calls": 2}}))

    def imported(name: str, *knobs: str) -> Episode:
        db = tmp_path / f"{name}{len(knobs)}.db"
        assert main(["import", str(files[name]), "--format", "verl", "--db", str(db), "--tokenizer",
                     tok.name_or_path, "--check", "--quiet", *knobs]) == 0
        capsys.readouterr()
        store = Store(db)
        [eid] = store.episode_ids()
        ep = store.get_episode(eid)
        store.close()
        return ep

    # Without the knobs: one info that names what is assumed; what depends on a knob says it assumed it.
    for name in files:
        ep = imported(name)
        assert ep.config.loop is None
        [said] = [f for f in ep.findings if f.evidence.get("check") == "verl_knobs"]
        assert said.severity is Severity.INFO and "max_parallel_calls=1" in said.message
        assert "--set KNOB=VALUE" in said.message and said.evidence["assumed"]["apply_chat_template_kwargs"] == "{}"
    dropped = of(list(imported("parallel").all_findings()), "tool_call_dropped")
    assert dropped and "past max_parallel_calls=1 (verl's default, assumed: the record does not say)" in \
        dropped[0].message
    [no_truth] = [f for f in imported("thinking").findings if f.evidence.get("check") == "strict_score_refused"]
    assert "no ground truth" in no_truth.message
    # With them (--set as `run` takes it; --config a preset file): recorded, and no false alarm.
    ep = imported("thinking", "--set", f"apply_chat_template_kwargs={kw}", "--set", "response_length=4096",
                  "--set", "prompt_length=8192")
    assert ep.config.loop is not None and ep.config.loop.apply_chat_template_kwargs == kw
    found = list(ep.all_findings())
    assert not [f for f in found if f.evidence.get("check") == "verl_knobs"]
    assert not of(found, "mask_misaligned")  # the empty think block is the generation prompt's, not the reply
    ep = imported("parallel", "--config", str(config))
    assert ep.config.loop is not None and ep.config.loop.max_parallel_calls == 2
    assert not of(list(ep.all_findings()), "tool_call_dropped")
    # Knobs for rows that record what they ran with are refused, saying why.
    assert main(["import", str(files["thinking"]), "--format", "jsonl", "--db", str(tmp_path / "x.db"),
                 "--set", "max_parallel_calls=2"]) != 0
    assert "to --format verl rows" in capsys.readouterr().err and not (tmp_path / "x.db").exists()
