"""Rollscope JSONL: exact round trips and precise errors."""

from __future__ import annotations

import asyncio
import io
import json

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.envs.math import MathEnv
from engine.formats import jsonl
from engine.formats.jsonl import REQUIRED
from engine.loop.stepper import run_episode
from engine.presets import PRESETS


@pytest.fixture(scope="module")
def eps(smol_tokenizer):
    env = MathEnv()
    be = ScriptedBackend(MathEnv().reference_reply, smol_tokenizer, mistake_rate=0.5, seed=4)
    return [asyncio.run(run_episode(MathEnv(), be, smol_tokenizer, PRESETS["areal-math"], t)) for t in env.tasks[:3]]


def test_round_trip_exact(tmp_path, eps):
    p = tmp_path / "e.jsonl"
    with p.open("w") as f:
        assert jsonl.write(eps, f) == 3
    first = json.loads(p.read_text().splitlines()[0])
    for key in REQUIRED:
        assert key in first
    assert first["logprobs"][0] is None  # NaN (prompt token) written as null
    back = list(jsonl.read(p))
    assert back == eps


def test_malformed_lines_are_reported_and_skipped(tmp_path, eps):
    good = [jsonl.dumps(e) for e in eps]
    bad_reward = json.loads(good[1])
    bad_reward["reward"] = "high"
    short_mask = json.loads(good[2])
    short_mask["loss_mask"] = short_mask["loss_mask"][:-1]
    no_tokens = json.loads(good[2])
    del no_tokens["tokens"]
    lines = [good[0], "{not json", json.dumps(bad_reward), json.dumps(short_mask), json.dumps(no_tokens), "[1,2]"]
    p = tmp_path / "bad.jsonl"
    p.write_text("\n".join(lines) + "\n")
    report = jsonl.ReadReport()
    back = list(jsonl.read(p, report))
    assert [e.id for e in back] == [eps[0].id]
    msgs = [str(e) for e in report.errors]
    assert len(msgs) == 5
    assert msgs[0].startswith(f"{p}:2: not valid JSON")
    assert f"{p}:3: field 'reward'" in msgs[1]
    assert f"{p}:4: field 'loss_mask'" in msgs[2] and "entries for" in msgs[2]
    assert f"{p}:5: field 'tokens': missing" in msgs[3]
    assert f"{p}:6:" in msgs[4]


def test_write_to_stream(eps):
    buf = io.StringIO()
    jsonl.write(eps[:1], buf)
    assert buf.getvalue().count("\n") == 1
