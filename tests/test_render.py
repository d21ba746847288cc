"""The dashboard's HTML renderers, on episodes made by the real loop and tokenizer."""

from __future__ import annotations

import asyncio
import html
import re
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from dashboard import render
from engine.backends.base import GenerationRequest
from engine.backends.scripted import ScriptedBackend
from engine.chat import encode, end_of_turn_ids
from engine.factory import env_factory, load_tokenizer
from engine.loop import run_episode
from engine.presets import PRESETS
from engine.records import Episode, Finding, Generation, Message, Segment, Severity, TokenArrays, ToolCall

HOSTILE = '<img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>'
TOK_SPAN = re.compile(r'<span class="(tok [^"]*)"(?: id="[^"]*")? title="([^"]*)">')


class FixedReplyBackend:
    """A backend that always says the same text, tokenized like a model's output."""

    name = "fixed"

    def __init__(self, tokenizer: Any, text: str) -> None:
        self.tok = tokenizer
        self.text = text

    async def generate(self, request: GenerationRequest) -> Generation:
        ids = encode(self.tok, self.text) + sorted(end_of_turn_ids(self.tok))[:1]
        return Generation(
            text=self.tok.decode(ids, skip_special_tokens=False),
            token_ids=tuple(ids),
            logprobs=tuple(-0.25 for _ in ids),
            model="fixed",
        )

    def describe(self) -> dict[str, Any]:
        return {"name": self.name}


@pytest.fixture(scope="module")
def tok() -> Any:
    return load_tokenizer(None)


def _run(tok: Any, backend: Any, preset: str = "areal-math") -> Episode:
    make_env = env_factory("math")
    env = make_env()
    return asyncio.run(
        run_episode(env, backend, tok, PRESETS[preset], env.tasks[0], preset=preset, tokenizer_name="smollm2")
    )


@pytest.fixture(scope="module")
def episode(tok: Any) -> Episode:
    return _run(tok, ScriptedBackend(env_factory("math"), tok, mistake_rate=0.5, seed=1))


@pytest.fixture(scope="module")
def hostile(tok: Any) -> Episode:
    return _run(tok, FixedReplyBackend(tok, HOSTILE))


def _token_html(ep: Episode, tok: Any) -> str:
    texts = render.decode_token_texts(tok, ep.tokens.ids.tolist())
    return render.render_tokens(ep, texts, render.special_token_ids(tok))


def test_one_span_per_token_with_mask_classes(episode: Episode, tok: Any) -> None:
    out = _token_html(episode, tok)
    spans = TOK_SPAN.findall(out)
    assert len(spans) == episode.n_tokens
    assert out.count('class="tok ') == episode.n_tokens
    train = [c for c, _ in spans if "tok-train" in c.split()]
    ctx = [c for c, _ in spans if "tok-ctx" in c.split()]
    assert len(train) == int(episode.tokens.loss_mask.sum()) > 0
    assert len(ctx) == episode.n_tokens - len(train) > 0


def test_titles_carry_id_logprob_mask_turn_and_kind(episode: Episode, tok: Any) -> None:
    spans = TOK_SPAN.findall(_token_html(episode, tok))
    ids = episode.tokens.ids.tolist()
    for i, (_, title) in enumerate(spans):
        assert f"#{i} · id {ids[i]} · " in title
        assert f"mask {int(episode.tokens.loss_mask[i])}" in title
        assert " turn " in title
    # The prompt has no logprobs; the scripted policy's tokens have logprob 0.
    assert "logprob n/a" in spans[0][1]
    first_gen = episode.prompt_len
    assert "logprob 0.0000" in spans[first_gen][1] and "assistant" in spans[first_gen][1]


def test_special_tokens_styled_and_newlines_visible(episode: Episode, tok: Any) -> None:
    out = _token_html(episode, tok)
    special = render.special_token_ids(tok)
    spans = TOK_SPAN.findall(out)
    ids = episode.tokens.ids.tolist()
    for i, (cls, _) in enumerate(spans):
        assert ("tok-special" in cls.split()) == (ids[i] in special)
    assert ">&lt;|im_start|&gt;</span>" in out
    assert "↵\n</span>" in out


def test_turn_anchors_for_every_turn(episode: Episode, tok: Any) -> None:
    out = _token_html(episode, tok)
    for t in episode.turns:
        assert out.count(f'id="turn-{t.index}"') == 1


def test_texts_join_to_decoded_text_including_split_characters(tok: Any) -> None:
    text = "Héllo — 日本語 🎉 done\n\n  x"
    ids = tok.encode(text, add_special_tokens=False)
    texts = render.decode_token_texts(tok, ids)
    assert len(texts) == len(ids)
    assert "".join(texts) == text
    assert "日" in texts and "\ufffd" not in "".join(texts)


def test_hostile_text_is_escaped_everywhere(hostile: Episode, tok: Any) -> None:
    outputs = [render.render_header(hostile), render.render_conversation(hostile), _token_html(hostile, tok)]
    for out in outputs:
        assert "<script" not in out.lower()
        assert "<img" not in out.lower()
    conv = outputs[1]
    assert html.escape(HOSTILE, quote=True) in conv
    assert "&lt;script&gt;" in conv
    assert "&lt;script&gt;" in outputs[2] or "&lt;/" in outputs[2]
    assert "onerror=&quot;" in conv


def test_tool_calls_findings_and_metadata_are_escaped(episode: Episode) -> None:
    bad = "<script>x</script>"
    turn = replace(
        episode.turns[0],
        tool_calls=(ToolCall(name=f"lookup{bad}", arguments={"q": bad, "n": [1, 2]}),),
        parse_error=f"unexpected {bad}",
        findings=(Finding(kind="mask", severity=Severity.ERROR, message=bad, turn=0, token_start=3, token_end=5,
                          evidence={"text": bad}),),
    )
    ep = episode.evolve(
        turns=(turn, *episode.turns[1:]), task_id=bad, reason=bad, tags=(bad,), note=bad, backend={"name": bad}
    )
    for out in (render.render_header(ep), render.render_conversation(ep)):
        assert "<script" not in out
    conv = render.render_conversation(ep)
    assert "&quot;q&quot;: &quot;&lt;script&gt;x&lt;/script&gt;&quot;" in conv  # JSON-formatted arguments
    assert "parse error" in conv and 'href="#tok-3"' in conv
    tokens = render.render_tokens(ep, None, set())
    assert 'id="tok-3"' in tokens and tokens.count("tok-flag") == 2


def test_missing_tokenizer_shows_ids_and_why(episode: Episode) -> None:
    out = render.render_tokens(episode, None, set(), tokenizer_error="no <such> tokenizer")
    assert "could not be loaded" in out and "no &lt;such&gt; tokenizer" in out
    spans = TOK_SPAN.findall(out)
    assert len(spans) == episode.n_tokens
    first_id = int(episode.tokens.ids[0])
    assert f">{first_id}</span>" in out


def test_long_texts_fold(episode: Episode) -> None:
    long = "line\n" * (render.FOLD_LINES + 5)
    ep = episode.evolve(messages=(Message("system", long), *episode.messages))
    assert "<details" in render.render_conversation(ep)


def test_32k_token_episode_renders(episode: Episode) -> None:
    n = 32_000
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 49_000, n)
    mask = (np.arange(n) % 3 == 0).astype(np.uint8)
    segs = tuple(Segment(i, min(i + 500, n), "assistant", i // 1000, True) for i in range(0, n, 500))
    big = episode.evolve(tokens=TokenArrays(ids, mask, rng.normal(size=n)), segments=segs, prompt_len=0)
    texts = [f"t{i % 97}" for i in range(n)]
    out = render.render_tokens(big, texts, {0, 1, 2})
    assert out.count('class="tok ') == n
