"""Token diffs (engine/tokendiff.py, `rollscope diff`) on real episodes: the embedded SmolLM2 template, the retail
env with the scripted policy, and the real Qwen3 tokenizer for a diff across tokenizers."""

from __future__ import annotations

import asyncio
import json

import pytest

from engine.analysis import tokendiff as td
from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.cli import main
from engine.envs import env_factory
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.token_arrays import TokenArrays
from engine.store import Store


@pytest.fixture(scope="module")
def tok():
    return load_tokenizer(None)


def _retail(tok, preset: str, task: int = 0):
    env = env_factory("retail")()
    backend = ScriptedBackend(env.reference_reply, tok)
    return asyncio.run(run_episode(env, backend, tok, PRESETS[preset], env.tasks[task], preset=preset,
                                   tokenizer_name="smollm2"))


def _texts(tok, d: td.TokenDiff, rows, side: str) -> str:
    ids = td.side_ids(d, rows)[0 if side == "a" else 1]
    return tok.decode(ids)


def test_an_episode_against_itself_agrees_everywhere(tok):
    ep = _retail(tok, "tito")
    d = td.token_diff(ep, ep)
    assert d.first is None and not d.hunks and d.n_differing == 0
    assert len(d.rows) == len(ep.tokens)
    assert sum(c.rows for c in d.counts.values()) == len(ep.tokens)


def test_the_seed_loop_against_tito_marks_the_dropped_generation_prompts_and_the_template_newlines(tok):
    seed = _retail(tok, "slime-tau-seed")
    tito = asyncio.run(td.retokenized(seed, preset="tito", tokenizer=tok))
    assert tito.preset == "tito" and tito.n_turns == seed.n_turns
    d = td.token_diff(seed, tito)
    # Every later turn's "<|im_start|>assistant\n" is in tito's array and not in the seed's.
    dropped = [r for r in d.rows if r.op == td.TD_ONLY_B and d.kind_of(r) == "gen_prompt"]
    assert d.counts["gen_prompt"].only_b == len(dropped)
    runs: list[list[int]] = []
    for r in dropped:
        if runs and r.b == runs[-1][-1] + 1:
            runs[-1].append(r.b)
        else:
            runs.append([r.b])
    assert len(runs) == seed.n_turns - 1  # one before each turn after the first
    assert {tok.decode([int(tito.tokens.ids[b]) for b in run]) for run in runs} == {"<|im_start|>assistant"}
    # The newline after each <|im_end|>: the same token, trained on by the seed (in its assistant run), not by tito.
    newlines = [r for r in d.rows if r.op == td.TD_SAME and r.mask_differs]
    assert newlines and all(tok.decode([int(seed.tokens.ids[r.a])]) == "\n" for r in newlines)
    assert all(seed.tokens.loss_mask[r.a] == 1 and tito.tokens.loss_mask[r.b] == 0 for r in newlines)
    assert d.counts["assistant"].mask == len(newlines)
    # Generated tokens keep their ids and logprobs.
    assert d.counts["assistant"].ids == 0 and d.counts["assistant"].logprob == 0


def test_slime_against_tito_differs_only_where_the_arrays_differ(tok):
    slime = _retail(tok, "slime-tau")
    d = td.token_diff(slime, asyncio.run(td.retokenized(slime, preset="tito", tokenizer=tok)))
    # slime lays the generation prompts down too (masked 0), so they agree; the newlines after <|im_end|> do not.
    assert d.counts["gen_prompt"].differing == 0
    # One newline per reply: trained on by slime, not by tito; after the last reply tito has none at all.
    stops = sum(1 for t in slime.turns if t.generation is not None and t.generation.finish_reason == "stop")
    assert (d.counts["assistant"].mask, d.counts["assistant"].only_a) == (stops - 1, 1)
    # slime-tau replaces the template's tool sentence: the first difference is in the first prompt.
    first = d.first
    assert first is not None and d.kind_of(first) == "prompt" and d.turn_of(first) == 0


def test_one_changed_reply_is_one_run_in_its_turn(tok):
    ep = _retail(tok, "tito")
    ids = ep.tokens.ids.copy()
    gen = next(s for s in ep.segments if s.kind == "assistant" and s.turn == 1)
    ids[gen.start + 2] = ids[gen.start + 2] + 1
    lp = ep.tokens.logprobs.copy()
    lp[gen.start + 5] = -3.5
    other = ep.evolve(tokens=TokenArrays(ids, ep.tokens.loss_mask, lp, ep.tokens.versions))
    d = td.token_diff(ep, other)
    assert [(r.op, r.a) for r in d.rows if r.differs] == [(td.TD_CHANGED, gen.start + 2), (td.TD_SAME, gen.start + 5)]
    assert d.rows[gen.start + 5].logprob_differs and d.turn_of(d.first) == 1
    assert d.counts["assistant"].ids == 1 and d.counts["assistant"].logprob == 1


def test_another_tokenizer_is_aligned_by_token_text(tok, qwen3_tokenizer):
    ep = _retail(tok, "tito")
    other = asyncio.run(td.retokenized(ep, preset="tito", tokenizer=qwen3_tokenizer, tokenizer_name="qwen3"))
    d = td.token_diff(ep, other, tok, qwen3_tokenizer)
    assert d.by_text
    # Most positions align: the two vocabularies spell most of this text with the same pieces.
    same = sum(1 for r in d.rows if r.op == td.TD_SAME)
    assert same > 0.5 * len(ep.tokens)
    assert d.hunks


def test_rollscope_diff_against_a_preset_and_between_two_episodes(tok, tmp_path, capsys):
    db = tmp_path / "r.db"
    seed, tito = _retail(tok, "slime-tau-seed"), _retail(tok, "tito")
    store = Store(db)
    store.save_episode(seed)
    store.save_episode(tito)
    store.close()
    assert main(["diff", seed.id[:8], "--preset", "tito", "--db", str(db)]) == 1
    out = capsys.readouterr().out
    assert "B: A's conversation under preset tito" in out and "first difference: A[" in out
    assert "gen_prompt" in out and "<|im_start|>assistant'  mask 0000" in out
    assert main(["diff", seed.id, tito.id, "--db", str(db), "--json"]) == 1
    doc = json.loads(capsys.readouterr().out)
    assert doc["counts"]["gen_prompt"]["only_b"] > 0 and doc["runs"]
    assert (doc["a"], doc["b"]) == (seed.id, tito.id) and doc["b_how"] == f"episode {tito.id}"
    assert main(["diff", tito.id, tito.id, "--db", str(db)]) == 0
    assert "agree" in capsys.readouterr().out
    assert main(["diff", tito.id, "--db", str(db)]) == 2
    assert "--preset" in capsys.readouterr().err


def test_a_math_episode_is_laid_down_again_under_another_preset(smol_tokenizer):
    # Math has no user to replay: its feedback comes from the env again, so "A under tito" works there too.
    import asyncio

    from engine.backends.scripted import ScriptedBackend
    from engine.envs.math import MathEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS

    env = MathEnv()
    backend = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.5, seed=3)
    ep = asyncio.run(run_episode(env, backend, smol_tokenizer, PRESETS["areal-math"], env.tasks[1], preset="areal-math",
                                 tokenizer_name="smollm2"))
    assert ep.n_turns >= 2
    other = asyncio.run(td.retokenized(ep, preset="tito", tokenizer=smol_tokenizer))
    assert other.preset == "tito" and other.n_turns == ep.n_turns
    assert [t.generation.token_ids for t in other.turns] == [t.generation.token_ids for t in ep.turns]
    d = td.token_diff(ep, other, smol_tokenizer, smol_tokenizer)
    assert d.first is not None  # areal-math's injected system block and feedback tokens differ from tito's


def test_a_preset_lays_down_its_own_episode_with_the_knobs_it_ran_with_and_says_how_another_ended(tok, tmp_path,
                                                                                                 capsys):
    """An episode run under verl-tool with a prompt_length of its own is laid down by verl-tool as it ran: no
    difference. Under the preset's defaults its 3,000-token prompt is refused (verl's overlong-prompt filter), and the
    diff says B ended so, and why, where it used to show the whole response as only A's; --set gives the knob."""
    env = env_factory("retail")()
    backend = ScriptedBackend(env.reference_reply, tok)
    cfg = PRESETS["verl-tool"].with_settings({"prompt_length": "4096"})
    verl = asyncio.run(run_episode(env, backend, tok, cfg, env.tasks[0], preset="verl-tool", tokenizer_name="smollm2"))
    slime = _retail(tok, "slime-tau")
    assert verl.prompt_len > PRESETS["verl-tool"].prompt_length and verl.n_tokens > verl.prompt_len
    again = asyncio.run(td.retokenized(verl, preset="verl-tool", tokenizer=tok))
    assert td.token_diff(verl, again).n_differing == 0 and td.laid_down_ending(verl, again) == ""
    db = tmp_path / "r.db"
    store = Store(db)
    store.save_episode(verl)
    store.save_episode(slime)
    store.close()
    assert main(["diff", verl.id[:8], "--preset", "verl-tool", "--db", str(db)]) == 0
    assert "0 differ" in capsys.readouterr().out
    assert main(["diff", slime.id[:8], "--preset", "verl-tool", "--db", str(db)]) == 1
    out = capsys.readouterr().out.splitlines()
    b = asyncio.run(td.retokenized(slime, preset="verl-tool", tokenizer=tok))
    assert len(b.tokens) == b.prompt_len > 512  # the prompt alone: the loop ended before any reply
    assert out[2] == td.laid_down_ending(slime, b) == (
        f"B ended failed: the prompt is {b.prompt_len} tokens, longer than prompt_length=512: verl's dataset refuses "
        f"it (filter_overlong_prompts); raise prompt_length (--set prompt_length={b.prompt_len} or more) (A ended "
        "completed)")
    # With the knob it is laid down: verl's loop names no tool message and cuts long answers (its layout of the same
    # answers), and its response_length ends B before A's last turns, which the diff says.
    assert main(["diff", slime.id[:8], "--preset", "verl-tool", "--set", "prompt_length=4096", "--db", str(db)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[1].startswith("B: A's conversation under preset verl-tool (prompt_length=4096) (verl-tool, ")
    assert out[2] == "B ended truncated: the response reached response_length=512 (A ended completed)"
    # Where the other loop's env says other words (verl's gsm8k interaction against the math env's feedback), it
    # would be another conversation: refused, saying where, what differs and what to do instead.
    from engine.envs.math import MathEnv
    from engine.errors import RollscopeError

    math = MathEnv()
    answered = asyncio.run(run_episode(math, ScriptedBackend(math.reference_reply, tok), tok, PRESETS["verl-tool"],
                                       math.tasks[1], preset="verl-tool", tokenizer_name="smollm2"))
    with pytest.raises(RollscopeError) as e:
        asyncio.run(td.retokenized(answered, preset="tito", tokenizer=tok))
    said = str(e.value)
    assert said.startswith("A's conversation cannot be laid down by tito: replayed under it, what follows a reply "
                           "differs at turn 0 (observation: [user: ")
    assert "tito's loop answers otherwise than verl-tool" in said and "rollscope diff A B" in said
    assert main(["diff", slime.id[:8], "--set", "prompt_length=4096", "--db", str(db)]) == 2
    assert "give --preset (A's own is slime-tau)" in capsys.readouterr().err


def test_a_record_of_an_env_rollscope_cannot_rebuild_says_why_diff_cannot_lay_it_down_again(tmp_path, capsys):
    """A chat record names no env Rollscope has: diff against a preset or tokenizer replays the conversation in its
    env, so it says so in diff's words (not fork's), with what works without one."""
    from tests.fixtures_formats import write_jsonl

    rec = {"id": "c", "messages": [{"role": "user", "content": "2+3?"}, {"role": "assistant", "content": "5."}]}
    db = tmp_path / "m.db"
    assert main(["import", str(write_jsonl(tmp_path / "c.jsonl", [rec])), "--format", "messages", "--db", str(db),
                 "--tokenizer", "smollm2", "--quiet"]) == 0
    eid = next(Store(db).iter_episodes()).id
    capsys.readouterr()
    assert main(["diff", eid[:8], "--preset", "tito", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"cannot replay {eid}: it names env 'messages'" in err and "import it with --env" in err
    assert "`diff A B`" in err and "fork" not in err
