"""Root causes: the linking rules, the diagnosis line, its columns in the store and where Browse shows it."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest

from dashboard.tabs.browse import ROOT, episode_filter, page
from dashboard.views.episode import render_findings
from engine.checks.diagnosis import consequences, diagnosis, link_findings, root_of, roots
from engine.records.episode import Finding, Severity
from engine.store import DB_SCHEMA, EpisodeFilter, Store
from tests import tokenview as tv

E, INFO = Severity.ERROR, Severity.INFO
GOLDEN = Path(__file__).parent / "golden" / "dbschema2.sqlite"


def _f(kind: str, sev: Severity = E, start: int | None = None, end: int | None = None, turn: int | None = 0,
       **ev: object) -> Finding:
    return Finding(kind, sev, kind, turn=turn, token_start=start, token_end=end, evidence=dict(ev))


def test_a_mask_finding_causes_the_logprob_findings_on_its_own_positions_only():
    found = link_findings([
        _f("mask_misaligned", start=10, end=40, positions=[10, 20, 30]),
        _f("logprobs_missing", start=20, end=31, positions=[20, 30]),
        _f("logprobs_misaligned", start=50, end=51, positions=[50]),  # elsewhere: a cause of its own
    ])
    assert [f.id for f in found] == ["f1", "f2", "f3"]
    assert [f.caused_by for f in found] == [None, "f1", None]
    assert [r.id for r in roots(found)] == ["f1", "f3"]
    assert consequences(found, found[0]) == [found[1]] and root_of(found, found[1]) is found[0]


def test_one_corrupt_id_explains_what_is_read_wrong_at_it_and_not_a_finding_elsewhere():
    """A single id past the vocabulary is a corrupt id, not another tokenizer's ids: verl's missing newline 17 tokens
    later stays a root of its own; the re-encoding that differs at the id follows from it. Many such ids are the
    wrong tokenizer's, and everything read through it follows."""
    corrupt = link_findings([
        _f("token_out_of_vocab", start=35, end=36, positions=[35], count=1),
        _f("retokenization_drift", start=35, end=40),
        _f("im_end_newline_missing", start=52, end=53),
    ])
    assert [f.caused_by for f in corrupt] == [None, "f1", None]
    assert [r.kind for r in roots(corrupt)] == ["token_out_of_vocab", "im_end_newline_missing"]
    foreign = link_findings([
        _f("token_out_of_vocab", start=3, end=90, positions=[3, 9, 40, 77], count=4),
        _f("im_end_newline_missing", start=52, end=53),
    ])
    assert [r.kind for r in roots(foreign)] == ["token_out_of_vocab"]


def test_a_mask_that_leaves_every_reply_untrained_explains_that_nothing_is_trained():
    nothing = Finding("nothing_trained", Severity.WARNING, "the loss mask is 0 on every token")
    found = link_findings([_f("mask_misaligned", start=10, end=40, positions=[10, 20, 30]), nothing])
    assert [f.caused_by for f in found] == [None, "f1"] and [r.kind for r in roots(found)] == ["mask_misaligned"]
    assert [r.kind for r in roots(link_findings([nothing]))] == ["nothing_trained"]  # alone: a root of its own


def test_token_structure_explains_what_comes_after_it_not_before():
    found = link_findings([
        _f("mask_misaligned", start=5, end=6, positions=[5]),  # before the first wrong id: its own cause
        _f("generation_prompt_missing", start=30, end=31, turn=1),
        _f("mask_misaligned", start=33, end=60, turn=1, positions=[33, 40]),
        _f("tokens_not_rendering", start=30, end=31, turn=1),
    ])
    by = {f.token_start: f for f in found if f.kind == "mask_misaligned"}
    gpm = next(f for f in found if f.kind == "generation_prompt_missing")
    assert by[5].caused_by is None and by[33].caused_by == gpm.id and gpm.caused_by is None
    assert next(f for f in found if f.kind == "tokens_not_rendering").caused_by == gpm.id  # same token: the specific wins


def test_a_history_rewrite_is_one_cause_and_info_is_never_linked():
    found = link_findings([
        _f("tokens_not_rendering", start=12, end=13, turn=0),
        _f("template_not_prefix_stable", start=40, end=41, turn=1, text="<think>"),
        _f("template_not_prefix_stable", start=90, end=91, turn=3),
        _f("template_not_prefix_stable", INFO, start=95, end=96, turn=3),
        _f("not_checked", INFO, turn=None),
    ])
    first = found[1]
    assert first.caused_by is None and found[2].caused_by == first.id and found[0].caused_by == first.id
    assert found[3].caused_by is None and found[4].caused_by is None
    assert diagnosis(found) == ("the chat template rewrites history from turn 1 (it drops earlier <think> blocks): "
                                "2 findings follow across 3 turns")


def test_a_later_history_rewrite_explains_the_render_before_it_not_what_the_loop_laid_down_before_it():
    """slime slices Qwen3's deltas: a tool message rewrites history at turn 2. The whole render then differs from
    turn 0 on, which the rewrite explains; turn 0's trained ids differing from its generated ones were laid down
    before it, by the re-encoding of the reply: a root of their own, at their own first wrong token."""
    found = link_findings([
        _f("tokens_not_rendering", start=12, end=13, turn=0),
        _f("retokenization_drift", start=12, end=30, turn=0),
        _f("logprobs_missing", start=12, end=40, turn=0),
        _f("template_not_prefix_stable", start=70, end=71, turn=2),
        _f("retokenization_drift", start=70, end=90, turn=2),
    ])
    rewrite, drift = found[3], found[1]
    assert {r.id for r in roots(found)} == {drift.id, rewrite.id}
    assert found[0].caused_by == rewrite.id and found[2].caused_by == drift.id and found[4].caused_by is not None


def test_the_same_failure_in_later_turns_is_one_cause_recurring():
    found = link_findings([_f("tool_call_parse_error", turn=t) for t in range(4)] + [_f("env_error", turn=2)])
    assert [f.caused_by for f in found] == [None, "f1", "f1", "f1", None]
    assert diagnosis(found) == ("a tool call failed to parse at turn 0: 3 findings follow across 4 turns; "
                                "the env failed at turn 2")


@pytest.mark.parametrize("by_episode", [True, False])
def test_a_schema_2_database_gets_its_diagnoses_on_open(tmp_path, monkeypatch, by_episode):
    from engine.store import index

    # Run-level kinds read the same whether the runs' findings are read episode by episode or kind by kind.
    monkeypatch.setattr(index, "RUN_KINDS_BY_EPISODE", 10**9 if by_episode else 0)
    db = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN, db)
    raw = sqlite3.connect(db)
    n_findings = raw.execute("SELECT COUNT(*) FROM findings").fetchone()[0]
    raw.close()
    store = Store(db)
    try:
        assert store.db.execute("SELECT value FROM meta WHERE key = 'db_schema'").fetchone()[0] == str(DB_SCHEMA)
        assert store.applied[0] == "0003_diagnosis"
        rows = {r.id: r for r in store.list_episodes()}
        assert len(rows) == 10
        assert rows["f3acbca0961a4057"].diagnosis == "a system block is injected mid-trajectory at turn 0"
        assert rows["f3acbca0961a4057"].root_kinds == ",system_block_injected,"
        assert rows["83fba487342d497c"].diagnosis is None  # a clean tito episode
        assert store.count(EpisodeFilter(root_kind="system_block_injected")) == 5
        assert store.count(EpisodeFilter.from_where(["root=template_newline_trained"])) == 2
        assert store.count(EpisodeFilter(root_kind="mask_misaligned")) == 0
        assert dict(store.root_kind_counts()) == {"system_block_injected": 5, "template_newline_trained": 2}
        assert store.run_level_kinds(["2f16ca17978245a5", "b5258a9f04bd4eaa", "39b9345806b64e14"]) == {
            "2f16ca17978245a5": (2, ["template_newline_trained"]), "b5258a9f04bd4eaa": (4, ["system_block_injected"])}
        assert sum(len(store.get_episode(i).all_findings()) for i in rows) == n_findings
    finally:
        store.close()


def test_browse_shows_the_diagnosis_and_says_run_level_kinds_once(tmp_path):
    db = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN, db)
    store = Store(db)
    try:
        table, info, _ = page(store, episode_filter(run="b5258a9f04bd4eaa"), None, 1)
        # Every areal-math episode of that run has the injected block: one note, not four rows saying it.
        assert info.count("system_block_injected") == 1 and "in every one of its 4 episodes" in info
        assert table.count("a system block is injected") == 0 and table.count("run: system_<wbr>block_<wbr>injected") == 4
        table, _, _ = page(store, episode_filter(findings=ROOT + "system_block_injected"), None, 1)
        assert table.count('<tr data-id=') == 5
        fork = store.get_episode("a0dd25aea5c24541")  # a run of its own: its diagnosis stays on its row
        panel = render_findings(fork, None)
        assert "<b>Diagnosis</b>: a system block is injected mid-trajectory at turn 0: 1 finding follows" in panel
        ep = store.get_episode("f3acbca0961a4057")
        run_panel = render_findings(ep, (4, ["system_block_injected"]))
        assert "Diagnosis" not in run_panel and "Every one of the 4 episodes of run" in run_panel
    finally:
        store.close()


def test_the_token_view_draws_roots_and_what_follows_from_them_apart(tmp_path):
    from dashboard.views.tokens import render_tokens

    shutil.copy(GOLDEN, tmp_path / "g.sqlite")
    store = Store(tmp_path / "g.sqlite")
    try:
        ep = store.get_episode("83fba487342d497c")  # a clean tito episode: only the findings below
    finally:
        store.close()
    n = len(ep.tokens)
    found = (
        Finding("generation_prompt_missing", E, "header", turn=0, token_start=10, token_end=11),
        Finding("mask_misaligned", E, "mask", turn=0, token_start=20, token_end=24, evidence={"positions": [20, 23]}),
        Finding("logprobs_misaligned", E, "lp", turn=0, token_start=5, token_end=6),
    )
    out = render_tokens(ep.evolve(findings=found), None, set())
    classes = tv.classes(tv.payload(out))
    assert len(classes) == n
    roots_at = [i for i, c in enumerate(classes) if "tok-root" in c]
    caused_at = [i for i, c in enumerate(classes) if "tok-caused" in c]
    # The mask finding after the missing header follows from it: drawn faint; the stray logprob before the
    # header is a root of its own.
    assert roots_at == [5, 10] and caused_at == [20, 23]
    assert "follows from a root" in out and "root finding" in out


def _as_slime_dump(ep, tok, tmp_path):
    """The episode as slime itself would dump it: no Rollscope metadata, imported back."""
    import torch

    from engine.formats import slime
    from engine.formats.base import ImportContext

    sample = slime.episode_to_sample(ep, 0, 0)
    sample["metadata"].pop("rollscope", None)
    path = tmp_path / "0.pt"
    torch.save({"rollout_id": 0, "samples": [sample]}, path)
    (out,) = list(slime.read(path, ImportContext("slime", tok, "smollm2")))
    return out


def test_a_slime_dump_without_our_metadata_shows_markup_bugs_at_their_token(tmp_path, smol_tokenizer):
    from engine.checks import CheckOptions, with_checks
    from tests import planted

    base = planted.build_base("math-tito", smol_tokenizer, "smollm2")
    opts = CheckOptions(tokenizer=smol_tokenizer)
    clean = with_checks(_as_slime_dump(base.episode, smol_tokenizer, tmp_path), opts).all_findings()
    assert not [f for f in clean if f.severity is E]
    assert any(f.kind == "not_checked" and "only the chat markup is checked" in f.message for f in clean)

    for plant in (planted.drop_gen_prompt, planted.drop_closing_newline):
        p = plant(base)
        found = with_checks(_as_slime_dump(p.episode, smol_tokenizer, tmp_path), opts).all_findings()
        errs = [r for r in roots(found) if r.severity is E]
        assert [(r.kind, r.token_start) for r in errs] == [(p.kind, p.token_start)], [
            (f.kind, f.token_start, f.caused_by) for f in found]


def test_a_one_reply_tool_episode_from_a_slime_dump_is_clean(tmp_path, smol_tokenizer, qwen3_tokenizer):
    from engine.checks import CheckOptions, with_checks
    from tests.planted import play
    from tests.toolenv import PriceEnv

    for tok in (smol_tokenizer, qwen3_tokenizer):
        ep = play(PriceEnv, tok, "tito", task=1, tokenizer_name="t", max_turns=1)  # one trained run
        found = with_checks(_as_slime_dump(ep, tok, tmp_path), CheckOptions(tokenizer=tok)).all_findings()
        assert not [f for f in found if f.severity is E], [(f.kind, f.message) for f in found]


def test_a_warning_never_explains_an_error_away():
    # slime renders a user message on its own after a rewrite: a warning, not the cause of a mask error.
    found = link_findings([
        _f("template_not_prefix_stable", Severity.WARNING, start=100, end=101, turn=1),
        _f("mask_misaligned", start=50, end=51, positions=[50]),
        _f("logprobs_missing", start=300, end=301, turn=2, positions=[300]),
    ])
    assert [f.caused_by for f in found] == [None, None, None]
    assert {r.kind for r in roots(found) if r.severity is E} == {"mask_misaligned", "logprobs_missing"}


def test_a_logprob_finding_beyond_what_the_mask_finding_covers_is_its_own_root():
    found = link_findings([
        _f("mask_misaligned", start=10, end=13, positions=[10, 11, 12], runs=[[10, 13]]),
        _f("logprobs_missing", start=10, end=700, runs=[[10, 13], [500, 700]],
           positions=[10, 11, 12, *range(500, 697)]),
    ])
    assert found[1].caused_by is None


def test_an_interrupted_diagnosis_fill_is_done_again_on_the_next_open(tmp_path, monkeypatch):
    import pytest

    db = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN, db)

    def boom(db):
        raise RuntimeError("interrupted")

    monkeypatch.setattr("engine.store.schema.backfill_diagnosis", boom)
    with pytest.raises(RuntimeError):
        Store(db)
    monkeypatch.undo()
    store = Store(db)
    try:
        assert store.count(EpisodeFilter(root_kind="system_block_injected")) == 5
    finally:
        store.close()
