"""Fixtures for driving the real dashboard with Debian's chromium through Playwright.

One database, one server and one browser per session: starting chromium and
loading the tokenizer are the slow parts, and every test only reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
from collections.abc import Coroutine, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.backends.tokenizers import load_tokenizer
from engine.envs import env_factory
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Episode
from engine.store import Store
from tests.conftest import SCREENSHOTS
from tests.fakes import FixedReplyBackend

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--no-first-run",
]
HOSTILE = '<img src=x onerror="window.__xss=1"> and <script>window.__xss=2</script>'


@dataclass(frozen=True)
class DashboardDb:
    path: Path
    episode_ids: tuple[str, ...]
    hostile_id: str
    hostile_text: str = HOSTILE


def _run_sync(coro: Coroutine[Any, Any, Episode]) -> Episode:
    # Playwright's sync API keeps an asyncio loop running in this thread once
    # the browser is up, and asyncio.run refuses to nest; a worker thread has
    # no loop of its own, whichever fixture starts first.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


@pytest.fixture(scope="session")
def dashboard_db(tmp_path_factory: pytest.TempPathFactory) -> DashboardDb:
    """A real database with three scripted math episodes and one hostile one."""
    path = tmp_path_factory.mktemp("dash") / "rollscope.db"
    tok = load_tokenizer(None)
    make_env = env_factory("math")
    store = Store(path)
    ids: list[str] = []
    for i in range(3):
        env = make_env()
        backend = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=0.5, seed=i, tokenizer_name="smollm2")
        ep = _run_sync(run_episode(env, backend, tok, PRESETS["areal-math"], env.tasks[i],
                                   preset="areal-math", tokenizer_name="smollm2"))
        store.save_episode(ep)
        ids.append(ep.id)
    env = make_env()
    ep = _run_sync(run_episode(env, FixedReplyBackend(tok, HOSTILE), tok, PRESETS["tito"].with_(max_turns=2),
                               env.tasks[0], preset="tito", tokenizer_name="smollm2"))
    store.save_episode(ep)
    store.close()
    return DashboardDb(path, tuple(ids), ep.id)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def dashboard_url(dashboard_db: DashboardDb) -> Iterator[str]:
    """The base URL of the real app, served from a background thread."""
    with serve(dashboard_db.path) as url:
        yield url


@contextlib.contextmanager
def serve(db: Path) -> Iterator[str]:
    """The real app over ``db``, served from a background thread while the block runs: its base URL."""
    from dashboard.app import build_app

    demo = build_app(str(db))
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        demo.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Module scope: Playwright's sync API keeps an event loop running in this
    # thread while it lives, and tests after these call asyncio.run.
    if not os.path.exists(CHROMIUM):
        pytest.fail(f"{CHROMIUM} is not installed; run `make test-deps` (scripts/install-chromium.sh)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture(scope="session")
def screenshots() -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)  # emptied when the run starts (tests/conftest.py)
    return SCREENSHOTS


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    """A fresh laptop-sized page; console errors are collected on ``page.errors``."""
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    pg = context.new_page()
    # Generous: two test processes share two cores, and a page waits on background polls (watch, charts).
    pg.set_default_timeout(45_000)
    errors: list[str] = []
    pg.on("pageerror", lambda e: errors.append(str(e)))
    pg.errors = errors
    try:
        yield pg
    finally:
        context.close()
