"""Dashboard figures: the Episode view of long episodes, Browse at 100,000 episodes, the browser.

    python bench/dashboard_speed.py                      # all three
    python bench/dashboard_speed.py --episodes 100000 --db /tmp/rs-bench.db --no-browser
    python bench/dashboard_speed.py --no-browse          # the Episode view only (server and browser)

1. Server: time for ``episode.view`` (store read, header, findings, timeline,
   token view with real token texts, per-turn chart) on a 33,000-token,
   61-turn episode and a 128,000-token, 120-turn one whose system prompt
   holds 40 tool schemas; the first call and the median of the next ones,
   and the HTML each part sends.
2. Server: a database of ``--episodes`` synthetic episodes (built once and
   reused from ``--db``); time for Browse to filter by status and reward and
   produce the first page (count to a bound + page query + table HTML), and
   the same for a deep page (by offset, and by the token Next carries), the
   middle and the last page of everything (a typed page number: by offset,
   read from the nearer end), a sort, a text search, the exact count and the
   charts' aggregates.
3. Browser (Playwright + chromium): link to painted, median of 3: from
   loading ``/?episode=ID`` in a new tab to the frame that paints the
   episode's last token (the end of its last tool output) in the token
   view, scrolled to its end, on the page's own clock; and the same from
   clicking Open in a loaded page. A small episode alongside gives the
   app's own start-up time, which every link pays.
4. Browser, on the Browse database of 2.: from loading ``/`` in a new tab
   (the app's files cached) to the frame with Browse's first rows, the
   matching count, and the first chart; median of 3.
    python bench/dashboard_speed.py --episodes 1000000 --db /tmp/rs-1m.db --no-episode   # 2. and 4. alone
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
from engine.backends import tokenizers  # noqa: E402
from engine.backends.tokenizers import load_tokenizer  # noqa: E402
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


# The long episodes: the 33k-token, 61-turn episode and a 128k-token one with tool schemas to fold.
LONG = {"33k": {"n_tokens": 33_000, "n_turns": 61}, "128k": {"n_tokens": 128_000, "n_turns": 120, "tools": 40}}


def episode_view(workdir: Path, size: str) -> str:
    tok = load_tokenizer(None)
    ep = long_episode(tok, **LONG[size])
    store = Store(workdir / "long.db")
    store.save_episode(ep)
    tokenizers.try_tokenizer(None)  # loaded once per server, at start (app.launch warms it)
    first, median, out = timed(lambda: episode.view(store, ep.id), 3)
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
    print(f"\n2. Browse on {total:,} episodes (server side; bounded count + page query + table HTML)")
    first, median, (table, info, _) = timed(lambda: browse.page(store, flt, None, 1))
    matching = store.count(flt)
    print(f"   status=completed, reward>=0.5 ({matching:,} match), first page: first {ms(first)}, median {ms(median)}")

    def token(f: EpisodeFilter, page: int, by: str = "created_at") -> dict[str, str]:
        """The token of page ``page`` (1-based) of 50, as Next carries it from the page before."""
        after = store.page_episodes(f, by, True, 50, offset=(page - 2) * 50).after
        assert after is not None
        return {"after": after}

    at = max(2, min(300, matching // 50))  # page 300, or the filter's last where it has fewer
    deep, last = token(flt, at), token(EpisodeFilter(), total // 50)
    cases = {
        f"same filter, page {at} (offset)": lambda: browse.page(store, flt, None, at),
        f"same filter, page {at} (Next, keyset)": lambda: browse.page(store, flt, None, at, cursor=deep),
        "same filter, sorted by turns": lambda: browse.page(store, flt, {"by": "n_turns", "desc": True}, 1),
        "no filter, sorted by reward": lambda: browse.page(store, EpisodeFilter(), {"by": "reward", "desc": True}, 1),
        "no filter, middle page (offset)": lambda: browse.page(store, EpisodeFilter(), None, total // 100),
        "no filter, last page (offset)": lambda: browse.page(store, EpisodeFilter(), None, total // 50),
        "no filter, last page (Next, keyset)": lambda: browse.page(store, EpisodeFilter(), None, total // 50,
                                                                    cursor=last),
        "exact count after the page, filtered": lambda: store.count(flt),
        "text search (rare phrase)": lambda: browse.page(store, browse.episode_filter(text=needle(7007)), None, 1),
        "text search ('zebra', 2% of episodes)": lambda: browse.page(store, browse.episode_filter(text="zebra"), None, 1),
        "tag + has findings": lambda: browse.page(store, browse.episode_filter(tags=["bug"], findings="__any__"),
                                                  None, 1),
        "charts: aggregates, filtered": lambda: store.stats(flt),
        "charts: aggregates, everything": lambda: store.stats(EpisodeFilter()),
        "charts: figures from aggregates": lambda: charts.browse_figures(aggregates),
    }
    aggregates = store.stats(flt)  # read once: the figures alone are timed
    for name, fn in cases.items():
        first, median, _ = timed(fn, 3)
        print(f"   {name:40s} first {ms(first):>11s}, median {ms(median):>11s}")
    store.close()


PAINTED_JS = """(id) => {
    // The episode's last token (the end of its last tool output) on screen: the view scrolled to its end
    // and into the window, and the last block's last token inside both. Checked in a requestAnimationFrame
    // callback, so the frame that passes is the one that paints it; its time is kept on the window.
    const c = document.querySelector('#rs-episode-header .rs-id code');
    const view = document.querySelector('#rs-episode-tokens .rs-tokview');
    if (!c || c.textContent !== id || !view) return false;
    view.scrollIntoView({block: 'nearest'});
    view.scrollTop = view.scrollHeight;
    const blocks = view.querySelectorAll('.rs-tokens .rs-tblock');
    const toks = blocks.length ? blocks[blocks.length - 1].getElementsByClassName('tok') : [];
    const last = toks[toks.length - 1];
    if (!last) return false;
    const a = last.getBoundingClientRect(), b = view.getBoundingClientRect();
    const ok = a.height > 0 && a.top >= b.top - 1 && a.bottom <= b.bottom + 1 && a.bottom <= innerHeight + 1;
    if (ok) window.__rsPainted = performance.now();
    return ok;
}"""
# The time of Open's click, on the page's clock (a listener that runs before Gradio's).
CLICK_JS = """() => { window.__rsPainted = 0; document.querySelector('#rs-episode-open').addEventListener(
    'click', () => { window.__rsClicked = performance.now(); }, {capture: true, once: true}); }"""
SPANS_JS = "() => document.querySelectorAll('#rs-episode-tokens .rs-tokens .tok').length"


def browser_figure(workdir: Path, long_ids: dict[str, str], runs: int = 3) -> None:
    from playwright.sync_api import sync_playwright

    from dashboard.app import build_app
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, _free_port

    store = Store(workdir / "long.db")
    store.save_episodes(synthetic_episodes(20))
    small = store.get_episode("ep0000002")
    store.close()
    ids = {f"{small.n_tokens}": "ep0000002", **long_ids}
    demo = build_app(str(workdir / "long.db"))
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    url = f"http://127.0.0.1:{port}"
    link: dict[str, list[float]] = {size: [] for size in ids}
    opened: dict[str, list[float]] = {size: [] for size in ids}
    spans: dict[str, int] = {}
    html_mb: dict[str, float] = {}

    def painted(page: Any, episode_id: str) -> None:
        page.wait_for_function(PAINTED_JS, arg=episode_id, timeout=120_000, polling="raf")

    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            context = b.new_context(viewport={"width": 1440, "height": 900})
            page = context.new_page()
            page.goto(f"{url}/?episode=ep0000001")  # the app's files in the browser's cache, as for a second link
            painted(page, "ep0000001")
            page.close()
            for _ in range(runs):
                for size, episode_id in ids.items():
                    page = context.new_page()
                    page.goto(f"{url}/?episode={episode_id}")
                    painted(page, episode_id)
                    link[size].append(page.evaluate("() => window.__rsPainted") / 1000)  # from navigation start
                    spans[size] = page.evaluate(SPANS_JS)
                    html_mb[size] = page.evaluate(
                        "() => document.querySelector('#rs-episode-tokens').innerHTML.length") / 1e6
                    page.close()
            page = context.new_page()
            page.goto(f"{url}/?episode=ep0000001")
            painted(page, "ep0000001")
            box = page.locator("#rs-episode-id").locator("input, textarea").first
            for _ in range(runs):
                for size, episode_id in ids.items():
                    box.fill(episode_id)
                    page.evaluate(CLICK_JS)
                    page.locator("#rs-episode-open").click()
                    painted(page, episode_id)
                    opened[size].append(page.evaluate("() => window.__rsPainted - window.__rsClicked") / 1000)
            b.close()
    finally:
        demo.close()

    def row(size: str, times: list[float]) -> str:
        return f"   {size:>7} tokens: {', '.join(f'{t:.2f}' for t in times)} s; median {statistics.median(times):.2f} s"

    print(f"\n3. Browser (Playwright, chromium, headless, 1440x900), median of {runs}: until the frame that paints the")
    print("   episode's last token (the end of its last tool output) in the token view scrolled to its end")
    print("   a) link: a new tab loads /?episode=ID (the app's files cached); seconds from navigation start.")
    print("      The small episode's time is the app's own start (Gradio's scripts, first render, load events).")
    for size, times in link.items():
        print(row(size, times) + f"; {spans[size]:,} token spans drawn, {html_mb[size]:.2f} MB of token view")
    print("   b) Open in the Episode tab of a loaded page: seconds from the click")
    for size, times in opened.items():
        print(row(size, times))


SEEN_JS = """window.__rsSeen = {}; new MutationObserver(() => {
    const seen = window.__rsSeen, now = performance.now();
    if (!seen.rows && document.querySelector('#rs-episode-table tr[data-id]')) seen.rows = now;
    const info = document.querySelector('#rs-browse-info');
    if (!seen.count && info && /matching/.test(info.textContent) && !/counting/.test(info.textContent)) seen.count = now;
    if (!seen.chart && document.querySelector('#rs-chart-0 .js-plotly-plot')) seen.chart = now;
}).observe(document, {subtree: true, childList: true, characterData: true});"""


def browse_load_figure(db: Path, runs: int = 3) -> None:
    """Seconds from navigation start to Browse's first rows, its exact count and its first chart, in Chromium."""
    from playwright.sync_api import sync_playwright

    from dashboard.app import build_app
    from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, _free_port

    store = Store(db)
    total = store.count()
    store.close()
    demo = build_app(str(db))
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    url = f"http://127.0.0.1:{port}/"
    seen: dict[str, list[float]] = {"rows": [], "count": [], "chart": []}
    try:
        with sync_playwright() as p:
            b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
            context = b.new_context(viewport={"width": 1440, "height": 900})
            context.add_init_script(SEEN_JS)
            warm = context.new_page()  # the app's files in the browser's cache
            warm.goto(url)
            warm.wait_for_function("() => window.__rsSeen.rows && window.__rsSeen.chart", timeout=300_000)
            warm.close()
            for _ in range(runs):
                page = context.new_page()
                page.goto(url)
                page.wait_for_function("() => window.__rsSeen.rows && window.__rsSeen.count && window.__rsSeen.chart",
                                       timeout=300_000, polling="raf")
                got = page.evaluate("() => window.__rsSeen")
                for k in seen:
                    seen[k].append(got[k] / 1000)
                page.close()
            b.close()
    finally:
        demo.close()
    print(f"\n4. Browser (Playwright, chromium, headless, 1440x900): Browse on {total:,} episodes, a new tab loading /")
    print("   (the app's files cached); seconds from navigation start, each run, then the median")
    for k, what in (("rows", "first rows on screen"), ("count", "exact count shown"), ("chart", "first chart drawn")):
        print(f"   {what:22s} {', '.join(f'{t:.2f}' for t in seen[k])} s; median {statistics.median(seen[k]):.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--episodes", type=int, default=100_000)
    ap.add_argument("--db", type=Path, default=Path(tempfile.gettempdir()) / "rollscope-bench-100k.db")
    ap.add_argument("--no-browser", action="store_true")
    ap.add_argument("--no-browse", action="store_true", help="leave out the Browse figures (and their database)")
    ap.add_argument("--no-episode", action="store_true", help="leave out the long episodes' figures (1. and 3.)")
    a = ap.parse_args()
    print(f"cpus {os.cpu_count()}, load average {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory() as tmp:
        long_ids = {} if a.no_episode else {size: episode_view(Path(tmp), size) for size in LONG}
        if not a.no_browse:
            browse_figures(a.db, a.episodes)
        if not a.no_browser:
            if not a.no_episode:
                browser_figure(Path(tmp), long_ids)
            if not a.no_browse:
                browse_load_figure(a.db)


if __name__ == "__main__":
    main()
