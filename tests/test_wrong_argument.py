"""``wrong_argument_token``: the token where a wrong tool argument was generated, with the model's alternatives.

Retail mistakes are planted by the scripted policy at a known turn (``tests/planted_outcomes.py``) and run
through the real loop with real tokenizers; the top K a server would have given are written into the episode's
token arrays at the positions found here by reading the tokens one by one.
"""

from __future__ import annotations

import asyncio
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from engine.backends.scripted import ScriptedBackend
from engine.checks import CheckOptions, with_checks
from engine.checks.diagnosis import diagnosis
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Episode
from engine.store import Store
from engine.tokens import chat
from tests.conftest import QWEN3_DIR, ROOT
from tests.planted_outcomes import planted, slip

KIND = "wrong_argument_token"
WRONG_ADDRESS = {"address1": "3501 Rookery Street", "zip": "21741"}  # moved-00's reference: 2501 Rookery Street, 21141


def _preset(tok) -> str:
    # slime's token delta refuses Qwen3's template, which rewrites history: Qwen3 episodes run under tito.
    return "tito" if "qwen3" in str(getattr(tok, "name_or_path", "")) else "slime-tau"


def _moved(tok, **changes) -> tuple[Episode, int]:
    """moved-00 with its first write (modify_user_address) made with ``changes``; the turn it was planted at."""
    _, plant = slip("moved-00", **changes)
    ep, at = planted(tok, "moved-00", plant, preset=_preset(tok))
    assert ep.outcome.kind == "wrong_arguments" and ep.outcome.turn == at[0], ep.outcome.text
    return ep, at[0]


def _reply(ep: Episode, turn: int) -> tuple[int, list[int]]:
    seg = next(s for s in ep.segments if s.kind == "assistant" and s.turn == turn)
    return seg.start, ep.tokens.ids[seg.start : seg.end].tolist()


def _after(tok, ep: Episode, turn: int, text: str) -> int:
    """The position of the first token of ``turn``'s reply that follows the text ``text`` exactly."""
    start, ids = _reply(ep, turn)
    return start + next(i for i in range(len(ids)) if chat.decode(tok, ids[:i]).endswith(text))


def _one(tok, text: str) -> int:
    (i,) = chat.encode(tok, text)
    return i


def _with_top(ep: Episode, at: int, row: list[tuple[int, float]], k: int = 5) -> Episode:
    """The episode's arrays with a top ``k`` at every generated token (the sampled id alone, at 0.9) and ``row``
    (id, probability) at ``at``."""
    t = ep.tokens
    n = len(t)
    ids = np.full((n, k), -1, dtype=np.int32)
    lps = np.full((n, k), np.nan, dtype=np.float32)
    gen = t.loss_mask == 1
    ids[gen, 0] = t.ids[gen]
    lps[gen, 0] = math.log(0.9)
    ids[at], lps[at] = -1, np.nan
    for j, (i, p) in enumerate(row):
        ids[at, j], lps[at, j] = i, math.log(p)
    return ep.evolve(tokens=t.evolve(top_ids=ids, top_logprobs=lps))


def _found(ep: Episode, tok) -> list:
    return [f for f in with_checks(ep, CheckOptions(tokenizer=tok)).all_findings() if f.kind == KIND
            or f.evidence.get("check") == KIND]


@pytest.mark.parametrize("tname", ["smollm2", "qwen3"])
def test_the_right_digit_second_is_named_at_the_first_wrong_token(tname, smol_tokenizer, qwen3_tokenizer):
    tok = smol_tokenizer if tname == "smollm2" else qwen3_tokenizer
    ep, turn = _moved(tok, **WRONG_ADDRESS)
    at = _after(tok, ep, turn, '"address1": "')
    assert chat.decode(tok, [int(ep.tokens.ids[at])]) == "3"
    three, two = int(ep.tokens.ids[at]), _one(tok, "2")
    top = _with_top(ep, at, [(three, 0.61), (two, 0.34), (_one(tok, "4"), 0.03), (_one(tok, "1"), 0.01),
                             (_one(tok, "5"), 0.005)])
    checked = with_checks(top, CheckOptions(tokenizer=tok))
    (f,) = [f for f in checked.all_findings() if f.kind == KIND]  # one, though address1 and zip both differ
    assert (f.severity.value, f.turn, f.token_start, f.token_end) == ("info", turn, at, at + 1)
    ev = f.evidence
    assert (ev["key"], ev["token"], ev["expected_token"], ev["expected_rank"], ev["top_k"]) == ("address1", "3", "2", 2, 5)
    assert (ev["token_id"], ev["expected_token_id"], ev["other_keys"]) == (three, two, ["zip"])
    assert ev["probability"] == pytest.approx(0.61, abs=1e-6) and ev["expected_probability"] == pytest.approx(0.34, abs=1e-6)
    assert ev["expected_in_top_k"] is True and ev["taken"] == "3501 Rookery Street" and ev["expected"] == "2501 Rookery Street"
    assert f"at token {at}" in f.message and "the model gave '3' 0.61, '2' 0.34" in f.message
    # Checking again gives the same findings.
    assert with_checks(checked, CheckOptions(tokenizer=tok)).all_findings() == checked.all_findings()


def test_the_right_digit_absent_from_the_top_k_is_said_as_info(smol_tokenizer):
    tok = smol_tokenizer
    ep, turn = _moved(tok, **WRONG_ADDRESS)
    at = _after(tok, ep, turn, '"address1": "')
    three = int(ep.tokens.ids[at])
    top = _with_top(ep, at, [(three, 0.96), (_one(tok, "4"), 0.02), (_one(tok, "1"), 0.01), (_one(tok, "5"), 0.005),
                             (_one(tok, "6"), 0.002)])
    checked = with_checks(top, CheckOptions(tokenizer=tok))
    (f,) = [f for f in checked.all_findings() if f.kind == KIND]
    assert (f.severity.value, f.token_start, f.evidence["expected_in_top_k"], f.evidence["expected_token"]) == (
        "info", at, False, None)
    assert f.evidence["probability"] == pytest.approx(0.96, abs=1e-6)
    assert "the model gave '3' 0.96; the reference's value was not among its 5 most likely tokens there" in f.message
    # Nothing alarming: the episode's diagnosis is what it is without the top K.
    plain = with_checks(ep, CheckOptions(tokenizer=tok))
    assert diagnosis(checked.all_findings()) == diagnosis(plain.all_findings())
    assert [(g.kind, g.message) for g in checked.all_findings() if g.kind != KIND] == \
        [(g.kind, g.message) for g in plain.all_findings()]


def test_a_value_parting_after_its_first_tokens_is_found_at_the_token_that_parts(smol_tokenizer):
    """'2501 Rookery Avenue' where the reference has '2501 Rookery Street': the finding is on ' Avenue'. A top-K
    entry that fits both values (' ') is not the right value; ' St', a prefix of ' Street', is."""
    tok = smol_tokenizer
    ep, turn = _moved(tok, address1="2501 Rookery Avenue")
    at = _after(tok, ep, turn, '"address1": "2501 Rookery')
    avenue = int(ep.tokens.ids[at])
    assert chat.decode(tok, [avenue]) == " Avenue" and at > _after(tok, ep, turn, '"address1": "') + 2
    row = [(avenue, 0.5), (_one(tok, " "), 0.2), (_one(tok, " St"), 0.15), (_one(tok, " Lane"), 0.1)]
    (f,) = _found(_with_top(ep, at, row), tok)
    ev = f.evidence
    assert (f.token_start, ev["key"], ev["token"], ev["expected_token"], ev["expected_rank"]) == (
        at, "address1", " Avenue", " St", 3)
    assert ev["expected_probability"] == pytest.approx(0.15, abs=1e-6) and "other_keys" not in ev
    assert "the model gave ' Avenue' 0.50, ' St' 0.15" in f.message


def test_no_top_k_or_no_wrong_argument_gives_nothing(smol_tokenizer):
    tok = smol_tokenizer
    ep, turn = _moved(tok, **WRONG_ADDRESS)
    assert _found(ep, tok) == []  # no top K recorded: no finding and nothing said
    fine, at = planted(tok, "moved-00", lambda r, h: None)
    assert fine.outcome.kind == "success" and at == []
    start, ids = _reply(fine, 5)
    pos = start + 3
    assert _found(_with_top(fine, pos, [(ids[3], 0.5), (_one(tok, "2"), 0.4)]), tok) == []  # no false alarm


def test_a_taubench_episode_gets_it(fake_tau_bench, smol_tokenizer):
    from engine.envs.taubench import TauBenchEnv

    tok = smol_tokenizer
    right = '"reason": "no longer needed"'
    wrong = '"reason": "ordered by mistake"'

    def policy(task_id, history, rng, rate):
        return TauBenchEnv("retail").reference_reply(task_id, history, rng, 0.0).replace(right, wrong)

    ep = asyncio.run(run_episode(TauBenchEnv("retail"), ScriptedBackend(policy, tok), tok, PRESETS["slime-tau"], "0",
                                 preset="slime-tau"))
    o = ep.outcome
    assert (o.kind, o.differing_arguments) == ("wrong_arguments", ("reason",))
    at = _after(tok, ep, o.turn, '"reason": "')
    assert chat.decode(tok, [int(ep.tokens.ids[at])]) == "ordered"
    (f,) = _found(_with_top(ep, at, [(int(ep.tokens.ids[at]), 0.7), (_one(tok, "no"), 0.2)]), tok)
    assert (f.turn, f.token_start, f.evidence["token"], f.evidence["expected_token"]) == (o.turn, at, "ordered", "no")
    assert "the model gave 'ordered' 0.70, 'no' 0.20" in f.message


def test_check_show_and_the_findings_list_show_it(tmp_path, qwen3_tokenizer):
    from dashboard.views.episode import render_findings

    tok = qwen3_tokenizer
    ep, turn = _moved(tok, **WRONG_ADDRESS)
    at = _after(tok, ep, turn, '"address1": "')
    ep = _with_top(ep, at, [(int(ep.tokens.ids[at]), 0.61), (_one(tok, "2"), 0.34)])
    db = tmp_path / "x.db"
    store = Store(db)
    store.save_episode(ep)  # unchecked: `rollscope check` runs the checks on what the store gives back
    store.close()

    def cli(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, cwd=ROOT,
                              timeout=300)
        assert proc.returncode in (0, 1), proc.stderr
        return proc.stdout

    said = "the model gave '3' 0.61, '2' 0.34"
    out = cli("check", str(db), "--info", "--tokenizer", str(QWEN3_DIR))
    (line,) = [x for x in out.splitlines() if KIND in x]
    assert f"turn {turn}" in line and f"[{at}:{at + 1}]" in line and said in line
    rows = [json.loads(x) for x in cli("check", str(db), "--json", "--info", "--no-store", "--tokenizer",
                                        str(QWEN3_DIR)).splitlines() if x.startswith("{")]
    (row,) = [r for r in rows if r["kind"] == KIND]
    assert (row["token_start"], row["evidence"]["expected_token"]) == (at, "2")
    shown = cli("show", ep.id, "--db", str(db))
    assert any(KIND in x and said in x for x in shown.splitlines())
    store = Store(db)
    stored = store.get_episode(ep.id)
    store.close()
    html = render_findings(stored)
    assert KIND in html and said in html.replace("&#x27;", "'") and f"tok-{at}" in html


@pytest.mark.parametrize("text,key,taken,expected,at", [
    ('{"zip": "21741"}', "zip", "21741", "21141", '"21741"'.index("7") + len('{"zip": ')),
    # Written with JSON's ASCII escapes: the expected value is written so too, and they part at the escape.
    (json.dumps({"name": "Zoë"}), "name", "Zoë", "Zoe", len('{"name": "Zo')),
    ('{"item_ids": ["123", "456"]}', "item_ids", ["123", "456"], ["123", "457"], len('{"item_ids": ["123", "45')),
    ('{"n":3}', "n", 3, 2, len('{"n":')),
    # A taken value that is a prefix of the expected one parts where it ends: at its closing quote.
    ('{"zip": "2114"}', "zip", "2114", "21141", len('{"zip": "2114')),
    # The call after a draft of it in the reasoning is the one found.
    ('<think>{"zip": "21741"}</think>{"zip": "21741"}', "zip", "21741", "21141",
     len('<think>{"zip": "21741"}</think>{"zip": "21')),
    # Not JSON: the string value itself, its last place.
    ("cancel(reason=ordered by mistake)", "reason", "ordered by mistake", "no longer needed", len("cancel(reason=")),
])
def test_where_the_taken_value_parts_from_the_expected_one(text, key, taken, expected, at):
    from engine.checks.arguments import parting

    p = parting(text, key, taken, expected)
    assert p is not None and p.char == at and p.key == key


def test_a_value_not_in_the_text_or_the_same_as_expected_has_no_parting():
    from engine.checks.arguments import parting

    assert parting('{"zip": "21741"}', "zip", "99999", "21141") is None
    assert parting('{"n": 1}', "n", True, False) is None  # 1 is not True: the taken value is not there
    # The key written as JSON with another value: the same text elsewhere is not that argument's.
    assert parting('{"address1": "1 Main St", "zip": "21741"}', "address1", "21741", "21141") is None


def test_a_sampled_token_outside_the_top_k_is_said_to_be_below_them(smol_tokenizer):
    """A top K recomputed by another pass may not hold the sampled token: its probability there is below the
    least of them, and its rollout probability is evidence, not that number."""
    tok = smol_tokenizer
    ep, turn = _moved(tok, **WRONG_ADDRESS)
    at = _after(tok, ep, turn, '"address1": "')
    lps = ep.tokens.logprobs.copy()
    lps[at] = math.log(0.9)
    ep = ep.evolve(tokens=ep.tokens.evolve(logprobs=lps))
    (f,) = _found(_with_top(ep, at, [(_one(tok, "2"), 0.47), (_one(tok, "4"), 0.2), (_one(tok, "1"), 0.05)]), tok)
    assert (f.evidence["probability"], f.evidence["expected_token"], f.evidence["expected_rank"]) == (None, "2", 1)
    assert f.evidence["rollout_probability"] == pytest.approx(0.9, abs=1e-6)
    assert "the model gave '3' (below its 3 most likely, the least of them 0.05), '2' 0.47: the right value was " \
           "its choice 1 of 3" in f.message
