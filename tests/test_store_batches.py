"""Imports write a batch of episodes in one transaction, each episode in a savepoint of its own, on a real file."""

from __future__ import annotations

from pathlib import Path

from engine.store import Store
from tests.synthetic import synthetic_episodes


def test_a_batch_is_one_transaction_with_a_savepoint_per_episode(tmp_path: Path) -> None:
    store = Store(tmp_path / "b.db")
    conn = store.db.conn
    outside: list[str] = []

    def traced(sql: str) -> None:
        # A savepoint opened outside a transaction begins one of its own, and its release commits it.
        if sql.startswith("SAVEPOINT") and not conn.in_transaction:
            outside.append(sql)

    conn.set_trace_callback(traced)
    try:
        done = list(store.save_batches(synthetic_episodes(150), batch=64))
    finally:
        conn.set_trace_callback(None)
    assert [state for _, state, _ in done] == ["new"] * 150 and store.count() == 150
    assert outside == []
    store.close()
