"""verl's ``trainer.rollout_data_dir`` dumps as verl writes them: each sample's prompt and response ids decoded with
``skip_special_tokens=True`` (``RayPPOTrainer._log_rollout_data``), one JSON line each in ``{step}.jsonl``.

ChatML's markup is special tokens, so what is left of it are the role lines: a multi-turn sample (a tool call, the
tool's answer, the last reply) is split back into its messages there, rather than read as one user message and one
reply that the template then cuts at the last ``</think>``. Samples of one prompt in one step are a GRPO group, and
``--env`` names their env as it does for every other import.
"""

from __future__ import annotations

import json

from engine.formats import import_path
from engine.formats.verl import decoded_conversation
from engine.records.episode import Message
from engine.store import Store
from engine.tokens import chat

SYSTEM = "You are a math expert. Use the calc tool, then answer as `#### <answer>`."
QUESTION = "Natalia sold 48 clips in April and half as many in May. How many in all?"
CALL = '<tool_call>\n{"name": "calc", "arguments": {"answer": "72"}}\n</tool_call>'
ANSWER = "<tool_response>\nreward=1.0\n</tool_response>"


def _conversation(final: str) -> list[Message]:
    return [Message("system", SYSTEM), Message("user", QUESTION), Message("assistant", CALL),
            Message("user", ANSWER), Message("assistant", final)]


def _row(tok, messages, step, uid, score):
    """A sample as verl dumps it: the ids of the prompt and of the response, each decoded without special tokens."""
    prompt = chat.encode(tok, chat.render(tok, messages[:2], add_generation_prompt=True))
    whole = chat.encode(tok, chat.render(tok, messages))
    assert whole[:len(prompt)] == prompt
    response = whole[len(prompt):]
    end = tok.convert_tokens_to_ids("<|im_end|>")
    response = response[: len(response) - response[::-1].index(end)]  # verl's response stops at the last reply's end
    return {"input": tok.decode(prompt, skip_special_tokens=True), "output": tok.decode(response, skip_special_tokens=True),
            "gts": "72", "score": score, "step": step, "uid": uid, "acc": score}


def test_a_multi_turn_sample_is_split_back_into_its_messages(tmp_path, qwen3_tokenizer):
    tok = qwen3_tokenizer
    right, wrong = _conversation("#### 72"), _conversation("#### 70")
    rows = [_row(tok, right, 5, "uid-a", 1.0), _row(tok, wrong, 5, "uid-a", 0.0), _row(tok, right, 5, "uid-b", 1.0)]
    assert rows[0]["input"].startswith("system\n") and "\nuser\n<tool_response>" in rows[0]["output"]
    path = tmp_path / "5.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    st = Store(tmp_path / "v.db")
    report = import_path(path, "verl", st, tokenizer=tok, env="math")
    assert report.new == 3 and not report.errors and any("split into messages" in n for n in report.notes)
    eps = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    n_groups, groups = st.group_stats()
    st.close()
    ep = eps[0]
    # as the template wrote them: Qwen3 gives the reply after the last question an empty think block
    assert [(m.role, m.content) for m in ep.messages] == [(m.role, m.content) for m in right[:-1]] + \
        [("assistant", "<think>\n\n</think>\n\n#### 72")]
    assert len(ep.turns) == 2 and ep.turns[0].generation.text.endswith(CALL)
    assert ep.turns[0].observation[0].content == ANSWER and ep.turns[1].generation.text.endswith("#### 72")
    # the tool's answer is not trained; both replies are
    text = chat.decode(tok, ep.tokens.ids[ep.tokens.loss_mask == 1])
    assert "tool_response" not in text and "calc" in text and "#### 72" in text
    assert {e.env for e in eps} == {"math"}
    assert eps[0].group_id == eps[1].group_id != eps[2].group_id
    assert n_groups == 1 and len(groups) == 1, groups


def test_text_of_another_template_or_none_is_read_as_one_exchange():
    # Llama 3's headers are special tokens too, but leave no newline before the next role: not ChatML's lines
    assert decoded_conversation("system\n\nBe brief.user\n\n2+2?assistant\n\n", "4") is None
    assert decoded_conversation("2+2?", "4") is None
    assert decoded_conversation("user\n2+2?\n", "4") is None  # no generation prompt: not a prompt ChatML rendered
    got = decoded_conversation("user\n2+2?\nassistant\n", "4")
    assert got == (Message("user", "2+2?"), Message("assistant", "4"))


def test_agent_loop_rows_of_one_prompt_in_one_file_are_a_group(tmp_path, qwen3_tokenizer):
    """Rows as verl's ``AgentLoopOutput`` dumps them (no Rollscope record): a step's samples of one prompt."""
    tok = qwen3_tokenizer

    def row(question, reply, score):
        prompt = chat.encode(tok, chat.render(tok, [Message("user", question)], add_generation_prompt=True))
        response = chat.encode(tok, reply + "<|im_end|>")
        return {"prompt_ids": prompt, "response_ids": response, "response_mask": [1] * len(response),
                "response_logprobs": None, "multi_modal_data": {}, "reward_score": score, "num_turns": 2,
                "metrics": {"generate_sequences": 0.1, "tool_calls": 0.0}, "extra_fields": {}}

    rows = [row("2+2?", "4", 1.0), row("2+2?", "5", 0.0), row("3+3?", "6", 1.0)]
    path = tmp_path / "7.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    st = Store(tmp_path / "a.db")
    assert import_path(path, "verl", st, tokenizer=tok).new == 3
    eps = sorted(st.iter_episodes(), key=lambda e: e.source.line)
    n_groups, groups = st.group_stats()
    st.close()
    assert eps[0].group_id == eps[1].group_id != eps[2].group_id and n_groups == 1
    assert (groups[0].n, groups[0].mean) == (2, 0.5), groups


def test_a_rows_ground_truth_is_the_episodes_and_a_step_past_64_bits_is_named(tmp_path):
    rows = [{"input": "user\n2+2?\nassistant\n", "output": "4", "gts": "4", "score": 1.0, "step": 3},
            {"input": "user\n3+3?\nassistant\n", "output": "6", "gts": "6", "score": 1.0, "step": 10 ** 30}]
    path = tmp_path / "3.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    st = Store(tmp_path / "g.db")
    report = import_path(path, "verl", st)
    (ep,) = st.iter_episodes()
    st.close()
    assert report.new == 1 and ep.ground_truth == "4" and ep.messages[-1].content == "4"
    (err,) = report.errors
    assert err.field == "step" and "within 64 bits" in str(err) and ":2" in err.where, str(err)


def test_verls_own_layout_appends_the_tools_answer_right_after_the_reply(tmp_path, qwen3_tokenizer):
    """verl's ToolAgentLoop renders a tool's answer alone (with the generation prompt after it) and appends it right
    after the reply's end-of-turn token, with no newline: decoded, ``</tool_call>user\\n<tool_response>``."""
    tok = qwen3_tokenizer
    prompt = chat.encode(tok, chat.render(tok, [Message("user", QUESTION)], add_generation_prompt=True))
    answer = chat.encode(tok, chat.render(tok, [Message("tool", "42")], add_generation_prompt=True))
    response = chat.encode(tok, CALL + "<|im_end|>") + answer + chat.encode(tok, "#### 72<|im_end|>")
    row = {"input": tok.decode(prompt, skip_special_tokens=True), "output": tok.decode(response, skip_special_tokens=True),
           "gts": "72", "score": 1.0, "step": 1}
    assert "</tool_call>user\n<tool_response>" in row["output"]
    got = decoded_conversation(row["input"], row["output"])
    assert [(m.role, m.content) for m in got] == [
        ("user", QUESTION), ("assistant", CALL), ("user", "<tool_response>\n42\n</tool_response>"),
        ("assistant", "#### 72")]
    path = tmp_path / "1.jsonl"
    path.write_text(json.dumps(row) + "\n", encoding="utf-8")
    st = Store(tmp_path / "t.db")
    import_path(path, "verl", st, tokenizer=tok)
    (ep,) = st.iter_episodes()
    st.close()
    text = chat.decode(tok, ep.tokens.ids[ep.tokens.loss_mask == 1])
    assert "tool_response" not in text and "42" not in text.replace("#### 72", "")


def test_text_that_only_mentions_roles_is_not_split():
    # a reply listing roles, one a line: one reply
    listing = decoded_conversation("user\nName the roles.\nassistant\n", "They are:\nsystem\nuser\nassistant\ntool")
    assert [m.role for m in listing] == ["user", "assistant"] and listing[1].content.endswith("assistant\ntool")
    # a reply line that ends on a role's name, before verl's glued tool answer: the call stays in the reply
    said = f"Let me call the tool\n{CALL}"
    got = decoded_conversation("user\nQ?\nassistant\n", f"{said}user\n{ANSWER}\nassistant\n#### 72")
    assert [(m.role, m.content) for m in got] == [("user", "Q?"), ("assistant", said), ("user", ANSWER),
                                                 ("assistant", "#### 72")]
    # a prompt quoting a conversation puts its roles out of turn: not split (read as one exchange)
    assert decoded_conversation("system\nBe kind.\nuser\nFix:\nuser\nhello\nassistant\nhi\nassistant\n", "ok") is None
    starts = decoded_conversation("user\nSay it.\nassistant\n", "user\nis a role\nassistant\nok")
    assert [m.role for m in starts] == ["user", "assistant"]  # a response that starts on a role line is the reply's


def test_a_prompt_of_several_messages_keeps_them_and_a_long_response_reads_in_one_pass():
    few_shot = decoded_conversation("system\nBe brief.\nuser\n1+1?\nassistant\n2\nuser\n2+2?\nassistant\n", "4")
    assert [(m.role, m.content) for m in few_shot] == [("system", "Be brief."), ("user", "1+1?"), ("assistant", "2"),
                                                       ("user", "2+2?"), ("assistant", "4")]
    # a model that repeats a line: 1 MB read in one pass (a backtracking split took over an hour)
    long = decoded_conversation("user\nQ\nassistant\n", "x" + "user\n" * 200_000)
    assert [m.role for m in long] == ["user", "assistant"]
