"""``rollscope show``: one episode turn by turn, its findings by root."""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from ..analysis.at_turn import prompt_at, turn_span
from ..analysis.entropy import ForkToken, TurnEntropy, has_entropy, turn_entropy
from ..backends.tokenizers import tokenizer_spec, try_tokenizer
from ..records.episode import Episode, Finding, Message
from ..tokens import chat
from .common import DEFAULT_DB, counted, open_store
from .explain import outcome_lines

FOLDED_LINES = 3
"""A system prompt longer than this many lines shows its first lines only, unless ``--full``."""


def register(sub: Any) -> None:
    sh = sub.add_parser("show", help="show one episode turn by turn")
    sh.add_argument("episode_id")
    sh.add_argument("--db", default=DEFAULT_DB)
    sh.add_argument("--json", action="store_true", help="print the whole record as JSON")
    sh.add_argument("--full", action="store_true", help="print the system prompt (and its tool schemas) in full")
    sh.set_defaults(handler=cmd_show)


def _opening(m: Message, full: bool) -> str:
    lines = m.content.splitlines()
    if m.role != "system" or full or len(lines) <= FOLDED_LINES:
        return f"\n[{m.role}] {m.content}"
    shown = "\n".join(lines[:FOLDED_LINES])
    return (f"\n[{m.role}] {shown}\n  … {len(lines) - FOLDED_LINES} more lines ({len(m.content):,} characters); "
            "--full shows them")


def _clip(text: str) -> str:
    """``text`` folded to its first lines (``--full`` shows all)."""
    lines = text.splitlines()
    if len(lines) <= FOLDED_LINES:
        return text
    return "\n".join(lines[:FOLDED_LINES]) + f"\n  … {len(lines) - FOLDED_LINES} more lines; --full shows them"


def _finding(f: Finding) -> str:
    where = f" turn {f.turn}" if f.turn is not None else ""
    at = f" tokens [{f.token_start}, {f.token_end})" if f.token_start is not None else ""
    return f"[{f.severity.value}] {f.kind}{where}{at}: {f.message}"


def findings_by_root(ep: Episode) -> list[str]:
    """The episode's findings as lines: its diagnosis, each root with what follows from it indented under it, then
    the info findings (what could not be checked)."""
    from ..checks.diagnosis import consequences, diagnosis, roots

    found = list(ep.all_findings())
    if not found:
        return []
    out = [f"diagnosis: {diagnosis(found) or 'no errors or warnings'}"]
    placed: set[int] = set()
    for r in roots(found):
        placed.add(id(r))
        out.append(f"  {_finding(r)}")
        for f in consequences(found, r):
            placed.add(id(f))
            out.append(f"      <- {_finding(f)}")
    out += [f"  {_finding(f)}" for f in found if id(f) not in placed]
    return out


SHOWN_CHOICES = 3
"""Alternatives a fork line names (the most likely ones, and the sampled one wherever it ranks)."""


def _token(tokenizer: Any, token_id: int) -> str:
    """A token's text, quoted so that its spaces and newlines show; its id when there is no tokenizer."""
    if tokenizer is None:
        return f"id {token_id}"
    return json.dumps(str(tokenizer.decode([token_id], skip_special_tokens=False)), ensure_ascii=False)


def _percent(p: float) -> str:
    return "?" if math.isnan(p) else f"{p:.0%}" if p >= 0.01 else "<1%"


def fork_text(f: ForkToken, tokenizer: Any) -> str:
    """One fork: its position, its token, its entropy and the alternatives with their probabilities, the sampled
    one marked (and given by its own logprob when it is not among the top K)."""
    shown = [c for r, c in enumerate(f.alternatives) if r < SHOWN_CHOICES or c.sampled]
    choices = [f"{_token(tokenizer, c.token_id)} {_percent(c.prob)}{' sampled' if c.sampled else ''}" for c in shown]
    if f.alternatives and f.sampled_rank is None:
        prob = _percent(math.exp(f.logprob)) if math.isfinite(f.logprob) else "?"
        choices.append(f"sampled {_token(tokenizer, f.token_id)} {prob}, not in the top {len(f.alternatives)}")
    return (f"#{f.position} {_token(tokenizer, f.token_id)} {f.entropy:.2f} nats"
            + (f" ({', '.join(choices)})" if choices else ""))


def _undecoded(ep: Any, ids: Any) -> str:
    """A reply stored as ids alone: decoded with the episode's tokenizer where it loads, else how to decode it."""
    tok = try_tokenizer(tokenizer_spec(ep))[0] if ep.tokenizer else None
    if tok is None:
        return (f"[assistant] (no text stored: {len(ids)} generated token ids; `--json` has them, and "
                "`rollscope import --tokenizer` decodes them)")
    text = chat.strip_end_of_turn(tok, chat.decode(tok, list(ids)).rstrip())
    if text.strip():
        return f"[assistant] (no text stored; decoded with {ep.tokenizer}:) {text}"
    return (f"[assistant] (no text: its {counted(len(ids), 'generated token id')} decode{'s' if len(ids) == 1 else ''} "
            "to none but the end of the turn)")


def entropy_line(te: TurnEntropy, estimated: bool, tokenizer: Any) -> str:
    """A turn's mean entropy and its forks, on one line."""
    if not te.known:
        return "[entropy] none recorded for this turn"
    bound = " (estimated: a lower bound)" if estimated else ""
    forks = " · ".join(fork_text(f, tokenizer) for f in te.forks)
    return f"[entropy] mean {te.mean:.3f} nats over {te.known} tokens{bound}; forks: {forks}"


def cmd_show(a: argparse.Namespace) -> int:
    store = open_store(a.db, must_exist=True)
    ep = store.get_episode(store.resolve_id(a.episode_id))
    if a.json:
        print(json.dumps(ep.to_dict(), ensure_ascii=False, indent=1))
        return 0
    print(f"episode {ep.id}  env={ep.env} task={ep.task_id} preset={ep.preset} status={ep.status} ({ep.reason})")
    print(f"reward {ep.reward:.4f}  turn rewards {list(ep.turn_rewards)}  returns {[round(x, 4) for x in ep.returns]}")
    marks = ["starred"] if ep.starred else []
    marks += [f"tags {', '.join(ep.tags)}"] if ep.tags else []
    marks += [f"note: {ep.note}"] if ep.note else []
    if marks:
        print("  ".join(marks))
    for line in outcome_lines(ep.outcome):
        print(line)
    print(f"tokens {ep.n_tokens} (prompt {ep.prompt_len}, trainable {ep.tokens.n_trainable})  backend {ep.backend.label if ep.backend else 'unknown'}"
          f"  source {ep.source.kind}{f' ({ep.source.file})' if ep.source.file else ''}")
    opening = ep.messages[: next((i for i, m in enumerate(ep.messages) if m.role == "assistant"), len(ep.messages))]
    for m in opening:
        print(_opening(m, a.full))
    entropy = turn_entropy(ep) if has_entropy(ep) else None
    # A dump's record may hold its prompt and what answered each reply as tokens alone: read off them, as the
    # dashboard's episode view reads them.
    off_tokens = bool(ep.turns) and ep.n_tokens > 0 and (not opening or not any(t.observation for t in ep.turns))
    tokenizer = try_tokenizer(tokenizer_spec(ep))[0] if (entropy or off_tokens) and ep.tokenizer else None
    if ep.turns and not opening:
        view = prompt_at(ep, 0, tokenizer)
        if view.text is not None:
            said = "prompt" if view.source == "prompt_text" else f"prompt: {view.note}"
            print(f"[{said}] {view.text if a.full else _clip(view.text)}")
    for k, t in enumerate(ep.turns):
        g = t.generation
        took = f"  {t.timings['total_s']:.3f}s" if ep.source.live and "total_s" in t.timings else ""  # an import's: untimed
        print(f"\n--- turn {t.index}  env reward {t.reward}  done {t.done}  finish {g.finish_reason if g else '-'}  "
              f"{len(g.token_ids) if g else 0} tokens{took}")
        if entropy:
            print(entropy_line(entropy[k], ep.tokens.entropy_estimated, tokenizer))
        if g is not None:
            print(f"[assistant] {g.text}" if g.text or not g.token_ids else _undecoded(ep, g.token_ids))
        if t.parse_error:
            print(f"[parse error] {t.parse_error}")
        for c in t.tool_calls:
            print(f"[tool call] {c.name} {c.raw_arguments if c.raw_arguments is not None else json.dumps(c.arguments)}")
        for m in t.observation:
            print(f"[{m.role}{'/' + m.name if m.name else ''}] {m.content}")
        span = turn_span(ep, k)
        if not t.observation and tokenizer is not None and span.cut > span.gen_end:
            after = chat.decode(tokenizer, ep.tokens.ids[span.gen_end : span.cut].tolist())
            if after.strip():
                print(f"[after the reply: tokens {span.gen_end}-{span.cut}, decoded] {after if a.full else _clip(after)}")
    lines = findings_by_root(ep)
    not_run = len(ep.checks_not_run)
    checked = (f"checks v{ep.checked}" + (f"; {not_run} could not run for want of a tokenizer or a model, their "
                                          "notes below" if not_run else "")
               if ep.checked else "not checked (`rollscope check` runs the checks)")
    print(f"\n--- findings ({checked})" + ("" if lines or not ep.checked else ": none"))
    for line in lines:
        print(line)
    return 0
