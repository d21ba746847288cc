"""The ``rollscope`` command: a thin wrapper over the engine.

Library errors (``RollscopeError``) become one line on stderr and exit
status 2; anything else is a bug and keeps its traceback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from . import jsonbounds
from .cli_demo import add_demo_parser, cmd_demo
from .errors import ConfigError, RollscopeError, StoreError

DEFAULT_DB = "rollscope.db"


def _positive_int(s: str) -> int:
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a whole number") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {v}")
    return v


def _rate(s: str) -> float:
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{s!r} is not a number") from None
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"must be between 0 and 1, not {v}")
    return v


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="rollscope", description="Trace, store and inspect multi-turn agent rollouts.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser("run", help="run a batch of episodes and store them")
    r.add_argument("--env", default="math", help="math, retail, taubench:retail or taubench:airline")
    r.add_argument("--problems", help="math env: an AReaL-style JSONL (query_id, prompt, solutions) instead of the built-in set")
    r.add_argument("--policy", default="scripted", help="scripted, local, sglang or openai")
    r.add_argument("--preset", help="tito, slime-tau, slime-tau-seed, areal-math or areal-multiturn "
                   "(default: areal-math for math, slime-tau for tool envs; `rollscope presets` lists them)")
    r.add_argument("--set", action="append", default=[], metavar="KNOB=VALUE",
                   help="change one of the preset's knobs, e.g. --set turn_discount=0.9 (repeatable)")
    r.add_argument("--config", help="a preset file (JSON, as `rollscope presets --json` prints) instead of --preset")
    r.add_argument("--url", help="sglang / openai policy: the server's base URL, e.g. http://127.0.0.1:30000")
    r.add_argument("--api", default="completions", choices=["completions", "chat"], help="openai policy: which endpoint")
    r.add_argument("--timeout", type=float, default=60.0,
                   help="sglang / openai policy: seconds one try may take, the whole answer included (default 60)")
    r.add_argument("--retries", type=int, default=3,
                   help="sglang / openai policy: tries after the first when the server fails (default 3); a server "
                        "that stops answering, its health check included, is not retried")
    r.add_argument("--user", default="scripted", help="who plays the user in tool envs: scripted or llm")
    r.add_argument("--user-url", help="--user llm: an sglang server for the user model (default: the local model)")
    r.add_argument("--user-model", help="--user llm: a local model for the user (default: the embedded SmolLM2)")
    r.add_argument("--tasks", default="0:8", help="task range or list: 0:8, 3, 1,5,9, all")
    r.add_argument("--samples", type=_positive_int, default=1, help="samples per task (a GRPO group)")
    r.add_argument("--db", default=DEFAULT_DB)
    r.add_argument("--model", help="local policy: a local Hugging Face folder or a cached hub id (default: embedded SmolLM2)")
    r.add_argument("--tokenizer", help="tokenizer folder or id (default: the embedded SmolLM2 one with its tool template)")
    r.add_argument("--max-turns", type=_positive_int)
    r.add_argument("--temperature", type=float, default=1.0)
    r.add_argument("--top-p", type=float, default=1.0)
    r.add_argument("--max-new-tokens", type=_positive_int, default=256)
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--concurrency", type=_positive_int, default=4)
    r.add_argument("--mistake-rate", type=_rate, default=0.2, help="scripted policy: share of wrong turns (0 = always right)")
    r.add_argument("--quiet", action="store_true", help="no progress bar")

    pr = sub.add_parser("presets", help="list the loop presets, their knobs and the code each reproduces")
    pr.add_argument("name", nargs="?", help="one preset: print its knobs")
    pr.add_argument("--json", action="store_true", help="print preset files (the format --config reads)")

    sc = sub.add_parser("schema", help="print the JSON Schema (draft 2020-12) of a JSONL episode record")
    sc.add_argument("--validate", metavar="FILE", help="check a JSONL file against it instead: each line that "
                    "does not conform, with the field")

    ls = sub.add_parser("ls", help="list stored episodes")
    ls.add_argument("--db", default=DEFAULT_DB)
    ls.add_argument("--where", action="append", default=[], help="filter: status=completed, reward>=0.5, env=math, tag=x ...")
    ls.add_argument("--sort", default="created_at")
    ls.add_argument("--limit", type=_positive_int, default=50)
    ls.add_argument("--json", action="store_true")

    sh = sub.add_parser("show", help="show one episode turn by turn")
    sh.add_argument("episode_id")
    sh.add_argument("--db", default=DEFAULT_DB)
    sh.add_argument("--json", action="store_true", help="print the whole record as JSON")

    from .formats import EXPORTERS, IMPORTERS

    ex = sub.add_parser("export", help="export episodes to a file (jsonl, slime, areal, messages, parquet)")
    ex.add_argument("--db", default=DEFAULT_DB)
    ex.add_argument("--format", default="jsonl", choices=sorted(EXPORTERS))
    ex.add_argument("-o", "--output", required=True, help="output file ('-' for stdout, text formats only)")
    ex.add_argument("--where", action="append", default=[], help="filter like `ls`: status=completed, reward>=0.5 ...")
    ex.add_argument("--id", action="append", default=[], help="only this episode (repeatable; an id prefix is enough)")
    ex.add_argument("--tag", action="append", default=[], help="only episodes with this tag (repeatable: all of them)")
    ex.add_argument("--starred", action="store_true", help="only starred episodes")

    im = sub.add_parser("import", help="import episodes from a training run's dump (or a Rollscope export)")
    im.add_argument("file", metavar="FILE_OR_DIR")
    im.add_argument("--format", default="jsonl", choices=sorted(IMPORTERS))
    im.add_argument("--db", default=DEFAULT_DB)
    im.add_argument("--tokenizer", help="tokenizer folder or hub id to tokenize and check foreign dumps with "
                    "(slime --dump-details folders bring their own)")
    im.add_argument("--env", help="the env the records ran in, when they do not say (taubench: recognized from "
                    "the policy text; messages: a record's own env comes first), e.g. taubench:airline")
    im.add_argument("--run", help="put the episodes in this run (the run view plots a run by rollout step)")
    im.add_argument("--check", action="store_true", help="run the fidelity checks on each new episode as it is "
                    "imported (on --workers processes, or --ray)")
    im.add_argument("--quiet", action="store_true", help="no progress bar")
    _fanout_options(im)

    ck = sub.add_parser("check", help="run the fidelity checks on stored or exported episodes")
    ck.add_argument("source", metavar="FILE_OR_DB", help="a Rollscope database or a Rollscope JSONL file")
    ck.add_argument("--episode", action="append", default=[], help="only this episode (repeatable; an id prefix is enough)")
    ck.add_argument("--where", action="append", default=[], help="database only: filter like `ls`")
    ck.add_argument("--json", action="store_true", help="one JSON object per finding")
    ck.add_argument("--tokenizer", help="tokenizer to check with (default: the one each episode names)")
    ck.add_argument("--recompute-logprobs", action="store_true",
                    help="teacher-force a local model and compare its logprobs with the rollout's")
    ck.add_argument("--model", help="with --recompute-logprobs: local model folder (default: the episode's own local model)")
    ck.add_argument("--threshold", type=float, default=0.5, help="logprob difference that counts as a mismatch")
    ck.add_argument("--no-store", action="store_true", help="database only: do not save the findings back")
    ck.add_argument("--info", action="store_true", help="also print info findings (what was not checked, and why)")
    ck.add_argument("--all", action="store_true", help="print, under each root finding, the findings that follow from it")
    _fanout_options(ck)

    rp = sub.add_parser("replay", help="re-execute stored episodes against their env and compare")
    rp.add_argument("episode_id", nargs="?", help="one episode (an id prefix is enough); or use --where / --all")
    rp.add_argument("--db", default=DEFAULT_DB)
    rp.add_argument("--until", type=int, help="stop after this turn")
    rp.add_argument("--where", action="append", default=[], help="batch form: re-execute every episode matching")
    rp.add_argument("--json", action="store_true", help="one JSON object per episode")
    rp.add_argument("--no-store", action="store_true", help="do not store the results")

    from .cli_diff import add_diff_parser
    from .cli_watch import add_watch_parser

    add_watch_parser(sub, DEFAULT_DB, _fanout_options)
    add_demo_parser(sub, DEFAULT_DB)
    add_diff_parser(sub, DEFAULT_DB)

    sv = sub.add_parser("serve", help="start the dashboard")
    sv.add_argument("--db", default=DEFAULT_DB)
    sv.add_argument("--host", default="127.0.0.1",
                    help="address to listen on (default 127.0.0.1: this machine only; any other needs --auth)")
    sv.add_argument("--port", type=int, default=7860)
    sv.add_argument("--auth", metavar="USER:PASSWORD",
                    help="require this login (needed with a non-loopback --host; or set ROLLSCOPE_AUTH)")
    return p


def _fanout_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--workers", type=_positive_int, help="processes that run the checks (default: one per CPU; 1: "
                   "this process alone)")
    p.add_argument("--ray", nargs="?", const="local", metavar="ADDRESS",
                   help="run the checks on Ray workers: a cluster address (ray://host:10001, auto), or none for a "
                        "local Ray on this machine's CPUs (needs the rollscope[ray] extra)")


def _fanout(a: argparse.Namespace) -> Any:
    from .fanout import Fanout, default_workers

    return Fanout(a.workers or default_workers(), a.ray)


def _open_store(path: str, must_exist: bool) -> Any:
    from .store import Store

    if must_exist and not Path(path).exists():
        raise StoreError(f"database {path} does not exist (run `rollscope run --db {path}` or `rollscope import` first)")
    return Store(path)


def cmd_run(a: argparse.Namespace) -> int:
    from .planning import BackendSettings, UserSettings, plan_run
    from .runner import run_batch

    settings = _knob_settings(a.set) | ({"max_turns": str(a.max_turns)} if a.max_turns is not None else {})
    backend_settings = BackendSettings.parse(a.policy, a.model, a.url, a.api, a.tokenizer, a.temperature, a.top_p,
                                             a.max_new_tokens, a.mistake_rate, a.seed, a.timeout, a.retries)
    plan = plan_run(a.env, a.tasks, a.samples, a.preset, settings, a.concurrency, backend_settings,
                    config_file=a.config, problems=a.problems, user=UserSettings(a.user, a.user_model, a.user_url),
                    max_episodes=None, preflight=False)
    tokenizer, backend = plan.backend.open(plan.make_env)
    spec, make_env = plan.spec(), plan.make_env
    store = _open_store(a.db, must_exist=False)
    try:
        result = asyncio.run(run_batch(spec, make_env, backend, tokenizer, store, progress=not a.quiet))
    except KeyboardInterrupt:
        print("rollscope: interrupted; finished episodes are stored, the rest are marked interrupted", file=sys.stderr)
        return 130
    counts = ", ".join(f"{k} {v}" for k, v in sorted(result.counts().items()))
    mean = sum(e.reward for e in result.episodes) / max(1, len(result.episodes))
    print(f"run {result.run_id}: {len(result.episodes)} episodes ({counts}), mean reward {mean:.3f}, "
          f"{result.n_turns} turns in {result.elapsed_s:.1f}s -> {a.db}")
    return 0


def _table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def cmd_ls(a: argparse.Namespace) -> int:
    from .store import EpisodeFilter

    store = _open_store(a.db, must_exist=True)
    flt = EpisodeFilter.from_where(a.where)
    rows = store.list_episodes(flt, order_by=a.sort, limit=a.limit)
    if a.json:
        for r in rows:
            print(json.dumps(r.__dict__))
        return 0
    total = store.count(flt)
    print(_table(
        [[r.id, r.env, r.task_id, r.status, f"{r.reward:.3f}", str(r.n_turns), str(r.n_tokens), str(r.n_trainable),
          r.preset, str(r.n_findings)] for r in rows],
        ["id", "env", "task", "status", "reward", "turns", "tokens", "trainable", "preset", "findings"],
    ))
    print(f"({len(rows)} of {total} episodes)")
    return 0


def cmd_show(a: argparse.Namespace) -> int:
    store = _open_store(a.db, must_exist=True)
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


def cmd_export(a: argparse.Namespace) -> int:
    from .formats import export
    from .store import EpisodeFilter

    store = _open_store(a.db, must_exist=True)
    flt = EpisodeFilter.from_where(a.where)
    if a.id:
        flt = replace(flt, ids=tuple(store.resolve_id(i) for i in a.id))
    if a.tag:
        flt = replace(flt, tags=(*flt.tags, *a.tag))
    if a.starred:
        flt = replace(flt, starred=True)
    n = export(store.iter_episodes(flt), a.format, a.output)
    print(f"exported {n} episodes ({a.format}) to {a.output}", file=sys.stderr)
    return 0


def cmd_import(a: argparse.Namespace) -> int:
    from .errors import FormatError
    from .formats import import_path

    if not Path(a.file).exists():  # before the database is created for nothing
        raise FormatError("no such file", a.file)
    store = _open_store(a.db, must_exist=False)
    fanout = _fanout(a) if a.check else None
    try:
        report = import_path(a.file, a.format, store, tokenizer=a.tokenizer,
                             progress=not a.quiet and sys.stderr.isatty(), env=a.env, run_id=a.run, check=a.check,
                             fanout=fanout)
    finally:
        if fanout is not None:
            fanout.close()
    for spec, why in report.tokenizer_errors.items():
        print(f"rollscope: tokenizer {spec!r} unavailable, token checks skipped: {why}", file=sys.stderr)
    for err in report.errors:
        print(f"rollscope: skipped {err}", file=sys.stderr)
    for note in report.notes:
        print(f"rollscope: note: {note}", file=sys.stderr)
    print(f"{report.summary()}{f'; {report.checked} checked' if a.check else ''} -> {a.db}")
    return 1 if report.errors and not report.imported else 0


def cmd_check(a: argparse.Namespace) -> int:
    from .cli_check import cmd_check

    return cmd_check(a, _fanout(a), lambda path: _open_store(path, must_exist=True))


def cmd_replay(a: argparse.Namespace) -> int:
    from .replay import replay_stored
    from .store import EpisodeFilter

    store = _open_store(a.db, must_exist=True)
    if a.episode_id and a.where:
        raise ConfigError("give an episode id or --where, not both")
    if a.episode_id:
        episodes = iter([store.get_episode(store.resolve_id(a.episode_id))])
    elif a.where:
        episodes = store.iter_episodes(EpisodeFilter.from_where(a.where))
    else:
        raise ConfigError("which episodes? give an episode id, or --where (e.g. --where env=retail)")
    kinds: dict[str, int] = {}
    n = 0
    for ep in episodes:
        n += 1
        res = asyncio.run(replay_stored(ep, a.until))
        if not a.no_store:
            store.save_replay(res)
        kinds[res.kind] = kinds.get(res.kind, 0) + 1
        if a.json:
            print(json.dumps(res.to_dict(), ensure_ascii=False, default=str))
        elif a.episode_id:
            print(res.summary())
            for v in res.turns:
                mark = "ok  " if v.ok else "DIFF"
                extra = f"  {v.field}: stored {v.stored!r}  now {v.now!r}" if not v.ok else (f"  ({v.note})" if v.note else "")
                print(f"  turn {v.turn:3d} {mark}{extra}")
        elif res.kind != "reproduced":
            print(res.summary())
    summary = ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "nothing matched"
    print(f"replayed {n} episodes: {summary}", file=sys.stderr)
    return 0 if set(kinds) <= {"reproduced"} else 1


def cmd_serve(a: argparse.Namespace) -> int:
    from dashboard.server import resolve_auth

    auth = resolve_auth(a.host, a.auth)  # before importing Gradio: a refused host fails fast
    from dashboard.app import launch

    launch(db=a.db, host=a.host, port=a.port, auth=auth)
    return 0


def _knob_settings(items: Sequence[str]) -> dict[str, str]:
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set takes KNOB=VALUE, not {item!r}")
        out[name.strip()] = value
    return out


def cmd_presets(a: argparse.Namespace) -> int:
    from .presets import PRESET_INFO, PRESET_LIST, knobs, preset_document

    chosen = PRESET_LIST
    if a.name:
        if a.name not in PRESET_INFO:
            raise ConfigError(f"unknown preset {a.name!r}; choose one of: {', '.join(PRESET_INFO)}")
        chosen = (PRESET_INFO[a.name],)
    if a.json:
        docs = [preset_document(p) for p in chosen]
        print(json.dumps(docs[0] if a.name else docs, indent=2))
        return 0
    for p in chosen:
        print(f"{p.name}\n  reproduces: {p.reproduces}\n  {p.summary}")
        if a.name:
            values = p.config.to_dict()
            for k in knobs():
                print(f"  {k['name']} = {values[k['name']]!r}\n      {k['doc']}")
        print()
    if not a.name:
        print("`rollscope presets NAME` shows a preset's knobs; `rollscope run --set KNOB=VALUE` changes one.")
    return 0


def cmd_schema(a: argparse.Namespace) -> int:
    from .records import READABLE_VERSIONS, SCHEMA_VERSION
    from .schema import episode_schema, problems
    from .upgrade import upgrade

    if not a.validate:
        print(json.dumps(episode_schema(), indent=2, ensure_ascii=False))
        return 0
    path = Path(a.validate)
    if not path.is_file():
        raise ConfigError(f"{path} is not a file")
    n = bad = upgraded = 0
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"{path} is not UTF-8 text (byte {e.start}): a JSONL file is UTF-8, one record a line") from None
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        n += 1
        try:
            record = jsonbounds.loads(line, limit=None)
        except ValueError as e:
            bad += 1
            print(f"{path}:{lineno}: not valid JSON ({jsonbounds.describe(e)})")
            continue
        if isinstance(record, dict) and record.get("schema_version") in READABLE_VERSIONS \
                and record["schema_version"] < SCHEMA_VERSION:
            record = upgrade(record, SCHEMA_VERSION)  # an earlier version is judged as it reads today
            upgraded += 1
        found = problems(record) if isinstance(record, dict) else ["(record): not a JSON object"]
        if found:
            bad += 1
            for p in found:
                print(f"{path}:{lineno}: {p}")
    print(f"{n - bad} of {n} records conform to the episode schema"
          + (f" ({upgraded} of an earlier version, checked as upgraded)" if upgraded else ""), file=sys.stderr)
    return 1 if bad else 0


def cmd_watch(a: argparse.Namespace) -> int:
    from .cli_watch import cmd_watch

    if not Path(a.folder).is_dir():  # before the database is created for nothing
        raise ConfigError(f"{a.folder} is not a folder: watch a training run's dump folder")
    return cmd_watch(a, _open_store(a.db, must_exist=False), _fanout(a))


def cmd_diff(a: argparse.Namespace) -> int:
    from .cli_diff import cmd_diff

    return cmd_diff(a, _open_store(a.db, must_exist=True))


COMMANDS = {
    "presets": cmd_presets, "schema": cmd_schema,
    "run": cmd_run, "ls": cmd_ls, "show": cmd_show, "export": cmd_export, "import": cmd_import,
    "check": cmd_check, "replay": cmd_replay, "serve": cmd_serve, "watch": cmd_watch, "diff": cmd_diff,
    "demo": cmd_demo,
}


def main(argv: Sequence[str] | None = None) -> int:
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("math_verify").setLevel(logging.ERROR)
    args = build_parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except RollscopeError as e:
        print(f"rollscope: error: {e}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # `rollscope ls | head`: the reader left; that is not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
