"""The Runs tab in a real browser: watch a folder of slime dumps as they are written, see the run grow
step by step, and Browse show the new episodes, all without reloading the page.

The watch writes to its database, so this module has its own database, dump folder and server (with
quick watches: a look every second, files settled after half a second).
"""

from __future__ import annotations

import sys
import threading
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from engine.store import EpisodeFilter, Store
from tests.browser.conftest import _free_port
from tests.fixtures_formats import synthetic_slime_samples, write_slime_dump

N = 8


@dataclass(frozen=True)
class RunsSite:
    url: str
    db: Path
    folder: Path
    watches: Any


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunsSite]:
    """An empty database, a dump folder holding rollout 0, and the app serving the database."""
    from dashboard.app import build_app
    from dashboard.background.watching import WatchManager

    root = tmp_path_factory.mktemp("runs-ui")
    folder = root / "rollouts"
    write_slime_dump(folder / "0.pt", synthetic_slime_samples(N, 600, seed=0), 0)
    Store(root / "rollscope.db").close()
    watches = WatchManager(interval=1.0, settle=0.5)
    demo = build_app(str(root / "rollscope.db"), watches)
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    try:
        yield RunsSite(f"http://127.0.0.1:{port}", root / "rollscope.db", folder, watches)
    finally:
        watches.stop_all()
        demo.close()


def _tab(page: Any, name: str) -> None:
    page.locator(f"#rs-tab-{name}-button").click()
    page.wait_for_function(
        f"() => document.querySelector('#rs-tab-{name}-button')?.getAttribute('aria-selected') === 'true'")


def _fill(page: Any, elem_id: str, value: str) -> None:
    page.locator(f"#{elem_id} textarea, #{elem_id} input").first.fill(value)


def _browse_info(page: Any, text: str) -> None:
    page.locator("#rs-browse-info", has_text=text).wait_for()


def _why_not_stopped(site: RunsSite, shown: str) -> str:
    """What the watch was doing when the page did not say it stopped: its state and error, and where its thread was."""
    job = site.watches.latest()
    if job is None:
        return f"no watch; the page says {shown!r}"
    status = job.status()
    frame = sys._current_frames().get(job._thread.ident or -1)
    where = "".join(traceback.format_stack(frame)) if frame is not None else "its thread has ended"
    return (f"the page says {shown!r}; the watch is {status.state!r} (error: {status.error!r}, {status.looks} looks, "
            f"{status.new} new); its thread:\n{where}\nthe server's threads in Rollscope's code:\n{_our_threads()}")


def _watch_shows(page: Any, site: RunsSite, state: str) -> None:
    """Wait for the watch status to show ``state``; else fail saying what the page and the server were doing."""
    try:
        page.locator(f"#rs-watch-status [data-state={state}]").wait_for()
    except PlaywrightTimeout:
        said = page.locator("#rs-watch-message").inner_text()
        raise AssertionError(f"the page said {said!r}; " + _why_not_stopped(
            site, page.locator("#rs-watch-status").inner_text())) from None


def _our_threads() -> str:
    """Where each thread of this process that is in Rollscope's code stands (a lock it waits on shows here)."""
    names = {t.ident: t.name for t in threading.enumerate()}
    out = []
    for ident, frame in sys._current_frames().items():
        stack = traceback.extract_stack(frame)
        if ident != threading.get_ident() and any(("/engine/" in f.filename or "/dashboard/" in f.filename)
                                                  for f in stack):
            out.append(f"-- {names.get(ident, ident)}:\n" + "".join(traceback.format_list(stack[-10:])))
    return "\n".join(out) or "(none)"


def _second_dump() -> list[dict[str, Any]]:
    """Rollout 1 went wrong: 6 of its 8 loss masks are longer than the response (mask_misaligned)."""
    samples = synthetic_slime_samples(N, 600, seed=1)
    for s in samples[:6]:
        s["loss_mask"] = s["loss_mask"] + [1] * 10
    return samples


@pytest.mark.browser
def test_watch_a_run_see_it_grow_and_browse_a_step(page: Any, site: RunsSite, screenshots: Path) -> None:
    page.goto(site.url + "/")
    _browse_info(page, "No episodes in")
    page.evaluate("() => { window.__sameDocument = true; }")  # gone if anything reloads the page
    _tab(page, "runs")

    # A wrong folder is a sentence, and nothing starts.
    _fill(page, "rs-watch-folder", str(site.folder / "missing"))
    page.locator("#rs-watch-start").click()
    page.locator("#rs-watch-message .rs-error", has_text="is not a folder on this server").wait_for()

    _fill(page, "rs-watch-folder", str(site.folder))
    _fill(page, "rs-watch-run", "demo-run")
    page.locator("#rs-watch-start").click()
    page.locator("#rs-watch-message", has_text="Watching").wait_for()
    status = page.locator("#rs-watch-status")
    status.locator("[data-state=watching]").wait_for()
    status.locator(".rs-ev", has_text="0.pt: read: 8 new").wait_for()
    page.locator('#rs-run-steps tr[data-step="0"]').wait_for()
    page.locator("#rs-run-chart .js-plotly-plot").wait_for()
    page.locator("#rs-run-alerts", has_text="One rollout step so far").wait_for()  # a change needs two steps

    # Browse shows the first 8 episodes on its own.
    _tab(page, "browse")
    _browse_info(page, f"Episodes 1–{N} of {N} matching")

    # The trainer writes rollout 1: the run view grows a step and marks it, Browse shows 16 episodes.
    _tab(page, "runs")
    write_slime_dump(site.folder / "1.pt", _second_dump(), 1)
    status.locator(".rs-ev", has_text="1.pt: read: 8 new").wait_for()
    page.locator('#rs-run-steps tr[data-step="1"].rs-step-alert').wait_for()
    page.locator("#rs-run-alerts", has_text="The data changed at step 1").wait_for()
    assert "root errors 0% → 75% (mask_misaligned)" in page.locator("#rs-run-alerts").inner_text()
    assert page.locator("#rs-run-select input").input_value().startswith("demo-run · steps 0–1 · 16 episodes")
    # The run is listed with every other run, what it ran and how many episodes have a root error.
    page.locator('#rs-runs-all tr[data-run="demo-run"]', has_text="16").wait_for()
    page.screenshot(path=str(screenshots / "runs_watch.png"), full_page=True)
    _tab(page, "browse")
    _browse_info(page, f"Episodes 1–{2 * N} of {2 * N} matching")

    # A step of the table opens its episodes in Browse: that run and step, nothing else.
    _tab(page, "runs")
    page.locator('#rs-run-steps tr[data-step="1"]').click()
    page.wait_for_function(
        "() => document.querySelector('#rs-tab-browse-button')?.getAttribute('aria-selected') === 'true'")
    _browse_info(page, f"Episodes 1–{N} of {N} matching")
    assert page.locator("#rs-filter-step input").input_value() == "1"
    assert page.locator("#rs-filter-run input").input_value() == "demo-run"
    steps = page.locator("#rs-episode-table tbody td.c-step").all_inner_texts()
    assert steps == ["1"] * N
    store = Store(site.db)
    assert store.count(EpisodeFilter(run_id="demo-run", rollout_step=1)) == N
    store.close()
    page.screenshot(path=str(screenshots / "runs_step_in_browse.png"))

    # Stop: the watch ends and says what it stored.
    _tab(page, "runs")
    page.locator("#rs-watch-stop").click()
    try:
        status.locator("[data-state=stopped]").wait_for()
    except PlaywrightTimeout:
        raise AssertionError(_why_not_stopped(site, status.inner_text())) from None
    assert "Stopped. 16 new episodes" in status.inner_text()
    assert page.evaluate("() => window.__sameDocument") is True
    assert not page.errors


@pytest.mark.browser
def test_a_reloaded_page_finds_the_watch_and_browse_refreshes_in_place(page: Any, site: RunsSite) -> None:
    folder = site.folder.parent / "second-run"
    folder.mkdir()
    page.goto(site.url + "/")
    _tab(page, "runs")
    _fill(page, "rs-watch-folder", str(folder))
    page.locator("#rs-watch-start").click()
    _watch_shows(page, site, "watching")
    page.reload()
    _tab(page, "runs")
    page.locator("#rs-watch-status [data-state=watching]", has_text=str(folder)).wait_for()
    write_slime_dump(folder / "0.pt", synthetic_slime_samples(40, 600, seed=2), 0)
    total = 2 * N + 40

    # Oldest first, on page 2, with a row opened and back: new episodes leave all of that as it was.
    _tab(page, "browse")
    _browse_info(page, f"of {total} matching")
    page.locator("#rs-episode-table th[data-sort=created_at]").click()
    _browse_info(page, "sorted by created_at ▲")
    page.locator("#rs-next").click()
    _browse_info(page, f"Episodes 51–{total} of {total} matching · page 2 of 2")
    opened = page.locator("#rs-episode-table tr[data-id]").first
    opened_id = opened.get_attribute("data-id")
    opened.locator("td.c-task").click()
    page.wait_for_function(
        "() => document.querySelector('#rs-tab-episode-button')?.getAttribute('aria-selected') === 'true'")
    _tab(page, "browse")
    page.evaluate("() => { window.__sameDocument = true; }")
    write_slime_dump(folder / "1.pt", synthetic_slime_samples(N, 600, seed=3), 1)
    _browse_info(page, f"Episodes 51–{total + N} of {total + N} matching · page 2 of 2")
    assert page.locator("#rs-page input").input_value() == "2"
    assert page.locator("#rs-episode-table tr.rs-selected").get_attribute("data-id") == opened_id
    assert "sorted by created_at ▲" in page.locator("#rs-browse-info").inner_text()

    _tab(page, "runs")
    page.locator("#rs-watch-stop").click()
    _watch_shows(page, site, "stopped")
    assert page.evaluate("() => window.__sameDocument") is True
    assert not page.errors
