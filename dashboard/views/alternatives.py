"""What else the model could have said, as the Episode tab shows it: the entropy heat's scale, the top K the token
view sends for its hover, and a turn's forks (its highest-entropy tokens) on the playback card.

The numbers are the engine's (``turn_entropy``, the episode's token arrays); this module only lays them out.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from engine import Episode, ForkToken, TurnEntropy, turn_entropy

from .episode import deep_link
from .html import esc, jump
from .limits import ALTERNATIVES_SENT

# Entropy heat buckets (nats): class eK for an entropy below each bound, e5 beyond.
ENTROPY_BOUNDS = (0.1, 0.5, 1.0, 2.0, 3.0)


def percent(p: float) -> str:
    """A probability as the views print it (the hover's script prints it the same way)."""
    if math.isnan(p):
        return "?"
    return f"{p:.0%}" if p >= 0.01 else "<1%"


def quoted(text: str) -> str:
    """A token's text in quotes, its spaces and newlines visible (plain text, to be escaped)."""
    return json.dumps(text, ensure_ascii=False)


def alternatives_sent(ep: Episode, sel: np.ndarray | None = None) -> tuple[list[list[Any]], int]:
    """([position, top ids, their logprobs (4 decimals, None where unknown)] of the tokens whose top K the view
    sends, in order; how many tokens' are not sent). Of the tokens at ``sel`` (a folded view's) when given; past
    ``ALTERNATIVES_SENT`` alternatives, the turns' forks first (the turn card links to them), then the
    highest-entropy tokens' (ties: the earlier)."""
    t = ep.tokens
    if not t.top_k:
        return [], 0
    has = t.top_ids[:, 0] >= 0
    positions = np.flatnonzero(has) if sel is None else sel[has[sel]]
    room = max(ALTERNATIVES_SENT // t.top_k, 1)
    left = max(int(positions.size) - room, 0)
    if left:
        ent = t.entropy[positions].astype(np.float64)
        ent = np.where(np.isfinite(ent), ent, -np.inf)
        forks = np.isin(positions, [f.position for te in turn_entropy(ep) for f in te.forks])
        positions = np.sort(positions[np.lexsort((positions, -ent, ~forks))[:room]])
    rows: list[list[Any]] = []
    for p, ids, lps in zip(positions.tolist(), t.top_ids[positions].tolist(),
                           np.round(t.top_logprobs[positions].astype(np.float64), 4).tolist(), strict=True):
        k = sum(1 for i in ids if i >= 0)
        rows.append([p, ids[:k], [x if math.isfinite(x) else None for x in lps[:k]]])
    return rows, left


def entropy_legend(ep: Episode) -> str:
    """The entropy heat's scale (shown while it is on), or, for an episode without entropy, why it has none."""
    if not np.isfinite(ep.tokens.entropy).any():
        return ('<span class="rs-ent-legend rs-ent-none">entropy: none recorded in this episode '
                "(<code>rollscope run --top-logprobs K</code> records it)</span>")
    bounds = [f"{b:g}" for b in ENTROPY_BOUNDS]
    labels = [f"< {b}" for b in bounds] + [f"≥ {bounds[-1]}"]
    scale = "".join(f'<span class="rs-swatch sw-e{k}">{esc(label)}</span>' for k, label in enumerate(labels))
    est = ' <span class="rs-dim">(estimates from the top K: lower bounds)</span>' if ep.tokens.entropy_estimated else ""
    return f'<span class="rs-ent-legend">entropy, nats {scale}{est}</span>'


def _fork(episode_id: str, f: ForkToken, texts: dict[int, str]) -> str:
    def text(i: int) -> str:
        return quoted(texts[i]) if i in texts else f"id {i}"

    alts = [f'<span class="rs-alt{" rs-alt-sampled" if c.sampled else ""}" title="{"sampled" if c.sampled else ""}">'
            f'{esc(text(c.token_id))} {percent(c.prob)}{" ✓" if c.sampled else ""}</span>' for c in f.alternatives]
    if f.alternatives and f.sampled_rank is None:
        prob = percent(math.exp(f.logprob)) if math.isfinite(f.logprob) else "?"
        alts.append(f'<span class="rs-alt rs-alt-sampled">sampled {esc(text(f.token_id))} {prob}, not in the top '
                    f"{len(f.alternatives)}</span>")
    link = jump(f"tok-{f.position}", f"#{f.position} {esc(text(f.token_id))}", "rs-jump rs-forktok-link",
                href=deep_link(episode_id, f.turn, f.position))
    return (f'<li class="rs-forktok" data-position="{f.position}">{link} '
            f'<span class="rs-forktok-h">{f.entropy:.2f} nats</span> <span class="rs-alts">{"".join(alts)}</span></li>')


def forks_block(ep: Episode, te: TurnEntropy, texts: dict[int, str]) -> str:
    """A turn's forks on its playback card: each a link to its token, with its entropy and its alternatives'
    probabilities (the sampled one marked); ``texts`` maps the ids to their texts (an id shows where it has none).
    Empty for an episode without entropy."""
    if not np.isfinite(ep.tokens.entropy).any():
        return ""
    head = '<h5 class="rs-pb-h">Forks <span class="rs-dim">(the turn\'s highest-entropy tokens)</span></h5>'
    if not te.known:
        return head + '<div class="rs-dim">no entropy recorded at this turn\'s tokens</div>'
    bound = ", estimates from the top K: lower bounds" if ep.tokens.entropy_estimated else ""
    mean = (f'<div class="rs-pb-chips rs-dim">mean entropy {te.mean:.3f} nats over {te.known:,} of '
            f"{te.generated:,} generated tokens{bound}</div>")
    items = "".join(_fork(ep.id, f, texts) for f in te.forks)
    return f'<div class="rs-pb-forks" data-turn="{te.turn}">{head}{mean}<ul class="rs-forks">{items}</ul></div>'


def fork_ids(te: TurnEntropy) -> list[int]:
    """The ids a turn's forks block shows: each fork's token and its alternatives."""
    return sorted({i for f in te.forks for i in (f.token_id, *(c.token_id for c in f.alternatives))})
