"""``rollscope diff``: two episodes' tokens aligned, or one episode against its conversation under another loop."""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from ..analysis import tokendiff
from ..backends import tokenizers
from ..errors import ConfigError
from ..records.episode import Episode
from ..tokens.tokenizer import Tokenizer
from .common import DEFAULT_DB, knob_settings, open_store

SHOWN_RUNS = 20


def register(sub: Any) -> None:
    d = sub.add_parser("diff", help="align two episodes' tokens (or one against another preset) and show what "
                                     "differs: ids, loss mask, logprobs")
    d.add_argument("a", metavar="A", help="episode id (a unique prefix is enough)")
    d.add_argument("b", metavar="B", nargs="?", help="the other episode; or give --preset / --tokenizer")
    d.add_argument("--preset", help="compare A with its own conversation laid down by this preset (e.g. tito)")
    d.add_argument("--tokenizer", help="... or by this tokenizer (folder or hub id; aligned by token text)")
    d.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                   help="with --preset: change one of the knobs of the loop that lays A down (repeatable)")
    d.add_argument("--db", default=DEFAULT_DB)
    d.add_argument("--all", action="store_true", help=f"every differing run (default: the first {SHOWN_RUNS})")
    d.add_argument("--context", type=int, default=2, help="equal tokens shown either side of a run")
    d.add_argument("--json", action="store_true", help="the summary and runs as one JSON object")
    d.set_defaults(handler=cmd_diff)


def _load(store: Any, ref: str) -> Episode:
    ep: Episode = store.get_episode(store.resolve_id(ref))
    return ep


def _tokenizer(ep: Episode) -> Any:
    tok, why = tokenizers.episode_tokenizer(ep)
    if tok is None:
        raise ConfigError(f"episode {ep.id}: {why}")
    return tok


def compute(store: Any, a_ref: str, b_ref: str | None, preset: str | None, tokenizer: str | None,
            settings: dict[str, str] | None = None) -> tuple[tokendiff.TokenDiff, Any, Any, str]:
    """(the diff, A's tokenizer, B's tokenizer, how B was made) for the command's arguments."""
    a = _load(store, a_ref)
    if b_ref and (preset or tokenizer):
        raise ConfigError("give B, or --preset/--tokenizer to re-tokenize A, not both")
    if settings and not preset:
        raise ConfigError("--set changes the knobs of the loop --preset names: give --preset (A's own is "
                          f"{a.preset or 'not recorded'})")
    if not b_ref and not (preset or tokenizer):
        raise ConfigError("give B, or --preset NAME / --tokenizer NAME to compare A with its conversation laid "
                          "down another way")
    tok_a = _tokenizer(a)
    if b_ref:
        b = _load(store, b_ref)
        tok_b = _tokenizer(b)
        how = f"episode {b.id}"
    else:
        tok_b = tokenizers.load_tokenizer(tokenizer) if tokenizer else tok_a
        b = asyncio.run(tokendiff.retokenized(a, preset=preset, tokenizer=tok_b, tokenizer_name=tokenizer,
                                              settings=settings))
        knobs = f" ({', '.join(f'{k}={v}' for k, v in settings.items())})" if settings else ""
        how = f"A's conversation under {' and '.join(x for x in (preset and f'preset {preset}{knobs}', tokenizer and f'tokenizer {tokenizer}') if x)}"
    return tokendiff.token_diff(a, b, tok_a, tok_b), tok_a, tok_b, how


def _text(tok: Tokenizer, ids: list[int]) -> str:
    return repr("".join(tok.batch_decode([[i] for i in ids], skip_special_tokens=False,
                                         clean_up_tokenization_spaces=False)))


def runs(d: tokendiff.TokenDiff, tok_a: Tokenizer, tok_b: Tokenizer) -> list[dict[str, Any]]:
    """Each differing run: where it is on each side, its turn and kind, what differs, and its text on each side."""
    out = []
    for h in d.hunks:
        rows = d.rows[h.start : h.end]
        ia, ib = tokendiff.side_ids(d, rows)
        pa = [r.a for r in rows if r.a is not None]
        pb = [r.b for r in rows if r.b is not None]
        whats = sorted({d.what(r) for r in rows})
        out.append({
            "a": [min(pa), max(pa) + 1] if pa else None, "b": [min(pb), max(pb) + 1] if pb else None,
            "turn": d.turn_of(rows[0]), "kind": d.kind_of(rows[0]), "what": whats,
            "a_text": _text(tok_a, ia), "b_text": _text(tok_b, ib),
            "a_mask": [int(d.a.tokens.loss_mask[p]) for p in pa], "b_mask": [int(d.b.tokens.loss_mask[p]) for p in pb],
        })
    return out


def _span(s: list[int] | None) -> str:
    return f"[{s[0]}:{s[1]}]" if s else "[-]"


def cmd_diff(a: argparse.Namespace) -> int:
    return diff(a, open_store(a.db, must_exist=True))


def diff(a: argparse.Namespace, store: Any) -> int:
    d, tok_a, tok_b, how = compute(store, a.a, a.b, a.preset, a.tokenizer, knob_settings(a.set))
    found = runs(d, tok_a, tok_b)
    counts = {k: vars(c) for k, c in d.counts.items()}
    if a.json:
        # "b": B's id when B is a stored episode, as "a" is; "b_how": what B is (an episode, or A laid down otherwise)
        print(json.dumps({"a": d.a.id, "b": d.b.id if a.b else None, "b_how": how,
                          "b_ending": "" if a.b else tokendiff.laid_down_ending(d.a, d.b),
                          "by_text": d.by_text, "rows": len(d.rows),
                          "differing": d.n_differing, "counts": counts, "runs": found}, ensure_ascii=False))
        return 1 if d.hunks else 0
    print(f"A: episode {d.a.id} ({d.a.preset}, {len(d.a.tokens)} tokens)")
    print(f"B: {how} ({d.b.preset}, {len(d.b.tokens)} tokens)")
    if not a.b and (said := tokendiff.laid_down_ending(d.a, d.b)):
        print(said)
    print(f"aligned by token {'text (the tokenizers differ)' if d.by_text else 'id'}: {len(d.rows)} positions, "
          f"{d.n_differing} differ in {len(d.hunks)} run{'s' if len(d.hunks) != 1 else ''}")
    if not d.hunks:
        print("the token arrays agree: same ids, loss mask and logprobs")
        return 0
    first = d.first
    assert first is not None
    f = found[0]
    print(f"first difference: A[{first.a if first.a is not None else '-'}] B[{first.b if first.b is not None else '-'}], "
          f"turn {f['turn']}, {f['kind']}: {d.what(first)}")
    header = ["kind", "positions", "only A", "only B", "ids", "mask", "logprob"]
    rows = [[k, str(c.rows), str(c.only_a), str(c.only_b), str(c.ids), str(c.mask), str(c.logprob)]
            for k, c in sorted(d.counts.items(), key=lambda kv: -kv[1].differing)]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    print("\n" + "  ".join(h.ljust(w) for h, w in zip(header, widths)))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))
    shown = found if a.all else found[:SHOWN_RUNS]
    for run in shown:
        print(f"\n@@ A{_span(run['a'])} B{_span(run['b'])} turn {run['turn']} {run['kind']}: {'; '.join(run['what'])}")
        print(f"- {run['a_text']}  mask {''.join(map(str, run['a_mask'])) or '-'}")
        print(f"+ {run['b_text']}  mask {''.join(map(str, run['b_mask'])) or '-'}")
    if len(shown) < len(found):
        print(f"\n... {len(found) - len(shown)} more runs (--all shows them)")
    return 1
