"""What the reproduced loops do to the data, named by the checks at the token."""

from __future__ import annotations

import asyncio

from engine.backends.base import GenerationRequest
from engine.checks import CheckOptions, run_checks
from engine.envs.math import MathEnv
from engine.envs.retail import RetailEnv
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Generation, Severity, Status
from tests.test_presets_fidelity import run
from tests.toolenv import PriceEnv


def found(ep, tok):
    return run_checks(ep, CheckOptions(tokenizer=tok))


def errors(fs):
    return [f for f in fs if f.severity is Severity.ERROR]


def test_areal_seed_feedback_system_block_is_one_finding_at_its_token(qwen25_tokenizer):
    ep, _ = run(MathEnv, qwen25_tokenizer, "areal-math", 0, 0.5)
    fs = errors(found(ep, qwen25_tokenizer))
    assert [f.kind for f in fs] == ["system_block_injected"]
    first_feedback = next(s for s in ep.segments if s.kind == "user")
    # The segment starts with the "\n" AReaL prepends; the block starts right after it.
    assert fs[0].token_start == first_feedback.start + 1
    assert fs[0].evidence["text"].startswith("<|im_start|>system\nYou are Qwen")
    assert len(fs[0].evidence["positions"]) == ep.n_turns - 1


def test_areal_seed_on_a_template_without_default_system_is_clean(qwen3_tokenizer, smol_tokenizer):
    ep, _ = run(MathEnv, qwen3_tokenizer, "areal-math", 1, 0.5)
    assert not errors(found(ep, qwen3_tokenizer))
    # SmolLM2's template adds a default system prompt too.
    ep, _ = run(MathEnv, smol_tokenizer, "areal-math", 1, 0.5)
    assert [f.kind for f in errors(found(ep, smol_tokenizer))] == ["system_block_injected"]


def test_slime_seed_missing_generation_prompts_named_at_the_first(smol_tokenizer):
    ep, _ = run(RetailEnv, smol_tokenizer, "slime-tau-seed", 1, 0.0)
    fs = errors(found(ep, smol_tokenizer))
    gpm = [f for f in fs if f.kind == "generation_prompt_missing"]
    assert len(gpm) == 1
    second = next(s for s in ep.segments if s.kind == "assistant" and s.turn == 1)
    assert gpm[0].token_start == second.start
    assert len(gpm[0].evidence["positions"]) == ep.n_turns - 1
    clean, _ = run(RetailEnv, smol_tokenizer, "slime-tau", 1, 0.0)
    assert not errors(found(clean, smol_tokenizer))


def test_slime_seed_replies_without_headers_are_one_root_and_every_trained_newline_one_warning(smol_tokenizer):
    """The seed loop glues each reply after the first to the message before it: one root at the first missing
    header. Those replies are still replies: their mask is right (no "not assistant output"), and the newline
    after each reply's <|im_end|>, trained with no logprob, is the template's, counted once over every turn, none
    of them a missing logprob."""
    from engine.checks import with_checks

    ep, _ = run(RetailEnv, smol_tokenizer, "slime-tau-seed", 1, 0.0)
    checked = with_checks(ep, CheckOptions(tokenizer=smol_tokenizer))
    fs = [f for f in checked.all_findings() if f.severity is not Severity.INFO]
    assert sorted(f.kind for f in fs) == ["generation_prompt_missing", "template_newline_trained"]
    assert all(f.caused_by is None for f in fs)  # two roots: a missing header does not train a newline
    replies = [s for s in ep.segments if s.kind == "assistant"]
    trained_newlines = [s.end - 1 for s in replies if ep.tokens.loss_mask[s.end - 1]
                        and smol_tokenizer.decode(ep.tokens.ids[s.end - 1 : s.end].tolist()) == "\n"]
    newline = next(f for f in fs if f.kind == "template_newline_trained")
    assert len(trained_newlines) == len(replies) > 2
    assert newline.evidence["positions"] == trained_newlines and newline.message.startswith(f"{len(replies)} trained")


def test_slime_trained_template_newline_is_its_own_warning(smol_tokenizer):
    ep, _ = run(RetailEnv, smol_tokenizer, "slime-tau", 0, 0.0)
    fs = [f for f in found(ep, smol_tokenizer) if f.kind == "template_newline_trained"]
    assert len(fs) == 1 and fs[0].severity is Severity.WARNING
    first = next(s for s in ep.segments if s.kind == "assistant")
    assert fs[0].token_start == first.end - 1
    assert smol_tokenizer.decode(ep.tokens.ids[first.end - 1 : first.end].tolist()) == "\n"
    assert not [f for f in found(ep, smol_tokenizer) if f.kind == "logprobs_missing"]


class Replies:
    name = "replies"

    def __init__(self, tok, texts):
        self.tok, self.texts = tok, list(texts)

    async def generate(self, request: GenerationRequest) -> Generation:
        text = self.texts.pop(0)
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.convert_tokens_to_ids("<|im_end|>")]
        return Generation(text=text + "<|im_end|>", token_ids=tuple(ids), logprobs=tuple(0.0 for _ in ids))

    def describe(self):
        return {"name": self.name}


def test_sglang_drops_a_call_to_an_undefined_tool_and_slime_sends_the_text_to_the_user(smol_tokenizer):
    env = PriceEnv()
    reply = 'Checking.\n<tool_call>\n{"name": "get_cost", "arguments": {"item": "apple"}}\n</tool_call>'
    ep = asyncio.run(run_episode(env, Replies(smol_tokenizer, [reply]), smol_tokenizer, PRESETS["slime-tau"],
                                 "apple", preset="slime-tau"))
    t = ep.turns[0]
    assert t.parse_error is None and not t.tool_calls
    assert t.action is not None and t.action.is_respond and t.action.text == reply
    dropped = [f for f in t.findings if f.kind == "tool_call_dropped"]
    assert dropped and "get_cost" in dropped[0].message
    assert ep.status is Status.COMPLETED and ep.reward == 0.0


def test_text_glued_after_a_closed_message_that_runs_into_the_next_is_still_a_mask_error(smol_tokenizer):
    """Only a run that closes on <|im_end|> is read as a reply missing its header: raw text a loop glued after a
    closed message and trained (a tool answer without its message) is still "not assistant output"."""
    import numpy as np

    from engine.checks import check_mask
    from engine.records.token_arrays import TokenArrays

    ep, _ = run(RetailEnv, smol_tokenizer, "tito", 0, 0.0)
    assert not [f for f in check_mask(ep, CheckOptions(tokenizer=smol_tokenizer)) if f.severity is Severity.ERROR]
    first = next(s for s in ep.segments if s.kind == "assistant")
    at = first.end + 1  # past the reply's <|im_end|> and the newline after it: the next message's <|im_start|>
    assert smol_tokenizer.decode(ep.tokens.ids[at - 2 : at + 1].tolist()) == "<|im_end|>\n<|im_start|>"
    raw = smol_tokenizer.encode("order #W1 cancelled", add_special_tokens=False)
    t = ep.tokens

    def put(a, fill):
        return np.concatenate([a[:at], np.full(len(raw), fill, dtype=a.dtype), a[at:]])

    glued = ep.evolve(tokens=TokenArrays(np.concatenate([t.ids[:at], raw, t.ids[at:]]), put(t.loss_mask, 1),
                                         put(t.logprobs, -0.5), put(t.versions, -1)), segments=())
    found = [f for f in check_mask(glued, CheckOptions(tokenizer=smol_tokenizer)) if f.kind == "mask_misaligned"]
    assert [(f.token_start, f.token_end) for f in found] == [(at, at + len(raw))]
    assert found[0].message.startswith(f"loss mask 1 on tokens that are not assistant output: {len(raw)} tokens")


def test_in_ids_alone_a_bos_is_no_injection_and_only_the_templates_own_system_block_is(smol_tokenizer):
    """A row of ids alone (AReaL's per-turn sequences) has no messages to say which system block a loop wrote: past
    its first message (a BOS token may come first), a block is injected where it is the template's default one."""
    import numpy as np

    from engine.checks import injected_system_blocks
    from engine.records.episode import Episode
    from engine.records.token_arrays import TokenArrays

    ep, _ = run(MathEnv, smol_tokenizer, "areal-math", 0, 0.5)
    blocks = injected_system_blocks(ep, smol_tokenizer)
    assert len(blocks) == ep.n_turns - 1 >= 2
    bos = smol_tokenizer.convert_tokens_to_ids("<|endoftext|>")
    t = ep.tokens

    def row(ids, mask):
        n = len(ids)
        return Episode(id="row", env="areal", task_id="t", prompt_len=int(np.flatnonzero(mask)[0]),
                       tokens=TokenArrays(ids, mask, np.full(n, np.nan), np.full(n, -1)))

    with_bos = row(np.concatenate([[bos], t.ids]), np.concatenate([[0], t.loss_mask]))
    assert injected_system_blocks(with_bos, smol_tokenizer) == [(s + 1, e + 1) for s, e in blocks]
    # The first injected block rewritten as a system message of the loop's own words: not the template's.
    s, e = blocks[0]
    own = smol_tokenizer.encode("<|im_start|>system\nBe brief.<|im_end|>\n", add_special_tokens=False)
    ids = np.concatenate([t.ids[:s], own, t.ids[e:]])
    mask = np.concatenate([t.loss_mask[:s], np.zeros(len(own), np.uint8), t.loss_mask[e:]])
    shift = len(own) - (e - s)
    assert injected_system_blocks(row(ids, mask), smol_tokenizer) == [(a + shift, b + shift) for a, b in blocks[1:]]
