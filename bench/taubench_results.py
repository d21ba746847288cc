"""Import and re-execution speed for 1,000 tau-bench trajectories.

Writes a tau-bench results file (the shape ``run.py`` writes) of 1,000
trajectories over the three tasks of the ``tau_bench`` package in
``tests/fake_taubench`` (Sierra's package is used instead when it is
installed), imports it into a fresh database (no tokenizer: messages only),
and re-executes every episode with its user replayed from the record.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
try:
    import tau_bench  # noqa: F401
except ImportError:
    sys.path.insert(0, str(ROOT / "tests" / "fake_taubench"))

from engine import Store, formats  # noqa: E402
from engine.loop.replay import replay_stored  # noqa: E402

N = 1000
WIKI = "# Fake retail policy\nAuthenticate the user before acting. Confirm before cancelling."


def _call(cid: str, name: str, args: dict) -> dict:
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


def trajectory(i: int) -> dict:
    """Task 2 (look at a delivered order, which cannot be cancelled), the user in words of its own."""
    traj = [
        {"role": "system", "content": WIKI},
        {"role": "user", "content": f"Hello, this is Ana Ito, zip 10001 (conversation {i})."},
        {"role": "assistant", "content": None,
         "tool_calls": [_call("c1", "find_user_id_by_name_zip", {"name": "Ana Ito", "zip": "10001"})]},
        {"role": "tool", "tool_call_id": "c1", "name": "find_user_id_by_name_zip", "content": "ana_1"},
        {"role": "assistant", "content": None, "tool_calls": [_call("c2", "get_order_details", {"order_id": "#A2"})]},
        {"role": "tool", "tool_call_id": "c2", "name": "get_order_details",
         "content": json.dumps({"status": "delivered", "total": 12.0})},
        {"role": "assistant", "content": "Order #A2 was delivered, so it cannot be cancelled. Anything else?"},
        {"role": "user", "content": "No, that's all. ###STOP###"},
    ]
    return {"task_id": 2, "reward": 1.0, "info": {"n": i}, "traj": traj, "trial": i}


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "results.json"
        path.write_text(json.dumps([trajectory(i) for i in range(N)]), encoding="utf-8")
        store = Store(Path(tmp) / "x.db")
        t0 = time.perf_counter()
        report = formats.import_path(path, "taubench", store)
        t_import = time.perf_counter() - t0
        episodes = list(store.iter_episodes())
        t0 = time.perf_counter()
        kinds: dict[str, int] = {}

        async def replay_all() -> None:
            for ep in episodes:
                res = await replay_stored(ep)
                kinds[res.kind] = kinds.get(res.kind, 0) + 1

        asyncio.run(replay_all())
        t_replay = time.perf_counter() - t0
        print(f"import: {report.new} trajectories ({path.stat().st_size / 1e6:.1f} MB) in {t_import:.2f}s "
              f"= {report.new / t_import:,.0f}/s")
        print(f"replay with the recorded user: {len(episodes)} in {t_replay:.2f}s = {len(episodes) / t_replay:,.0f}/s "
              f"({', '.join(f'{k} {v}' for k, v in sorted(kinds.items()))})")
        store.close()


if __name__ == "__main__":
    main()
