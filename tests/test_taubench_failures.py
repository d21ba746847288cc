"""tau-bench results of tasks that raised, and of results whose reward is null or disagrees with the calls.

Sierra's ``run.py`` (``tau_bench/run.py``, ``_run``) writes a task whose ``agent.solve`` raised as
``EnvRunResult(task_id=idx, reward=0.0, info={"error": str(e), "traceback": traceback.format_exc()}, traj=[],
trial=i)``, dumped with ``model_dump()`` into one JSON list with ``indent=2``. The results here are made so: the
exception raised and caught, its traceback formatted by ``traceback``.
"""

from __future__ import annotations

import copy
import json
import sys
import traceback

import pytest

from engine import Store, formats
from engine.records.episode import Status
from tests.fakes import openai_tool_call, tau_cancel_result


class RateLimitError(Exception):
    """Stands for litellm's, which is what a rate-limited run raises."""


RateLimitError.__module__ = "litellm.exceptions"  # as the traceback's last line names litellm's
RATE_LIMIT = ("litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit reached for gpt-4o in "
              "organization org-x on tokens per min (TPM): Limit 30000, Used 29717, Requested 1402.")
AIRLINE_WIKI = "# Airline agent policy\nThe current time is 2024-05-15 15:00:00 EST."


def raised(task_id: int, trial: int, error: Exception) -> dict:
    """A result as run.py writes it for a task whose agent raised ``error``."""
    try:
        raise error
    except Exception as e:
        return {"task_id": task_id, "reward": 0.0, "info": {"error": str(e), "traceback": traceback.format_exc()},
                "traj": [], "trial": trial}


def with_task(result: dict, reason: str = "no longer needed") -> dict:
    """``result`` (task 0 of the fake tau_bench) with the task and reward info ToolCallingAgent.solve puts in
    ``info``, the agent's cancellation made with ``reason``."""
    r = copy.deepcopy(result)
    r["traj"][6]["tool_calls"] = [openai_tool_call("c2", "cancel_pending_order", {"order_id": "#A1", "reason": reason})]
    actions = [{"name": "find_user_id_by_name_zip", "kwargs": {"name": "Ana Ito", "zip": "10001"}},
               {"name": "cancel_pending_order", "kwargs": {"order_id": "#A1", "reason": "no longer needed"}}]
    r["info"] = {"task": {"user_id": "ana_1", "instruction": "Cancel #A1.", "outputs": [], "actions": actions},
                 "source": "user", "user_cost": 0.0,
                 "reward_info": {"reward": r["reward"], "info": {"r_actions": r["reward"], "gt_data_hash": "x"},
                                 "actions": actions}}
    return r


def write(path, results) -> None:
    path.write_text(json.dumps(results, indent=2), encoding="utf-8")


def import_file(tmp_path, results, env=None, name="results.json"):
    path = tmp_path / name
    write(path, results)
    store = Store(tmp_path / "x.db")
    return store, formats.import_path(path, "taubench", store, env=env), path


@pytest.fixture
def no_tau_bench(monkeypatch):
    monkeypatch.setitem(sys.modules, "tau_bench", None)  # not installed, as for most who import results


@pytest.mark.parametrize("installed", [False, True], ids=["tau_bench missing", "tau_bench installed"])
def test_a_task_that_raised_is_an_aborted_episode_with_its_error(tmp_path, monkeypatch, request, installed):
    if installed:
        request.getfixturevalue("fake_tau_bench")
    else:
        monkeypatch.setitem(sys.modules, "tau_bench", None)
    failed = raised(1, 0, RateLimitError(RATE_LIMIT))
    store, report, path = import_file(tmp_path, [tau_cancel_result(), failed])  # no --env: the other result's policy
    assert report.errors == [] and report.new == 2
    (ep,) = [e for e in store.iter_episodes() if e.task_id == "1"]
    assert (ep.env, ep.status, ep.reward, ep.sample_index, ep.n_turns, ep.messages) == (
        "taubench:retail", Status.ABORTED, 0.0, 0, 0, ())
    assert ep.reason == f"RateLimitError: {RATE_LIMIT}"
    assert ep.source.kind == "taubench" and ep.source.details["info"] == failed["info"]  # the traceback kept
    assert ep.source.details["info"]["traceback"].rstrip().endswith(f"litellm.exceptions.RateLimitError: {RATE_LIMIT}")
    o = ep.outcome
    assert o.kind == "other" and o.passed is None and (o.expected, o.taken) == (None, None)
    assert "not installed" not in o.text and "never called" not in o.text
    assert o.text.startswith("reward 0: tau-bench's run.py kept no conversation for this task (it raised)")
    assert o.text.endswith(f"ended aborted before the env scored it (RateLimitError: {RATE_LIMIT})")
    assert any(f"{path}: 1 result is a task that raised in tau-bench's run" in n and "status=aborted" in n
               for n in report.notes)
    # Counted among the aborted, and read again it is the one stored.
    assert [e.task_id for e in store.iter_episodes() if e.status is Status.ABORTED] == ["1"]
    again = formats.import_path(path, "taubench", store)
    assert (again.new, again.already_present, again.errors) == (0, 2, [])
    store.close()


def test_the_reason_is_the_first_line_bounded_or_the_type_of_an_error_without_a_message(tmp_path, no_tau_bench):
    results = [raised(0, 0, RateLimitError("Rate limit reached.\nRetry after 2s.\n  details: ...")),
               raised(1, 0, TimeoutError()),
               raised(2, 0, KeyError("x" * 2000))]
    store, report, _ = import_file(tmp_path, results, env="taubench:airline")
    assert report.new == 3 and report.errors == []
    by_task = {ep.task_id: ep for ep in store.iter_episodes()}
    assert by_task["0"].reason == "RateLimitError: Rate limit reached."
    assert by_task["1"].reason == "TimeoutError"
    long = by_task["2"].reason
    assert long.startswith("KeyError: 'xxx") and long.endswith("…") and len(long) < 400
    assert all(ep.env == "taubench:airline" and ep.status is Status.ABORTED for ep in by_task.values())
    assert "Retry after 2s" in by_task["0"].source.details["info"]["error"]  # the whole error kept
    store.close()


def test_without_env_a_task_that_raised_needs_the_files_other_results_to_name_the_domain(tmp_path, no_tau_bench):
    airline = tau_cancel_result()
    airline["traj"][0]["content"] = AIRLINE_WIKI
    store, report, _ = import_file(tmp_path, [raised(4, 2, RateLimitError(RATE_LIMIT)), airline])
    assert report.errors == [] and {(ep.env, ep.task_id, ep.status) for ep in store.iter_episodes()} == {
        ("taubench:airline", "4", Status.ABORTED), ("taubench:airline", "0", Status.COMPLETED)}
    store.close()

    give = "give --env taubench:retail or --env taubench:airline"
    alone = tmp_path / "alone"
    alone.mkdir()
    store, report, path = import_file(alone, [raised(4, 0, RateLimitError(RATE_LIMIT))])
    assert report.new == 0 and [str(e) for e in report.errors] == [
        f"{path}: result 0: field 'traj': this task raised in tau-bench's run (RateLimitError: {RATE_LIMIT}) and "
        "run.py kept no conversation for it, so no policy text tells its domain, and no other result in this file "
        f"names one in its policy text: {give}"]
    store.close()

    both = tmp_path / "both"
    both.mkdir()
    store, report, _ = import_file(both, [tau_cancel_result(), airline, raised(4, 0, RateLimitError(RATE_LIMIT))])
    assert report.new == 2 and len(report.errors) == 1
    assert str(report.errors[0]).endswith(f"the results in this file name both retail and airline: {give}")
    store.close()

    # --env says it.
    given = tmp_path / "given"
    given.mkdir()
    store, report, _ = import_file(given, [raised(4, 0, RateLimitError(RATE_LIMIT))], env="taubench:retail")
    assert report.errors == [] and [ep.env for ep in store.iter_episodes()] == ["taubench:retail"]
    store.close()


def test_the_same_failure_in_two_runs_files_is_two_episodes(tmp_path, no_tau_bench):
    failed = raised(3, 0, RateLimitError(RATE_LIMIT))
    store, first, _ = import_file(tmp_path, [failed], env="taubench:retail", name="run-a.json")
    write(tmp_path / "run-b.json", [failed])
    second = formats.import_path(tmp_path / "run-b.json", "taubench", store, env="taubench:retail")
    assert (first.new, second.new) == (1, 1)
    assert [ep.status for ep in store.iter_episodes()] == [Status.ABORTED, Status.ABORTED]
    store.close()


def test_a_null_reward_is_not_explained_as_a_success(tmp_path, no_tau_bench):
    right = with_task(tau_cancel_result(reward=1.0))
    null = copy.deepcopy(right)
    null["reward"], null["trial"] = None, 1
    store, report, _ = import_file(tmp_path, [right, null])
    assert report.errors == [] and any("hold no reward" in n for n in report.notes)
    by_trial = {ep.sample_index: ep for ep in store.iter_episodes()}
    assert (by_trial[0].reward, by_trial[0].outcome.kind) == (1.0, "success")
    ep = by_trial[1]
    assert ep.reward == 0.0 and ep.outcome.kind == "other" and ep.outcome.passed is None
    assert ep.source.details["reward"] is None  # what the outcome reads it by
    assert ep.outcome.text.endswith("; but the result holds no reward (null, read as 0), so tau-bench's verdict is "
                                    "not recorded")
    store.close()


def test_the_outcome_agrees_with_the_recorded_reward(tmp_path, no_tau_bench):
    wrong = "ordered by mistake"
    results = [with_task(tau_cancel_result(reward=0.0, trial=0)),                 # the calls right, reward 0
               with_task(tau_cancel_result(reward=1.0, trial=1), reason=wrong),   # the calls wrong, reward 1
               with_task(tau_cancel_result(reward=0.0, trial=2), reason=wrong)]   # both say it failed
    null_wrong = with_task(tau_cancel_result(trial=3), reason=wrong)
    null_wrong["reward"] = None
    store, report, _ = import_file(tmp_path, [*results, null_wrong])
    assert report.errors == [] and report.new == 4
    o = {ep.sample_index: ep.outcome for ep in store.iter_episodes()}
    assert o[0].kind == "other" and o[0].text == ("every reference write was made, nothing else was written, every "
                                                  "required output was said; but tau-bench recorded reward 0")
    # A failing kind beside a reward of 1 is left as the comparison says (the reward is tau-bench's).
    assert (o[1].kind, o[1].text) == ("wrong_arguments", "turn 2: cancel_pending_order was called with reason="
                                      "'ordered by mistake' where the reference has 'no longer needed'")
    assert (o[2].kind, o[2].differing_arguments) == ("wrong_arguments", ("reason",))
    assert "tau-bench recorded" not in o[2].text
    assert o[3].kind == "wrong_arguments" and o[3].text.endswith("; the result holds no reward (null, read as 0), "
                                                                 "so tau-bench's verdict is not recorded")
    store.close()


def test_the_cli_import_names_the_task_that_raised_and_show_prints_its_error(tmp_path, capsys, no_tau_bench):
    from engine.cli import main

    path, db = tmp_path / "results.json", str(tmp_path / "x.db")
    write(path, [tau_cancel_result(), raised(1, 0, RateLimitError(RATE_LIMIT))])
    assert main(["import", str(path), "--format", "taubench", "--db", db]) == 0
    out, err = capsys.readouterr()
    assert out.startswith("imported 2 new, 0 already present") and "skipped" not in err
    assert (f"rollscope: note: {path}: 1 result is a task that raised in tau-bench's run (info.error, no conversation "
            "kept): imported as aborted, the error the reason and the traceback in the source's info (`--where "
            f"status=aborted` lists them); the first, task 1 trial 0: RateLimitError: {RATE_LIMIT}\n") in err
    assert "not installed" not in out + err
    assert main(["ls", "--db", db, "--where", "status=aborted"]) == 0
    listed = capsys.readouterr().out
    (row,) = [line for line in listed.splitlines() if "taubench:retail" in line]
    episode_id = row.split()[0]
    assert row.split()[1:4] == ["taubench:retail", "1", "aborted"]
    assert main(["show", episode_id, "--db", db]) == 0
    shown = capsys.readouterr().out
    assert f"status=aborted (RateLimitError: {RATE_LIMIT})" in shown
    assert "outcome: other: reward 0: tau-bench's run.py kept no conversation for this task (it raised)" in shown

    # A file of failures alone, without --env: skipped, saying what to give, and exit 1.
    alone = tmp_path / "alone.json"
    write(alone, [raised(1, 0, RateLimitError(RATE_LIMIT))])
    assert main(["import", str(alone), "--format", "taubench", "--db", str(tmp_path / "y.db")]) == 1
    err = capsys.readouterr().err
    assert f"rollscope: skipped {alone}: result 0: field 'traj': this task raised in tau-bench's run" in err
    assert err.split("\n")[0].endswith("give --env taubench:retail or --env taubench:airline")


def test_a_task_that_raised_is_not_said_to_replay_as_recorded(tmp_path, fake_tau_bench):
    """Nothing ran: a replay reproduces nothing, and says why, rather than that every output and the reward came back."""
    import asyncio

    from engine.loop.replay import replay_stored

    store, _, _ = import_file(tmp_path, [tau_cancel_result(), raised(1, 0, RateLimitError(RATE_LIMIT))])
    (ep,) = [e for e in store.iter_episodes() if e.task_id == "1"]
    store.close()
    result = asyncio.run(replay_stored(ep))
    assert not result.reproduced and "holds no turn to replay" in result.reason and "RateLimitError" in result.reason


def test_a_task_that_raised_stored_before_as_an_empty_conversation_is_found_again(tmp_path, no_tau_bench):
    """Read before as a completed conversation of no turns, under the id of an empty trajectory: found, not stored
    twice."""
    from engine.formats.base import stable_id
    from engine.records.episode import Episode
    from engine.records.provenance import Source

    failed = raised(3, 0, RateLimitError(RATE_LIMIT))
    old = stable_id("taubench", "taubench:retail", 3, 0, [])
    store = Store(tmp_path / "x.db")
    store.save_episode(Episode(id=old, env="taubench:retail", task_id="3", status=Status.COMPLETED, reason="imported",
                               source=Source.imported("taubench", str(tmp_path / "results.json"), index=0)))
    path = tmp_path / "results.json"
    write(path, [failed])
    report = formats.import_path(path, "taubench", store, env="taubench:retail")
    assert (report.new, report.already_present) == (0, 1)
    again = formats.import_path(path, "taubench", store, env="taubench:retail", replace_changed=True)
    (ep,) = store.iter_episodes()
    store.close()
    assert again.new == 0 and ep.id == old and ep.status is Status.ABORTED
