"""Each turn's prompt text held once: a 60-turn retail episode's prompts, rendered by Qwen3's real template (which
drops the <think> of earlier replies once the user speaks again), go through the JSONL export and the store and
come back exact, at a fraction of the bytes."""

from __future__ import annotations

import io
import json
import random
from dataclasses import replace

import pytest

from engine.errors import FormatError
from engine.formats import jsonl
from engine.records import prompts
from engine.records.episode import Episode
from engine.store import Store, codec
from tests.synthetic import rendered_retail_episode


@pytest.fixture(scope="module")
def episode(qwen3_tokenizer) -> Episode:
    return rendered_retail_episode(qwen3_tokenizer)


def _rewritten(ep: Episode) -> list[int]:
    """The turns whose prompt does not start with the turn before's."""
    return [t.index for a, t in zip(ep.turns, ep.turns[1:]) if not t.prompt_text.startswith(a.prompt_text)]


def test_a_jsonl_export_holds_each_prompt_once_and_reads_back_exact(episode):
    rewritten = _rewritten(episode)
    assert len(rewritten) == 5  # the template rewrote history at every user answer but the last turn's
    full = jsonl.dumps(episode, full_prompts=True)
    line = jsonl.dumps(episode)
    assert jsonl.parse_line(line, "x") == episode == jsonl.parse_line(full, "x")
    record = json.loads(line)
    for k in rewritten:  # kept as slices around the dropped thinking, not whole
        value = record["turns"][k]["prompt_text"]
        literal = sum(len(p) for p in value["$pieces"] if isinstance(p, str))
        assert literal < min(1_000, len(episode.turns[k].prompt_text) // 20), (k, literal)
    held = sum(len(json.dumps(t["prompt_text"])) for t in record["turns"])
    whole = sum(len(json.dumps(t.prompt_text)) for t in episode.turns)
    assert held < whole / 20 and len(line) < len(full) / 4, (held, whole, len(line), len(full))
    # A plain record (every prompt whole) is valid, and so is the compact one.
    from engine.records.schema import problems

    assert problems(record) == [] and problems(json.loads(full)) == []


def test_the_store_holds_each_prompt_once_and_reads_back_exact(tmp_path, episode):
    store = Store(tmp_path / "x.db")
    store.save_episodes([episode])
    assert store.get_episode(episode.id) == episode
    rows = dict(store.db.execute("SELECT idx, data FROM turns WHERE episode_id = ?", [episode.id]).fetchall())
    for k in _rewritten(episode):
        stored = codec.unpack_json(rows[k])["prompt_text"]
        assert isinstance(stored, dict) and sum(len(p) for p in stored["$pieces"] if isinstance(p, str)) < 1_000
    # Saved turn by turn, as a live run stores it, then finished.
    live = replace(episode, id="live")
    for k in range(live.n_turns):
        store.save_turn(live.evolve(turns=live.turns[: k + 1]), live.turns[k])
    assert store.get_episode("live").turns == live.turns
    store.close()


def test_pieces_rebuild_any_edit_exactly():
    rng = random.Random(7)

    def text(n: int) -> str:
        return "".join(rng.choice("ab <>\n{}:日") for _ in range(n))

    for _ in range(400):
        source = text(rng.randint(0, 2_000))
        prompt = source
        for _ in range(rng.randint(0, 4)):
            a = rng.randint(0, len(prompt))
            prompt = prompt[:a] + text(rng.randint(0, 80)) * (rng.random() < 0.5) + prompt[a + rng.randint(0, 300):]
        prompt += text(rng.randint(0, 300))
        assert prompts.restore(prompts.compact(prompt, source), source) == prompt


def test_pieces_that_do_not_fit_are_refused_naming_the_turn(episode):
    record = json.loads(jsonl.dumps(episode))
    record["turns"][3]["prompt_text"] = {"$pieces": [[0, 10**9]]}
    with pytest.raises(FormatError, match=r"turns\.3\.prompt_text.*piece 0"):
        jsonl.parse_line(json.dumps(record), "f.jsonl:1")
    record["turns"][0]["prompt_text"] = {"$pieces": ["x"]}
    with pytest.raises(FormatError, match=r"turns\.0\.prompt_text.*no prompt text"):
        jsonl.parse_dict(record, "f.jsonl:1")
    buf = io.StringIO()
    jsonl.write([episode], buf, full_prompts=True)
    assert all(isinstance(t["prompt_text"], str) for t in json.loads(buf.getvalue())["turns"])
