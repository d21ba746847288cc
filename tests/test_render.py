"""The dashboard's HTML views, on episodes made by the real loop and tokenizer."""

from __future__ import annotations

import asyncio
import html
import re
import time
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from dashboard.views import episode as episode_view
from dashboard.views import tokens as tokens_view
from dashboard.views.html import FOLD_LINES
from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.envs import env_factory
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Episode, Finding, Message, Segment, Severity, TokenArrays, ToolCall
from engine.records.provenance import BackendInfo
from tests import tokenview as tv
from tests.fakes import FixedReplyBackend

HOSTILE = '<img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>'


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
    return _run(tok, ScriptedBackend(env_factory("math")().reference_reply, tok, mistake_rate=0.5, seed=1))


@pytest.fixture(scope="module")
def hostile(tok: Any) -> Episode:
    return _run(tok, FixedReplyBackend(tok, HOSTILE))


def _token_html(ep: Episode, tok: Any) -> str:
    texts = tokens_view.decode_token_texts(tok, ep.tokens.ids.tolist())
    return tokens_view.render_tokens(ep, texts, tokens_view.special_token_ids(tok))


def test_one_class_per_token_with_mask_classes(episode: Episode, tok: Any) -> None:
    out = _token_html(episode, tok)
    meta = tv.payload(out)
    cls = tv.classes(meta)
    assert meta["n"] == len(cls) == episode.n_tokens
    assert "<span class=\"tok" not in out  # the script draws the tokens; the server sends data
    train = [c for c in cls if "tok-train" in c]
    ctx = [c for c in cls if "tok-ctx" in c]
    assert len(train) == int(episode.tokens.loss_mask.sum()) > 0
    assert len(ctx) == episode.n_tokens - len(train) > 0
    assert all(("tok-train" in c) == bool(m) for c, m in zip(cls, episode.tokens.loss_mask.tolist(), strict=True))


def test_hover_data_carries_id_logprob_mask_and_turn(episode: Episode, tok: Any) -> None:
    meta = tv.payload(_token_html(episode, tok))
    n = episode.n_tokens
    assert meta["ids"] == episode.tokens.ids.tolist()
    assert tv.mask(meta) == episode.tokens.loss_mask.tolist()
    lp = tv.dense(meta["lp"], n)
    lps = episode.tokens.logprobs.tolist()
    assert [x is None for x in lp] == [x != x for x in lps]
    # The prompt has no logprobs; the scripted policy's tokens have logprob 0.
    assert lp[0] is None and lp[episode.prompt_len] == 0.0
    segs = meta["seg"]
    assert segs[0][0] == 0 and segs[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(segs, segs[1:]))  # every token in exactly one run
    first_gen = next(s for s in segs if s[0] <= episode.prompt_len < s[1])
    assert first_gen[2] == "assistant" and first_gen[3] == 0
    assert "diff" not in meta and "ver" not in meta
    assert meta["turns"] == [[t.index, next(s[0] for s in segs if s[3] == t.index)] for t in episode.turns]


def test_versions_travel_as_runs(episode: Episode, tok: Any) -> None:
    n = episode.n_tokens
    versions = np.full(n, -1)
    versions[episode.prompt_len : n // 2] = 3
    versions[n // 2 :] = 4
    t = episode.tokens
    ep = episode.evolve(tokens=TokenArrays(t.ids, t.loss_mask, t.logprobs, versions))
    assert tv.payload(_token_html(ep, tok))["ver"] == [[episode.prompt_len, n // 2, 3], [n // 2, n, 4]]


def test_special_tokens_styled_and_texts_kept_with_newlines(episode: Episode, tok: Any) -> None:
    out = _token_html(episode, tok)
    meta = tv.payload(out)
    special = tokens_view.special_token_ids(tok)
    ids = episode.tokens.ids.tolist()
    for i, cls in enumerate(tv.classes(meta)):
        assert ("tok-special" in cls) == (ids[i] in special)
    texts = tv.texts(meta)
    assert texts == tokens_view.decode_token_texts(tok, ids)
    assert "<|im_start|>" in texts and any("\n" in t for t in texts)
    assert "&lt;|im_start|&gt;" in out and "<|im_start|>" not in out  # escaped in the attribute
    assert len(meta["vid"]) == len(set(ids))  # each distinct text once


def test_blocks_start_at_turns_and_tile_the_tokens(episode: Episode, tok: Any) -> None:
    out = _token_html(episode, tok)
    meta = tv.payload(out)
    blocks = meta["blocks"]
    assert blocks[0][0] == 0 and blocks[-1][1] == episode.n_tokens
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    starts = {b[0] for b in blocks}
    assert all(i in starts for _, i in meta["turns"])
    assert out.count('data-jump="turn-') == episode.n_turns  # the turn navigation
    assert meta["fold"] == []  # a short prompt: nothing folded


def test_blocks_cut_long_runs_at_line_ends() -> None:
    n = 5_000
    line_ends = np.zeros(n, dtype=bool)
    line_ends[99::100] = True  # a newline every 100 tokens
    line_ends[3_000:] = False  # then one line of 2,000 tokens
    blocks = tokens_view.blocks(n, [1_000], line_ends)
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(blocks, blocks[1:]))
    assert any(b[0] == 1_000 for b in blocks)  # a cut is a block boundary
    for b in blocks:
        assert b[1] - b[0] <= tokens_view.BLOCK_MAX
        if b[1] <= 3_000 and b[1] not in (1_000, n):
            assert line_ends[b[1] - 1]  # ends with its line
    # A block that starts inside a line says so; one that starts after a line end does not.
    assert all((len(b) == 3) == (not line_ends[b[0] - 1] and b[0] != 1_000) for b in blocks[1:])
    assert [b for b in blocks if b[0] >= 3_000 and len(b) == 3]


def test_long_context_folds_in_prompt_segments_only(episode: Episode) -> None:
    n_sys = 1_000
    ids = [1] + list(range(100, 100 + n_sys)) + [2] + list(range(200, 700)) + [2]
    n = len(ids)
    mask = [0] * (n_sys + 2) + [1] * 501
    segs = (Segment(0, n_sys + 2, "prompt", None, False), Segment(n_sys + 2, n, "assistant", 0, True))
    ep = episode.evolve(tokens=TokenArrays(ids, mask, [float("nan")] * n), segments=segs, prompt_len=n_sys + 2)
    out = tokens_view.render_tokens(ep, [f"w{i} " for i in ids], {1, 2})
    meta = tv.payload(out)
    keep = tokens_view.FOLD_KEEP
    # The system prompt between its special tokens, less a few tokens at each end; not the long reply.
    assert meta["fold"] == [[1 + keep, 1 + n_sys - keep, "prompt"]]
    assert f"{n_sys - 2 * keep:,} tokens of long context folded" in out
    a, b = meta["fold"][0][:2]
    assert not any(x[0] < a < x[1] or x[0] < b < x[1] for x in meta["blocks"])  # folds hold whole blocks


def test_logprob_heat_classes(episode: Episode) -> None:
    lps = [float("nan"), -0.01, -0.3, -0.7, -1.5, -3.0, -9.0]
    ep = episode.evolve(tokens=TokenArrays(list(range(7)), [0, 1, 1, 1, 1, 1, 1], lps), segments=(), prompt_len=1)
    classes = tv.classes(tv.payload(tokens_view.render_tokens(ep, [str(i) for i in range(7)], set())))
    assert [next((c for c in cls if re.fullmatch(r"l\d", c)), None) for cls in classes] == [
        None, "l0", "l1", "l2", "l3", "l4", "l5"]


def test_logprob_mismatch_diff_in_hover_heat_and_marks(episode: Episode, tok: Any) -> None:
    n = episode.n_tokens
    mask = episode.tokens.loss_mask.tolist()
    diff: list[float | None] = [0.01 if mask[i] else None for i in range(n)]
    trainable = [i for i in range(n) if mask[i]]
    over = [trainable[1], trainable[5]]
    for i in over:
        diff[i] = -1.5
    f = Finding("logprob_mismatch", Severity.ERROR, "2 tokens differ", turn=0, token_start=over[0],
                token_end=over[-1] + 1, evidence={"over": over, "diff": diff, "threshold": 0.5})
    ep = episode.evolve(findings=(f,))
    out = _token_html(ep, tok)
    meta = tv.payload(out)
    assert tv.dense(meta["diff"], n) == diff
    assert meta["find"] == [[over[0], over[0] + 1, "logprob_mismatch"], [over[1], over[1] + 1, "logprob_mismatch"]]
    classes = tv.classes(meta)
    # Only the tokens over the threshold are flagged, not every token between them.
    assert [i for i, c in enumerate(classes) if "tok-flag" in c] == over
    assert all("d4" in classes[i] for i in over)
    assert "d0" in classes[trainable[0]] and not any(c.startswith("d") for c in classes[0])
    assert meta["starts"] == [over[0]]  # the anchor the findings list links to
    # The findings list summarizes the per-token diff instead of printing it.
    listing = episode_view.render_findings(ep)
    assert "per-token values" in listing and "-1.5" not in listing
    bad = ep.evolve(findings=(Finding("logprob_mismatch", Severity.ERROR, "x", evidence={"diff": [0.1]}),))
    assert f"1 values for {n} tokens" in _token_html(bad, tok)


def test_texts_join_to_decoded_text_including_split_characters(tok: Any) -> None:
    text = "Héllo — 日本語 🎉 done\n\n  x"
    ids = tok.encode(text, add_special_tokens=False)
    texts = tokens_view.decode_token_texts(tok, ids)
    assert len(texts) == len(ids)
    assert "".join(texts) == text
    assert "日" in texts and "\ufffd" not in "".join(texts)


def test_hostile_text_is_escaped_everywhere(hostile: Episode, tok: Any) -> None:
    outputs = [episode_view.render_header(hostile), episode_view.render_conversation(hostile), _token_html(hostile, tok)]
    for out in outputs:
        assert "<script" not in out.lower()
        assert "<img" not in out.lower()
    conv = outputs[1]
    assert html.escape(HOSTILE, quote=True) in conv
    assert "&lt;script&gt;" in conv
    assert "onerror=&quot;" in conv
    # The tokens' texts travel as data and are set as text by the script.
    assert "<script>window.__xss=2</script>" in "".join(tv.texts(tv.payload(outputs[2])))


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
        turns=(turn, *episode.turns[1:]), task_id=bad, reason=bad, tags=(bad,), note=bad, backend=BackendInfo(bad)
    )
    for out in (episode_view.render_header(ep), episode_view.render_conversation(ep)):
        assert "<script" not in out
    conv = episode_view.render_conversation(ep)
    assert "&quot;q&quot;: &quot;&lt;script&gt;x&lt;/script&gt;&quot;" in conv  # JSON-formatted arguments
    assert "parse error" in conv and 'href="#tok-3"' in conv
    meta = tv.payload(tokens_view.render_tokens(ep, None, set()))
    assert meta["starts"] == [3] and [i for i, c in enumerate(tv.classes(meta)) if "tok-flag" in c] == [3, 4]
    listing = episode_view.render_findings(ep)
    assert "<script" not in listing and "&lt;script&gt;x&lt;/script&gt;" in listing
    assert 'data-jump="tok-3"' in listing and 'data-jump="conv-turn-0"' in listing


def test_missing_tokenizer_shows_ids_and_why(episode: Episode) -> None:
    out = tokens_view.render_tokens(episode, None, set(), tokenizer_error="no <such> tokenizer")
    assert "could not be loaded" in out and "no &lt;such&gt; tokenizer" in out
    meta = tv.payload(out)
    assert tv.texts(meta) is None and meta["ids"] == episode.tokens.ids.tolist()
    assert all("tok-id" in c for c in tv.classes(meta))


def test_long_texts_fold(episode: Episode) -> None:
    long = "line\n" * (FOLD_LINES + 5)
    ep = episode.evolve(messages=(Message("system", long), *episode.messages))
    assert "<details" in episode_view.render_conversation(ep)


def test_32k_token_episode_renders(episode: Episode) -> None:
    n = 32_000
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 49_000, n)
    mask = (np.arange(n) % 3 == 0).astype(np.uint8)
    segs = tuple(Segment(i, min(i + 500, n), "assistant", i // 1000, True) for i in range(0, n, 500))
    big = episode.evolve(tokens=TokenArrays(ids, mask, rng.normal(size=n)), segments=segs, prompt_len=0)
    texts = [f"t{i % 97}" for i in range(n)]
    meta = tv.payload(tokens_view.render_tokens(big, texts, {0, 1, 2}))
    assert tv.texts(meta) == texts and tv.mask(meta) == mask.tolist()
    assert len(tv.classes(meta)) == n and max(b[1] - b[0] for b in meta["blocks"]) <= tokens_view.BLOCK_MAX


@pytest.mark.solo
def test_32k_token_episode_renders_fast_enough(episode: Episode) -> None:
    n = 32_000
    rng = np.random.default_rng(1)
    segs = tuple(Segment(i, min(i + 500, n), "assistant", i // 1000, True) for i in range(0, n, 500))
    big = episode.evolve(tokens=TokenArrays(rng.integers(0, 49_000, n), np.ones(n), rng.normal(size=n)),
                         segments=segs, prompt_len=0)
    texts = [f"t{i % 97}" for i in range(n)]
    start = time.perf_counter()
    out = tokens_view.render_tokens(big, texts, set())
    # A guard, not a benchmark (bench/dashboard_speed.py): a few hundred ms is normal.
    assert time.perf_counter() - start < 3.0
    assert len(out) < 40 * n  # no element per token: the script draws them from the data


def test_findings_list_errors_first_with_links(episode: Episode) -> None:
    found = (
        Finding("not_checked", Severity.INFO, "drift: not checked"),
        Finding("truncated_turn", Severity.WARNING, "turn 1 hit the length limit", turn=1),
        Finding("mask_misaligned", Severity.ERROR, "mask 1 on a user token", turn=0, token_start=7, token_end=9,
                evidence={"positions": list(range(40))}),
    )
    out = episode_view.render_findings(episode.evolve(findings=found))
    assert out.index("mask_misaligned") < out.index("truncated_turn") < out.index("not_checked")
    # Counted as the header and ls count them: errors first, then warnings; the note apart.
    assert "<b>2 findings</b> · 1 error, 1 warning · 1 note" in out
    assert 'data-jump="tok-7"' in out and "tokens 7–8" in out and 'data-jump="conv-turn-1"' in out
    assert "… 28 more" in out  # long evidence lists are cut
    # No findings and no checks run: the page says it was not checked, not that it is clean.
    assert "Not checked" in episode_view.render_findings(episode.evolve(findings=(), turns=(), checked=None))


def test_findings_are_grouped_under_their_root(episode: Episode) -> None:
    from engine.checks.diagnosis import link_findings

    found = tuple(link_findings([
        Finding("mask_misaligned", Severity.ERROR, "the loss mask is shifted", turn=0, token_start=7, token_end=30,
                evidence={"positions": [7, 12, 20, 29]}),
        Finding("logprobs_missing", Severity.ERROR, "trained tokens without logprobs", turn=0, token_start=12,
                token_end=30, evidence={"positions": [12, 29]}),
        Finding("logprobs_misaligned", Severity.ERROR, "untrained tokens with logprobs", turn=0, token_start=7,
                token_end=21, evidence={"positions": [7, 20]}),
    ]))
    out = episode_view.render_findings(episode.evolve(findings=found))
    assert "<b>Diagnosis</b>: the loss mask is wrong from token 7 (turn 0): 2 findings follow" in out
    root, folded = out.split('<details class="rs-caused">', 1)
    assert root.count('class="rs-root"') == 1 and "the loss mask is shifted" in root
    assert "2 findings follow from it" in folded and "logprobs_missing" in folded and "logprobs_misaligned" in folded
    assert "logprobs_missing" not in root


def test_timeline_marks_turns_with_findings_and_offers_fork(episode: Episode) -> None:
    f = Finding("env_error", Severity.ERROR, "boom", turn=1)
    out = episode_view.render_conversation(episode.evolve(findings=(f,)))
    assert out.count('class="rs-turn"') + out.count('class="rs-turn rs-turn-flagged"') == episode.n_turns
    assert 'id="conv-turn-1"' in out and 'class="rs-turn rs-turn-flagged" id="conv-turn-1"' in out
    assert all(f'data-fork="{t.index}"' in out for t in episode.turns)
    assert all(f'data-jump="turn-{t.index}"' in out for t in episode.turns)


def test_header_folds_long_reward_series(episode: Episode) -> None:
    short = episode_view.render_header(episode)
    assert "rs-series-fold" not in short and "T0" in short
    long = episode_view.render_header(episode.evolve(turn_rewards=tuple([0.0] * 59 + [1.0]), returns=()))
    assert "rs-series-fold" in long and "60 values" in long and "non-zero at T59" in long
    assert "temperature" in long  # sampling params


def test_browse_table_escapes_and_marks_the_sort() -> None:
    from dashboard.views.browse import KEY_COLUMNS, OPTIONAL_COLUMNS, render_table, shown_columns
    from engine.store import EpisodeSummary

    bad = "<img src=x onerror=alert(1)>"
    row = EpisodeSummary(id='e"1', env=bad, task_id=bad, status="failed", reward=0.5, n_turns=2, n_tokens=1200,
                         n_trainable=300, preset=bad, model=bad, run_id=bad, sample_index=1, created_at=0.0,
                         starred=True, n_findings=3, source="live", group_id=bad, n_errors=1, tags=(bad,),
                         reason=bad)
    out = render_table([row], "reward", False)
    # The key columns and the default choice: env, and the task, reason and tags twice (text and tooltip).
    assert "<img" not in out and out.count("&lt;img") == 7
    assert 'class="c-preset"' not in out and 'class="c-diag"' in out and 'class="c-turns c-num"' in out
    every = render_table([row], "reward", False, columns=OPTIONAL_COLUMNS)
    # ...and with every column: preset, model and run (text and tooltip), the group (its link and its text).
    assert "<img" not in every and every.count("&lt;img") == 14
    bare = render_table([row], "reward", False, columns=())
    assert [c.name for c in shown_columns(())] == list(KEY_COLUMNS) and 'class="c-turns' not in bare
    assert 'data-id="e&quot;1"' in out and 'href="?episode=e&quot;1"' in out
    assert 'data-sort="reward" aria-sort="ascending"' in out and "reward ▲" in out
    assert "1,200" in every and "1,200" not in out and "rs-bad-text" in out and "★" in out
    assert "No episode matches" in render_table([], "reward", True, "No episode matches these filters.")


def test_a_verdict_says_when_the_user_was_replayed_from_the_record():
    from dashboard.views.playback import render_verdict
    from engine.loop.verdicts import ReplayResult, TurnVerdict

    ok = ReplayResult("e1", True, True, (TurnVerdict(0, True), TurnVerdict(1, True)), user="recorded",
                      recorded_reward=1.0, replayed_reward=1.0)
    assert ok.headline() == ("reproduced: 2 turns, every tool output and the final reward as recorded; "
                             "the user was replayed from the record")
    bad = TurnVerdict(1, False, "observation", "a", "b", "the output of f (call 1 of this turn)")
    diverged = ReplayResult("e1", True, False, (TurnVerdict(0, True), bad), bad, user="recorded")
    assert "diverged at turn 1, observation; the user was replayed from the record" in render_verdict(diverged)
    assert ReplayResult.from_dict(diverged.to_dict()).user == "recorded"


def test_a_local_turn_shows_the_prompt_being_read_then_the_first_token() -> None:
    from dashboard.views.step import generating

    reading = generating(3, 0, "", 4.2, None, (1024, 2900, 512))
    assert "Reading the prompt: 1,024 of 2,900 tokens, 512 of them reused from earlier turns (35%, 4.2 s)" in reading
    assert '<progress max="2900" value="1024">' in reading
    # Once a token has come, the reply shows, and the time to it; the prompt's progress is over.
    started = generating(3, 2, "Hel", 6.0, 5.1, (2900, 2900, 512))
    assert "Reading the prompt" not in started and "first token after" in started and "5.10 s" in started
    assert "Waiting for the first token" in generating(3, 0, "", 1.0, None)  # a server backend: no prefill to show


def test_a_stored_replay_shows_the_engines_verdict_path_by_path(tmp_path, fake_tau_bench):
    import json

    from dashboard.views.playback import render_replays
    from engine import ReplayResult, Store, formats, replay_stored
    from tests.fakes import airline_result

    path = tmp_path / "results.json"
    # The drift, then a cancellation recorded as text: two differing outputs, the first marked alone.
    path.write_text(json.dumps([airline_result(2, 0, older=True, reads_user=True, text_cancel=True)]),
                    encoding="utf-8")
    store = Store(tmp_path / "x.db")
    formats.import_path(path, "taubench", store)
    ep = next(store.iter_episodes())
    store.save_replay(asyncio.run(replay_stored(ep)))
    stored = store.replays(ep.id)
    res = ReplayResult.from_dict(stored[0])
    page = render_replays(stored)
    # The headline, the first divergence and each label are the engine's: the CLI prints the same.
    assert res.headline() == ("diverged at turn 0, get_user_details output; 1 more difference after it; "
                              "the reward reproduces (1); the user was replayed from the record")
    assert res.summary() == f"{ep.id}: " + res.headline().replace(
        "get_user_details output;", "get_user_details output: `address.province` is now `address.state`;")
    assert html.escape(res.headline()) in page
    assert res.divergence_index == 0 and [v.what for v in res.differences] == [
        "get_user_details output", "cancel_reservation output"]
    rows = re.findall(r"<tr class=\"rs-pb-(?:div|ok)\">.*?</tr>", page, re.S)
    assert [("first divergence" in r, "rs-pb-div" in r) for r in rows] == [
        (True, True), (False, False), (False, False), (False, True), (False, False)]
    assert '<li data-change="renamed">`address.province` is now `address.state`</li>' in page
    assert html.escape(res.divergence.describe()) in page and "cancel_reservation output" in page
    assert "address1" not in page  # paths, not the two dumps
    store.close()


def test_a_replay_stored_before_diffs_reads_back_and_shows_both_values_marked():
    from dashboard.views.playback import render_replays
    from engine import ReplayResult

    # As stored before replays kept diffs, rewards or causes: the whole observation, stored and now.
    old = {"episode_id": "e1", "reproducible": True, "reproduced": False, "kind": "diverged:observation",
           "turns": [{"turn": 0, "ok": True, "field": "", "stored": None, "now": None, "note": ""},
                     {"turn": 1, "ok": False, "field": "observation", "stored": [{"role": "tool", "content": "41"}],
                      "now": [{"role": "tool", "content": "42"}], "note": ""}],
           "divergence": {"turn": 1, "ok": False, "field": "observation", "stored": [{"role": "tool", "content": "41"}],
                          "now": [{"role": "tool", "content": "42"}], "note": ""},
           "reason": "", "until": None, "created_at": 1.0, "user": "env"}
    res = ReplayResult.from_dict(old)
    assert (res.recorded_reward, res.replayed_reward, res.reward_reproduced) == (None, None, None)
    assert res.headline() == "diverged at turn 1, observation" and res.divergence_index == 1
    assert res.causes == ("the env's answer differs",)
    page = render_replays([old])
    assert "<mark>1</mark>" in page and "<mark>2</mark>" in page and "rs-pb-diff" not in page
    assert "first divergence" in page


def test_the_header_counts_findings_as_ls_and_browse_do_and_says_notes_and_unchecked_apart(episode: Episode) -> None:
    """The header's findings are the episode's errors and warnings, as ``ls`` and Browse count them (``n_findings``);
    its notes (severity info) are said apart, and an episode no check ran on says so."""
    from engine.store.packing import episode_row

    found = (Finding("mask_misaligned", Severity.ERROR, "x", turn=0), Finding("truncated_turn", Severity.WARNING, "y"),
             Finding("not_checked", Severity.INFO, "z"))
    for findings, checked, shown in ((found, "v9", "2 (1 error) · 1 note"), (found[2:], "v9", "0 · 1 note"),
                                     ((), None, "0 · not checked")):
        ep = episode.evolve(findings=findings, turns=tuple(replace(t, findings=()) for t in episode.turns),
                            checked=checked)
        header = re.sub(r"<[^>]+>", "", episode_view.render_header(ep))
        assert f"findings{shown}" in header.replace("\n", ""), header
        assert episode_row(ep, 0)["n_findings"] == int(shown.split(" ")[0])
        # The findings panel and the token view count the same, the notes apart.
        n = int(shown.split(" ")[0])
        panel = re.sub(r"<[^>]+>", "", episode_view.render_findings(ep))
        if findings:
            assert panel.startswith(f"{n} finding{'s' if n != 1 else ''}" + (" · 1 error, 1 warning" if n else "")
                                    + " · 1 note"), panel
        assert (f"· {n} finding" in tokens_view.render_tokens(ep, None, set())) == (n > 0)
    # The diagnosis is marked as its worst root: red for an error, amber for warnings alone.
    for findings, cls in ((found, 'class="rs-diagnosis"'), (found[1:], 'class="rs-diagnosis rs-warn"')):
        ep = episode.evolve(findings=findings, turns=tuple(replace(t, findings=()) for t in episode.turns), checked="v9")
        assert cls in episode_view.render_findings(ep)


def test_an_imported_reply_without_text_says_so_and_shows_no_latency_it_never_had(episode: Episode, tok: Any,
                                                                                   tmp_path) -> None:
    """A trainer's dump keeps a reply's ids, not its text, and no timing: the conversation says the text is not
    stored (the token view and playback decode it), not "(empty)", and shows no "latency 0.0 ms"; so does ``show``."""
    import subprocess
    import sys
    from pathlib import Path

    from engine.records.provenance import Source
    from engine.store import Store

    turns = tuple(replace(t, generation=replace(t.generation, text="", latency_s=0.0), timings={"total_s": 0.0})
                  for t in episode.turns)
    imported = episode.evolve(id="imported-0001", turns=turns, source=Source.imported("slime", "r.pt"))
    page = episode_view.render_conversation(imported)
    n = len(turns[0].generation.token_ids)
    assert f"no text stored: {n:,} generated token ids" in page and "(empty)" not in page
    assert "latency" not in page and "latency" in episode_view.render_conversation(episode)
    db = tmp_path / "i.db"
    Store(db).save_episode(imported)
    out = subprocess.run([sys.executable, "-m", "engine.cli", "show", "imported", "--db", str(db)], capture_output=True,
                         text=True, cwd=Path(__file__).resolve().parents[1], timeout=120).stdout
    heads = [line for line in out.splitlines() if line.startswith("--- turn ")]
    assert heads and not any(h.endswith("s") and "0.000s" in h for h in heads), heads
    # show decodes them with the episode's tokenizer
    from engine.tokens import chat

    want = chat.strip_end_of_turn(tok, chat.decode(tok, list(turns[0].generation.token_ids)).rstrip())
    assert f"[assistant] (no text stored; decoded with {imported.tokenizer}:) {want}" in out, out


def test_an_imported_reply_of_nothing_but_its_end_of_turn_says_so_not_how_to_decode_it(episode: Episode, tok: Any,
                                                                                      tmp_path, capsys) -> None:
    from engine.cli import main
    from engine.records.provenance import Source
    from engine.store import Store

    eot = tok.convert_tokens_to_ids("<|im_end|>")
    turns = (replace(episode.turns[0], generation=replace(episode.turns[0].generation, text="", token_ids=(eot,))),
             *episode.turns[1:])
    imported = episode.evolve(id="imported-0002", turns=turns, source=Source.imported("verl", "rows.jsonl"))
    st = Store(tmp_path / "e.db")
    st.save_episode(imported)
    st.close()
    assert main(["show", "imported-0002", "--db", str(tmp_path / "e.db")]) == 0
    out = capsys.readouterr().out
    assert "[assistant] (no text: its 1 generated token id decodes to none but the end of the turn)" in out
    assert "rollscope import --tokenizer" not in out
