"""What opening an episode in the Episode tab sends to the browser, and the server's peak memory doing it.

Usage: python bench/display_limits.py [--message-mb 50] [--tokens 1000000] [--code ROOT] [--dir TMP]

Two databases are built in a temporary folder (by this checkout):

- ``normal``: a 32,000-token, 60-turn tool-use episode with real token ids (``tests.synthetic.long_episode``);
- ``hostile``: a six-turn episode whose first tool answer holds ``--message-mb`` MB of text and ``--tokens``
  tokens (``tests.synthetic.huge_episode``).

Each is opened in a child process the way the server opens it: ``dashboard.tabs.episode.view`` (header,
findings, timeline, token view, chart) and the playback panel's first card and re-executions
(``Episodes.get``, ``turn_card`` at the last turn). The child prints the HTML bytes each part sends (UTF-8,
as Gradio's JSON carries them), and its peak RSS (``ru_maxrss``) before opening (Gradio, the dashboard and
the tokenizer loaded) and its peak while opening (``VmHWM``, reset through ``/proc/self/clear_refs``); the
JSON Gradio would send (the texts encoded as in its answer) is made too, and counted in the peak. ``--code`` opens with another checkout's dashboard (an earlier commit
unpacked with ``git archive``) for a before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
from engine import Store, try_tokenizer
from dashboard.tabs import episode, playback
def status(key):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) / 1024 for line in f if line.startswith(key))
db, episode_id = sys.argv[1], sys.argv[2]
try_tokenizer(None)  # a server loads it at start
store = Store(db)
before = status("VmRSS:")
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # the peak (VmHWM) starts again from here
t0 = time.perf_counter()
out = episode.view(store, episode_id)
out_parts = [out[k] for k in ("header", "findings", "conversation", "tokens")]
sizes = {k: len(out[k].encode()) for k in ("header", "findings", "conversation", "tokens")}
loaded = playback.Episodes(store).get(episode_id, refresh=True)
card = playback.turn_card(loaded, loaded.ep.n_turns - 1, follow=False)
sizes["card"] = len(card.encode())
sizes["replays"] = len(playback.views.render_replays(store.replays(episode_id)).encode())
seconds = time.perf_counter() - t0
sizes["wire"] = len(json.dumps([card, *out_parts]).encode())
after = status("VmHWM:")
print(json.dumps({"sizes": sizes, "before": before, "after": after, "seconds": seconds}))
"""


def build(workdir: Path, message_mb: int, n_tokens: int) -> dict[str, tuple[Path, str, str]]:
    """The two databases: name -> (path, episode id, what it holds)."""
    from engine.backends.tokenizers import load_tokenizer
    from engine.store import Store
    from tests.synthetic import huge_episode, long_episode

    made = {}
    for name, make, what in (
        ("normal", lambda: long_episode(load_tokenizer(None), n_tokens=32_000, n_turns=60),
         "32,000 tokens, 60 turns"),
        ("hostile", lambda: huge_episode(message_mb * 1_000_000, n_tokens),
         f"a {message_mb} MB message, {n_tokens:,} tokens"),
    ):
        ep = make()
        store = Store(workdir / f"{name}.db")
        store.save_episode(ep)
        store.close()
        made[name] = (workdir / f"{name}.db", ep.id, what)
        del ep
    return made


def measure(code: Path, db: Path, episode_id: str) -> dict[str, object]:
    env = {**os.environ, "PYTHONPATH": str(code), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "GRADIO_ANALYTICS_ENABLED": "False"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(db), episode_id], cwd=code, env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        return {"error": (done.stderr.strip().splitlines() or ["?"])[-1][:200]}
    result: dict[str, object] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--message-mb", type=int, default=50)
    ap.add_argument("--tokens", type=int, default=1_000_000)
    ap.add_argument("--code", type=Path, default=ROOT, help="the checkout whose dashboard is measured")
    ap.add_argument("--dir", help="where the temporary folder goes")
    a = ap.parse_args()
    code = a.code.resolve()
    with tempfile.TemporaryDirectory(dir=a.dir) as tmp:
        made = build(Path(tmp), a.message_mb, a.tokens)
        print(f"dashboard: {code}")
        for name, (db, episode_id, what) in made.items():
            r = measure(code, db, episode_id)
            if "error" in r:
                print(f"{name:8} ({what}): failed: {r['error']}")
                continue
            sizes = r["sizes"]
            assert isinstance(sizes, dict)
            wire = sizes.pop("wire")
            parts = " · ".join(f"{k} {v / 1e6:.2f}" for k, v in sizes.items())
            print(f"{name:8} ({what}):\n  HTML sent {sum(sizes.values()) / 1e6:.2f} MB ({parts}; as JSON "
                  f"{wire / 1e6:.2f} MB)\n  peak RSS {r['after']:.0f} MB, {r['after'] - r['before']:.0f} MB over "
                  f"the {r['before']:.0f} MB before opening; {r['seconds']:.1f} s")


if __name__ == "__main__":
    main()
