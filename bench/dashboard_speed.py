"""Dashboard figures: Episode view of a 32,000-token episode, Browse at 100,000 episodes, the browser.

    python bench/dashboard_speed.py                      # all three
    python bench/dashboard_speed.py --episodes 100000 --db /tmp/rs-bench.db --no-browser

1. Server: time for ``episode.view`` (store read, header, findings, timeline,
   token view with real token texts, per-turn chart) on a 32,000-token,
   60-turn episode; the first call and the median of the next ones.
2. Server: a database of ``--episodes`` synthetic episodes (built once and
   reused from ``--db``); time for Browse to filter by status and reward and
   produce the first page (count + page query + table HTML), and the same
   for a deep page, a sort, a text search and the charts' aggregates.
3. Browser (Playwright + chromium): time from clicking Open to the token
   view of the long episode being shown.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from dashboard.tabs import browse, episode  # noqa: E402
from dashboard.views import charts  # noqa: E402
from dashboard.views import episode as episode_html  # noqa: E402
from dashboard.views.tokens import token_view  # noqa: E402
from engine import tokenizers  # noqa: E402
from engine.factory import load_tokenizer  # noqa: E402
from engine.store import EpisodeFilter, Store  # noqa: E402
from tests.synthetic import long_episode, needle, synthetic_episodes  # noqa: E402


def timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, float, Any]:
    """(first call, median of the next ``repeat``) in seconds, and the last result."""
    start = time.perf_counter()
    out = fn()
    first = time.perf_counter() - start
    runs = []
    for _ in range(repeat):
        start = time.perf_counter()
        out = fn()
        runs.append(time.perf_counter() - start)
    return first, statistics.median(runs), out


def ms(s: float) -> str:
    return f"{s * 1000:,.1f} ms"


def episode_view(workdir: Path) -> str:
    tok = load_tokenizer(None)
    ep = long_episode(tok, n_tokens=32_000, n_turns=60)
    store = Store(workdir / "long.db")
    store.save_episode(ep)
    tokenizers.get(None)  # loaded once per server, at start (app.launch warms it)
    first, median, out = timed(lambda: episode.view(store, ep.id))
    sizes = {name: len(out[key]) for name, key in (("header", "header"), ("findings", "findings"),
                                                   ("timeline", "conversation"), ("tokens", "tokens"))}
    loaded = store.get_episode(ep.id)
    parts = {
        "store read": lambda: store.get_episode(ep.id),
        "header": lambda: episode_html.render_header(loaded),
        "findings": lambda: episode_html.render_findings(loaded),
        "timeline": lambda: episode_html.render_conversation(loaded),
        "token texts + view": lambda: token_view(loaded),
        "per-turn chart": lambda: charts.turn_chart(loaded).to_json(),
    }
    print(f"\n1. Episode view, server side: {ep.n_tokens:,} tokens, {ep.n_turns} turns, "
          f"{len(ep.all_findings())} findings")
    print(f"   episode.view(): first {ms(first)}, then median {ms(median)}")
    for name, fn in parts.items():
        print(f"     {name:20s} {ms(timed(fn, 3)[1])}")
    print("   HTML sent: " + ", ".join(f"{k} {v / 1e6:.2f} MB" for k, v in sizes.items()))
    store.close()
    return ep.id


def browse_figures(db: Path, n: int) -> None:
    store = Store(db)
    have = store.count()
    if have < n:
        print(f"\n2. Building {n - have:,} synthetic episodes in {db} (once; reused next time)…", flush=True)
        start = time.perf_counter()
        store.save_episodes(synthetic_episodes(n - have, start=have, system_chars=1500, tokens_per_turn=48))
        print(f"   built in {time.perf_counter() - start:.0f} s, {db.stat().st_size / 1e9:.2f} GB")
        store.close()
        store = Store(db)  # fresh planner statistics, as a dashboard started on it would have
    total = store.count()
    flt = browse.episode_filter(status=["completed"], reward_min="0.5")
    print(f"\n2. Browse on {total:,} episodes (server side; count + page query + table HTML)")
    first, median, (table, info, _) = timed(lambda: browse.page(store, flt, None, 1))
    matching = store.count(flt)
    print(f"   status=completed, reward>=0.5 ({matching:,} match), first page: first {ms(first)}, median {ms(median)}")
    cases = {
        "same filter, page 300": lambda: browse.page(store, flt, None, 300),
        "same filter, sorted by turns": lambda: browse.page(store, flt, {"by": "n_turns", "desc": True}, 1),
        "no filter, sorted by reward": lambda: browse.page(store, EpisodeFilter(), {"by": "reward", "desc": True}, 1),
        "no filter, last page": lambda: browse.page(store, EpisodeFilter(), None, total // 50),
        "text search (rare phrase)": lambda: browse.page(store, browse.episode_filter(text=needle(7007)), None, 1),
        "text search ('zebra', 2% of episodes)": lambda: browse.page(store, browse.episode_filter(text="zebra"), None, 1),
        "tag + has findings": lambda: browse.page(store, browse.episode_filter(tags=["bug"], findings="__any__"),
                                                  None, 1),
        "charts: aggregates, filtered": lambda: store.stats(flt),
        "charts: aggregates, everything": lambda: store.stats(EpisodeFilter()),
        "charts: figures from aggregates": lambda: charts.browse_figures(store.stats(flt)),
    }
    for name, fn in cases.items():
        first, median, _ = timed(fn, 3)
        print(f"   {name:40s} first {ms(first):>11s}, median {ms(median):>11s}")
    store.close()


def browser_figure(workdir: Path, long_id: str) -> None:
    from playwright.sync_api import sync_playwright

    from dashboard.app import build_app
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, _free_port

    store = Store(workdir / "long.db")
    store.save_episodes(synthetic_episodes(20))
    store.close()
    demo = build_app(str(workdir / "long.db"))
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    url = f"http://127.0.0.1:{port}"
    wait_js = """(id) => { const c = document.querySelector('#rs-episode-header .rs-id code');
        return c && c.textContent === id && document.querySelectorAll('#rs-episode-tokens .rs-tokens .tok').length > 0; }"""
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            page = b.new_page(viewport={"width": 1440, "height": 900})
            page.goto(f"{url}/?episode=ep0000001")
            page.wait_for_function(wait_js, arg="ep0000001", timeout=60_000)
            box = page.locator("#rs-episode-id").locator("input, textarea").first
            runs = []
            for target in [long_id, "ep0000002"] * 3:
                box.fill(target)
                start = time.perf_counter()
                page.locator("#rs-episode-open").click()
                page.wait_for_function(wait_js, arg=target, timeout=60_000)
                page.evaluate("() => new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)))")
                if target == long_id:
                    runs.append(time.perf_counter() - start)
            b.close()
    finally:
        demo.close()
    print("\n3. Browser (Playwright, chromium, headless): click Open -> 32,000-token view painted")
    print(f"   runs: {', '.join(f'{r:.2f} s' for r in runs)}; median {statistics.median(runs):.2f} s "
          "(includes the server's view, the transfer and Gradio's update)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--db", type=Path, default=Path(tempfile.gettempdir()) / "rollscope-bench-100k.db")
    ap.add_argument("--no-browser", action="store_true")
    a = ap.parse_args()
    print(f"cpus {os.cpu_count()}, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        long_id = episode_view(Path(tmp))
        browse_figures(a.db, a.episodes)
        if not a.no_browser:
            browser_figure(Path(tmp), long_id)


if __name__ == "__main__":
    main()
