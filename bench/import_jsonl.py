"""Import speed of a JSONL file of episodes, against parsing the same file with ``json.loads`` alone.

The file is ``rollscope export --format jsonl`` of ``--episodes`` episodes of one ``--kind``, written once into
``--dir`` and reused:
- ``synthetic``: small math and tool episodes of one to six turns (``tests/synthetic.py``; their prompts were
  sent as ids, so they carry no prompt text);
- ``math``: math episodes run by the loop (scripted policy, SmolLM2's template, the ``areal-math`` preset with
  ``token_mode=retokenize``, so each turn's prompt is text), one to five turns;
- ``retail-loop``: retail episodes run by the loop (the retail env's scripted agent with mistakes, SmolLM2's template,
  the ``slime-tau`` preset), 8 to 10 turns of about 4,500 tokens in all, each turn's prompt text the conversation so far;
- ``retail``: 60-turn retail episodes of 32,000 tokens whose prompts are Qwen3's template's render of the
  conversation so far, the thinking of earlier replies dropped at every user answer
  (``tests/synthetic.rendered_retail_episode``; needs the Qwen3 tokenizer, ``ROLLSCOPE_QWEN3_TOKENIZER``).
``--full-prompts`` writes every prompt text whole (as exports did before prompts were written as pieces). ``--into DB``
imports into a copy of that database (its episodes' ids must differ from the file's: ``--start`` numbers synthetic
episodes from there), the cost of writing into a database that already holds many; the copy is flushed to disk
before the clock starts, so the import does not wait for its pages to be written back. Prints
episodes a second for ``json.loads`` alone and for ``import_path`` into a fresh database, in one process and with
``--workers`` processes reading the file (parsing and packing; this process writes), their ratio, and the bytes an
episode takes in the file and in the database. Then where the time goes, on the file's first ``--stages`` episodes
in this process, best of 5 (the machine's speed varies from run to run more than the stages differ): ``json.loads``,
reading the records into episodes, packing them into rows, and writing the rows into a fresh database.

    python bench/import_jsonl.py [--episodes 2000] [--kind synthetic] [--full-prompts] [--dir /tmp/rollscope-import-jsonl]
                                 [--into rs-100k.db --start 2000000] [--workers 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine import export, import_path  # noqa: E402
from engine.checks.fanout import Fanout, default_workers  # noqa: E402
from engine.formats import jsonl  # noqa: E402
from engine.records.episode import Episode  # noqa: E402
from engine.store import Store  # noqa: E402
from engine.store.packing import pack_episode  # noqa: E402
from tests.synthetic import rendered_retail_episode, synthetic_episodes  # noqa: E402


def episodes(kind: str, n: int, start: int = 0) -> Iterator[Episode]:
    if kind == "synthetic":
        yield from synthetic_episodes(n, start=start)
    elif kind == "math":
        from engine.backends.scripted import ScriptedBackend
        from engine.backends.tokenizers import load_tokenizer
        from engine.envs.math import MathEnv
        from engine.loop.stepper import run_episode
        from engine.presets import PRESETS

        tok, env = load_tokenizer(None), MathEnv()
        cfg = PRESETS["areal-math"].with_(token_mode="retokenize")
        for i in range(n):
            be = ScriptedBackend(env.reference_reply, tok, mistake_rate=0.5, seed=i)
            yield asyncio.run(run_episode(env, be, tok, cfg, env.tasks[i % len(env.tasks)], preset="areal-math"))
    elif kind == "retail-loop":
        from engine.backends.scripted import ScriptedBackend
        from engine.backends.tokenizers import load_tokenizer
        from engine.envs.retail import RetailEnv
        from engine.loop.stepper import run_episode
        from engine.presets import PRESETS

        tok, retail = load_tokenizer(None), RetailEnv()
        for i in range(n):
            be = ScriptedBackend(retail.reference_reply, tok, mistake_rate=0.3, seed=i)
            yield asyncio.run(run_episode(retail, be, tok, PRESETS["slime-tau"], retail.tasks[i % len(retail.tasks)],
                                          preset="slime-tau"))
    else:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(os.environ.get("ROLLSCOPE_QWEN3_TOKENIZER", ".cache/tokenizers/qwen3"))
        for i in range(n):
            yield rendered_retail_episode(tok, seed=i)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=2000)
    ap.add_argument("--kind", choices=("synthetic", "math", "retail-loop", "retail"), default="synthetic")
    ap.add_argument("--full-prompts", action="store_true", help="write every prompt text whole")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "rollscope-import-jsonl")
    ap.add_argument("--into", type=Path, help="import into a copy of this database")
    ap.add_argument("--start", type=int, default=0, help="the first synthetic episode's number")
    ap.add_argument("--workers", type=int, default=default_workers(),
                    help="processes that read the file (as `rollscope import --workers`; default: one per CPU); the "
                         "import in one process is timed too")
    ap.add_argument("--stages", type=int, default=500, help="episodes each stage is timed on (0: none)")
    a = ap.parse_args()
    a.dir.mkdir(parents=True, exist_ok=True)
    src = a.dir / f"{a.kind}-{a.episodes}{f'-from{a.start}' if a.start else ''}{'-full' if a.full_prompts else ''}.jsonl"
    if not src.exists():
        export(episodes(a.kind, a.episodes, a.start), "jsonl", src, full_prompts=a.full_prompts)
    start = time.perf_counter()
    with open(src, "rb") as f:
        n = sum(1 for line in f if json.loads(line))
    parse = time.perf_counter() - start
    size = src.stat().st_size
    print(f"{src}: {n:,} episodes, {size / n / 1e3:.1f} KB an episode")
    print(f"   json.loads alone: {parse:.2f} s, {n / parse:,.0f} episodes a second")
    for workers in sorted({1, a.workers}):
        took, stored, db_bytes, before = import_once(src, a.dir, a.into, workers)
        if before:
            print(f"   into a copy of {a.into} ({before:,} episodes)")
        how = "import, 1 process:" if workers == 1 else f"import, {workers} workers:"
        print(f"   {how:<20}{took:.2f} s, {stored / took:,.0f} episodes a second ({took / parse:.1f}x json.loads); "
              f"{db_bytes / stored / 1e3:.1f} KB an episode in the database")
    if a.stages:
        print(f"   where the time goes, seconds a 1,000 episodes (best of 5 on the first {a.stages:,}):")
        figures = stages(src, a.dir, a.stages)
        for name, took in figures.items():
            print(f"   {name:<20}{took:.3f} s ({took / figures['json.loads']:.1f}x json.loads)")


def _best(fn: Callable[[], object], repeat: int = 5) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def stages(src: Path, folder: Path, n: int) -> dict[str, float]:
    """Seconds a 1,000 episodes of each stage of an import, on the first ``n`` lines of ``src``: ``json.loads``
    alone; reading the records into episodes (as an import does: ``formats.jsonl``); packing them into their rows
    (``store.packing.pack_episode``); writing those rows into a fresh database (``Store.save_batches``)."""
    with open(src, "rb") as f:
        lines = [line for _, line in zip(range(n), f)]
    episodes = [ep for i, line in enumerate(lines) if (ep := jsonl.read_line(line, f"{src}:{i + 1}")) is not None]
    packed = [pack_episode(ep, os.getpid()) for ep in episodes]

    def write() -> None:
        with tempfile.TemporaryDirectory(dir=folder) as tmp:
            store = Store(Path(tmp) / "stages.db")
            for _ in store.save_batches(packed):
                pass
            store.close()

    per = 1000 / len(lines)
    return {
        "json.loads": per * _best(lambda: [json.loads(line) for line in lines]),
        "read": per * _best(lambda: [jsonl.read_line(line, "") for line in lines]),
        "pack": per * _best(lambda: [pack_episode(ep, os.getpid()) for ep in episodes]),
        "write": per * _best(write),
    }


def import_once(src: Path, folder: Path, into: Path | None, workers: int) -> tuple[float, int, int, int]:
    """Seconds, episodes stored, bytes the database grew by, and episodes it held before, of one import of ``src``
    into a fresh database (or a copy of ``into``) with ``workers`` processes reading the file."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        if into is not None:
            shutil.copy(into, Path(tmp) / "import.db")
        store = Store(Path(tmp) / "import.db")
        before = store.count()
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        os.sync()  # the copy's pages on disk before the clock starts, not written back during the import
        bytes_before = sum(p.stat().st_size for p in Path(tmp).glob("import.db*"))
        start = time.perf_counter()
        with Fanout(workers) as pool:
            import_path(src, "jsonl", store, fanout=pool)
        took = time.perf_counter() - start
        stored = store.count() - before
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db_bytes = sum(p.stat().st_size for p in Path(tmp).glob("import.db*")) - bytes_before
        store.close()
    return took, stored, db_bytes, before

if __name__ == "__main__":
    main()
