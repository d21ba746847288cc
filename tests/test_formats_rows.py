"""Trainers' rows of ids and text dumps: AReaL's trajectory dumps and per-turn rows, verl's rollout_data_dir and
AgentLoopOutput rows, read with a tokenizer: their tokens, masks, the replies they cut and the counts they record."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.checks import CheckOptions, check_mask, run_checks
from engine.formats import export, import_path
from engine.formats.areal import ROWS_NOTE, packed_rows
from engine.records.episode import Message
from engine.tokens import chat
from tests.fixtures_formats import areal_record, loop_episodes, slime_sample, verl_rows, write_jsonl, write_slime_dump
from tests.test_formats_text import _db, _enc

# -- AReaL ------------------------------------------------------------------------


def test_areal_dump_imports_with_tokens_mask_and_versions(tmp_path, qwen3_tokenizer):
    tok = qwen3_tokenizer
    prompt = _enc(tok, chat.render(tok, [Message("user", "What is 6*7?")], add_generation_prompt=True))
    gen1 = _enc(tok, "<think>\nmultiply\n</think>\n\n41<|im_end|>")
    feedback = _enc(tok, "\n<|im_start|>user\nwrong, try again<|im_end|>\n<|im_start|>assistant\n")
    gen2 = _enc(tok, "<think>\nagain\n</think>\n\n42<|im_end|>")
    single = areal_record(tok, 17, 0, [("prompt", prompt), ("gen", gen1)], reward=0.0)
    multi = areal_record(tok, 17, 1, [("prompt", prompt), ("gen", gen1), ("context", feedback), ("gen", gen2)],
                         reward=0.9, versions=[3] * len(gen1) + [4] * len(gen2))
    f = write_jsonl(tmp_path / "log" / "rollout" / "4" / "17.jsonl", [single, multi])
    st = _db(tmp_path)
    report = import_path(tmp_path / "log" / "rollout", "areal", st, tokenizer=tok)
    assert report.new == 2 and not report.errors and str(f) in report.files
    one, two = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    assert one.tokens.ids.tolist() == prompt + gen1 and one.prompt_len == len(prompt)
    assert one.tokens.loss_mask.tolist() == [0] * len(prompt) + [1] * len(gen1)
    ids = prompt + gen1 + feedback + gen2
    assert two.tokens.ids.tolist() == ids
    assert two.tokens.loss_mask.tolist() == [0] * len(prompt) + [1] * len(gen1) + [0] * len(feedback) + [1] * len(gen2)
    vers = two.tokens.versions.tolist()
    assert vers == [-1] * len(prompt) + [3] * len(gen1) + [-1] * len(feedback) + [4] * len(gen2)
    assert two.n_turns == 2 and two.turns[1].generation.text.endswith("42<|im_end|>") and two.reward == 0.9
    assert two.task_id == "17" and two.source.details["head_version"] == 3 and "token_counts" not in two.source.details
    assert check_mask(two, CheckOptions(tokenizer=tok)) == []
    # without a tokenizer: the text, one turn per generated segment
    bare = _db(tmp_path, "bare.db")
    r2 = import_path(f, "areal", bare)
    assert any("no tokenizer" in n for n in r2.notes)
    b2 = max(bare.iter_episodes(), key=lambda e: e.sample_index)
    assert b2.n_tokens == 0 and b2.n_turns == 2 and b2.turns[0].prompt_text.startswith("<|im_start|>user")


def test_areal_export_packs_each_turn_and_imports_back(tmp_path, smol_tokenizer):
    ep = next(e for e in loop_episodes(smol_tokenizer) if e.preset == "areal-math" and e.n_turns > 1)
    st = _db(tmp_path)
    st.save_episode(ep)
    out = tmp_path / "packed.jsonl"
    assert export(st.iter_episodes(), "areal", out) == 1
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["turn"] for r in rows] == list(range(ep.n_turns))
    for r, t in zip(rows, ep.turns):
        seg = next(s for s in t.segments if s.kind == "assistant")
        assert r["input_ids"] == ep.tokens.ids[: seg.end].tolist() and r["prompt_len"] == seg.start
        assert r["loss_mask"] == [0] * seg.start + [1] * (seg.end - seg.start)
        assert r["logprobs"][: seg.start] == [0.0] * seg.start
        assert r["logprobs"][seg.start :] == pytest.approx(ep.tokens.logprobs[seg.start : seg.end].tolist())
        assert r["versions"] == [-1] * seg.start + ep.tokens.versions[seg.start : seg.end].tolist()
        assert r["rewards"] == pytest.approx(ep.returns[t.index])
    back = _db(tmp_path, "b.db")
    report = import_path(out, "areal", back)
    assert report.new == len(rows) and back.count() == ep.n_turns  # a row an episode, as the import says
    assert [n for n in report.notes if "per-turn" in n or "AReaL dumps hold text" in n] == [ROWS_NOTE]
    last = max(back.iter_episodes(), key=lambda e: e.n_tokens)
    assert last.tokens.ids.tolist() == rows[-1]["input_ids"] and last.reward == pytest.approx(rows[-1]["rewards"])
    assert last.tokens.loss_mask.tolist() == rows[-1]["loss_mask"]
    assert list(packed_rows(ep.evolve(turns=()))) == []


# -- verl -------------------------------------------------------------------------


def test_verl_rollout_dir_imports_text_and_reconstructed_tokens(tmp_path, smol_tokenizer):
    rows = verl_rows(7, [("What is 2+2?", "It is 4.", 1.0), ("What is 2+2?", "It is 5.", 0.0)], uid="q-9")
    rows += verl_rows(7, [("Name a prime.", "9", 0.0)])
    f = write_jsonl(tmp_path / "rollouts" / "7.jsonl", rows)
    st = _db(tmp_path)
    report = import_path(tmp_path / "rollouts", "verl", st)
    assert report.new == 3 and any("no tokenizer" in n for n in report.notes)
    a, b, c = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    assert [m.role for m in a.messages] == ["user", "assistant"] and a.messages[1].content == "It is 4."
    assert (a.reward, b.reward) == (1.0, 0.0) and a.task_id == b.task_id == "q-9" and c.task_id != a.task_id
    assert a.source.details["step"] == 7 and a.source.details["gts"] == "42" and a.source.details["reward_extra"]["acc"] is True
    assert a.n_tokens == 0
    tk = _db(tmp_path, "tok.db")
    r2 = import_path(f, "verl", tk, tokenizer=smol_tokenizer)
    assert any("reconstructed" in n for n in r2.notes)
    ep = min(tk.iter_episodes(), key=lambda e: e.sample_index)
    assert ep.id == a.id  # the id comes from the record, not from the tokenizer
    assert ep.source.details["tokens_reconstructed"] is True
    asst = ep.tokens.ids[ep.tokens.loss_mask == 1].tolist()
    assert chat.decode(smol_tokenizer, asst).startswith("It is 4.")
    kinds = {x.kind for x in run_checks(ep, CheckOptions(tokenizer=smol_tokenizer))}
    assert not kinds & {"mask_misaligned", "tokens_not_rendering"}


# -- what a dump leaves unsaid: how a reply ended, how many tokens -------------------------


def test_a_reply_that_never_reached_its_end_of_turn_token_is_read_as_cut_by_the_length_limit(tmp_path, qwen3_tokenizer):
    """AReaL's dump and verl's rows record no finish reason: their loops end a reply on the template's end-of-turn
    token or at the length limit, so a reply without one was cut, and the checks say so; one with it was not."""
    tok = qwen3_tokenizer
    prompt = _enc(tok, chat.render(tok, [Message("user", "What is 6*7?")], add_generation_prompt=True))
    ended = _enc(tok, "<think>\nmultiply\n</think>\n\n42<|im_end|>")
    cut = _enc(tok, "<think>\nmultiply six by seven, which is")
    newline = _enc(tok, "<think>\nsix sevens\n</think>\n\n42<|im_end|>\n")  # a mask that trains the template's newline
    rows = [areal_record(tok, 3, i, [("prompt", prompt), ("gen", g)], reward=0.0)
            for i, g in enumerate((ended, cut, newline))]
    write_jsonl(tmp_path / "rollout" / "1" / "3.jsonl", rows)
    # verl's AgentLoopOutput row of the same two replies (the fields verl's rows hold; no finish reason among them)
    verl = [{"prompt_ids": prompt, "response_ids": g, "response_mask": [1] * len(g), "response_logprobs": None,
             "num_turns": 2, "reward_score": 0.0, "metrics": {}, "extra_fields": {}} for g in (ended, cut)]
    write_jsonl(tmp_path / "verl.jsonl", verl)
    for path, fmt in ((tmp_path / "rollout", "areal"), (tmp_path / "verl.jsonl", "verl")):
        st = _db(tmp_path, f"{fmt}.db")
        import_path(path, fmt, st, tokenizer=tok)
        eps = sorted(st.iter_episodes(), key=lambda e: e.tokens.ids[len(prompt):].tolist() != cut)  # the cut first
        st.close()
        assert [e.turns[-1].generation.finish_reason for e in eps] == ["length"] + ["stop"] * (len(eps) - 1), fmt
        found = [run_checks(e, CheckOptions(tokenizer=tok)) for e in eps]
        kinds = [[f.kind for f in fs] for fs in found]
        assert "truncated_turn" in kinds[0] and not any("truncated_turn" in k for k in kinds[1:]), (fmt, kinds)
        # read off the ids, not recorded: it says so, and names the other way a reply ends without the token
        said = next(f.message for f in found[0] if f.kind == "truncated_turn")
        assert "no end-of-turn token" in said and "stop string" in said, said
    assert len(eps) == 2  # (verl's rows: the two replies without the trained newline)


def test_a_text_dump_read_again_with_a_tokenizer_is_not_said_to_differ_in_the_arrays_it_encoded(tmp_path, qwen3_tokenizer):
    """AReaL's dump holds text: its arrays are the tokenizer's encoding. Read first without one, then with one, the
    arrays (and the turns read off their mask) differ by encoding, not by what the dump says; a re-scored reward
    is still found."""
    tok = qwen3_tokenizer
    prompt = _enc(tok, chat.render(tok, [Message("user", "What is 6*7?")], add_generation_prompt=True))
    gen = _enc(tok, "<think>\nmultiply\n</think>\n\n42<|im_end|>")
    path = tmp_path / "rollout" / "1" / "3.jsonl"
    write_jsonl(path, [areal_record(tok, 3, 0, [("prompt", prompt), ("gen", gen)], reward=1.0)])
    st = _db(tmp_path)
    assert import_path(tmp_path / "rollout", "areal", st).new == 1
    again = import_path(tmp_path / "rollout", "areal", st, tokenizer=tok)
    assert (again.already_present, again.differ) == (1, 0), again.differing
    write_jsonl(path, [areal_record(tok, 3, 0, [("prompt", prompt), ("gen", gen)], reward=0.0)])
    rescored = import_path(tmp_path / "rollout", "areal", st, tokenizer=tok)
    assert dict(rescored.differing) == {"reward": 1}
    st.close()


def test_a_row_of_ids_whose_mask_trains_nothing_says_the_mask_not_an_empty_response(tmp_path, smol_tokenizer):
    """AReaL's rows put the prompt's end at the first trained token, so a mask of zeros leaves a prompt that runs to
    the end: the response is there, untrained, and ``nothing_trained`` says so rather than "nothing generated"."""
    ep = next(e for e in loop_episodes(smol_tokenizer) if e.preset == "areal-math")
    zero = ep.evolve(tokens=ep.tokens.evolve(loss_mask=np.zeros(len(ep.tokens), np.uint8)))
    out = tmp_path / "rows.jsonl"
    export([zero], "areal", out)
    st = _db(tmp_path)
    import_path(out, "areal", st, tokenizer=smol_tokenizer)
    rows = list(st.iter_episodes())
    st.close()
    assert rows
    for row in rows:
        (found,) = [f for f in run_checks(row, CheckOptions(tokenizer=smol_tokenizer)) if f.kind == "nothing_trained"]
        assert "the loss mask is 0 on every token" in found.message


def test_an_areal_dump_whose_counts_its_text_does_not_give_says_so_on_the_episode(tmp_path, qwen3_tokenizer):
    """The dump's seqlen and segment lengths count the ids AReaL trained; its text re-encodes to others here. The
    episode says which count, where, and that its ids are a re-encoding, not a vague note for the whole file."""
    tok = qwen3_tokenizer
    prompt = _enc(tok, chat.render(tok, [Message("user", "What is 6*7?")], add_generation_prompt=True))
    gen1 = _enc(tok, "<think>\nmultiply\n</think>\n\n41<|im_end|>")
    feedback = _enc(tok, "\n<|im_start|>user\nwrong, try again<|im_end|>\n<|im_start|>assistant\n")
    gen2 = _enc(tok, "<think>\nagain\n</think>\n\n42<|im_end|>")
    rec = areal_record(tok, 17, 1, [("prompt", prompt), ("gen", gen1), ("context", feedback), ("gen", gen2)],
                       reward=0.9)
    rec["segments"][3]["len"] += 2
    rec["seqlen"] += 2
    clean = areal_record(tok, 17, 0, [("prompt", prompt), ("gen", gen1)], reward=0.0)
    write_jsonl(tmp_path / "rollout" / "4" / "17.jsonl", [clean, rec])
    st = _db(tmp_path)
    report = import_path(tmp_path / "rollout", "areal", st, tokenizer=tok)
    one, two = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    st.close()
    assert any("each says where (ids_reencoded)" in n for n in report.notes)
    assert not [f for f in one.all_findings() if f.kind == "ids_reencoded"]
    (found,) = [f for f in two.all_findings() if f.kind == "ids_reencoded"]
    assert found.turn == 1 and found.token_start == len(prompt) + len(gen1) + len(feedback)
    assert f"seqlen {len(prompt) + len(gen1) + len(feedback) + len(gen2) + 2}" in found.message
    assert f"segment 3 of {len(gen2) + 2} tokens (re-encoded: {len(gen2)})" in found.message


def test_a_thinking_off_generation_prompt_in_a_dump_is_the_prompt_not_an_untrained_reply(tmp_path, qwen3_tokenizer):
    """Qwen3 rendered with ``enable_thinking=False`` ends its generation prompt on an empty think block: template
    text the model was given, at the first turn (slime's prompt) and after a user's answer (in the response, untrained,
    without a logprob). A dump that does not say how it rendered is read so; the same block untrained where the model
    generated it (its logprobs say so) is still an untrained reply."""
    tok = qwen3_tokenizer
    off = {"enable_thinking": False}
    first = _enc(tok, chat.render(tok, [Message("user", "Add 2 and 3.")], add_generation_prompt=True, **off))
    assert chat.decode(tok, first).endswith("<think>\n\n</think>\n\n")
    reply, again = _enc(tok, "It is 5.<|im_end|>"), _enc(tok, "Yes: 5.<|im_end|>")
    answer = _enc(tok, "\n<|im_start|>user\nAre you sure?<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    response = reply + answer + again
    mask = [1] * len(reply) + [0] * len(answer) + [1] * len(again)
    lps = [-0.25] * len(reply) + [0.0] * len(answer) + [-0.5] * len(again)
    samples = [slime_sample(first + response, len(response), index=0, loss_mask=mask, rollout_log_probs=lps)]
    # the model wrote the empty think block itself and the loop left it untrained: logprobs on it
    think = _enc(tok, "<think>\n\n</think>\n\n")
    plain = _enc(tok, chat.render(tok, [Message("user", "Add 2 and 3.")], add_generation_prompt=True))
    own = think + reply
    samples.append(slime_sample(plain + own, len(own), index=1, loss_mask=[0] * len(think) + [1] * len(reply),
                                rollout_log_probs=[-0.01] * len(think) + [-0.25] * len(reply)))
    st = _db(tmp_path)
    import_path(write_slime_dump(tmp_path / "1.pt", samples), "slime", st, tokenizer=tok)
    eps = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    st.close()
    found = [[f for f in run_checks(e, CheckOptions(tokenizer=tok)) if f.severity.value != "info"] for e in eps]
    assert not found[0], [(f.kind, f.message) for f in found[0]]
    (wrong,) = [f for f in found[1] if f.kind == "mask_misaligned"]
    assert "loss mask 0 on assistant output" in wrong.message and wrong.token_start == len(plain)


def test_show_reads_a_dumps_prompt_and_what_answered_each_reply_off_its_tokens(tmp_path, qwen3_tokenizer, capsys):
    """An AReaL dump holds the conversation as tokens: `show` prints the prompt and the user's retry between the
    replies, decoded, as the dashboard's episode view does, and says they were read off the tokens."""
    from engine.cli import main

    tok = qwen3_tokenizer
    prompt = _enc(tok, chat.render(tok, [Message("user", "What is 6*7?")], add_generation_prompt=True))
    retry = _enc(tok, "\n<|im_start|>user\nWrong, try again.<|im_end|>\n<|im_start|>assistant\n")
    pieces = [("prompt", prompt), ("gen", _enc(tok, "48<|im_end|>")), ("context", retry), ("gen", _enc(tok, "42<|im_end|>"))]
    write_jsonl(tmp_path / "rollout" / "1" / "3.jsonl", [areal_record(tok, 3, 0, pieces, reward=1.0)])
    db = tmp_path / "a.db"
    st = _db(tmp_path)
    import_path(tmp_path / "rollout", "areal", st, tokenizer=tok)
    eid = next(st.iter_episodes()).id
    st.close()
    capsys.readouterr()
    assert main(["show", eid[:10], "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "[prompt] <|im_start|>user\nWhat is 6*7?" in out
    at = len(prompt) + len(pieces[1][1])
    assert f"[after the reply: tokens {at}-{at + len(retry)}, decoded]" in out and "Wrong, try again." in out
    assert out.index("48") < out.index("Wrong, try again.") < out.index("--- turn 1")


def test_a_slime_sample_cut_by_the_length_limit_is_one_finding_and_one_out_of_turns_another(tmp_path, smol_tokenizer):
    """slime keeps one status a sample: ``truncated`` is a reply the length limit cut (its ids end on no end-of-turn
    token), said once, on that turn; or, from slime's tau agent, a conversation out of turns (its last reply ended
    on its own), said as the episode's."""
    tok = smol_tokenizer
    prompt = _enc(tok, chat.render(tok, [Message("user", "Count to ten.")], add_generation_prompt=True))
    cut, whole = _enc(tok, "One, two, three"), _enc(tok, "One to ten.<|im_end|>")
    samples = [slime_sample(prompt + r, len(r), index=i, status="truncated", rollout_log_probs=[-0.1] * len(r))
               for i, r in enumerate((cut, whole))]
    st = _db(tmp_path)
    import_path(write_slime_dump(tmp_path / "1.pt", samples), "slime", st, tokenizer=tok)
    eps = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    st.close()
    assert [e.turns[-1].generation.finish_reason for e in eps] == ["length", "stop"]
    cuts = [[f.kind for f in run_checks(e, CheckOptions(tokenizer=tok)) if f.kind.startswith("truncated")] for e in eps]
    assert cuts == [["truncated_turn"], ["truncated_episode"]]
