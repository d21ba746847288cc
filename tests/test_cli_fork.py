"""``rollscope fork``: a stored episode forked at a turn and played to its end by the policy, on the real retail and
math envs."""

from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

from engine.cli import main
from engine.formats import export
from engine.store import Store


@pytest.fixture(scope="module")
def parent_db(tmp_path_factory):
    """A retail run of the scripted policy making mistakes: one finished episode of several turns to fork."""
    db = tmp_path_factory.mktemp("fork") / "f.db"
    assert main(["run", "--env", "retail", "--tasks", "0:2", "--mistake-rate", "0.4", "--db", str(db), "--quiet"]) == 0
    st = Store(db)
    parent = max(st.iter_episodes(), key=lambda e: e.n_turns)
    st.close()
    assert parent.n_turns >= 5
    return db, parent


def _copy(parent_db, tmp_path):
    """A copy of the parent's database, its write-ahead log included (SQLite's backup)."""
    src, parent = parent_db
    db = tmp_path / "f.db"
    with sqlite3.connect(src) as a, sqlite3.connect(db) as b:
        a.backup(b)
    return db, parent


def _forks(db, parent_id):
    st = Store(db)
    try:
        return [e for e in st.iter_episodes() if e.parent_id == parent_id]
    finally:
        st.close()


def test_forks_replay_the_turns_before_the_fork_and_are_stored_with_their_parent(parent_db, tmp_path, capsys):
    db, parent = _copy(parent_db, tmp_path)
    turn = 3
    # The parent's own mistake rate and seed: a fork sampled with the parent's seed would be the parent again.
    assert main(["fork", parent.id[:8], "--turn", str(turn), "--samples", "3", "--mistake-rate", "0.4",
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"forked {parent.id} at turn {turn}: replayed {turn} turns, every observation" in out
    assert "from turn 3, 3 samples (" in out and f"`rollscope diff {parent.id[:8]} " in out
    forks = _forks(db, parent.id)
    assert len(forks) == 3 and all(f.fork_turn == turn and f.checked is not None for f in forks)
    assert all(not f.source.by_hand and f.status.value != "running" for f in forks)
    # The parent's turns before the fork, token for token: its ids up to the fork turn's prompt.
    cut = parent.turns[turn].prompt_len
    assert cut > parent.prompt_len
    for f in forks:
        assert np.array_equal(f.tokens.ids[:cut], parent.tokens.ids[:cut])
        assert [t.generation.text for t in f.turns[:turn]] == [t.generation.text for t in parent.turns[:turn]]
    # The parent's own policy settings, where none are given: its mistake rate, its sampling.
    assert main(["fork", parent.id, "--turn", str(turn), "--db", str(db), "--no-store"]) == 0
    said = capsys.readouterr().out
    assert "(its policy: scripted, mistake rate 0.4)" in said and "max 256 new tokens, mistake rate 0.4)" in said
    # Every fork sampled anew: none is the parent again, and they differ among themselves.
    assert all(not np.array_equal(f.tokens.ids, parent.tokens.ids) for f in forks)
    assert len({tuple(f.tokens.ids.tolist()) for f in forks}) > 1


def test_fork_json_no_store_and_refusals(parent_db, tmp_path, capsys):
    db, parent = _copy(parent_db, tmp_path)
    assert main(["fork", parent.id, "--turn", "0", "--samples", "2", "--db", str(db), "--json", "--no-store",
                 "--mistake-rate", "0"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["parent_id"] for x in lines] == [parent.id] * 2 and all(x["replay_matched"] for x in lines)
    assert all(x["reward"] == 1.0 and not x["stored"] for x in lines)  # the reference replies from the start
    assert len({x["seed"] for x in lines}) == 2
    st = Store(db)
    assert st.count() == 2  # nothing stored
    st.close()
    for args, said in (
        (["--turn", str(parent.n_turns)], f"has turns 0 to {parent.n_turns - 1}"),
        (["--turn", "1", "--user", "human"], "no person to answer as the user"),
        (["--turn", "1", "--samples", "1000"], "samples: 1 to 256"),
    ):
        assert main(["fork", parent.id, *args, "--db", str(db)]) == 2
        assert said in capsys.readouterr().err


def test_a_parent_whose_record_cannot_replay_to_the_fork_turn_is_refused_and_nothing_stored(parent_db, tmp_path,
                                                                                           capsys):
    """A slime dump keeps the prompt's messages and the tokens: no reply to replay, so no fork at turn 3 is one."""
    src, parent = parent_db
    st = Store(src)
    dump = tmp_path / "s.pt"
    export([st.get_episode(parent.id)], "slime", dump)
    st.close()
    db = tmp_path / "imported.db"
    assert main(["import", str(dump), "--format", "slime", "--db", str(db), "--quiet"]) == 0
    capsys.readouterr()
    st = Store(db)
    (imported,) = st.iter_episodes()
    st.close()
    assert main(["fork", imported.id, "--turn", "3", "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert f"cannot fork {imported.id} at turn 3: replayed 0 of its turns before it" in err
    assert _forks(db, imported.id) == []


def test_an_imported_math_conversation_forks_with_the_envs_own_feedback(tmp_path, capsys):
    """A chat record of the math env: the env has no user, so its feedback is replayed, not a user's replies."""
    from engine.envs.math import MathEnv

    env = MathEnv()
    task = env.tasks[0]
    first = env.reset(task)[-1].content
    rec = {"env": "math", "task_id": task, "reward": 0.0, "messages": [
        {"role": "user", "content": first},
        {"role": "assistant", "content": "It is \\boxed{5}."},
        {"role": "user", "content": "Your answer is wrong. Please try again."},
        {"role": "assistant", "content": "It is \\boxed{68}."}]}
    path = tmp_path / "m.jsonl"
    path.write_text(json.dumps(rec) + "\n")
    db = tmp_path / "m.db"
    assert main(["import", str(path), "--format", "messages", "--db", str(db), "--tokenizer", "smollm2",
                 "--quiet"]) == 0
    st = Store(db)
    (parent,) = st.iter_episodes()
    st.close()
    code = main(["fork", parent.id, "--turn", "1", "--db", str(db), "--mistake-rate", "0"])
    err = capsys.readouterr().err
    assert "has no user" not in err, err
    assert code in (0, 1), err
    forks = _forks(db, parent.id)
    assert len(forks) == 1 and forks[0].turns[0].generation.text.startswith("It is \\boxed{5}")
