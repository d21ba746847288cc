"""The "Why this reward" panel, Browse's outcome cell, the Runs outcome chart and the Group partings as HTML and
figures, from real episodes: retail with planted mistakes and math answers planted per turn (the real loop)."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from dashboard.views.group import render_partings
from dashboard.views.outcome import kind_badge, render_outcome
from dashboard.views.run_charts import outcome_figure
from engine import Status, reward_partings
from engine.envs.math import MathEnv
from tests.planted_outcomes import math_episode, outcome_run


@pytest.fixture(scope="module")
def run(smol_tokenizer):
    return {p.kind + ("" if p.step == 0 else "-1"): p for p in outcome_run(smol_tokenizer)}


def _marked(html: str, cls: str) -> list[str]:
    return re.findall(rf'<mark class="{cls}">(.*?)</mark>', html)


def test_wrong_arguments_mark_exactly_the_differing_values_and_link_the_turn(run):
    p = run["wrong_arguments-1"]
    ep, o = p.episode, p.episode.outcome
    html = render_outcome(ep)
    assert 'data-kind="wrong_arguments"' in html and f'data-turn="{p.turns[0]}"' in html
    assert [m for m in re.findall(r'<tr data-arg="([^"]+)" class="rs-oc-differs"', html)] == ["address1", "zip"]
    taken = _marked(html, "rs-oc-diff")
    assert f"&quot;{o.taken.arguments['zip']}&quot;" in taken and f"&quot;{o.expected.arguments['zip']}&quot;" not in taken
    assert f"&quot;{o.expected.arguments['zip']}&quot;" in _marked(html, "rs-oc-want")
    assert f'href="?episode={ep.id}&amp;turn={o.turn}" data-jump="conv-turn-{o.turn}"' in html
    assert f'data-jump="turn-{o.turn}"' in html  # and into the token view
    assert "address.zip" in html  # the database difference


def test_each_tool_kind_shows_what_it_has(run):
    never = render_outcome(run["not_called"].episode)
    assert "never called" in never and "rs-oc-turn" not in never  # no call, no turn
    assert "cancel_pending_order" in never
    extra = render_outcome(run["extra_write"].episode)
    assert "modify_user_address" in extra and ">none<" in extra and "users" in extra
    missing = run["missing_output-1"].episode
    assert _marked(render_outcome(missing), "rs-oc-diff rs-oc-output") == list(missing.outcome.missing_outputs)
    ok = render_outcome(run["success"].episode)
    assert 'class="rs-oc-kind rs-oc-pass"' in ok and "rs-oc-calls" not in ok and "rs-oc-db" not in ok
    assert 'class="rs-oc-kind rs-oc-fail"' in never


def test_a_running_episode_and_an_outcome_with_markup_are_said_plainly(run):
    ep = run["wrong_arguments"].episode
    running = render_outcome(ep.evolve(status=Status.RUNNING, outcome=None))
    assert "No outcome: the episode is still running" in running and "rs-oc-kind" not in running
    hostile = '<img src=x onerror="window.__xss=1">'
    o = ep.outcome
    bad = ep.evolve(outcome=replace(o, text=hostile, taken=replace(o.taken, arguments={**o.taken.arguments,
                                                                                      "reason": hostile})))
    html = render_outcome(bad)
    assert "<img" not in html and "&lt;img" in html
    assert kind_badge(None) == "" and "<img" not in kind_badge(hostile)


def test_math_lists_each_turn_answer_with_its_verdict_and_the_reference(smol_tokenizer):
    ref = MathEnv().task(MathEnv().tasks[0]).solutions[0]
    right = "The answer is \\boxed{{{}}}."
    ep, _ = math_episode(smol_tokenizer, [right.format(int(ref) + 1), right.format(ref), "I give up."])
    html = render_outcome(ep)
    assert ep.outcome.kind == "right_answer_not_scored" and "right answer not scored" in html
    rows = re.findall(r'<tr data-turn="(\d)">(.*?)</tr>', html)
    assert [t for t, _ in rows] == ["0", "1", "2"]
    assert f"<code>{int(ref) + 1}</code>" in rows[0][1] and "wrong" in rows[0][1]
    assert f"<code>{ref}</code>" in rows[1][1] and "right" in rows[1][1]
    assert "none" in rows[2][1] and "(scored)" in rows[2][1]
    assert f"(reference <code>{ref}</code>)" in html and 'data-jump="conv-turn-1"' in html
    # Past six turns, the right ones and the scored one stay in view; the rest fold.
    wrong = right.format(int(ref) + 1)
    ep, _ = math_episode(smol_tokenizer, [wrong, wrong, right.format(ref), wrong, wrong, wrong, wrong, wrong, wrong])
    shown, folded = render_outcome(ep).split('class="rs-oc-same"')
    assert re.findall(r'<tr data-turn="(\d)">', shown) == ["0", "1", "2", "3", "4", "8"]
    assert re.findall(r'<tr data-turn="(\d)">', folded) == ["5", "6", "7"] and "3 more turns" in folded


def test_the_outcome_chart_stacks_the_steps_counts_and_the_partings_table(run, tmp_path):
    from engine import Store

    store = Store(tmp_path / "o.db")
    store.save_episodes([p.episode for p in run.values()])
    stats = store.step_stats("planted-run")
    fig = outcome_figure(stats)
    assert fig.layout.barmode == "stack"
    got = {(int(x), t.meta): int(y) for t in fig.data for x, y in zip(t.x, t.y) if y}
    assert got == {(step, k): n for step, by in store.outcome_counts(by="rollout_step").items() for k, n in by.items()}
    assert [t.meta for t in fig.data] == ["success", "not_called", "wrong_arguments", "extra_write", "missing_output"]
    blank = outcome_figure([replace(s, outcomes={}) for s in stats])  # nothing to stack: said, not drawn
    assert not blank.data and f"none of its {sum(s.n for s in stats):,} episodes has an outcome" in \
        blank.layout.annotations[0].text
    assert outcome_figure([], "r1").layout.annotations[0].text == "this run has no rollout steps"
    assert outcome_figure([]).layout.annotations[0].text == "no run chosen"
    group = [p.episode for p in run.values() if p.episode.group_id]
    table = render_partings(reward_partings(group))
    assert table.count('class="rs-parting"') == 3
    assert f'data-open="{run["success"].episode.id}" data-turn="{run["wrong_arguments"].turns[0]}"' in table
    assert _marked(table, "rs-oc-want")[0] == "ordered by mistake" and render_partings(()) == ""
    store.close()


def test_a_huge_outcome_sends_a_bounded_panel(run):
    """A 1 MB reason, value, key, output and database field, and thousands of arguments and rows, are cut."""
    from engine import DbChange, MathAnswer

    ep = run["wrong_arguments-1"].episode
    o = ep.outcome
    mb = "x" * 1_000_000
    args = {**o.taken.arguments, "address1": mb, mb: 1, **{f"k{i}": i for i in range(5000)}}
    huge = replace(o, text=mb, taken=replace(o.taken, arguments=args),
                   expected=replace(o.expected, arguments={**o.expected.arguments, "nested": {"deep": [mb] * 50}}),
                   missing_outputs=(mb,) * 500,
                   db_diff=tuple(DbChange(mb, mb, mb, {"v": mb}, mb) for _ in range(3000)))
    html = render_outcome(ep.evolve(outcome=huge))
    assert len(html) < 300_000, len(html)
    assert "more characters not sent to the browser" in html
    assert "more arguments not sent to the browser" in html and "more rows not sent" in html
    assert "and 480 more" in html
    math = replace(o, kind="wrong_answer", expected=None, taken=None, db_diff=(), reference_answer=mb,
                   answers=tuple(MathAnswer(i, mb, False, mb) for i in range(3000)))
    html = render_outcome(ep.evolve(outcome=math))
    assert len(html) < 500_000, len(html)
    assert "(scored)" in html.split('class="rs-oc-same"')[0]  # the scored (last) turn stays in view


def test_another_envs_reason_is_neither_pass_nor_fail_and_kinds_read_alike(run):
    from engine import OUTCOME_LABELS, Outcome

    ep = run["success"].episode.evolve(env="judge", reward=1.0, outcome=Outcome.other("the judge liked it"))
    html = render_outcome(ep)
    assert 'class="rs-oc-kind rs-oc-neutral" data-kind="other"' in html and "the judge liked it" in html
    assert "rs-oc-fail" not in html and "rs-oc-pass" not in html
    assert [re.sub("<[^>]+>", "", kind_badge(k)) for k in OUTCOME_LABELS] == list(OUTCOME_LABELS.values())
    # A finished record without an outcome says it has none, not that it runs.
    none = render_outcome(ep.evolve(outcome=None, status=Status.COMPLETED))
    assert "this record has none" in none and "still running" not in none


def test_one_tool_is_named_once_and_the_runs_legend_uses_the_engines_words_and_colours(run, tmp_path):
    from engine import OUTCOME_COLORS, Store, kind_label

    html = render_outcome(run["wrong_arguments-1"].episode)
    name = run["wrong_arguments-1"].episode.outcome.expected.name
    assert html.count('class="rs-call-name"') == 1 and 'class="rs-oc-tool"' in html
    assert html.count(name.replace("_", "_<wbr>")) == 1
    # The sentence says what the table shows: folded under it; with one call, it stays in view.
    assert html.index("rs-oc-calls") < html.index('<summary>in words</summary><div class="rs-oc-text">')
    extra = render_outcome(run["extra_write"].episode)  # one side only: named under it
    assert 'class="rs-oc-tool"' not in extra and "in words" not in extra and 'class="rs-oc-text"' in extra
    store = Store(tmp_path / "o.db")
    store.save_episodes([p.episode for p in run.values()])
    fig = outcome_figure(store.step_stats("planted-run"))
    store.close()
    kinds = ["success", "not_called", "wrong_arguments", "extra_write", "missing_output"]
    assert [(t.meta, t.name, t.marker.color) for t in fig.data] == [(k, kind_label(k), OUTCOME_COLORS[k])
                                                                      for k in kinds]
    assert "wrong arguments: %{y}" in fig.data[2].hovertemplate


def test_a_lower_reward_sample_that_ended_early_shows_ended(run):
    best, short = run["success"].episode, run["not_called"].episode
    short = short.evolve(turns=short.turns[:run["not_called"].turns[0] - 1])  # ended after its last read
    (p,) = reward_partings([best, short])
    table = render_partings((p,))
    assert p.turn is None and p.rewarded_turn is not None
    assert "(ended)" in table and f'data-turn="{p.rewarded_turn}"' in table
    said = re.sub("<[^>]+>", "", table)  # the words on the page
    assert f"open #0 at turn {p.rewarded_turn}" in said and f"#{short.sample_index} had ended" in said
    assert "best-reward" in said and "unrewarded" not in said


def test_the_groups_actions_at_the_divergence_are_cut(run):
    from dashboard.views.group import ACTION_CHARS, render
    from engine import group_view

    best, wrong = run["success"].episode, run["wrong_arguments"].episode
    k = run["wrong_arguments"].turns[0]
    call = wrong.turns[k].tool_calls[0]
    huge = replace(wrong.turns[k], tool_calls=(replace(call, arguments={**call.arguments, "reason": "y" * 1_000_000}),))
    g = group_view([best, wrong.evolve(turns=(*wrong.turns[:k], huge, *wrong.turns[k + 1:]))])
    html = render(g)
    assert g.diverge_turn == k and len(html) < 20 * ACTION_CHARS + 20_000, len(html)
