"""The demo database: each tag's episodes show what the tag says, built fast, refused over other episodes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.errors import ConfigError
from engine.launch import demo
from engine.records.episode import Episode, Severity, Status
from engine.store import EpisodeFilter, Store
from tests.conftest import QWEN3_DIR

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Store, demo.DemoReport]]:
    if not (QWEN3_DIR / "tokenizer.json").is_file():
        pytest.fail(f"the Qwen3 test tokenizer is missing at {QWEN3_DIR}; run `make test-deps`")
    store = Store(tmp_path_factory.mktemp("demo") / "demo.db")
    lines: list[str] = []
    report = demo.build_demo(store, qwen3=QWEN3_DIR, progress=lines.append)
    assert len(lines) == len(demo.DEMO_PARTS) and all(" episodes (" in line for line in lines)
    yield store, report
    store.close()


def _tagged(store: Store, part: demo.DemoPart) -> list[Episode]:
    eps = list(store.iter_episodes(EpisodeFilter(tags=(part.tag,))))
    assert eps, f"no episode tagged {part.tag}"
    return eps


def test_every_part_is_built_as_one_tagged_run(built: tuple[Store, demo.DemoReport]) -> None:
    store, report = built
    assert [r.part.name for r in report.runs] == list(demo.PART_NAMES) and not report.skipped
    assert report.n_episodes == store.count() == 28
    for run in report.runs:
        eps = _tagged(store, run.part)
        assert run.run_id == run.part.run_id and {e.run_id for e in eps} == {run.run_id}
        assert len(eps) == run.n_episodes and all(e.tags == (run.part.tag,) for e in eps)
        assert {e.preset for e in eps} == {run.part.preset} and {e.env for e in eps} == {run.part.env}
    assert dict(store.tag_counts()) == {r.part.tag: r.n_episodes for r in report.runs}
    assert {tag for tag, _, _ in demo.notes(report)} == {p.tag for p in demo.DEMO_PARTS}


@pytest.mark.parametrize("part", [p for p in demo.DEMO_PARTS if p.shows], ids=lambda p: p.name)
def test_each_tags_episodes_carry_the_finding_they_show(built: tuple[Store, demo.DemoReport],
                                                       part: demo.DemoPart) -> None:
    store, _ = built
    for ep in _tagged(store, part):
        kinds = {f.kind for f in ep.all_findings() if f.severity is not Severity.INFO}
        assert set(part.shows) <= kinds, (ep.id, sorted(kinds))
    # ... as a root, which Browse's findings filter and diagnosis column show.
    rows = store.list_episodes(EpisodeFilter(tags=(part.tag,)))
    assert all(all(f",{k}," in (r.root_kinds or "") for k in part.shows) for r in rows)


def test_what_each_part_shows_beyond_its_finding(built: tuple[Store, demo.DemoReport]) -> None:
    store, _ = built
    parts = {p.name: p for p in demo.DEMO_PARTS}
    clean = _tagged(store, parts["clean-tito"])
    assert all(e.status is Status.COMPLETED and e.reward == 1.0 for e in clean)
    assert not [f for e in clean for f in e.all_findings() if f.severity is Severity.ERROR]
    rewrite = _tagged(store, parts["history-rewrite"])
    assert {e.task_id for e in rewrite} == {e.task_id for e in clean}  # the same tasks
    assert all(e.status is Status.ABORTED and "rewrote history" in e.reason for e in rewrite)
    assert all(str(QWEN3_DIR.resolve()) == e.tokenizer for e in rewrite)
    aborted = _tagged(store, parts["parse-abort"])
    assert all(e.status is Status.ABORTED and e.reason.startswith("tool call parse error") for e in aborted)
    cut = _tagged(store, parts["truncated-turn"])
    assert all(e.turns[0].generation.finish_reason == "length" and e.status is Status.COMPLETED for e in cut)
    shaped = _tagged(store, parts["system-block"])
    assert min(e.reward for e in shaped) < 0 < max(e.reward for e in shaped)  # AReaL's shaped returns
    # Browse's reward chart keeps them apart from the 0/1 rewards.
    sets = {r.label: r for r in store.stats().rewards}
    assert min(sets["math · areal-math"].bins.centers) < 0 and set(sets["retail · tito"].bins.centers) <= {0.0, 1.0}


def test_the_grpo_group_has_zero_spread(built: tuple[Store, demo.DemoReport]) -> None:
    store, _ = built
    part = next(p for p in demo.DEMO_PARTS if p.name == "zero-spread")
    eps = _tagged(store, part)
    assert len(eps) == 4 and len({e.group_id for e in eps}) == 1 and len({e.reward for e in eps}) == 1
    stats = store.stats(EpisodeFilter(tags=(part.tag,)))
    [group] = stats.groups
    assert group.n == 4 and group.std == 0.0 and group.min == group.max and stats.n_flat_groups == 1
    # The areal-math groups beside it do have a spread.
    spread = store.stats(EpisodeFilter(tags=("demo:system-block",)))
    assert spread.n_groups == 4 and spread.n_flat_groups < spread.n_groups


def test_it_refuses_a_database_with_episodes_unless_forced(built: tuple[Store, demo.DemoReport]) -> None:
    store, _ = built
    with pytest.raises(ConfigError, match=r"already holds 28 episodes.*--force"):
        demo.build_demo(store, parts=["zero-spread"])
    assert store.count() == 28
    report = demo.build_demo(store, parts=["zero-spread"], force=True)
    assert [r.run_id for r in report.runs] == ["demo-zero-spread-2"] and store.count() == 32
    with pytest.raises(ConfigError, match="no demo part 'nope'"):
        demo.build_demo(store, parts=["nope"], force=True)


def test_without_the_qwen3_tokenizer_its_part_is_skipped_and_says_how_to_get_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(demo, "find_qwen3", lambda path=None: None)
    store = Store(tmp_path / "d.db")
    report = demo.build_demo(store, parts=["clean-tito", "history-rewrite"])
    assert [r.part.name for r in report.runs] == ["clean-tito"]
    [(part, why)] = report.skipped
    assert part.name == "history-rewrite" and "make test-deps" in why and "fetch-qwen3-tokenizer.sh" in why
    assert "--qwen3" in why and store.count(EpisodeFilter(run_id="demo-history-rewrite")) == 0
    store.close()


def test_find_qwen3_takes_a_folder_and_refuses_one_without_the_tokenizer(tmp_path: Path) -> None:
    assert demo.find_qwen3(QWEN3_DIR) == QWEN3_DIR.resolve()
    with pytest.raises(ConfigError, match="no tokenizer.json"):
        demo.find_qwen3(tmp_path)


def _rollscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ROLLSCOPE_QWEN3_TOKENIZER": str(QWEN3_DIR)}
    return subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600)


def test_the_command_prints_each_run_what_to_look_at_and_the_time(tmp_path: Path) -> None:
    db = tmp_path / "demo.db"
    proc = _rollscope("demo", "--db", str(db), "--part", "parse-abort", "--part", "zero-spread")
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert "demo-parse-abort: 2 episodes (aborted 2), tag demo:parse-abort" in out
    assert "6 episodes in 2 runs" in out and "built in" in out
    assert re.search(r"\ndemo:parse-abort +2 +demo-parse-abort +tool_call_parse_error\n", out)
    assert re.search(r"\ndemo:zero-spread +4 +demo-zero-spread +none\n", out)
    assert "--where tag=TAG" in out and "a closing brace short" in out
    again = _rollscope("demo", "--db", str(db), "--part", "zero-spread")
    assert again.returncode == 2 and "already holds 6 episodes" in again.stderr and "--force" in again.stderr
    forced = _rollscope("demo", "--db", str(db), "--part", "zero-spread", "--append")
    assert forced.returncode == 0 and "demo-zero-spread-2" in forced.stdout
    bad = _rollscope("demo", "--db", str(tmp_path / "x.db"), "--qwen3", str(tmp_path))
    assert bad.returncode == 2 and "no tokenizer.json" in bad.stderr and "make test-deps" in bad.stderr
    unknown = _rollscope("demo", "--db", str(tmp_path / "y.db"), "--part", "nope")
    assert unknown.returncode == 2 and "no demo part 'nope'" in unknown.stderr
    assert not (tmp_path / "x.db").exists() and not (tmp_path / "y.db").exists()


def test_the_dashboards_job_and_what_it_shows(built: tuple[Store, demo.DemoReport]) -> None:
    from dashboard.background.jobs import FAILED, DemoJob
    from dashboard.views import browse as views

    store, report = built
    job = DemoJob(store).start()
    assert job.wait(60)
    status = job.status()
    assert status.state == FAILED and not status.active and "already holds" in status.error
    assert 'data-state="failed"' in views.progress(status) and "The demo was not built" in views.progress(status)
    shown = views.built(report)
    assert "28 episodes in 7 runs" in shown and "tags filter" in shown
    assert all(f'data-tag="{p.tag}"' in shown for p in demo.DEMO_PARTS)
    assert "&lt;think&gt;" in shown and "<think>" not in shown  # what to look at is escaped text
    assert "This database holds the demo" in views.present(store.tag_counts())
    assert views.present([("keep", 3)]) == ""


def test_every_finding_lies_on_the_episodes_tokens_and_the_rewrite_on_the_rewritten_one(
        built: tuple[Store, demo.DemoReport]) -> None:
    from engine import load_tokenizer, misplaced
    from engine.tokens.chat import decode

    store, _ = built
    for ep in store.iter_episodes(EpisodeFilter()):
        for f in ep.all_findings():
            assert misplaced(ep, f) is None and "misplaced" not in f.evidence, (ep.id, misplaced(ep, f))
    # The history rewrite: its root is the token the template dropped on re-render (Qwen3's empty <think>).
    tok = load_tokenizer(str(QWEN3_DIR))
    part = next(p for p in demo.DEMO_PARTS if p.name == "history-rewrite")
    for ep in _tagged(store, part):
        [root] = [f for f in ep.all_findings() if f.kind == "template_not_prefix_stable" and f.is_root]
        assert root.token_start is not None
        assert decode(tok, ep.tokens.ids[root.token_start : root.token_end].tolist()).startswith("<think>")


def test_an_export_holds_every_cause_its_findings_name(built: tuple[Store, demo.DemoReport], tmp_path: Path) -> None:
    import json

    from engine import export

    store, _ = built
    out = tmp_path / "demo.jsonl"
    assert export(store.iter_episodes(EpisodeFilter()), "jsonl", out) >= 28
    named = held = 0
    for line in out.read_text(encoding="utf-8").splitlines():
        d = json.loads(line)
        found = [*d["findings"], *(f for t in d["turns"] for f in t["findings"])]
        ids = {f["id"] for f in found}
        causes = [f["caused_by"] for f in found if f["caused_by"]]
        named += len(causes)
        held += sum(c in ids for c in causes)
    assert named and held == named
