"""A dump's reward as the trainer read it: a reward model's dict of scores gives the score the trainer took, and
what the import cannot know it asks for or says, never a number made up."""

from __future__ import annotations

import subprocess
import sys

from engine.formats import export, import_path
from engine.formats.base import safe_torch_load
from engine.store import Store
from tests.fixtures_formats import slime_sample, write_jsonl, write_slime_dump


def _samples() -> list[dict]:
    scores = {"acc": 1.0, "response_len": 26}  # slime's --reward-key picks one: summed, they would read 27
    return [slime_sample([1, 2, 3, 4], 2, index=0, reward=dict(scores)),
            slime_sample([1, 2, 3, 5], 2, index=1, reward={"score": 0.5, "format": 1.0}),
            slime_sample([1, 2, 3, 6], 2, index=2, reward=None)]


def test_a_dict_of_scores_without_a_score_key_is_refused_and_names_the_option_that_picks_one(tmp_path):
    f = write_slime_dump(tmp_path / "3.pt", _samples(), rollout_id=3)
    st = Store(tmp_path / "a.db")
    report = import_path(f, "slime", st)
    assert report.new == 2 and report.skipped == 1
    err = str(report.errors[0])
    assert "'acc', 'response_len'" in err and "--reward-key" in err and "sample 0" in err, err
    rewards = sorted(e.reward for e in st.iter_episodes())
    assert rewards == [0.0, 0.5]  # the dict's 'score'; the sample never scored reads 0.0, and the import says so
    assert any("hold no reward (null" in n for n in report.notes), report.notes
    st.close()


def test_the_reward_key_picks_the_score_as_slime_does_and_the_export_gives_the_dict_back(tmp_path):
    f = write_slime_dump(tmp_path / "3.pt", _samples()[:1], rollout_id=3)
    st = Store(tmp_path / "a.db")
    assert import_path(f, "slime", st, reward_key="acc").new == 1
    (ep,) = list(st.iter_episodes())
    assert ep.reward == 1.0 and ep.source.details["reward_key"] == "acc"
    out = tmp_path / "back.pt"
    export([ep], "slime", out)
    assert safe_torch_load(out)["samples"][0]["reward"] == {"acc": 1.0, "response_len": 26}
    missing = import_path(f, "slime", Store(tmp_path / "b.db"), reward_key="pass")
    assert missing.new == 0 and "has no key 'pass'" in str(missing.errors[0]) and "'acc'" in str(missing.errors[0])
    st.close()


def test_a_verl_row_and_the_command_line_read_the_key_too(tmp_path):
    """verl's rollout_data_dir rows, through ``rollscope import --reward-key``."""
    rows = write_jsonl(tmp_path / "1.jsonl", [{"input": "q", "output": "a", "score": {"acc": 0.25, "len": 3}},
                                              {"input": "q2", "output": "b", "score": {"acc": 0.75, "len": 4}}])
    db = tmp_path / "v.db"
    run = [sys.executable, "-m", "engine.cli", "import", str(rows), "--format", "verl", "--db", str(db), "--quiet"]
    refused = subprocess.run(run, capture_output=True, text=True)
    assert "--reward-key" in refused.stdout + refused.stderr
    ok = subprocess.run([*run, "--reward-key", "acc"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    st = Store(db)
    assert sorted(e.reward for e in st.iter_episodes()) == [0.25, 0.75]
    st.close()
