"""A dump's rollout logprobs of another length than the response are shown, not dropped.

slime's ``rollout_log_probs`` and verl's ``response_logprobs`` hold one logprob per response token. A loop that lost
one (the end-of-turn token's, say) or added one writes a list that fits no token: the sample is imported with the
list laid from the response's start, and ``check`` reports one ``logprobs_misaligned`` root naming both lengths, the
token left without a logprob following from it.
"""

from __future__ import annotations

import json
import math

import numpy as np

from engine.checks import CheckOptions, run_checks
from engine.checks.diagnosis import link_findings, roots
from engine.formats import import_path
from engine.records.episode import Message
from engine.store import Store
from engine.tokens import chat
from tests.fixtures_formats import slime_sample, write_slime_dump


def _enc(tok, text):
    return chat.encode(tok, text)


def _dump(tok):
    prompt = _enc(tok, chat.render(tok, [Message("user", "What is 6*7?")], add_generation_prompt=True))
    reply = _enc(tok, "It is 42.<|im_end|>")
    return prompt, reply


def _findings(ep, tok):
    found = link_findings([f for f in run_checks(ep, CheckOptions(tokenizer=tok)) if f.severity.value != "info"])
    return found, roots(found)


def test_slime_logprobs_one_short_import_laid_from_the_start_and_check_as_one_root(tmp_path, qwen3_tokenizer):
    tok = qwen3_tokenizer
    prompt, reply = _dump(tok)
    lps = [-0.5 - 0.01 * i for i in range(len(reply))]
    samples = [
        slime_sample(prompt + reply, len(reply), index=0, rollout_log_probs=lps[:-1]),  # the end-of-turn's lost
        slime_sample(prompt + reply, len(reply), index=1, rollout_log_probs=[*lps, -0.1]),  # one too many
        slime_sample(prompt + reply, len(reply), index=2, rollout_log_probs=lps),  # as slime writes them
    ]
    st = Store(tmp_path / "a.db")
    report = import_path(write_slime_dump(tmp_path / "0.pt", samples), "slime", st, tokenizer=tok)
    assert report.new == 3 and not report.errors
    assert any("logprobs laid from the response start" in n for n in report.notes), report.notes
    short, long, fine = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    st.close()
    n = len(prompt)
    assert short.tokens.logprobs[n:-1].tolist() == [float(np.float32(x)) for x in lps[:-1]]
    assert math.isnan(short.tokens.logprobs[-1])
    assert long.tokens.logprobs[n:].tolist() == [float(np.float32(x)) for x in lps]
    assert short.source.details["logprobs_length"] == len(reply) - 1
    assert "logprobs_length" not in fine.source.details

    found, top = _findings(short, tok)
    assert [r.kind for r in top] == ["logprobs_misaligned"], [(f.kind, f.message) for f in found]
    assert f"have {len(reply) - 1} entries for a response of {len(reply)} tokens" in top[0].message
    assert "the last 1 response token has none" in top[0].message and top[0].token_start == n
    # the token without a logprob is found, and follows from the length
    assert any(f.kind == "logprobs_missing" and f.caused_by == top[0].id for f in found)

    found, top = _findings(long, tok)
    assert [r.kind for r in top] == ["logprobs_misaligned"]
    assert "1 entry past the response's end were dropped" in top[0].message
    assert _findings(fine, tok) == ([], [])


def test_a_verl_row_whose_logprobs_miss_one_is_imported_and_found(tmp_path, qwen3_tokenizer):
    """A row as verl's ``AgentLoopOutput`` dumps it (no Rollscope record), its ``response_logprobs`` one short."""
    tok = qwen3_tokenizer
    prompt, reply = _dump(tok)
    row = {"prompt_ids": prompt, "response_ids": reply, "response_mask": [1] * len(reply),
           "response_logprobs": [-0.25] * (len(reply) - 1), "multi_modal_data": {}, "reward_score": 1.0,
           "num_turns": 2, "metrics": {"generate_sequences": 0.1, "tool_calls": 0.0}, "extra_fields": {}}
    path = tmp_path / "agent_loop.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    st = Store(tmp_path / "v.db")
    report = import_path(path, "verl", st, tokenizer=tok)
    assert report.new == 1 and not report.errors, report.errors
    (ep,) = st.iter_episodes()
    st.close()
    assert ep.source.details["logprobs_length"] == len(reply) - 1
    found, top = _findings(ep, tok)
    assert [r.kind for r in top] == ["logprobs_misaligned"], [(f.kind, f.message) for f in found]
    assert top[0].turn == 0 and top[0].token_start == len(prompt)


def test_a_slime_response_length_both_arrays_contradict_is_the_one_root(tmp_path, qwen3_tokenizer):
    """response_length written as the mask's sum (a loop that counted trained tokens): the loss mask and the rollout
    logprobs agree on the response, so the field is the one wrong, and the arrays lie where they belong."""
    tok = qwen3_tokenizer
    prompt, reply = _dump(tok)
    answer = _enc(tok, "\n<|im_start|>user\nSure?<|im_end|>\n<|im_start|>assistant\n")
    again = _enc(tok, "Yes.<|im_end|>")
    response = reply + answer + again
    mask = [1] * len(reply) + [0] * len(answer) + [1] * len(again)
    lps = [-0.25] * len(reply) + [0.0] * len(answer) + [-0.5] * len(again)
    sample = slime_sample(prompt + response, sum(mask), index=0, loss_mask=mask, rollout_log_probs=lps)
    st = Store(tmp_path / "r.db")
    report = import_path(write_slime_dump(tmp_path / "0.pt", [sample]), "slime", st, tokenizer=tok)
    assert report.new == 1 and any("response_length_mismatch" in n for n in report.notes), report.notes
    (ep,) = st.iter_episodes()
    st.close()
    assert ep.prompt_len == len(prompt) and ep.tokens.loss_mask[len(prompt):].tolist() == mask
    found, top = _findings(ep, tok)
    assert [r.kind for r in top] == ["response_length_mismatch"], [(f.kind, f.message) for f in found]
    assert top[0].token_start == len(prompt)
    assert f"response_length is {sum(mask)} but the response has {len(response)} tokens" in top[0].message
    assert f"loss_mask and rollout_log_probs both have {len(response)} entries" in top[0].message
    assert not [f for f in found if f.kind in ("mask_misaligned", "logprobs_misaligned")]


def test_mask_and_logprobs_both_one_short_of_a_right_response_length_blame_the_arrays(tmp_path, qwen3_tokenizer):
    """A generate function that lost the end-of-turn token's entry from both arrays: the field is right, so the
    response starts where it says, the mask is the one root, and an empty logprob list is still reported."""
    tok = qwen3_tokenizer
    prompt, reply = _dump(tok)
    k = len(reply) - 1
    samples = [slime_sample(prompt + reply, len(reply), index=0, loss_mask=[1] * k, rollout_log_probs=[-0.5] * k),
               slime_sample(prompt + reply, len(reply), index=1, rollout_log_probs=[])]
    st = Store(tmp_path / "s.db")
    import_path(write_slime_dump(tmp_path / "0.pt", samples), "slime", st, tokenizer=tok)
    both, empty = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    st.close()
    assert both.prompt_len == len(prompt) and "response_from" not in both.source.details
    found, top = _findings(both, tok)
    assert [r.kind for r in top] == ["mask_misaligned"], [(f.kind, f.message) for f in found]
    assert f"loss mask has {k} entries for a response of {len(reply)} tokens" in top[0].message
    found, top = _findings(empty, tok)
    assert [r.kind for r in top] == ["logprobs_misaligned"], [(f.kind, f.message) for f in found]
    assert f"have 0 entries for a response of {len(reply)} tokens" in top[0].message
