"""The tau-bench adapter, against a small package with tau-bench's interface."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.backends.scripted import ScriptedBackend
from engine.errors import ConfigError
from engine.loop.stepper import run_episode
from engine.presets import PRESETS
from engine.records.episode import Status
from tests.conftest import FAKE_TAUBENCH as FAKE

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def tau(fake_tau_bench):
    from engine.envs.taubench import TauBenchEnv

    return TauBenchEnv


def test_missing_package_says_how_to_install(monkeypatch):
    # None in sys.modules makes an import fail, as if the package were absent;
    # submodules cached by earlier tests must be hidden too.
    for mod in [m for m in sys.modules if m.startswith("tau_bench.")]:
        monkeypatch.setitem(sys.modules, mod, None)
    monkeypatch.setitem(sys.modules, "tau_bench", None)
    from engine.envs.taubench import TauBenchEnv

    with pytest.raises(ConfigError, match="tau-bench is not installed.*pip install"):
        TauBenchEnv("retail")


def test_adapter_shapes(tau):
    env = tau("retail")
    assert env.name == "taubench:retail" and env.tasks == ["0", "1", "2"]
    assert {t["function"]["name"] for t in env.tools} >= {"cancel_pending_order", "get_order_details"}
    assert "Authenticate" in env.system_prompt("0")
    first = env.reset("0")
    assert first[0].role == "user" and "Cancel order #A1" in first[0].content


@pytest.mark.parametrize("task", ["0", "1", "2"])
@pytest.mark.parametrize("mode", ["retokenize", "tito"])
def test_scripted_policy_solves_every_task(tau, smol_tokenizer, task, mode):
    make = lambda: tau("retail")  # noqa: E731
    be = ScriptedBackend(make().reference_reply, smol_tokenizer, mistake_rate=0.0)
    ep = asyncio.run(run_episode(make(), be, smol_tokenizer, PRESETS["slime-tau"].with_(token_mode=mode), task,
                                 preset="slime-tau"))
    assert ep.status is Status.COMPLETED, ep.reason
    assert ep.reward == 1.0
    tool_turns = [t for t in ep.turns if t.tool_calls]
    assert all(t.observation[0].role == "tool" and t.observation[0].name == t.tool_calls[0].name for t in tool_turns)
    assert ep.turns[-1].info["reward_info"]["db_match"] is True


def test_wrong_action_scores_zero(tau, smol_tokenizer):
    env = tau("retail")
    env.reset("0")
    from engine.records.episode import Action

    env.step(Action("cancel_pending_order", {"order_id": "#B1", "reason": "no longer needed"}))
    res = env.step(Action("respond", {"content": "Done. Is there anything else I can help you with?"},
                          "Done. Is there anything else I can help you with?"))
    assert res.done and res.reward == 0.0 and res.info["success"] is False


def test_malformed_tool_call_aborts_under_slime_tau(tau, smol_tokenizer):
    make = lambda: tau("retail")  # noqa: E731
    be = ScriptedBackend(make().reference_reply, smol_tokenizer, mistake_rate=1.0)
    ep = asyncio.run(run_episode(make(), be, smol_tokenizer, PRESETS["slime-tau"], "0", preset="slime-tau"))
    assert ep.status is Status.ABORTED and "parse error" in ep.reason


def test_cli_runs_taubench(tmp_path):
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{FAKE}"}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "run", "--env", "taubench:retail", "--tasks", "0:3",
                           "--mistake-rate", "0", "--db", str(tmp_path / "t.db"), "--quiet"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "3 episodes (completed 3), mean reward 1.000" in proc.stdout
