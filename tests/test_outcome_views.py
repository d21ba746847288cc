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
    got = {(int(x), t.name): int(y) for t in fig.data for x, y in zip(t.x, t.y) if y}
    assert got == {(step, k): n for step, by in store.outcome_counts(by="rollout_step").items() for k, n in by.items()}
    assert [t.name for t in fig.data] == ["success", "not_called", "wrong_arguments", "extra_write", "missing_output"]
    assert not outcome_figure([replace(s, outcomes={}) for s in stats]).data  # nothing to stack: said, not drawn
    group = [p.episode for p in run.values() if p.episode.group_id]
    table = render_partings(reward_partings(group))
    assert table.count('class="rs-parting"') == 3
    assert f'data-open="{run["success"].episode.id}" data-turn="{run["wrong_arguments"].turns[0]}"' in table
    assert _marked(table, "rs-oc-want")[0] == "ordered by mistake" and render_partings(()) == ""
    store.close()
