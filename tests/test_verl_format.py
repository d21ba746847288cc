"""``export --format verl`` writes verl's AgentLoopOutput and ``import --format verl`` reads it back.

A verl-tool episode's row is held to the transcription of verl's loop (tests/reference_verl.py) and validated by
a transcription of verl's pydantic ``AgentLoopOutput``; exported and imported, the episode is the same. A row verl
wrote itself (no Rollscope record) imports from its mask, a renamed or missing field is named and read, and a file
of neither verl shape is refused naming both.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.envs.math import MathEnv
from engine.envs.retail import RetailEnv
from engine.errors import FormatError
from engine.formats import export, import_path
from engine.records.episode import Episode, Status
from engine.store import Store
from tests import reference_verl as ref
from tests.test_verl_preset import WIDE, reference, run

TEASE = '<tool_call>\n{"name": "teleport", "arguments": {"to": "Zürich"}}\n</tool_call>'


def _runs(tok: Any) -> list[tuple[Episode, Any]]:
    truth = str(MathEnv().task(MathEnv().tasks[0]).solutions[0])
    return [
        (run(RetailEnv, tok, 0, overrides={2: TEASE}, max_tool_response_length=40, calculate_log_probs="true",
             **WIDE)[0], RetailEnv),
        (run(RetailEnv, tok, 1, rate=0.4, seed=4, **WIDE)[0], RetailEnv),
        (run(MathEnv, tok, 0, overrides={0: f"So the answer is \\boxed{{{truth}}}."}, calculate_log_probs="true")[0],
         MathEnv),
        (run(MathEnv, tok, 1, overrides={0: "The answer is 3.", 1: "#### 2"})[0], MathEnv),
    ]


def _lps(ep: Episode) -> list[float | None]:
    return [None if math.isnan(x) else x for x in ep.tokens.logprobs.tolist()]


@pytest.mark.parametrize("tname", ["qwen3_tokenizer", "smol_tokenizer"])
def test_a_verl_tool_run_exports_as_verls_agent_loop_output_and_imports_back_the_same(request, tname, tmp_path):
    tok = request.getfixturevalue(tname)
    runs = _runs(tok)
    eps = [ep for ep, _ in runs]
    out = tmp_path / "agent_loop.jsonl"
    assert export(eps, "verl", out) == 4
    rows = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    for (ep, env_cls), r in zip(runs, rows, strict=True):
        # verl's own model takes the row and dumps the same fields in the same order.
        model = ref.AgentLoopOutput.model_validate(r)
        assert list(model.model_dump()) == list(r) and model.model_dump() == r
        # The arrays, counts and rewards are what verl's loop returns for these generations.
        want = reference(ep, tok, env_cls)
        for key in ("prompt_ids", "response_ids", "response_mask", "num_turns"):
            assert r[key] == want[key], key
        if want["response_logprobs"] is None:
            assert r["response_logprobs"] is None
        else:
            assert r["response_logprobs"] == pytest.approx(want["response_logprobs"])
        assert r["extra_fields"]["turn_scores"] == want["extra_fields"]["turn_scores"]
        assert r["extra_fields"]["tool_rewards"] == want["extra_fields"]["tool_rewards"]
        assert r["reward_score"] == ep.reward and r["metrics"]["generate_sequences"] >= 0
        assert r["extra_fields"]["raw_prompt"][-1]["role"] == "user"
        assert "logprobs" not in r["extra_fields"]["rollscope"]  # verl's own fields hold them exactly
    assert rows[0]["response_logprobs"] is not None and rows[1]["response_logprobs"] is None
    store = Store(tmp_path / "back.sqlite")
    try:
        report = import_path(out, "verl", store)
        # Nothing lost, nothing renamed: the one note says that the loop's episodes were not checked, as they were not.
        assert report.new == 4 and not report.errors and all(ep.checked is None for ep, _ in runs), report.notes
        assert [n.split(":")[0] for n in report.notes] == ["4 new episodes not checked"], report.notes
        checked = tmp_path / "checked.jsonl"
        export([eps[0].evolve(checked="v1")], "verl", checked)  # a record that says a check ran: no note
        again = import_path(checked, "verl", Store(tmp_path / "checked.sqlite"))
        assert again.new == 1 and again.notes == []
        for ep in eps:
            back = store.get_episode(ep.id)
            assert back.tokens.ids.tolist() == ep.tokens.ids.tolist()
            assert back.tokens.loss_mask.tolist() == ep.tokens.loss_mask.tolist()
            assert _lps(back) == _lps(ep)
            assert (back.reward, back.turn_rewards, back.status, back.prompt_len) == (
                ep.reward, ep.turn_rewards, ep.status, ep.prompt_len)
            assert back.turns[-1].info["verl"] == ep.turns[-1].info["verl"]  # turn scores, tool rewards, counts
            assert back.config.loop == ep.config.loop and back.config.loop.token_mode == "verl"
            assert [t.raw_observation for t in back.turns] == [t.raw_observation for t in ep.turns]
            assert back.ground_truth == ep.ground_truth and back.segments == ep.segments
            assert back.to_dict() == ep.to_dict()
    finally:
        store.close()
    assert eps[2].ground_truth and eps[0].ground_truth is None
    assert any(len(r) > 40 for t in eps[0].turns for r in t.raw_observation)


def test_a_row_verl_wrote_itself_imports_from_its_mask_and_names_what_it_lacks(qwen3_tokenizer, tmp_path):
    ep, _ = run(RetailEnv, qwen3_tokenizer, 0, calculate_log_probs="true", **WIDE)
    want = reference(ep, qwen3_tokenizer, RetailEnv)
    theirs = ref.AgentLoopOutput(
        prompt_ids=want["prompt_ids"], response_ids=want["response_ids"], response_mask=want["response_mask"],
        response_logprobs=want["response_logprobs"], num_turns=want["num_turns"], metrics=ref.AgentLoopMetrics(),
        extra_fields={**want["extra_fields"], "raw_prompt": [{"role": "user", "content": "hi"}]}).model_dump()
    renamed = {("responses" if k == "response_ids" else k): v for k, v in theirs.items() if k != "metrics"}
    path = tmp_path / "dump.jsonl"
    path.write_text(json.dumps(theirs) + "\n" + json.dumps(renamed) + "\n" + json.dumps({"prompt_ids": [1, 2]}) + "\n",
                    encoding="utf-8")
    store = Store(tmp_path / "s.sqlite")
    try:
        report = import_path(path, "verl", store, tokenizer=qwen3_tokenizer)
        assert report.new == 2  # a row alike on another line is another sample (a group's same reply)
        assert len(report.errors) == 1 and report.errors[0].field == "response_ids"
        assert any("'response_ids' is missing; read from 'responses'" in n for n in report.notes)
        assert any("'metrics' is missing" in n for n in report.notes)
        assert any("reward_score is null" in n for n in report.notes)
        got, again = (store.get_episode(eid) for eid in store.episode_ids())
        assert got.id != again.id and np.array_equal(got.tokens.ids, again.tokens.ids)
    finally:
        store.close()
    p = len(want["prompt_ids"])
    assert got.prompt_len == p and got.tokens.ids.tolist() == want["prompt_ids"] + want["response_ids"]
    assert got.tokens.loss_mask.tolist()[p:] == want["response_mask"]
    assert got.tokens.logprobs.tolist()[p:] == pytest.approx(want["response_logprobs"])
    assert got.source.kind == "verl" and got.source.details["turn_scores"] == want["extra_fields"]["turn_scores"]
    assert got.source.details["tool_rewards"] == want["extra_fields"]["tool_rewards"]
    # Turns from the mask: one per generation, its text decoded.
    gens = [t.generation for t in got.turns]
    assert len(gens) == sum(1 for t in ep.turns if t.generation is not None)
    assert all(g is not None and g.text for g in gens)
    assert got.status is Status.COMPLETED and got.messages[0].content == "hi"
    assert np.array_equal(got.tokens.ids, ep.tokens.ids[: len(got.tokens)])


def test_samples_of_a_group_with_the_same_reply_are_each_an_episode_and_read_again_are_kept(qwen3_tokenizer, tmp_path):
    """GRPO samples a prompt n times; short replies often come out alike. Each row is a sample: rows alike but for
    their reward and logprobs are two episodes, and importing the file again adds none."""
    ep, _ = run(MathEnv, qwen3_tokenizer, 0, calculate_log_probs="true")
    want = reference(ep, qwen3_tokenizer, MathEnv)
    rows = []
    for reward, shift in ((1.0, 0.0), (0.0, -0.25)):
        rows.append(ref.AgentLoopOutput(
            prompt_ids=want["prompt_ids"], response_ids=want["response_ids"], response_mask=want["response_mask"],
            response_logprobs=[x + shift if m else x for x, m in zip(want["response_logprobs"], want["response_mask"])],
            reward_score=reward, num_turns=want["num_turns"], metrics=ref.AgentLoopMetrics(),
            extra_fields=want["extra_fields"]).model_dump())
    path = tmp_path / "group.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    store = Store(tmp_path / "s.sqlite")
    try:
        first = import_path(path, "verl", store, tokenizer=qwen3_tokenizer)
        again = import_path(path, "verl", store, tokenizer=qwen3_tokenizer)
        got = [store.get_episode(eid) for eid in store.episode_ids()]
    finally:
        store.close()
    assert (first.new, first.already_present, again.new, again.already_present) == (2, 0, 0, 2)
    assert sorted(g.reward for g in got) == [0.0, 1.0]
    # The same rows in two steps' files (an eval's greedy answers): each file's rows are episodes of their own.
    steps = tmp_path / "steps"
    steps.mkdir()
    for name in ("1.jsonl", "2.jsonl"):
        (steps / name).write_text(path.read_text(encoding="utf-8"), encoding="utf-8")
    other = Store(tmp_path / "steps.sqlite")
    try:
        assert import_path(steps, "verl", other, tokenizer=qwen3_tokenizer).new == 4
    finally:
        other.close()
    low = next(g for g in got if g.reward == 0.0)
    gen = low.tokens.loss_mask == 1
    assert low.tokens.logprobs[gen].tolist() == pytest.approx(
        [x - 0.25 for x, m in zip(want["response_logprobs"], want["response_mask"]) if m])


def test_a_file_of_neither_verl_shape_is_refused_naming_both(tmp_path):
    path = tmp_path / "other.jsonl"
    path.write_text(json.dumps({"tokens": [1, 2], "loss_mask": [0, 1]}) + "\n", encoding="utf-8")
    store = Store(tmp_path / "s.sqlite")
    try:
        with pytest.raises(FormatError) as e:
            import_path(path, "verl", store)
    finally:
        store.close()
    msg = str(e.value)
    assert "neither of verl's shapes" in msg and "loss_mask, tokens" in msg
    assert "input, output and score" in msg and "prompt_ids, response_ids and response_mask" in msg


def test_the_cli_round_trip(tmp_path, smol_tokenizer, capsys):
    from engine.cli.main import main

    ep, _ = run(MathEnv, smol_tokenizer, 1, overrides={0: "The answer is 3.", 1: "#### 2"})
    src = Store(tmp_path / "a.sqlite")
    try:
        src.save_episode(ep)
    finally:
        src.close()
    out = tmp_path / "v.jsonl"
    assert main(["export", "--db", str(tmp_path / "a.sqlite"), "--format", "verl", "-o", str(out)]) == 0
    assert main(["import", str(out), "--format", "verl", "--db", str(tmp_path / "b.sqlite")]) == 0
    assert "imported 1 new" in capsys.readouterr().out
    back = Store(tmp_path / "b.sqlite")
    try:
        assert back.get_episode(ep.id).to_dict() == ep.to_dict()
    finally:
        back.close()


def test_rollout_data_dir_dumps_still_import(tmp_path):
    path = tmp_path / "3.jsonl"
    path.write_text(json.dumps({"input": "2+2?", "output": "4", "gts": "4", "score": 1.0, "step": 3}) + "\n",
                    encoding="utf-8")
    store = Store(tmp_path / "s.sqlite")
    try:
        report = import_path(path, "verl", store)
        ep = store.get_episode(next(iter(store.episode_ids())))
    finally:
        store.close()
    assert report.new == 1 and ep.reward == 1.0 and ep.messages[-1].content == "4"
    assert Path(ep.source.file) == path


def test_the_episode_views_show_each_turns_raw_tool_output(smol_tokenizer):
    from dashboard.views.episode import render_conversation
    from dashboard.views.html import esc, to_json
    from dashboard.views.limits import Budget
    from dashboard.views.playback import _env_block

    ep, _ = run(RetailEnv, smol_tokenizer, 0, max_tool_response_length=40, **WIDE)
    cut = next(t for t in ep.turns if t.raw_observation and len(t.raw_observation[0]) > 40)
    assert cut.observation[0].content != cut.raw_observation[0]  # what the model saw was cut; the record keeps it all
    shown = esc(to_json(list(cut.raw_observation)))
    html = render_conversation(ep)
    assert html.count("raw tool output, before truncation") == sum(1 for t in ep.turns if t.raw_observation)
    assert shown in html and shown in _env_block(cut, Budget())


def test_another_presets_episode_round_trips_too(smol_tokenizer, tmp_path):
    """slime-tau trains the newline after ``<|im_end|>``, which has no logprob: verl's shape then has no response
    logprobs at all, and the record keeps the episode's own."""
    import asyncio

    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS
    from tests.test_verl_preset import Policy

    env = RetailEnv()
    backend = Policy(RetailEnv, smol_tokenizer)  # each generated token with its own logprob
    ep = asyncio.run(run_episode(env, backend, smol_tokenizer, PRESETS["slime-tau"], env.tasks[0], preset="slime-tau"))
    p = ep.prompt_len
    trained = ep.tokens.logprobs[p:][ep.tokens.loss_mask[p:] == 1]
    assert np.isnan(trained).any() and not np.isnan(trained).all()
    out = tmp_path / "v.jsonl"
    assert export([ep], "verl", out) == 1
    r = json.loads(out.read_text(encoding="utf-8"))
    ref.AgentLoopOutput.model_validate(r)
    assert r["response_logprobs"] is None and len(r["extra_fields"]["rollscope"]["logprobs"]) == ep.n_tokens
    store = Store(tmp_path / "s.sqlite")
    try:
        import_path(out, "verl", store)
        assert store.get_episode(ep.id).to_dict() == ep.to_dict()
    finally:
        store.close()


def test_a_mask_that_trains_the_prompt_comes_back_whole_from_a_verl_row(smol_tokenizer, tmp_path):
    """verl's response_mask cannot hold a trained prompt token (a mask bug Rollscope shows); the row's record keeps the
    whole mask, so the episode reads back as it was, still checked, its finding still there."""
    from engine.checks import CheckOptions, with_checks
    from engine.formats import export, import_path
    from tests.fixtures_formats import loop_episodes

    ep = next(e for e in loop_episodes(smol_tokenizer) if e.preset == "tito")
    mask = ep.tokens.loss_mask.copy()
    mask[ep.prompt_len - 1] = 1
    bad = with_checks(ep.evolve(tokens=ep.tokens.evolve(loss_mask=mask)), CheckOptions(tokenizer=smol_tokenizer))
    out = tmp_path / "rows.jsonl"
    export([bad], "verl", out)
    row = json.loads(out.read_text())
    assert row["response_mask"] == mask[ep.prompt_len:].tolist()  # verl's view
    store = Store(tmp_path / "s.db")
    import_path(out, "verl", store)
    got = store.get_episode(bad.id)
    store.close()
    assert np.array_equal(got.tokens.loss_mask, mask) and got.checked == bad.checked
    assert [f.kind for f in got.all_findings()] == [f.kind for f in bad.all_findings()]
