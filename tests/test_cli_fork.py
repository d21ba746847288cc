"""``rollscope fork``: a stored episode forked at a turn and played to its end by the policy, on the real retail env."""

from __future__ import annotations

import json

import numpy as np
import pytest

from engine.cli import main
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


def test_forks_replay_the_turns_before_the_fork_and_are_stored_with_their_parent(parent_db, tmp_path, capsys):
    src, parent = parent_db
    db = tmp_path / "f.db"
    db.write_bytes(src.read_bytes())
    turn = 3
    assert main(["fork", parent.id[:8], "--turn", str(turn), "--samples", "3", "--mistake-rate", "0.5",
                 "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"forked {parent.id} at turn {turn}: replayed {turn} turns, every observation" in out
    assert "from turn 3, 3 samples: mean reward" in out and f"`rollscope diff {parent.id[:8]} " in out
    st = Store(db)
    forks = [e for e in st.iter_episodes() if e.parent_id == parent.id]
    st.close()
    assert len(forks) == 3 and all(f.fork_turn == turn and f.checked is not None for f in forks)
    assert all(not f.source.by_hand and f.status.value != "running" for f in forks)
    # The parent's turns before the fork, token for token: its ids up to the fork turn's first generated token.
    cut = parent.turns[turn].generation.token_ids and parent.turns[turn].prompt_len
    for f in forks:
        assert np.array_equal(f.tokens.ids[:cut], parent.tokens.ids[:cut])
        assert [t.generation.text for t in f.turns[:turn]] == [t.generation.text for t in parent.turns[:turn]]
    # Seeds --seed, --seed+1, ...: the scripted policy's mistakes differ from sample to sample.
    assert len({tuple(f.tokens.ids.tolist()) for f in forks}) > 1


def test_fork_json_no_store_and_refusals(parent_db, tmp_path, capsys):
    src, parent = parent_db
    db = tmp_path / "f.db"
    db.write_bytes(src.read_bytes())
    assert main(["fork", parent.id, "--turn", "0", "--samples", "2", "--db", str(db), "--json", "--no-store",
                 "--mistake-rate", "0"]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    assert [x["parent_id"] for x in lines] == [parent.id] * 2 and all(x["replay_matched"] for x in lines)
    assert all(x["reward"] == 1.0 and not x["stored"] for x in lines)  # the reference replies from the start
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
