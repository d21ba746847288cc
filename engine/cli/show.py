"""``rollscope show``: one episode turn by turn."""

from __future__ import annotations

import argparse
import json
from typing import Any

from .common import DEFAULT_DB, open_store


def register(sub: Any) -> None:
    sh = sub.add_parser("show", help="show one episode turn by turn")
    sh.add_argument("episode_id")
    sh.add_argument("--db", default=DEFAULT_DB)
    sh.add_argument("--json", action="store_true", help="print the whole record as JSON")
    sh.set_defaults(handler=cmd_show)


def cmd_show(a: argparse.Namespace) -> int:
    store = open_store(a.db, must_exist=True)
    ep = store.get_episode(store.resolve_id(a.episode_id))
    if a.json:
        print(json.dumps(ep.to_dict(), ensure_ascii=False, indent=1))
        return 0
    print(f"episode {ep.id}  env={ep.env} task={ep.task_id} preset={ep.preset} status={ep.status} ({ep.reason})")
    print(f"reward {ep.reward:.4f}  turn rewards {list(ep.turn_rewards)}  returns {[round(x, 4) for x in ep.returns]}")
    print(f"tokens {ep.n_tokens} (prompt {ep.prompt_len}, trainable {ep.tokens.n_trainable})  backend {ep.backend.label if ep.backend else 'unknown'}"
          f"  source {ep.source.kind}{f' ({ep.source.file})' if ep.source.file else ''}")
    for m in ep.messages:
        if m.role == "assistant":
            break
        print(f"\n[{m.role}] {m.content}")
    for t in ep.turns:
        g = t.generation
        print(f"\n--- turn {t.index}  reward {t.reward}  done {t.done}  finish {g.finish_reason if g else '-'}  "
              f"{len(g.token_ids) if g else 0} tokens  {t.timings.get('total_s', 0):.3f}s")
        if g is not None:
            print(f"[assistant] {g.text}")
        if t.parse_error:
            print(f"[parse error] {t.parse_error}")
        for c in t.tool_calls:
            print(f"[tool call] {c.name} {json.dumps(c.arguments)}")
        for m in t.observation:
            print(f"[{m.role}{'/' + m.name if m.name else ''}] {m.content}")
        for f in t.findings:
            print(f"[finding {f.severity}] {f.kind}: {f.message}")
    for f in ep.findings:
        print(f"[finding {f.severity}] {f.kind}: {f.message}")
    return 0
