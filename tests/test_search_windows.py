"""The search index's texts by window: a text is stored once within a window of texts, a system prompt or tool
schema once for good, every episode that holds a text is found by it, and a batch's new keys cost the digest
index a few pages, not one for each text."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from engine.records.episode import Message
from engine.store import EpisodeFilter, Store, index
from tests.synthetic import synthetic_episode, synthetic_episodes
from tests.walpages import by_owner, wal_pages

WINDOW = 8


def _rows(store: Store, body: str) -> int:
    return int(store.db.conn.execute("SELECT COUNT(*) FROM search_texts WHERE body = ?", [body]).fetchone()[0])


def test_a_text_is_stored_once_in_its_window_and_a_system_prompt_once_for_good(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "_WINDOW", WINDOW)
    s = Store(tmp_path / "w.db")

    def ids(texts: list[str], context: tuple[str, ...] = ()) -> dict[str, int]:
        with s.db.conn:
            return s._text_ids([*texts, *context], context)

    first = ids(["shared", "once"], ("the system prompt",))
    assert ids(["shared"], ("the system prompt",)) == {"shared": first["shared"], "the system prompt":
                                                       first["the system prompt"]}
    ids([f"filler {i}" for i in range(WINDOW)])  # the texts reach the next window: the one before is looked in too
    assert ids(["shared"])["shared"] == first["shared"]
    ids([f"more filler {i}" for i in range(2 * WINDOW)])  # two windows on: "shared" is out of reach
    later = ids(["shared"], ("the system prompt",))
    assert later["shared"] != first["shared"] and later["the system prompt"] == first["the system prompt"]
    assert ids(["shared"])["shared"] == later["shared"]
    assert (_rows(s, "shared"), _rows(s, "the system prompt"), _rows(s, "once")) == (2, 1, 1)
    both = ids(["a prompt quoted by the user"], ("a prompt quoted by the user",))  # one text in both places
    assert [r[0] for r in s.db.conn.execute("SELECT length(hash) FROM search_texts WHERE body = ?",
                                            ["a prompt quoted by the user"])] == [16]
    assert ids(["a prompt quoted by the user"]) != both  # looked up by window alone, it is another text
    s.close()


def test_every_episode_holding_a_text_is_found_by_it_across_windows(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(index, "_WINDOW", WINDOW)
    question = "Which warehouse ships the quartz lamp?"
    eps = [synthetic_episode(i) for i in range(12)]
    asking = {0, 5, 11}  # each episode holds more texts than a window: these are windows apart
    eps = [replace(ep, messages=(ep.messages[0], Message("user", question), *ep.messages[2:])) if i in asking else ep
           for i, ep in enumerate(eps)]
    s = Store(tmp_path / "f.db")
    for _ in s.save_batches(eps[:6]):
        pass
    for ep in eps[6:]:  # turn by turn, as a live episode is written
        for k in range(len(ep.turns)):
            part = ep.evolve(turns=ep.turns[: k + 1])
            s.save_turn(part, part.turns[k])
        s.finish_episode(ep)
    system = eps[0].messages[0].content
    assert {e.id for e in s.list_episodes(EpisodeFilter(text=question), limit=50)} == {eps[i].id for i in asking}
    assert _rows(s, question) >= 3  # windows apart (and a live episode's opening is looked up again each turn)
    same_system = {ep.id for ep in eps if ep.messages[0].content == system}
    assert len(same_system) > 1 and _rows(s, system) == 1
    assert {e.id for e in s.list_episodes(EpisodeFilter(text=system[:40], search_context=True), limit=50)} >= \
        same_system
    s.close()


def test_texts_keyed_by_their_digest_alone_are_found_and_an_episode_written_again_moves_to_its_window(
        tmp_path: Path) -> None:
    """A file whose texts were keyed by their digests alone (before windows): its episodes are found by their
    texts; a new episode with the same question is stored with a window's key, and both are found; the first,
    written again, refers to the new copy, and is still found."""
    question = "Is the blue kettle back in stock?"
    first, second = (replace(synthetic_episode(i), messages=(synthetic_episode(i).messages[0],
                                                             Message("user", question))) for i in (1, 2))
    s = Store(tmp_path / "old.db")
    s.save_episode(first)
    with s.db.conn:
        s.db.conn.execute("UPDATE search_texts SET hash = substr(hash, 5) WHERE length(hash) = 20")
    found = lambda: {e.id for e in s.list_episodes(EpisodeFilter(text=question), limit=10)}  # noqa: E731
    assert found() == {first.id}
    s.save_episode(second)
    assert found() == {first.id, second.id} and _rows(s, question) == 2
    old_id = s.db.conn.execute("SELECT id FROM search_texts WHERE body = ? AND length(hash) = 16",
                               [question]).fetchone()[0]
    for _ in s.save_batches([first.evolve(reward=0.25)]):
        pass
    assert found() == {first.id, second.id} and _rows(s, question) == 2
    assert s.db.conn.execute("SELECT COUNT(*) FROM search_refs WHERE text_id = ?", [old_id]).fetchone()[0] == 0
    s.close()


def test_a_batch_writes_a_few_pages_of_the_digest_index_in_a_file_of_many_texts(tmp_path: Path) -> None:
    """A file that holds 200,000 texts (keyed by their digests alone, as before windows) takes a batch of 300
    episodes: their new texts' keys lie in their window's range, so the digest index's pages in the log are a few
    per hundred texts. Keyed by digest alone, each would land on a page of its own: about half a page a text
    here."""
    db = tmp_path / "many.db"
    s = Store(db)
    conn = s.db.conn
    with conn:
        conn.executemany("INSERT INTO search_texts (hash, body) VALUES (?, ?)",
                         ((os.urandom(16), f"old text {i}") for i in range(200_000)))
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    before = int(conn.execute("SELECT MAX(id) FROM search_texts").fetchone()[0])
    for _ in s.save_batches(synthetic_episodes(300, start=10_000)):
        pass
    added = int(conn.execute("SELECT MAX(id) FROM search_texts").fetchone()[0]) - before
    frames = wal_pages(Path(f"{db}-wal"))
    s.close()
    logged, _ = by_owner(db, frames)
    assert added > 1000
    assert logged["sqlite_autoindex_search_texts_1"] < 0.05 * added, (logged.most_common(5), added)
