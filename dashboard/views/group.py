"""Escaped HTML for the Group tab: one task's GRPO samples side by side (``engine.GroupView``).

Each sample row links to its episode (``data-open``: ``assets/open_episode.js``; with ``data-turn``, at that
turn); the run's other groups with zero reward spread are plain ``?group=`` links. Where the rewards spread,
each lower-reward sample is shown beside the best-reward one it parts from (``engine.reward_partings``): both
actions where they part, the words that differ marked (the whole action where the two share little), each a
link to its turn in its episode.
"""

from __future__ import annotations

from collections.abc import Sequence

from engine import Episode, Finding, GroupView, Parting, RewardStats, word_diff

from .episode import deep_link
from .html import chip, esc, fmt_num, heads, note, status_badge
from .limits import cut
from .outcome import kind_badge

ACTION_CHARS = 600  # an action is cut to this in the partings table
SHARED = 0.5  # two actions sharing less than this part of the shorter one's text are marked whole


def _roots(sample_roots: Sequence[Finding], checked: bool = True) -> str:
    if not sample_roots:
        return '<span class="rs-dim">none</span>' if checked else \
            '<span class="rs-unchecked" title="no fidelity check ran on this sample">not checked</span>'
    return "".join(f'<span class="rs-chip rs-{esc(f.severity.value)}" title="{esc(f.message)}">{esc(f.kind)}</span>'
                   for f in sample_roots)


def render(g: GroupView, flat: Sequence[tuple[str, str, float, int]] = ()) -> str:
    """The group: header, spread, where the samples part ways, one row per sample; ``flat``: the run's
    groups with zero spread (group id, task, reward, samples)."""
    if not g.samples:
        return note("This group has no episodes.", "warn")
    first = g.samples[0].episode
    parts = [f'<div class="rs-group" data-group="{esc(g.group_id)}" data-samples="{len(g.samples)}">',
             '<div class="rs-head-line">'
             f'{chip("group", g.group_id)}{chip("task", g.task_id)}{chip("env", first.env)}'
             f'{chip("preset", first.preset)}'
             f'{chip("samples", len(g.samples))}{chip("reward spread", fmt_num(g.spread))}</div>',
             f'<div class="rs-dim rs-group-norm">advantage = {esc(g.normalization)}</div>']
    if g.zero_spread:
        parts.append('<div class="rs-group-flat">' + note(
            f"Zero reward spread: every sample got {fmt_num(g.samples[0].reward)}, so every advantage is 0 and "
            "this group gives no learning signal.", "warn") + "</div>")
    if g.uncompared:
        parts.append(note(f"The samples' actions cannot be compared: {g.uncompared}.", "warn"))
    elif g.diverge_turn is None:
        parts.append(note("The samples made the same calls throughout (replies to the user are not compared).",
                          "info"))
    else:
        def shown(a: str) -> str:
            kept, more = cut(a, limit=ACTION_CHARS)
            return esc(kept) + ("…" if more else "")

        rows = "".join(f'<tr><td>{s.episode.sample_index}</td><td><code>{shown(a)}</code></td></tr>'
                       for s, a in zip(g.samples, g.actions_at_divergence))
        parts.append(f'<div class="rs-group-diverge" data-turn="{g.diverge_turn}">'
                     + note(f"The samples first make different calls at turn {g.diverge_turn}.", "info")
                     + f'<details><summary>What each sample did there</summary>'
                       f'<table class="rs-table"><thead><tr><th>sample</th><th>action</th></tr></thead>'
                       f"<tbody>{rows}</tbody></table></details></div>")
    parts.append(render_partings(g.partings))
    head = "".join(f"<th>{h}</th>" for h in ("sample", "episode", "reward", "advantage", "status", "turns",
                                             "trainable tokens", "root findings"))
    body = []
    for s in g.samples:
        ep = s.episode
        adv = f"{s.advantage:+.3f}"
        body.append(
            f'<tr class="rs-group-sample" data-episode="{esc(ep.id)}" data-advantage="{adv}">'
            f"<td>{ep.sample_index}</td>"
            f'<td><a href="#" data-open="{esc(ep.id)}"><code>{esc(ep.id)}</code></a></td>'
            f"<td>{fmt_num(s.reward)}</td><td>{adv}</td><td>{status_badge(ep.status.value)}</td>"
            f"<td>{ep.n_turns}</td><td>{ep.tokens.n_trainable:,}</td><td>{_roots(s.roots, not ep.unchecked)}</td></tr>")
    parts.append('<h4 class="rs-h rs-group-samples">Samples</h4>'
                 f'<table class="rs-table rs-group-table"><thead><tr>{head}</tr></thead>'
                 f'<tbody>{"".join(body)}</tbody></table>')
    others = [f for f in flat if f[0] != g.group_id]
    if others:
        links = "".join(f'<li><a href="?group={esc(gid)}" class="rs-flat-group">{esc(task)}</a> · '
                        f'{n} samples, all {fmt_num(r)}</li>' for gid, task, r, n in others[:50])
        more = f"<li>… and {len(others) - 50} more</li>" if len(others) > 50 else ""
        parts.append(f'<details class="rs-fold"><summary>Groups of this run with zero reward spread '
                     f'({len(others)})</summary><ul>{links}{more}</ul></details>')
    parts.append("</div>")
    return "".join(parts)


def empty(message: str = "Type a group id (Browse's group column links to it), or open /?group=GROUP_ID.",
          kind: str = "info") -> str:
    return note(message, kind)


def render_list(total: int, groups: Sequence[RewardStats]) -> str:
    """The database's GRPO groups to pick from: samples, reward mean and range, and a flag on those whose samples
    all earned the same reward (zero spread: no advantage, no gradient)."""
    if not groups:
        return empty("No GRPO groups here: a group is two or more samples of one task (`rollscope run --samples 4`).")
    flat = sum(1 for g in groups if g.zero_spread)
    rows = "".join(
        f'<tr class="rs-group-row{" rs-group-flat" if g.zero_spread else ""}" data-group="{esc(g.key)}" tabindex="0">'
        f'<td><a class="rs-group-link" href="?group={esc(g.key)}">{esc(g.key)}</a></td><td>{esc(g.task_id)}</td>'
        f'<td>{esc(g.preset)}</td><td class="rs-num">{g.n}</td><td class="rs-num">{fmt_num(g.mean)}</td>'
        f'<td class="rs-num">{fmt_num(g.min)} … {fmt_num(g.max)}</td>'
        f'<td>{chip("zero spread", "no advantage", "rs-warn") if g.zero_spread else ""}</td></tr>'
        for g in groups)
    more = f" (the first {len(groups):,} by id)" if total > len(groups) else ""
    head = heads(("group", "task", "preset", "samples", "mean reward", "min … max", ""),
                 ("samples", "mean reward", "min … max"))
    said = (f"{total:,} groups{more}; zero reward spread in {flat:,} of those shown. Pick one to see its samples "
            "side by side.")
    return (f'<div class="rs-group-list">{note(said, "warn" if flat else "info")}'
            f'<div class="rs-table-wrap"><table class="rs-table rs-live"><thead><tr>{head}</tr></thead>'
            f"<tbody>{rows}</tbody></table></div></div>")


def _turn_link(ep: Episode, turn: int | None) -> str:
    if turn is None:
        return f'<span class="rs-dim">#{ep.sample_index} had ended</span>'
    return (f'<a class="rs-part-link" href="{esc(deep_link(ep.id, turn))}" data-open="{esc(ep.id)}" '
            f'data-turn="{turn}" title="open episode {esc(ep.id)} at turn {turn}">open #{ep.sample_index} at turn '
            f"{turn} ↗</a>")


def _action(ops: list[tuple[str, str]], keep: str, whole: bool) -> str:
    """One side of the two actions' word diff (``del``: the best-reward one's words, marked green; ``ins``: the
    lower-reward one's, amber), a run of changed words (and the spaces between them) in one mark; ``whole``:
    the two share little, so the whole action is one mark."""
    cls = "rs-oc-want" if keep == "del" else "rs-oc-diff"
    side = [(whole or op != "same", text) for op, text in ops if op in ("same", keep)]
    # Spaces between two changed pieces belong to the change.
    side = [(True, t) if not changed and not t.strip() and 0 < i < len(side) - 1 and side[i - 1][0] and side[i + 1][0]
            else (changed, t) for i, (changed, t) in enumerate(side)]
    runs: list[tuple[bool, str]] = []
    for changed, text in side:
        if runs and runs[-1][0] == changed:
            runs[-1] = (changed, runs[-1][1] + text)
        else:
            runs.append((changed, text))
    out, n = [], 0
    for changed, text in runs:
        kept, more = cut(text, limit=max(0, ACTION_CHARS - n))
        n += len(kept)
        out.append(f'<mark class="{cls}">{esc(kept)}</mark>' if changed else esc(kept))
        if more:
            out.append("…")
            break
    return f'<code class="rs-part-action">{"".join(out)}</code>'


def _share_little(a: str, b: str, ops: list[tuple[str, str]]) -> bool:
    """The two actions have less than ``SHARED`` of the shorter one's words in common (a call beside a reply)."""
    shared = sum(len(t) for op, t in ops if op == "same" and t.strip())
    return shared < SHARED * min(len(a), len(b))


def render_partings(partings: Sequence[Parting]) -> str:
    """Per lower-reward sample: the best-reward sample it parts from, the turn in each, both actions there."""
    if not partings:
        return ""
    rows = []
    for p in partings:
        r, u = p.rewarded, p.unrewarded
        badge = kind_badge(u.outcome.kind if u.outcome else None)
        who = (f"<td>#{u.sample_index} · {fmt_num(u.reward)} {badge}</td>"
               f"<td>#{r.sample_index} · {fmt_num(r.reward)}</td>")
        if not p.parts:
            rows.append(f'<tr class="rs-parting" data-unrewarded="{esc(u.id)}" data-turn="">{who}<td colspan="3" '
                        'class="rs-dim">the same calls throughout: the reward differs by what the env or user '
                        "did</td></tr>")
            continue
        a, b = cut(p.rewarded_action, limit=ACTION_CHARS * 4)[0], cut(p.unrewarded_action, limit=ACTION_CHARS * 4)[0]
        ops = word_diff(a, b)
        whole = _share_little(a, b, ops)
        rows.append(
            f'<tr class="rs-parting" data-unrewarded="{esc(u.id)}" data-rewarded="{esc(r.id)}" '
            f'data-turn="{"" if p.turn is None else p.turn}" '
            f'data-rewarded-turn="{"" if p.rewarded_turn is None else p.rewarded_turn}">'
            f"{who}<td>{_turn_link(r, p.rewarded_turn)}<br>{_turn_link(u, p.turn)}</td>"
            f'<td class="rs-part-r">{_action(ops, "del", whole)}</td>'
            f'<td class="rs-part-u">{_action(ops, "ins", whole)}</td></tr>')
    said = ("Where each sample below the best reward leaves the best-reward sample that shares the most calls with "
            "it: the first call that separates a best-reward path from a lower-reward one. Replies to the user "
            "are not compared (samples word them differently).")
    head = heads(("lower-reward sample", "parts from (best reward)", "where", "best-reward action",
                  "lower-reward action"))
    return (f'<div class="rs-partings"><h4 class="rs-h">Where the rewards part</h4>{note(said, "info")}'
            f'<div class="rs-table-wrap"><table class="rs-table rs-parting-table"><thead><tr>{head}</tr></thead>'
            f'<tbody>{"".join(rows)}</tbody></table></div></div>')
