"""The researcher's workflow in a real browser: launch a batch, step by hand, fork and compare, export.

These tests write to their database, so they get their own (and their own
server) rather than the read-only one the Browse and Episode tests share.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
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
from engine.store import EpisodeFilter, Store

XSS = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'


@dataclass(frozen=True)
class WorkflowApp:
    url: str
    db: Path
    parents: tuple[str, ...]  # three areal-math episodes, then a retail one


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _seed(path: Path) -> tuple[str, ...]:
    tok = load_tokenizer(None)
    make_env = env_factory("math")
    store = Store(path)
    ids = []
    for i in range(3):
        env = make_env()
        backend = ScriptedBackend(make_env().reference_reply, tok, mistake_rate=0.5, seed=i, tokenizer_name="smollm2")
        ep = asyncio.run(run_episode(env, backend, tok, PRESETS["areal-math"], env.tasks[i], preset="areal-math",
                                     tokenizer_name="smollm2"))
        store.save_episode(ep)
        ids.append(ep.id)
    # A retail episode (its env has a user), for forks with the user of choice.
    retail = env_factory("retail")
    env = retail()
    backend = ScriptedBackend(env.reference_reply, tok, tokenizer_name="smollm2")
    ep = asyncio.run(run_episode(env, backend, tok, PRESETS["slime-tau"], env.tasks[0], preset="slime-tau",
                                 tokenizer_name="smollm2"))
    store.save_episode(ep)
    ids.append(ep.id)
    store.close()
    return tuple(ids)


@pytest.fixture(scope="module")
def app(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkflowApp]:
    """A server over a database of three areal-math episodes, for this module alone."""
    from dashboard.app import build_app

    db = tmp_path_factory.mktemp("workflow") / "rollscope.db"
    # Playwright's sync API may already run a loop in this thread: seed from a worker thread.
    with ThreadPoolExecutor(max_workers=1) as pool:
        parents = pool.submit(_seed, db).result()
    demo = build_app(str(db))
    port = _free_port()
    demo.launch(prevent_thread_lock=True, server_port=port, server_name="127.0.0.1", quiet=True)
    try:
        yield WorkflowApp(f"http://127.0.0.1:{port}", db, parents)
    finally:
        demo.close()


def _tab(page: Any, name: str) -> None:
    page.locator(f"#rs-tab-{name}-button").click()


def _selected(page: Any, name: str) -> None:
    page.wait_for_function(
        f"() => document.querySelector('#rs-tab-{name}-button')?.getAttribute('aria-selected') === 'true'")


def _fill(page: Any, elem_id: str, value: str) -> None:
    page.locator(f"#{elem_id} textarea, #{elem_id} input").first.fill(value)


def _open_loop_box(page: Any, prefix: str) -> None:
    page.locator(f"#{prefix}-loop-box").get_by_text("Loop settings").first.click()
    page.locator(f"#{prefix}-knobs tr[data-knob]").first.wait_for()


def _no_xss(page: Any) -> None:
    assert page.evaluate("() => window.__xss") is None
    assert not page.errors


@pytest.mark.browser
def test_launch_a_batch_see_it_finish_and_cancel_another(page: Any, app: WorkflowApp, screenshots: Path) -> None:
    page.goto(app.url + "/")
    _tab(page, "launch")
    _fill(page, "rs-launch-tasks", "7:2")
    page.locator("#rs-launch-start").click()
    error = page.locator("#rs-launch-message .rs-error")
    error.wait_for()
    assert "task range '7:2'" in error.inner_text() and "Traceback" not in page.content()
    page.screenshot(path=str(screenshots / "launch_error.png"))

    # The preset's knobs are shown, and changing two of them marks them in the table.
    _open_loop_box(page, "rs-launch")
    knobs = page.locator("#rs-launch-knobs")
    knobs.get_by_text("preset areal-math (the usual one for math)").wait_for()
    assert knobs.locator("tr[data-knob]").count() == len(PRESETS["areal-math"].to_dict())
    _fill(page, "rs-launch-settings", "max_turns = 0")
    knobs.get_by_text("max_turns must be at least 1").wait_for()
    _fill(page, "rs-launch-settings", "max_turns = 1\nturn_discount = 0.5")
    knobs.get_by_text("2 knobs changed from preset areal-math").wait_for()
    assert knobs.locator("tr.rs-knob-changed").count() == 2
    page.screenshot(path=str(screenshots / "launch_knobs.png"), full_page=True)

    _fill(page, "rs-launch-tasks", "0:3")
    _fill(page, "rs-launch-samples", "2")
    _fill(page, "rs-launch-run", "knobs-run")
    _fill(page, "rs-launch-tags", "knobs, short")
    page.locator("#rs-launch-start").click()
    page.locator("#rs-launch-progress [data-state=finished]").wait_for(timeout=30_000)
    page.locator("#rs-launch-table tr[data-open]").nth(5).wait_for()
    assert page.locator("#rs-launch-table tr[data-open]").count() == 6
    assert "6 / 6" in page.locator("#rs-launch-progress").inner_text()
    page.screenshot(path=str(screenshots / "launch_finished.png"), full_page=True)
    first_run = page.locator("#rs-launch-progress .rs-job-head code").inner_text()
    store = Store(app.db)
    try:
        configs = [store.get_episode(r.id).config.loop for r in store.list_episodes(EpisodeFilter(run_id=first_run))]
    finally:
        store.close()
    # The effective config is stored on each episode: the changed knobs and the preset's others.
    assert first_run == "knobs-run"  # the run's name, and every episode has the tags
    store = Store(app.db)
    try:
        assert {e.tags for e in store.iter_episodes(EpisodeFilter(run_id=first_run))} == {("knobs", "short")}
    finally:
        store.close()
    assert len(configs) == 6 and all(c.max_turns == 1 and c.turn_discount == 0.5 for c in configs)
    assert all(c.feedback_wrong == PRESETS["areal-math"].feedback_wrong for c in configs)
    _fill(page, "rs-launch-settings", "")
    _fill(page, "rs-launch-run", "")  # a name is used once

    # A batch big enough to still be running when Cancel is pressed: retail
    # episodes take tens of milliseconds each, math ones a few.
    page.locator("#rs-launch-env input").click()
    page.get_by_role("option", name="retail", exact=True).click()
    _fill(page, "rs-launch-tasks", "all")
    _fill(page, "rs-launch-concurrency", "1")
    page.locator("#rs-launch-start").click()
    page.locator("#rs-launch-progress [data-state=running]").wait_for(timeout=30_000)
    page.wait_for_function("() => document.querySelectorAll('#rs-launch-table tr[data-open]').length > 6",
                           timeout=30_000)
    page.locator("#rs-launch-cancel").click()
    page.locator("#rs-launch-progress [data-state=cancelled]").wait_for(timeout=30_000)
    progress = page.locator("#rs-launch-progress").inner_text()
    assert "stored as interrupted" in progress and "never started" in progress
    page.screenshot(path=str(screenshots / "launch_cancelled.png"))
    run_id = page.locator("#rs-launch-progress .rs-job-head code").inner_text()
    done, total = (int(x.replace(",", "")) for x in page.locator("#rs-launch-progress .rs-job-head b").inner_text().split("/"))
    store = Store(app.db)
    try:
        # Finished episodes stay; those in flight (none, if the cancel fell between two
        # scripted episodes) are interrupted; the rest never started, so are not stored.
        stored = store.count(EpisodeFilter(run_id=run_id))
        finished = store.count(EpisodeFilter(run_id=run_id, status=("completed", "truncated", "aborted")))
    finally:
        store.close()
    assert total == 240 and finished == done and done <= stored < total

    first = page.locator("#rs-launch-table tr[data-open]").first
    episode_id = first.get_attribute("data-open")
    first.click()
    _selected(page, "episode")
    page.wait_for_function(f"() => document.querySelector('#rs-episode-header')?.innerText.includes('{episode_id}')")
    _no_xss(page)


@pytest.mark.browser
def test_generate_edit_commit_and_save_a_step(page: Any, app: WorkflowApp, screenshots: Path) -> None:
    page.goto(app.url + "/")
    _tab(page, "step")
    _open_loop_box(page, "rs-step")
    _fill(page, "rs-step-settings", "max_turns = 2")
    page.locator("#rs-step-knobs").get_by_text("1 knob changed from preset areal-math").wait_for()
    page.locator("#rs-step-start").click()
    page.locator("#rs-step-header .rs-step-header").wait_for()
    page.locator("#rs-step-generate").click()
    raw = page.locator("#rs-step-pending pre.rs-raw")
    raw.wait_for()
    assert "\\boxed{" in raw.inner_text()  # nothing committed yet: the turn is only shown
    assert page.locator("#rs-step-pending .rs-step-tokens .tok").count() > 5
    assert "Unchanged" in page.locator("#rs-step-parsed").inner_text()
    page.screenshot(path=str(screenshots / "step_generated.png"))

    _fill(page, "rs-step-text", f"{XSS} I think it is \\boxed{{-1}}.")
    page.locator("#rs-step-parsed").get_by_text("edited by hand").wait_for()
    page.locator("#rs-step-commit").click()
    committed = page.locator("#rs-step-committed .rs-committed")
    committed.wait_for()
    assert "wrong" in committed.inner_text()
    conversation = page.locator("#rs-step-conversation")
    assert XSS in conversation.inner_text()  # shown as text, never run

    page.locator("#rs-step-generate").click()
    page.locator("#rs-step-message").get_by_text("Generated turn 1").wait_for()
    page.locator("#rs-step-commit").click()
    page.locator("#rs-step-message").get_by_text("The episode ended").wait_for()
    page.locator("#rs-step-save").click()
    saved = page.locator("#rs-step-header .rs-saved-as code")
    saved.wait_for()
    episode_id = saved.inner_text()
    page.screenshot(path=str(screenshots / "step_saved.png"), full_page=True)
    store = Store(app.db)
    try:
        ep = store.get_episode(episode_id)
    finally:
        store.close()
    assert ep.n_turns == 2 and ep.turns[0].generation.model == "manual" and XSS in ep.turns[0].generation.text
    assert ep.turns[1].reward == 1.0 and ep.status.value == "completed"
    assert "edited_by_hand" in {f.kind for f in ep.findings}
    _no_xss(page)


@pytest.mark.solo
@pytest.mark.browser
def test_step_shows_the_local_models_tokens_as_they_come_and_cancels(page: Any, app: WorkflowApp,
                                                                      screenshots: Path) -> None:
    page.goto(app.url + "/")
    _tab(page, "step")
    page.locator("#rs-step-policy input").click()
    page.get_by_role("option", name="local", exact=True).click()
    page.locator("#rs-step-model").wait_for(state="visible")
    _fill(page, "rs-step-max-new-tokens", "400")
    _fill(page, "rs-step-temperature", "1.0")
    page.locator("#rs-step-start").click()
    page.locator("#rs-step-header .rs-step-header").wait_for(timeout=120_000)  # loads the embedded model
    page.locator("#rs-step-generate").click()
    # The reply grows on screen while the model writes it.
    growing = page.locator("#rs-step-pending .rs-generating pre.rs-raw")
    growing.wait_for(timeout=60_000)
    page.wait_for_function(
        "() => { const c = [...document.querySelectorAll('#rs-step-pending .rs-chip')]"
        ".find(x => x.innerText.includes('tokens so far')); return c && parseInt(c.innerText.split(/\\s/).pop()) >= 3 }",
        timeout=60_000)
    page.screenshot(path=str(screenshots / "step_generating.png"))
    page.locator("#rs-step-cancel").click()
    message = page.locator("#rs-step-message")
    message.get_by_text("was cancelled after").wait_for(timeout=30_000)
    n = int(message.inner_text().split("was cancelled after ")[1].split()[0])
    assert 3 <= n < 400
    partial = page.locator("#rs-step-text textarea").input_value()
    assert partial.strip()  # the partial reply is kept to edit
    assert "edited by hand" in page.locator("#rs-step-parsed").inner_text()
    page.screenshot(path=str(screenshots / "step_cancelled.png"))
    _no_xss(page)


@pytest.mark.browser
def test_fork_from_the_episode_tab_then_compare_with_the_parent(page: Any, app: WorkflowApp,
                                                                 screenshots: Path) -> None:
    parent = app.parents[1]
    page.goto(f"{app.url}/?episode={parent}")
    link = page.locator('#rs-episode-conversation a[data-fork="2"]')
    link.wait_for()
    link.click()
    _selected(page, "step")
    header = page.locator("#rs-step-header")
    header.get_by_text(f"forked {parent} at turn 2").wait_for()
    assert "every observation, reward and done flag as stored" in header.inner_text()
    assert page.locator("#rs-step-conversation .rs-turn-replayed").count() == 2
    page.screenshot(path=str(screenshots / "fork_started.png"))
    # In fork mode the knobs start from the parent's stored config, not from a preset.
    page.locator("#rs-step-start-box").get_by_text("Start a conversation").first.click()
    _open_loop_box(page, "rs-step")
    page.locator("#rs-step-knobs").get_by_text(f"episode {parent[:12]}'s config (preset areal-math)").wait_for()

    _fill(page, "rs-step-text", "Let me start over. The answer is \\boxed{0}.")
    page.locator("#rs-step-commit").click()
    page.locator("#rs-step-message").get_by_text("Committed turn 2").wait_for()
    page.locator("#rs-step-save").click()
    page.locator("#rs-step-header .rs-saved-as").wait_for()
    page.locator("#rs-step-compare:not([disabled])").click()
    _selected(page, "compare")
    verdict = page.locator("#rs-compare-view .rs-cmp-verdict")
    verdict.wait_for()
    assert "B is a fork of A at turn 2" in verdict.inner_text() and "first diverge at turn 2" in verdict.inner_text()
    assert verdict.get_attribute("data-first") == "2"
    first = page.locator("#rs-compare-view #cmp-turn-2.rs-cmp-first")
    assert first.count() == 1 and first.locator("ins.rs-diff-ins").count() > 0
    assert page.locator("#rs-compare-view #cmp-turn-0").get_attribute("open") is None  # same turns fold away
    assert page.locator("#rs-compare-a input, #rs-compare-a textarea").first.input_value() == parent
    page.screenshot(path=str(screenshots / "compare.png"), full_page=True)
    _no_xss(page)


@pytest.mark.browser
def test_compare_by_link(page: Any, app: WorkflowApp, screenshots: Path) -> None:
    a, b = app.parents[0], app.parents[1]
    page.goto(f"{app.url}/?compare={a[:10]},{b}")
    _selected(page, "compare")
    verdict = page.locator("#rs-compare-view .rs-cmp-verdict")
    verdict.wait_for()
    assert page.locator("#rs-compare-a input, #rs-compare-a textarea").first.input_value() == a  # the prefix resolved
    assert page.locator("#rs-compare-b input, #rs-compare-b textarea").first.input_value() == b
    page.goto(f"{app.url}/?compare={a}")  # one id is not a pair: Browse, as without the parameter
    page.locator("#rs-tab-browse-button[aria-selected='true']").wait_for()
    _no_xss(page)


@pytest.mark.browser
def test_compare_by_ticking_two_rows_in_browse(page: Any, app: WorkflowApp, screenshots: Path) -> None:
    page.goto(app.url + "/")
    button = page.locator("#rs-episode-table button.rs-compare-picked")
    button.wait_for()
    assert button.is_disabled()
    page.locator("#rs-episode-table input.rs-pick").nth(1).wait_for()
    boxes = page.locator("#rs-episode-table input.rs-pick")
    a, b = boxes.nth(0).get_attribute("data-id"), boxes.nth(1).get_attribute("data-id")
    page.locator(f"#rs-episode-table input.rs-pick[data-id='{a}']").check()
    assert button.is_disabled() and "1 of 2" in button.inner_text()
    page.locator(f"#rs-episode-table input.rs-pick[data-id='{b}']").check()
    assert not button.is_disabled()
    _selected(page, "browse")  # ticking does not open the row
    page.screenshot(path=str(screenshots / "browse_ticked.png"))
    button.click()
    _selected(page, "compare")
    page.locator("#rs-compare-view .rs-cmp-verdict").wait_for()
    assert page.locator("#rs-compare-a input, #rs-compare-a textarea").first.input_value() == a
    assert page.locator("#rs-compare-b input, #rs-compare-b textarea").first.input_value() == b
    _no_xss(page)


@pytest.mark.browser
def test_ticked_rows_are_tagged_starred_and_exported_in_one_click(page: Any, app: WorkflowApp,
                                                                   screenshots: Path) -> None:
    page.goto(app.url + "/")
    bar = page.locator("#rs-episode-table .rs-pickbar")
    page.locator("#rs-episode-table input.rs-pick").nth(2).wait_for()
    assert bar.locator("button[data-bulk=star]").is_disabled()  # nothing ticked: nothing to do
    ids = [app.parents[0], app.parents[1], app.parents[3]]
    for eid in ids:
        page.locator(f"#rs-episode-table input.rs-pick[data-id='{eid}']").check()
    assert bar.locator(".rs-picked-n").inner_text() == "3 ticked"
    bar.locator("input.rs-bulk-tag").fill("worth-a-look")
    bar.locator("button[data-bulk=tag]").click()
    info = page.locator("#rs-browse-info")
    info.get_by_text("Tagged 3 episodes 'worth-a-look'").wait_for()
    # The table is drawn again with the tag, and the rows stay ticked.
    for eid in ids:
        page.locator(f"#rs-episode-table tr[data-id='{eid}'] .rs-tag", has_text="worth-a-look").wait_for()
    assert bar.locator(".rs-picked-n").inner_text() == "3 ticked"
    bar.locator("button[data-bulk=star]").click()
    info.get_by_text("Starred 3 episodes").wait_for()
    store = Store(app.db)
    assert sorted(store.episode_ids(EpisodeFilter(tags=("worth-a-look",)))) == sorted(ids)
    assert sorted(store.episode_ids(EpisodeFilter(starred=True))) == sorted(ids)
    store.close()
    # One click writes the ticked rows and downloads the file.
    bar.locator("select.rs-bulk-format").select_option("messages")
    with page.expect_download(timeout=30_000) as download:
        bar.locator("button[data-bulk=export]").click()
    path = download.value.path()
    assert download.value.suggested_filename.endswith(".jsonl")
    assert len(Path(path).read_text().splitlines()) == 3
    info.get_by_text("Exported 3 ticked episodes as messages").wait_for()
    page.screenshot(path=str(screenshots / "browse_bulk.png"))
    # Untick all: the actions are off again; a row click opens, as before.
    bar.locator("button.rs-unpick").click()
    assert bar.locator(".rs-picked-n").inner_text() == "0 ticked" and bar.locator("button[data-bulk=tag]").is_disabled()
    _no_xss(page)


@pytest.mark.browser
def test_token_diff_of_a_slime_tau_episode(page: Any, app: WorkflowApp, screenshots: Path) -> None:
    retail = app.parents[3]  # slime-tau
    page.goto(f"{app.url}/?compare={retail},{retail}")
    _selected(page, "compare")

    def diff_against(choice: str, shown: str | None = None) -> Any:
        page.locator("#rs-compare-against input").click()
        page.get_by_role("option", name=choice, exact=True).click()
        page.locator("#rs-compare-tokens-run").click()
        view = page.locator(f"#rs-compare-tokens .rs-tokdiff:has-text('{shown or choice}')")
        view.wait_for()
        return view

    # Against tito: the newline after each <|im_end|> is the same token, trained on by slime-tau only.
    view = diff_against("A under tito")
    newlines = view.locator(".td-run .tok.td-mask")
    assert newlines.count() >= 1 and set(newlines.all_inner_texts()) == {"↵\n"}
    assert "mask 1" in newlines.first.get_attribute("title") and "B[" in newlines.first.get_attribute("title")
    assert view.locator("tr[data-kind=assistant].td-differs").count() == 1
    assert "First difference at A[" in view.locator(".td-first").inner_text()
    page.screenshot(path=str(screenshots / "token_diff_tito.png"), full_page=True)
    # Against slime's seed loop: the generation prompts slime-tau lays down before each later turn are A's only.
    view = diff_against("A under slime-tau-seed")
    dropped = view.locator("tr[data-kind=gen_prompt].td-differs")
    assert dropped.count() == 1
    only_a = view.locator(".td-run[data-kind=gen_prompt] .tok.td-a")
    assert only_a.count() >= 3 and "<|im_start|>" in only_a.all_inner_texts()
    page.screenshot(path=str(screenshots / "token_diff_seed.png"), full_page=True)
    # Against verl-tool with its default prompt_length: the loop refuses the long prompt, and the view says how B
    # ended, as `rollscope diff --preset verl-tool` does (the engine's words, not the page's).
    from concurrent.futures import ThreadPoolExecutor

    from engine import laid_down_ending, retokenized
    from engine.backends.tokenizers import episode_tokenizer

    store = Store(app.db)
    try:
        ep = store.get_episode(retail)
    finally:
        store.close()
    with ThreadPoolExecutor(1) as pool:  # playwright's loop runs in this thread
        b = pool.submit(asyncio.run, retokenized(ep, preset="verl-tool", tokenizer=episode_tokenizer(ep)[0])).result()
    said = laid_down_ending(ep, b)
    assert said.startswith("B ended failed: the prompt is")
    view = diff_against("A under verl-tool")
    assert view.locator(".td-ending").inner_text().strip() == said + "."
    # The same episode against itself agrees.
    diff_against("episode B", "The token arrays agree")
    assert page.locator("#rs-compare-tokens .td-ending").count() == 0
    _no_xss(page)


@pytest.mark.browser
def test_fork_with_a_model_playing_the_user(page: Any, app: WorkflowApp, screenshots: Path) -> None:
    from tests.servers import FIXED_REPLY, ProtocolServer

    parent = app.parents[3]
    store = Store(app.db)
    try:
        ep = store.get_episode(parent)
    finally:
        store.close()
    k = next(t.index for t in ep.turns if t.action is not None and t.action.is_respond) + 1  # one exchange replayed
    page.goto(app.url + "/")
    _tab(page, "step")
    page.locator("#rs-step-mode label").filter(has_text="fork a stored episode").click()
    _fill(page, "rs-step-parent", parent)
    _fill(page, "rs-step-fork-turn", str(k))
    url_box = page.locator("#rs-step-user-url")
    assert not url_box.is_visible()
    page.locator("#rs-step-user input").click()
    page.get_by_role("option", name="a model plays the user").click()
    url_box.wait_for(state="visible")  # the user model's server is asked for only when a model plays the user
    with ProtocolServer(tokenizer=load_tokenizer(None), fault="fixed") as server:
        _fill(page, "rs-step-user-url", server.url)
        page.locator("#rs-step-start").click()
        header = page.locator("#rs-step-header")
        header.get_by_text(f"forked {parent} at turn {k}").wait_for()
        assert "a model plays the user from the fork on" in header.inner_text()
        _fill(page, "rs-step-text", "Which order would you like to cancel?")
        page.locator("#rs-step-commit").click()
        page.locator("#rs-step-message").get_by_text(f"Committed turn {k}").wait_for()
        page.locator("#rs-step-conversation").get_by_text(FIXED_REPLY).wait_for()
        assert server.calls["/generate"] == 1
    assert not page.locator("#rs-step-user-reply").is_visible()  # no person was asked for the reply
    page.screenshot(path=str(screenshots / "fork_model_user.png"), full_page=True)
    _no_xss(page)


@pytest.mark.browser
def test_export_previews_then_downloads_in_one_click(page: Any, app: WorkflowApp, screenshots: Path, tmp_path: Path) -> None:
    store = Store(app.db)
    try:
        total = store.count()
    finally:
        store.close()
    page.goto(app.url + "/")
    _tab(page, "export")
    page.locator("#rs-export-preview").click()
    preview = page.locator("#rs-export-view .rs-export-preview")
    preview.wait_for()
    assert f"{total:,} episode" in preview.inner_text()
    assert '"schema_version"' in preview.locator("pre.rs-raw").inner_text()
    page.screenshot(path=str(screenshots / "export_preview.png"))
    with page.expect_download() as info:  # one click: written and downloaded
        page.locator("#rs-export-run").click()
    out = tmp_path / "all.jsonl"
    info.value.save_as(out)
    lines = out.read_text(encoding="utf-8").splitlines()
    assert len(lines) == total and {json.loads(x)["id"] for x in lines} >= set(app.parents)
    offered = page.locator("#rs-export-file")
    offered.wait_for(state="visible")

    page.locator("#rs-export-source label").filter(has_text="these episode ids").click()
    offered.wait_for(state="hidden")  # the file of the old choice is not offered for the new one
    _fill(page, "rs-export-ids", app.parents[0][:8])
    page.locator("#rs-export-format input").click()
    page.get_by_role("option", name="messages").click()
    page.locator("#rs-export-preview").click()
    page.locator("#rs-export-view .rs-export-count").get_by_text("1 episode").wait_for()
    with page.expect_download() as info:
        page.locator("#rs-export-run").click()
    page.locator("#rs-export-message").get_by_text("Wrote 1 episode (1 listed id)").wait_for()
    one = tmp_path / "one.jsonl"
    info.value.save_as(one)
    record = json.loads(one.read_text(encoding="utf-8").splitlines()[0])
    assert record["messages"][0]["role"] in ("system", "user")
    # An empty selection warns, and nothing is downloaded.
    _fill(page, "rs-export-ids", "")
    page.locator("#rs-export-run").click()
    page.locator("#rs-export-message .rs-warn").get_by_text("give one or more episode ids").wait_for()
    assert not offered.is_visible()
    page.screenshot(path=str(screenshots / "export_done.png"))
    _no_xss(page)
