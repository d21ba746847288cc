"""`rollscope import` and `rollscope export` end to end, as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.store import Store
from tests.fixtures_formats import loop_episodes, slime_sample, write_malicious_pt, write_slime_dump

ROOT = Path(__file__).resolve().parents[1]


def rollscope(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env, timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


@pytest.fixture(scope="module")
def db(tmp_path_factory, smol_tokenizer):
    path = tmp_path_factory.mktemp("cli") / "live.db"
    st = Store(path)
    eps = loop_episodes(smol_tokenizer)
    for e in eps:
        st.save_episode(e)
    st.set_tags(eps[0].id, ["gold"])
    st.set_tags(eps[1].id, ["gold"])
    st.set_starred(eps[1].id, True)
    st.close()
    return path, eps


def test_export_slime_then_import_twice(tmp_path, db):
    path, eps = db
    out = tmp_path / "rollout_0.pt"
    ex = rollscope("export", "--db", str(path), "--format", "slime", "-o", str(out))
    assert f"exported {len(eps)} episodes (slime)" in ex.stderr and out.is_file()
    new_db = tmp_path / "imported.db"
    first = rollscope("import", str(out), "--format", "slime", "--db", str(new_db), "--tokenizer", "smollm2")
    assert f"imported {len(eps)} new, 0 already present" in first.stdout
    assert "0 malformed records skipped" in first.stdout
    again = rollscope("import", str(out), "--format", "slime", "--db", str(new_db))
    assert f"imported 0 new, {len(eps)} already present" in again.stdout
    st = Store(new_db)
    assert st.count() == len(eps)
    by_origin = {e.source.details["original_id"]: e for e in st.iter_episodes()}
    for e in eps:
        assert by_origin[e.id].tokens == e.tokens and by_origin[e.id].reward == e.reward
    assert {e.tokenizer for e in by_origin.values()} == {"smollm2"}
    ls = rollscope("ls", "--db", str(new_db), "--where", "source=slime")
    assert f"({len(eps)} of {len(eps)} episodes)" in ls.stdout


def test_export_filters_and_stdout(tmp_path, db):
    path, eps = db
    out = tmp_path / "gold.jsonl"
    rollscope("export", "--db", str(path), "-o", str(out), "--tag", "gold")
    assert {json.loads(line)["id"] for line in out.read_text().splitlines()} == {eps[0].id, eps[1].id}
    rollscope("export", "--db", str(path), "-o", str(out), "--tag", "gold", "--starred")
    assert [json.loads(line)["id"] for line in out.read_text().splitlines()] == [eps[1].id]
    rollscope("export", "--db", str(path), "-o", str(out), "--id", eps[2].id[:8], "--id", eps[3].id)
    assert {json.loads(line)["id"] for line in out.read_text().splitlines()} == {eps[2].id, eps[3].id}
    sft = rollscope("export", "--db", str(path), "--format", "messages", "-o", "-", "--where", "env=price")
    rows = [json.loads(line) for line in sft.stdout.splitlines()]
    assert rows and all(r["env"] == "price" and r["tools"] for r in rows)
    pq = tmp_path / "all.parquet"
    rollscope("export", "--db", str(path), "--format", "parquet", "-o", str(pq), "--where", "status=completed")
    assert pq.is_file() and not (tmp_path / "all.parquet.part").exists()
    bad = rollscope("export", "--db", str(path), "--format", "slime", "-o", "-", check=False)
    assert bad.returncode == 2 and "binary format" in bad.stderr


def test_import_reports_each_skipped_record(tmp_path):
    f = write_slime_dump(tmp_path / "r.pt", [
        slime_sample([1, 2, 3, 4], 2, index=0),
        slime_sample([1.5, 2.0], 1, index=1),
        slime_sample([1, 2, 3], 1, index=2, reward="high"),
    ])
    proc = rollscope("import", str(f), "--format", "slime", "--db", str(tmp_path / "x.db"))
    assert "imported 1 new, 0 already present" in proc.stdout and "2 malformed records skipped" in proc.stdout
    skipped = [line for line in proc.stderr.splitlines() if line.startswith("rollscope: skipped")]
    assert skipped == [
        f"rollscope: skipped {f}: sample 1: field 'tokens': must be integer token ids, got floats",
        f"rollscope: skipped {f}: sample 2: field 'reward': must be a number, got a string 'high'",
    ]
    assert "no tokenizer" in proc.stderr


def test_unsafe_and_missing_files_are_one_clear_line(tmp_path):
    marker = tmp_path / "pwned"
    evil = write_malicious_pt(tmp_path / "evil.pt", marker)
    proc = rollscope("import", str(evil), "--format", "slime", "--db", str(tmp_path / "x.db"), check=False)
    assert proc.returncode == 2 and "refusing to unpickle" in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not marker.exists()
    # Refused whole, or every record skipped: no empty database is left behind; one that was there stays.
    assert not (tmp_path / "x.db").exists()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('not json\n{"x": 1}\n', encoding="utf-8")
    none = rollscope("import", str(bad), "--db", str(tmp_path / "z.db"), check=False)
    assert none.returncode == 1 and "z.db not made: nothing to put in it" in none.stdout
    assert not list(tmp_path.glob("z.db*"))
    Store(tmp_path / "kept.db").close()
    assert rollscope("import", str(evil), "--format", "slime", "--db", str(tmp_path / "kept.db"),
                     check=False).returncode == 2 and (tmp_path / "kept.db").exists()
    missing = rollscope("import", str(tmp_path / "nope"), "--format", "verl", "--db", str(tmp_path / "y.db"), check=False)
    assert missing.returncode == 2 and "no such file" in missing.stderr and not (tmp_path / "y.db").exists()


def test_an_export_that_would_write_nothing_or_into_a_missing_folder_is_an_error(tmp_path, db):
    path, _ = db
    missing = tmp_path / "missing" / "dir" / "x.jsonl"
    proc = rollscope("export", "--db", str(path), "-o", str(missing), check=False)
    assert proc.returncode == 2 and "no folder" in proc.stderr and not (tmp_path / "missing").exists()
    out = tmp_path / "none.jsonl"
    none = rollscope("export", "--db", str(path), "-o", str(out), "--tag", "nosuchtag", check=False)
    assert none.returncode == 2 and "no episodes match" in none.stderr and not out.exists()
    assert len(none.stderr.strip().splitlines()) == 1


def test_a_format_of_token_ids_leaves_out_episodes_that_hold_none_and_says_so(tmp_path, db):
    """Chat messages imported without a tokenizer hold no token ids: slime, AReaL and verl files are ids a trainer
    loads, so such episodes are left out of them and the export says how many and what to do (areal said "exported
    28" over an empty file, slime wrote samples of no tokens, verl said "exported 0" and no more). An export that
    could carry none of the matching episodes exits 2; jsonl and messages export them as they are."""
    path, eps = db
    chat = tmp_path / "chat.jsonl"
    rollscope("export", "--db", str(path), "--format", "messages", "-o", str(chat))
    mixed = tmp_path / "mixed.db"
    rollscope("import", str(chat), "--format", "messages", "--db", str(mixed))
    bare = Store(mixed).count()
    for fmt in ("slime", "areal", "areal-realhf", "verl"):
        out = tmp_path / f"only.{fmt}"
        proc = rollscope("export", "--db", str(mixed), "--format", fmt, "-o", str(out), check=False)
        assert proc.returncode == 2 and f"exported 0 episodes ({fmt})" in proc.stderr, proc.stderr
        assert f"{fmt}: left out {bare} episodes that hold no token ids" in proc.stderr
        assert not out.exists() and f"(no file written: {out} would hold nothing)" in proc.stderr
    st = Store(mixed)
    st.save_episodes(eps[:2])  # two with ids beside them: those are written, the rest said
    st.close()
    out = tmp_path / "some.areal"
    proc = rollscope("export", "--db", str(mixed), "--format", "areal", "-o", str(out))
    assert "exported 2 episodes (areal)" in proc.stderr and f"left out {bare} episodes that hold no token ids" in \
        proc.stderr and {json.loads(x)["episode_id"] for x in out.read_text().splitlines()} == {e.id for e in eps[:2]}
    assert "left out" not in rollscope("export", "--db", str(mixed), "-o", str(tmp_path / "all.jsonl")).stderr
    # The dashboard's Export (and the ticked rows' export) says the same, from the same export.
    from dashboard.bulk import bulk
    from dashboard.tabs.export import IDS, sample, selection, write

    # Its id box takes ids a comma, a line or (with neither) a space apart, as pasted from `ls`.
    for text, ids in (("a b  c", ("a", "b", "c")), ("a, b c", ("a", "b c")), ("x\ny", ("x", "y"))):
        assert selection(IDS, None, [], text)[0].ids == ids
    from engine.store import EpisodeFilter

    st = Store(mixed)
    try:
        # The preview's first record is of an episode the export writes (the oldest would be one without ids).
        first = sample(st, EpisodeFilter(has_tokens=True), "verl")
        assert first.startswith('{"prompt_ids": [') and not first.startswith('{"prompt_ids": []')
        path, written, said = write(st, EpisodeFilter(), "verl")
        assert path.name.startswith("rollscope-2-episodes-")  # named by what it holds, not by what matched
        assert st.count(EpisodeFilter(has_tokens=False)) == bare and st.count(EpisodeFilter(has_tokens=True)) == 2
        assert written == 2 and said == [f"verl: left out {bare} episodes that hold no token ids (imported from chat "
                                         "messages without --tokenizer): verl is token ids a trainer loads; `rollscope "
                                         "import --format messages --tokenizer NAME` tokenizes them, and jsonl and "
                                         "messages export them as they are"]
        message, _ = bulk(st, {"bulk": "export", "ids": [r.id for r in st.list_episodes()], "format": "slime"})
        assert "Exported 2 ticked episodes as slime" in message and "slime: left out" in message
        idless = [r.id for r in st.list_episodes() if r.id not in {e.id for e in eps[:2]}]
        message, file = bulk(st, {"bulk": "export", "ids": idless, "format": "verl"})
        assert file is None and "Nothing written as verl" in message and "verl: left out" in message
    finally:
        st.close()
