"""Chat messages, Rollscope JSONL and Parquet: tokens, masks, round trips, bad input (trainers' rows of ids and text
dumps: test_formats_rows.py)."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest

from engine.checks import LOOP_KINDS, CheckOptions, run_checks
from engine.errors import FormatError
from engine.formats import export, import_path
from engine.formats.messages import parse_messages, sliced_deltas, to_openai, tokenize_conversation
from engine.records.episode import ToolCall
from engine.store import Store
from engine.tokens import chat
from tests.fixtures_formats import areal_record, loop_episodes, write_jsonl
from tests.toolenv import TOOLS


@pytest.fixture(scope="module")
def eps(smol_tokenizer):
    return loop_episodes(smol_tokenizer)


def _db(tmp_path, name="a.db"):
    return Store(tmp_path / name)


def _enc(tok, text):
    return chat.encode(tok, text)


# -- OpenAI chat messages ------------------------------------------------------------


def _chat_record():
    return {
        "id": "shop-1",
        "messages": [
            {"role": "system", "content": "You are a shop assistant."},
            {"role": "user", "content": [{"type": "text", "text": "How much is a fig?"}]},
            {"role": "assistant", "content": "Let me check.", "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_price", "arguments": "{\"item\": \"fig\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "{\"price\": 11}"},
            {"role": "assistant", "content": "A fig costs 11 dollars."},
        ],
        "tools": list(TOOLS),
        "reward": {"score": 1.0},
    }


def test_messages_import_tokenizes_with_the_chat_template(tmp_path, smol_tokenizer):
    tok = smol_tokenizer
    f = write_jsonl(tmp_path / "chat.jsonl", [_chat_record()])
    st = _db(tmp_path)
    report = import_path(f, "messages", st, tokenizer=tok)
    assert report.new == 1 and not report.errors
    ep = next(st.iter_episodes())
    assert ep.task_id == "shop-1" and ep.reward == 1.0 and ep.n_turns == 2
    assert ep.messages[3].name == "get_price" and ep.turns[0].tool_calls == (ToolCall("get_price", {"item": "fig"}, "c1"),)
    assert chat.decode(tok, ep.tokens.ids.tolist()) == chat.render(tok, ep.messages, ep.tools)
    prompt = chat.render(tok, ep.messages[:2], ep.tools, add_generation_prompt=True)
    assert ep.prompt_len == len(chat.encode(tok, prompt)) and ep.tokens.loss_mask[: ep.prompt_len].sum() == 0
    trained = [chat.decode(tok, ep.tokens.ids[s.start : s.end].tolist()) for s in ep.segments if s.trainable]
    assert trained[0].startswith("Let me check.") and trained[1].startswith("A fig costs 11 dollars.")
    assert [s.kind for s in ep.segments] == ["prompt", "assistant", "tool", "gen_prompt", "assistant", "tail"]
    assert ep.source.details["tokenized"] == "whole render"
    kinds = {x.kind for x in run_checks(ep, CheckOptions(tokenizer=tok))}
    assert not kinds & {"mask_misaligned", "tokens_not_rendering", "template_not_prefix_stable"}
    assert not any("without a reward" in n for n in report.notes)
    # A record that names no reward reads as 0.0, and the import says so once.
    unscored = [{k: v for k, v in _chat_record().items() if k != "reward"}, {**_chat_record(), "reward": None}]
    f = write_jsonl(tmp_path / "unscored.jsonl", unscored)
    report = import_path(f, "messages", _db(tmp_path, "u.db"), tokenizer=tok)
    assert report.new == 2 and [n for n in report.notes if "reward" in n] == [
        f"{f}: records without a reward (none, or null) read as reward 0.0: nothing scored them"]


def test_a_chat_file_re_imported_with_records_added_or_reordered_stores_each_conversation_once(tmp_path):
    """A chat record's id is its content and how many identical records came before it, not its line: a record
    added at the top, or the file reversed, finds the episodes stored before (it stored them all again); two
    identical records are two samples. An episode stored when ids were numbered by line keeps its id."""
    from engine.formats.base import stable_id

    records = [{**_chat_record(), "id": f"shop-{k}", "reward": float(k)} for k in range(4)]
    twin = records[1]
    f = write_jsonl(tmp_path / "a.jsonl", [*records, twin])
    st = _db(tmp_path)
    assert import_path(f, "messages", st).new == 5  # the twin is a sample of its own
    ids = {e.id for e in st.iter_episodes()}
    extra = {**_chat_record(), "id": "shop-new"}
    for variant in ([extra, *records, twin], [twin, *reversed(records)]):
        g = write_jsonl(tmp_path / "a.jsonl", variant)  # the same file, written again
        report = import_path(g, "messages", st)
        assert report.already_present == 5 and report.new == (1 if extra in variant else 0), report
    assert len(ids | {e.id for e in st.iter_episodes()}) == st.count() == 6
    # A database from before: its episode of line 1 has the id of line 1, and a re-import leaves it as it is.
    fresh = _db(tmp_path, "fresh.db")
    import_path(write_jsonl(tmp_path / "one.jsonl", [records[0]]), "messages", fresh)
    legacy = stable_id("messages", 1, records[0])
    old = _db(tmp_path, "old.db")
    old.save_episodes([next(fresh.iter_episodes()).evolve(id=legacy)])
    report = import_path(tmp_path / "one.jsonl", "messages", old)
    assert (report.new, report.already_present) == (0, 1) and [e.id for e in old.iter_episodes()] == [legacy]
    # The same conversation in two step files is two samples, whether the folder is imported whole or a file at a
    # time (the count of identical records is its file's).
    steps = tmp_path / "steps"
    steps.mkdir()
    for name in ("step1.jsonl", "step2.jsonl"):
        write_jsonl(steps / name, [records[0], records[1]])
    whole, apart = _db(tmp_path, "whole.db"), _db(tmp_path, "apart.db")
    assert import_path(steps, "messages", whole).new == 4
    assert sum(import_path(steps / n, "messages", apart).new for n in ("step1.jsonl", "step2.jsonl")) == 4
    assert {e.id for e in whole.iter_episodes()} == {e.id for e in apart.iter_episodes()}


def test_a_legacy_function_call_is_flagged_as_dropped_and_shapeless_conversations_are_refused(tmp_path, smol_tokenizer):
    """OpenAI's legacy ``function_call`` is not rendered by chat templates (they read ``tool_calls``): the turn's
    tokens hold no call, and the turn says so (``tool_call_dropped``), with or without a tokenizer. ``tool_calls``
    that is not a list, and a record of no messages, are refused with the field named (they read as no call and as
    a completed episode of no turns)."""
    legacy = _chat_record()
    legacy["id"] = "legacy"
    call = legacy["messages"][2].pop("tool_calls")[0]
    legacy["messages"][2]["function_call"] = call["function"]
    shapeless, empty = _chat_record(), {**_chat_record(), "messages": []}
    shapeless["messages"][2]["tool_calls"] = {}
    f = write_jsonl(tmp_path / "chat.jsonl", [legacy, shapeless, empty])
    for tok in (None, smol_tokenizer):
        st = _db(tmp_path, f"{tok is None}.db")
        report = import_path(f, "messages", st, tokenizer=tok, check=True)
        assert report.new == 1 and [(e.where, e.field) for e in report.errors] == [
            (f"{f}:2", "messages[2].tool_calls"), (f"{f}:3", "messages")]
        assert "must be a list of tool calls, got an object" in str(report.errors[0])
        ep = next(st.iter_episodes())
        assert ep.turns[0].tool_calls == () and ep.messages[2].tool_calls == ()
        [dropped] = [x for x in ep.all_findings() if x.kind == "tool_call_dropped"]
        assert dropped.turn == 0 and dropped.severity.value == "warning"
        assert "messages[2] calls get_price in OpenAI's legacy function_call" in dropped.message
        if tok is not None:  # the tokens are the template's render: no call in them
            [reply] = [s for s in ep.segments if s.trainable and s.turn == 0]
            text = chat.decode(tok, ep.tokens.ids[reply.start:reply.end].tolist())
            assert text.startswith("Let me check.") and "<tool_call>" not in text and "get_price" not in text
            assert not [x for x in ep.all_findings() if x.severity.value == "error"]
    # A tool message answering a call id the reply before it did not make (the call dropped, its answer kept), and one
    # before any reply: each said on its turn. Answers to the calls made, or without ids, are fine.
    orphan, stray, plain = _chat_record(), _chat_record(), _chat_record()
    orphan["id"], stray["id"], plain["id"] = "orphan", "stray", "plain"
    orphan["messages"][3]["tool_call_id"] = "call_nope"
    stray["messages"].insert(2, {"role": "tool", "tool_call_id": "x9", "content": "stray"})
    del plain["messages"][3]["tool_call_id"]
    g = write_jsonl(tmp_path / "ids.jsonl", [orphan, stray, plain, _chat_record()])
    st = _db(tmp_path, "ids.db")
    assert import_path(g, "messages", st, check=True).new == 4
    said = {e.task_id: [(x.turn, x.message.split(": ", 1)[0]) for x in e.all_findings() if x.kind == "tool_call_dropped"]
            for e in st.iter_episodes()}
    assert said == {"orphan": [(0, "turn 0")], "stray": [(0, "before the first reply")], "plain": [], "shop-1": []}
    text = next(x.message for e in st.iter_episodes() if e.task_id == "orphan" for x in e.all_findings()
                if x.kind == "tool_call_dropped")
    assert "messages[3] answers tool call 'call_nope', but the reply before it made no call of that id" in text


def test_messages_import_without_a_tokenizer_keeps_what_the_env_answered_each_turn(tmp_path, smol_tokenizer):
    """Without a tokenizer the episode holds the messages alone, its turns the same as with one: each assistant
    message, and the tool and user messages after it up to the next one (what ``show`` and playback print)."""
    f = write_jsonl(tmp_path / "chat.jsonl", [_chat_record()])
    bare, tokenized = _db(tmp_path), _db(tmp_path, "t.db")
    import_path(f, "messages", bare)
    import_path(f, "messages", tokenized, tokenizer=smol_tokenizer)
    ep, full = next(bare.iter_episodes()), next(tokenized.iter_episodes())
    assert ep.n_tokens == 0 and [t.observation for t in ep.turns] == [t.observation for t in full.turns]
    assert [[m.role for m in t.observation] for t in ep.turns] == [["tool"], []]
    assert ep.turns[0].observation[0].content == '{"price": 11}'


def test_an_episode_checked_without_a_tokenizer_says_its_checks_ran_in_part(tmp_path, smol_tokenizer):
    """Checked without a tokenizer, the checks that need one could not run (a ``not_checked`` note each): the episode
    is checked in part, not clean. ``ls``, Browse's findings cell, the filters and ``show`` say so; the same record
    checked with a tokenizer is checked whole."""
    import subprocess
    import sys
    from pathlib import Path

    from dashboard.tabs import browse as browse_tab
    from dashboard.views.browse import render_table
    from engine.store import EpisodeFilter

    f = write_jsonl(tmp_path / "chat.jsonl", [_chat_record()])
    db = tmp_path / "both.db"
    st = Store(db)
    import_path(f, "messages", st, check=True)
    import_path(tmp_path / "chat.jsonl", "messages", _db(tmp_path, "tok.db"), tokenizer=smol_tokenizer, check=True)
    whole = next(Store(tmp_path / "tok.db").iter_episodes())
    st.save_episodes([whole.evolve(id="whole-1", env="tokenized")])
    part = next(e for e in st.iter_episodes() if e.id != "whole-1")
    not_run = st.checks_not_run([part.id, "whole-1"])
    assert list(not_run) == [part.id] and len(not_run[part.id]) == 3
    # The checks that needed the tokenizer; re-encoding had no generated ids to look at (a note, not one of them).
    assert {m.split(":")[0] for m in not_run[part.id]} == {
        "template_not_prefix_stable", "tokens_not_rendering", "mask_misaligned"}
    assert any(f.message.startswith("retokenization_drift: not checked") for f in part.all_findings())
    # The filters: in part, whole. Browse's "no findings" is read off the browse index (both; the one checked in part
    # says so in its cell), its "checked in part" off the notes.
    assert [e.id for e in st.list_episodes(EpisodeFilter.from_where(["checked=part"]))] == [part.id]
    assert [e.id for e in st.list_episodes(EpisodeFilter.from_where(["checked=whole"]))] == ["whole-1"]
    assert {e.id for e in st.list_episodes(browse_tab.episode_filter(findings=browse_tab.NO_FINDING))} == {
        part.id, "whole-1"}
    assert [e.id for e in st.list_episodes(browse_tab.episode_filter(findings=browse_tab.IN_PART))] == [part.id]
    labels = [c[0] for c in browse_tab.choices(st)["findings"].choices]
    assert "checked in part (a check could not run)" in labels and "no findings (checked)" in labels
    # Browse's cell: 0, and how many checks did not run (their notes in its title); none beside a whole check.
    rows = {s.id: s for s in st.list_episodes()}
    cells = {eid: render_table([s], "created_at", True, not_run=not_run).split('<td class="c-findings', 1)[1]
             .split("</td>", 1)[0] for eid, s in rows.items()}
    assert "3 checks not run</span>" in cells[part.id] and html.escape(not_run[part.id][0]) in cells[part.id]
    assert "not run" not in cells["whole-1"]
    # The episode view says it where its header and its findings panel count: the episode's own notes, as the
    # findings' index has them.
    from dashboard.views.episode import render_findings, render_header

    assert part.checks_not_run == tuple(not_run[part.id]) and st.get_episode("whole-1").checks_not_run == ()
    for html_text in (render_header(part), render_findings(part)):
        assert "3 checks not run (no tokenizer or model given)</span>" in html_text
    assert "not run" not in render_header(st.get_episode("whole-1")) + render_findings(st.get_episode("whole-1"))
    st.close()
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-m", "engine.cli", "ls", "--db", str(db)], capture_output=True, text=True,
                         cwd=root, timeout=120)
    lines = out.stdout.splitlines()
    assert any(x.startswith(part.id) and x.rstrip().endswith("0, 3 checks not run") for x in lines), out.stdout
    assert any(x.startswith("whole-1") and x.rstrip().endswith(" 0") for x in lines), out.stdout
    assert lines[-1].startswith("1 of these checked in part: a check could not run on it") and \
        f"rollscope show {part.id}" in lines[-1]
    listed = subprocess.run([sys.executable, "-m", "engine.cli", "ls", "--db", str(db), "--json"], capture_output=True,
                            text=True, cwd=root, timeout=120).stdout
    assert {(r := json.loads(x))["id"]: len(r["checks_not_run"]) for x in listed.splitlines()} == {part.id: 3, "whole-1": 0}
    assert all(isinstance(json.loads(x)["root_kinds"], list) for x in listed.splitlines())
    shown = subprocess.run([sys.executable, "-m", "engine.cli", "show", part.id, "--db", str(db)], capture_output=True,
                           text=True, cwd=root, timeout=120).stdout
    assert "; 3 could not run for want of a tokenizer or a model, their notes below)" in shown
    assert "tokens_not_rendering: not checked" in shown


def test_a_chat_record_is_its_whole_render_even_where_the_template_rewrites_history(tmp_path, qwen3_tokenizer):
    """Qwen3's template drops earlier thinking at a user's turn: sliced deltas of its prefixes' renders would be
    wrong ids, which the import would then blame on the record. Rendered whole, the ids are the conversation as the
    template writes it, each reply trained through its end-of-turn token, and the rewrite is said as harmless."""
    tok = qwen3_tokenizer
    rec = {"id": "c", "reward": 1.0, "messages": [
        {"role": "user", "content": "What is 2+3?"}, {"role": "assistant", "content": "It is 5."},
        {"role": "user", "content": "Are you sure?"}, {"role": "assistant", "content": "Yes, 5."}]}
    f = write_jsonl(tmp_path / "chat.jsonl", [rec, _chat_record()])
    st = _db(tmp_path)
    import_path(f, "messages", st, tokenizer=tok)
    for ep in st.iter_episodes():
        assert chat.decode(tok, ep.tokens.ids.tolist()) == chat.render(tok, ep.messages, ep.tools)
        trained = [chat.decode(tok, ep.tokens.ids[s.start:s.end].tolist()) for s in ep.segments if s.trainable]
        assert all(t.endswith("<|im_end|>") for t in trained) and len(trained) == ep.n_turns
        found = run_checks(ep, CheckOptions(tokenizer=tok))
        assert not [x for x in found if x.severity.value != "info"], [(x.kind, x.message) for x in found]
        said = [x for x in found if x.kind == "template_not_prefix_stable"]
        assert said and all("rendered whole" in x.message for x in said)
    st.close()
    # a reply with thinking and a call before a user's turn: its prefix's render keeps the thinking the whole drops
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}
    thought = {"id": "t", "messages": [
        {"role": "user", "content": "hi"}, {"role": "assistant", "content": "<think>\nhmm\n</think>\n\nA",
                                            "tool_calls": [call]},
        {"role": "tool", "content": "42", "tool_call_id": "c1", "name": "f"},
        {"role": "assistant", "content": "<think>\nx\n</think>\n\nB"}, {"role": "user", "content": "again"},
        {"role": "assistant", "content": "C"}]}
    st = _db(tmp_path, "t.db")
    import_path(write_jsonl(tmp_path / "t.jsonl", [thought]), "messages", st, tokenizer=tok)
    ep = next(st.iter_episodes())
    st.close()
    assert ep.source.details["tokenized"] == "whole render" and ep.n_turns == 3
    assert not [x for x in run_checks(ep, CheckOptions(tokenizer=tok)) if x.severity.value != "info"]
    # the slicing a reply that cannot be placed in the render falls back to says what it gets wrong
    *_, turns = sliced_deltas(tok, parse_messages(rec["messages"], "rec"))
    assert any(x.kind == "template_not_prefix_stable" for t in turns for x in t.findings)


def test_a_template_that_refuses_a_system_message_still_tokenizes_a_chat_record(qwen3_tokenizer):
    """The end-of-turn text is read off a probe conversation with a system message: a template that refuses one
    (Gemma's) tokenizes by the deltas, as before."""
    import copy

    tok = copy.deepcopy(qwen3_tokenizer)
    tok.chat_template = (
        "{%- if messages[0]['role'] == 'system' -%}{{ raise_exception('System role not supported') }}{%- endif -%}"
        "{%- for m in messages -%}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] + '<|im_end|>\n' }}"
        "{%- endfor -%}{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}")
    msgs = parse_messages([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], "r")
    (tokens, _, _, turns), whole = tokenize_conversation(tok, msgs)
    assert not whole and len(turns) == 1 and chat.decode(tok, tokens.ids.tolist()).endswith("hello<|im_end|>\n")


def test_a_tool_call_whose_arguments_are_not_json_is_kept_as_written_and_flagged(tmp_path, smol_tokenizer):
    """A model's broken JSON in ``function.arguments`` (and arguments given as a list) is what the trainer rendered
    and trained on: the episode is stored, the call keeps its arguments as written (rendered verbatim, so the tokens
    still render), its turn holds the parse error, and the check finds that one fault alone. Export writes the text
    back as it was."""
    tok = smol_tokenizer
    broken = '{"item": "fig"'
    bad_json, bad_type = _chat_record(), _chat_record()
    bad_json["id"], bad_type["id"] = "broken", "listed"
    bad_json["messages"][2]["tool_calls"][0]["function"]["arguments"] = broken
    bad_type["messages"][2]["tool_calls"][0]["function"]["arguments"] = ["fig"]
    f = write_jsonl(tmp_path / "chat.jsonl", [bad_json, bad_type, _chat_record()])
    st = _db(tmp_path)
    report = import_path(f, "messages", st, tokenizer=tok, check=True)
    assert report.new == 3 and not report.errors
    eps = {e.task_id: e for e in st.iter_episodes()}
    for task, raw, said in (("broken", broken, "is a string that is not JSON"), ("listed", '["fig"]', "got a list")):
        ep = eps[task]
        call = ep.turns[0].tool_calls[0]
        assert (call.name, call.arguments, call.raw_arguments, call.id) == ("get_price", {}, raw, "c1")
        text = chat.decode(tok, ep.tokens.ids.tolist())
        assert text == chat.render(tok, ep.messages, ep.tools) and f'"arguments": {raw}' in text
        assert said in ep.turns[0].parse_error and ep.turns[0].parse_error.startswith("tool call 1 (get_price)")
        found = [(x.kind, x.turn) for x in ep.all_findings() if x.severity.value != "info"]
        assert found == [("tool_call_parse_error", 0)], found
    assert eps["shop-1"].turns[0].parse_error is None
    assert not [x for x in eps["shop-1"].all_findings() if x.severity.value != "info"]
    # Without a tokenizer the turn says the same; the record round-trips through Rollscope's JSONL and messages.
    bare = _db(tmp_path, "bare.db")
    import_path(f, "messages", bare)
    assert {e.task_id: e.turns[0].parse_error for e in bare.iter_episodes()} == {
        t: e.turns[0].parse_error for t, e in eps.items()}
    # Compared with its copy read without a tokenizer (no ids), the reply is the same: text and calls say so.
    from engine.analysis.compare import compare

    same = compare(eps["broken"], next(e for e in bare.iter_episodes() if e.task_id == "broken"))
    assert same.first_divergence is None, same.summary()
    out = tmp_path / "sft.jsonl"
    export([eps["broken"]], "messages", out)
    sent = json.loads(out.read_text())["messages"][2]["tool_calls"][0]["function"]["arguments"]
    assert sent == broken
    rs = tmp_path / "rs.jsonl"
    export([eps["broken"]], "jsonl", rs)
    again = _db(tmp_path, "again.db")
    import_path(rs, "jsonl", again)
    assert next(again.iter_episodes()).turns[0].tool_calls == eps["broken"].turns[0].tool_calls
    # The episode view shows the arguments as written, and says they are not a JSON object.
    from dashboard.views.episode import render_conversation

    page = render_conversation(eps["broken"])
    assert "arguments not a JSON object, as written" in page and html.escape(broken) in page
    assert "arguments not a JSON object" not in render_conversation(eps["shop-1"])
    # Group and Compare tell calls apart by the arguments as written, not by the empty object beside them.
    from engine.analysis.groups import call_text

    assert call_text(eps["broken"].turns[0].tool_calls[0]) == f"get_price({broken})"
    assert call_text(eps["listed"].turns[0].tool_calls[0]) == 'get_price(["fig"])'


def test_messages_export_for_sft_and_back(tmp_path, eps, smol_tokenizer):
    tool_ep = next(e for e in eps if e.env == "price" and any(t.tool_calls for t in e.turns))
    st = _db(tmp_path)
    st.save_episode(tool_ep)
    out = tmp_path / "sft.jsonl"
    assert export(st.iter_episodes(), "messages", out) == 1
    row = json.loads(out.read_text())
    assert row["tools"] == list(TOOLS) and row["reward"] == tool_ep.reward
    calls = [m for m in row["messages"] if m.get("tool_calls")]
    assert calls and "<tool_call>" not in calls[0]["content"]
    fn = calls[0]["tool_calls"][0]
    assert fn["type"] == "function" and json.loads(fn["function"]["arguments"]) == {"item": "fig"}
    tool_msgs = [m for m in row["messages"] if m["role"] == "tool"]
    assert tool_msgs[0]["tool_call_id"] == fn["id"] and tool_msgs[0]["name"] == "get_price"
    assert to_openai(tool_ep) == row["messages"]
    back = _db(tmp_path, "b.db")
    assert import_path(out, "messages", back, tokenizer=smol_tokenizer).new == 1
    ep = next(back.iter_episodes())
    assert [m.role for m in ep.messages] == [m.role for m in tool_ep.messages]
    assert [c.name for t in ep.turns for c in t.tool_calls] == [c.name for t in tool_ep.turns for c in t.tool_calls]
    assert ep.tokens.n_trainable > 0


# -- lossless formats ----------------------------------------------------------------


def test_columns_edited_after_export_are_read_over_the_record_and_said_so(tmp_path, eps, smol_tokenizer):
    """A Parquet export's summary columns, and a verl row's reward_score, repeat the embedded record's fields for
    dataset tools: re-scored or re-labelled there, they are what the person means. Read back, an edited column is
    taken over the record's copy, checked as the field is, and the import says so; unedited rows are as they were."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from engine.checks import LOOP_KINDS, RECHECKED, with_checks

    eps = [with_checks(e, CheckOptions(tokenizer=smol_tokenizer)) for e in eps]
    src = _db(tmp_path)
    src.save_episodes(eps)
    originals = {e.id: e for e in src.iter_episodes()}
    out = tmp_path / "all.parquet"
    export(src.iter_episodes(), "parquet", out)
    t = pq.read_table(out)
    first = t.column("id")[0].as_py()
    edited = pc.equal(t.column("id"), first)
    t = t.set_column(t.schema.get_field_index("reward"), "reward",
                     pc.if_else(edited, pa.scalar(0.25), t.column("reward")))
    t = t.set_column(t.schema.get_field_index("status"), "status",
                     pc.if_else(edited, pa.scalar("failed"), t.column("status")))
    pq.write_table(t, tmp_path / "edited.parquet")
    dst = _db(tmp_path, "b.db")
    report = import_path(tmp_path / "edited.parquet", "parquet", dst)
    assert report.new == len(eps) and not report.errors
    got = dst.get_episode(first)
    assert (got.reward, got.status.value) == (0.25, "failed")
    assert got.evolve(reward=originals[first].reward, status=originals[first].status) == originals[first]
    assert all(dst.get_episode(eid) == e for eid, e in originals.items() if eid != first)
    said = [n for n in report.notes if "column differs from their Rollscope record" in n]
    assert sorted(n.split(" column")[0].rsplit(" ", 1)[-1] for n in said) == ["reward", "status"]
    # An edit the field cannot hold refuses its row, naming the column.
    bad = t.set_column(t.schema.get_field_index("status"), "status",
                       pc.if_else(edited, pa.scalar("finished"), t.column("status")))
    pq.write_table(bad, tmp_path / "bad.parquet")
    report = import_path(tmp_path / "bad.parquet", "parquet", _db(tmp_path, "c.db"))
    assert report.new == len(eps) - 1 and [e.field for e in report.errors] == ["status"]
    assert "must be one of running, completed" in str(report.errors[0]) and "got 'finished'" in str(report.errors[0])
    # Token arrays edited after export (a mask zeroed): the record's findings were of other arrays, so the episode
    # reads as not checked, its loop findings kept.
    checked = next(e for e in originals.values() if e.checked and any(m for m in e.tokens.loss_mask))
    row = pc.equal(t.column("id"), checked.id)
    masks = [[0] * len(m) if r else m for m, r in zip(t.column("loss_mask").to_pylist(), row.to_pylist())]
    zeroed = t.set_column(t.schema.get_field_index("loss_mask"), "loss_mask", pa.array(masks, pa.list_(pa.uint8())))
    pq.write_table(zeroed, tmp_path / "zeroed.parquet")
    report = import_path(tmp_path / "zeroed.parquet", "parquet", _db(tmp_path, "z.db"))
    got = _db(tmp_path, "z.db").get_episode(checked.id)
    assert got.checked is None and got.tokens.n_trainable == 0
    kept = LOOP_KINDS - RECHECKED  # the loop's own; the kinds the checks write again go with their findings
    assert {f.kind for f in got.findings} <= kept | {"not_checked"}
    assert [(f.kind, f.message) for f in got.findings if f.kind in kept] == [
        (f.kind, f.message) for f in checked.findings if f.kind in kept]
    (why,) = [f for f in got.findings if f.kind == "not_checked"]
    assert "its token ids, loss mask or logprobs are not those checks version" in why.message
    assert any("1 new episode not checked" in n and "1 of them held findings of other token arrays (changed after "
               "their check)" in n for n in report.notes), report.notes
    assert all(_db(tmp_path, "z.db").get_episode(e.id).checked == e.checked for e in originals.values()
               if e.id != checked.id)
    # verl's AgentLoopOutput rows: reward_score re-scored.
    rows = tmp_path / "rows.jsonl"
    export(src.iter_episodes(), "verl", rows)
    lines = [json.loads(x) for x in rows.read_text().splitlines()]
    lines[0]["reward_score"] = {"score": -2.0, "format": 0.5}  # a reward manager's dict: read as the row reader does
    rows.write_text("".join(json.dumps(x) + "\n" for x in lines))
    report = import_path(rows, "verl", _db(tmp_path, "v.db"))
    assert report.new == len(eps) and any("reward_score column differs" in n for n in report.notes)
    assert sorted(e.reward for e in _db(tmp_path, "v.db").iter_episodes()) == sorted(
        [-2.0] + [e.reward for e in list(src.iter_episodes())[1:]])


@pytest.mark.parametrize("fmt,suffix", [("jsonl", "jsonl"), ("parquet", "parquet")])
def test_lossless_round_trip(tmp_path, eps, fmt, suffix):
    src = _db(tmp_path)
    for e in eps:
        src.save_episode(e)
    src.set_tags(eps[0].id, ["gold"])
    src.set_starred(eps[1].id, True)
    originals = {e.id: e for e in src.iter_episodes()}
    out = tmp_path / f"all.{suffix}"
    assert export(src.iter_episodes(), fmt, out) == len(eps)
    dst = _db(tmp_path, "b.db")
    report = import_path(out, fmt, dst)
    assert report.new == len(eps)
    for eid, e in originals.items():
        assert dst.get_episode(eid) == e
    again = import_path(out, fmt, dst)
    assert (again.new, again.already_present) == (0, len(eps)) and "replaced" in again.summary()
    if fmt == "parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        t = pq.read_table(out)
        assert t.num_rows == len(eps) and t.schema.field("tokens").type.value_type == pa.int32()
        row = t.slice(0, 1).to_pylist()[0]
        assert len(row["tokens"]) == row["n_tokens"] == len(row["loss_mask"])


# -- bad and empty input -----------------------------------------------------------


def test_empty_files_and_folders(tmp_path):
    st = _db(tmp_path)
    for fmt in ("jsonl", "areal", "verl", "messages"):
        f = tmp_path / f"{fmt}.jsonl"
        f.write_text("")
        r = import_path(f, fmt, st)
        assert (r.imported, r.skipped) == (0, 0)
    assert export([], "parquet", tmp_path / "none.parquet") == 0
    assert import_path(tmp_path / "none.parquet", "parquet", st).imported == 0
    (tmp_path / "empty").mkdir()
    with pytest.raises(FormatError, match="no .jsonl files"):
        import_path(tmp_path / "empty", "verl", st)
    with pytest.raises(FormatError, match="no such file"):
        import_path(tmp_path / "missing.jsonl", "areal", st)
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(FormatError, match="cannot read as Parquet"):
        import_path(tmp_path / "bad.parquet", "parquet", st)


def test_truncated_and_wrongly_typed_records_are_skipped_with_their_position(tmp_path, smol_tokenizer):
    tok = smol_tokenizer
    ok = areal_record(tok, 1, 0, [("prompt", _enc(tok, "Q: 1+1?\n")), ("gen", _enc(tok, "2<|im_end|>"))], reward=1.0)
    lines = [json.dumps(ok), json.dumps({**ok, "sample_idx": 1, "reward": "high"}),
             json.dumps({**ok, "sample_idx": 2.5}), json.dumps({**ok, "completion": 7}),
             json.dumps({**ok, "sample_idx": 3})[:40]]  # the writer died mid-line
    f = write_jsonl(tmp_path / "a.jsonl", lines)
    st = _db(tmp_path)
    r = import_path(f, "areal", st, tokenizer=tok)
    assert r.new == 1 and r.skipped == 4
    msgs = [str(e) for e in r.errors]
    assert msgs[0].startswith(f"{f}:2: field 'reward': must be a number")
    assert msgs[1].startswith(f"{f}:3: field 'sample_idx': must be an integer")
    assert msgs[2].startswith(f"{f}:4: field 'completion': must be text")
    assert msgs[3].startswith(f"{f}:5: not valid JSON")
    bad_chat = _chat_record()
    del bad_chat["messages"][2]["tool_calls"][0]["function"]["name"]  # arguments that are not JSON are kept (above)
    g = write_jsonl(tmp_path / "c.jsonl", [bad_chat, {"reward": 1.0}, {"messages": "hi"}])
    r2 = import_path(g, "messages", st)
    assert r2.new == 0 and [e.field for e in r2.errors] == ["messages[2].tool_calls[0]", "messages", "messages"]
    v = write_jsonl(tmp_path / "3.jsonl", [{"input": "q", "output": "a"}, {"input": "q", "output": "a", "score": [1]}])
    r3 = import_path(v, "verl", st)
    assert [e.field for e in r3.errors] == ["score", "score"]


def test_episodes_with_nan_reward_parts_and_dict_rewards(tmp_path):
    st = _db(tmp_path)
    rows = [{"messages": [{"role": "user", "content": "hi"}], "reward": {"acc": 1.0, "fmt": 0.5}},
            {"messages": [{"role": "user", "content": "hi"}], "reward": float("nan")}]
    f = tmp_path / "r.jsonl"
    f.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    r = import_path(f, "messages", st, reward_key="acc")
    assert r.new == 1 and "finite" in str(r.errors[0])
    ep = next(st.iter_episodes())
    assert ep.reward == 1.0 and ep.source.details["reward"] == {"acc": 1.0, "fmt": 0.5}
    assert np.asarray(ep.tokens.ids).size == 0


@pytest.mark.parametrize("fmt", ["jsonl", "verl"])
def test_a_record_whose_mask_was_edited_after_its_check_reads_as_not_checked_in_either_import_path(
        tmp_path, smol_tokenizer, fmt):
    """A record carries a hash of the arrays its checks judged (``checked_arrays``): a mask shifted in the file after
    export no longer gives it, so the record's findings (of the old mask) are dropped and it reads as not checked,
    whether the line is read here or on a worker (``jsonl.pack_lines``), until ``check`` finds the shifted mask."""
    from engine.checks import with_checks
    from engine.formats import jsonl

    ep = with_checks(next(e for e in loop_episodes(smol_tokenizer) if e.preset == "tito" and e.n_turns > 1),
                     CheckOptions(tokenizer=smol_tokenizer))
    assert ep.checked and ep.checked_arrays == ep.tokens.digest()
    assert not [f for f in ep.all_findings() if f.kind == "mask_misaligned"]
    src = _db(tmp_path, "src.db")
    src.save_episode(ep)
    out = tmp_path / f"e.{fmt}.jsonl"
    export(src.iter_episodes(), fmt, out)
    src.close()
    d = json.loads(out.read_text())
    if fmt == "jsonl":
        d["loss_mask"] = [0] + d["loss_mask"][:-1]
    else:
        d["response_mask"] = [0] + d["response_mask"][:-1]
    out.write_text(json.dumps(d) + "\n")
    st = _db(tmp_path, "b.db")
    report = import_path(out, fmt, st)
    got = st.get_episode(ep.id)
    assert got.checked is None and got.checked_arrays is None
    assert not [f for f in got.findings if f.kind not in ("not_checked", *LOOP_KINDS)]
    (why,) = [f for f in got.findings if f.kind == "not_checked"]
    assert "not those checks version" in why.message and why.evidence["edited_after_check"] == ep.checked
    assert any("1 of them held findings of other token arrays" in n for n in report.notes), report.notes
    again = with_checks(got, CheckOptions(tokenizer=smol_tokenizer))
    assert any(f.kind == "mask_misaligned" for f in again.all_findings())
    assert not [f for f in again.findings if f.kind == "not_checked" and "edited_after_check" in f.evidence]
    st.close()
    if fmt == "jsonl":  # the worker's path packs the same verdict
        (packed,) = jsonl.pack_lines([(f"{out}:1", out.read_bytes(), 1 << 30, None, 1)])
        assert not packed.checked and packed.edited_after_check
    # The same file untouched: checked, as it was.
    export([ep], fmt, tmp_path / "same.jsonl")
    fresh = _db(tmp_path, "c.db")
    import_path(tmp_path / "same.jsonl", fmt, fresh)
    assert fresh.get_episode(ep.id).checked == ep.checked
    fresh.close()
