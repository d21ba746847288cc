"""The `rollscope` command end to end, as a user runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.store import Store

ROOT = Path(__file__).resolve().parents[1]


def rollscope(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", *args], capture_output=True, text=True, env=env, timeout=600)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_run_export_import_equal_records(tmp_path):
    db, db2, out = tmp_path / "a.db", tmp_path / "b.db", tmp_path / "out.jsonl"
    r = rollscope("run", "--env", "math", "--policy", "scripted", "--preset", "areal-math", "--tasks", "0:4",
                  "--samples", "2", "--db", str(db), "--mistake-rate", "0.3", "--concurrency", "3", "--quiet")
    assert "8 episodes" in r.stdout
    ls = rollscope("ls", "--db", str(db))
    assert ls.stdout.count("areal-math") == 8
    rollscope("export", "--db", str(db), "--format", "jsonl", "-o", str(out))
    assert len(out.read_text().splitlines()) == 8
    imp = rollscope("import", str(out), "--format", "jsonl", "--db", str(db2))
    assert "imported 8 new" in imp.stdout
    a, b = Store(db), Store(db2)
    ids = sorted(e.id for e in a.list_episodes(limit=100))
    assert ids == sorted(e.id for e in b.list_episodes(limit=100))
    for i in ids:
        assert a.get_episode(i) == b.get_episode(i)
    # importing again does not duplicate
    rollscope("import", str(out), "--format", "jsonl", "--db", str(db2))
    assert b.count() == 8
    # filtered export
    filt = tmp_path / "done.jsonl"
    rollscope("export", "--db", str(db), "-o", str(filt), "--where", "reward>=0.5")
    rewards = [json.loads(line)["reward"] for line in filt.read_text().splitlines()]
    assert all(r >= 0.5 for r in rewards)
    show = rollscope("show", ids[0][:8], "--db", str(db))
    assert "--- turn 4" in show.stdout and "[assistant]" in show.stdout
    # --where id= takes unique prefixes, as show does; one that matches none, or several, is refused
    one = rollscope("ls", "--db", str(db), "--where", f"id={ids[0][:8]},{ids[1]}", "--sort", "id", "--ascending")
    assert [line.split()[0] for line in one.stdout.splitlines()[1:-1]] == ids[:2] and "(2 of 2 episodes)" in one.stdout
    none = rollscope("ls", "--db", str(db), "--where", "id=zzzz", check=False)
    assert none.returncode == 2 and f"no episode 'zzzz' in {db}" in none.stderr


@pytest.mark.parametrize(
    "args,needle",
    [
        (["run", "--env", "chess", "--db", "{db}"], "unknown env 'chess'"),
        (["run", "--tasks", "5:2", "--db", "{db}"], "task range '5:2' holds no task: its end must come after its start, e.g. 2:5"),
        (["run", "--tasks", "0:9999", "--db", "{db}"], "outside the env"),
        (["run", "--preset", "fast", "--db", "{db}"], "unknown preset 'fast'"),
        (["run", "--policy", "local", "--model", "/nonexistent/model", "--tasks", "0:1", "--db", "{db}"], "/nonexistent/model"),
        (["ls", "--db", "{junk}"], "cannot open"),
        (["ls", "--db", "{missing}"], "does not exist"),
        (["show", "zzz", "--db", "{db}"], "no episode 'zzz'"),
        (["import", "{missing}", "--db", "{db}"], "no such file"),
        (["import", "-", "--db", "{db}"], "-: import reads a file or folder, not standard input: write what you pipe"),
        (["check", "{junk}"], "is not a SQLite database (its first bytes are not SQLite's), though its name says one"),
        (["check", "--db", "{junk}"], "is not a SQLite database (its first bytes are not SQLite's), though its name says one"),
        (["check", "--db", "{missing}"], "database {missing} does not exist (run `rollscope run --db"),
        (["check", "{db}", "--db", "{junk}"], "two files to check"),
        (["ls", "--db", "{db}", "--where", "colour=red"], "unknown key 'colour'"),
    ],
)
def test_user_mistakes_are_one_clear_line(tmp_path, args, needle):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"garbage" * 200)
    db = tmp_path / "ok.db"
    Store(db).close()
    fill = {"db": str(db), "junk": str(junk), "missing": str(tmp_path / "missing.db")}
    proc = rollscope(*[a.format(**fill) for a in args], check=False)
    assert proc.returncode != 0
    assert needle.format(**fill) in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_check_with_no_file_checks_the_default_database_as_ls_does(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "check"], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 2
    assert "database rollscope.db does not exist (run `rollscope run --db rollscope.db`" in proc.stderr


def test_import_reports_bad_lines_and_keeps_good(tmp_path):
    db = tmp_path / "a.db"
    rollscope("run", "--tasks", "0:2", "--db", str(db), "--quiet")
    out = tmp_path / "e.jsonl"
    rollscope("export", "--db", str(db), "-o", str(out))
    lines = out.read_text().splitlines()
    out.write_text(lines[0] + "\n{broken\n" + lines[1] + "\n")
    proc = rollscope("import", str(out), "--db", str(tmp_path / "b.db"))
    assert "imported 2 new" in proc.stdout
    assert f"{out}:2: not valid JSON" in proc.stderr


def test_presets_knobs_and_config_files(tmp_path):
    listing = rollscope("presets").stdout
    for name in ("tito", "slime-tau", "slime-tau-seed", "areal-math", "areal-multiturn"):
        assert f"\n{name}\n" in f"\n{listing}"
    assert "reproduces: AReaL realhf MathMultiTurnAgent" in listing
    doc = json.loads(rollscope("presets", "areal-math", "--json").stdout)
    assert doc["knobs"]["turn_discount"] == 1.0 and doc["knobs"]["token_mode"] == "areal-seed"

    db = tmp_path / "a.db"
    rollscope("run", "--env", "math", "--preset", "areal-math", "--set", "turn_discount=0.5", "--set", "max_turns=3",
              "--tasks", "0:1", "--db", str(db), "--quiet")
    ep = next(iter(Store(db).iter_episodes()))
    assert ep.config.loop.turn_discount == 0.5 and ep.n_turns == 3
    assert ep.returns[0] == ep.turn_rewards[0] + 0.5 * ep.turn_rewards[1] + 0.25 * ep.turn_rewards[2]

    doc["name"], doc["knobs"]["max_turns"] = "two-rounds", 2
    cfg = tmp_path / "two.json"
    cfg.write_text(json.dumps(doc))
    rollscope("run", "--env", "math", "--config", str(cfg), "--tasks", "1:2", "--db", str(db), "--quiet")
    two = [e for e in Store(db).iter_episodes() if e.preset == "two-rounds"]
    assert len(two) == 1 and two[0].n_turns == 2 and two[0].config.token_mode == "areal-seed"

    for bad, says in ((["--set", "nope=1"], "unknown knob 'nope'"), (["--set", "max_turns=many"], "whole number"),
                      (["--set", "turn_discount"], "KNOB=VALUE"), (["--config", str(tmp_path / "no.json")], "does not exist")):
        r = rollscope("run", "--env", "math", *bad, "--db", str(db), "--quiet", check=False)
        assert r.returncode == 2 and says in r.stderr and "Traceback" not in r.stderr


def test_show_folds_the_system_prompt_and_lists_findings_by_root(tmp_path):
    db = tmp_path / "r.db"
    rollscope("run", "--env", "retail", "--preset", "slime-tau-seed", "--tasks", "0:1", "--mistake-rate", "0",
              "--db", str(db), "--quiet")
    [ep] = Store(db).list_episodes(limit=1)
    shown = rollscope("show", ep.id, "--db", str(db)).stdout
    full = rollscope("show", ep.id, "--db", str(db), "--full").stdout
    record = Store(db).get_episode(ep.id)
    system = record.messages[0].content
    assert record.messages[0].role == "system" and len(system.splitlines()) > 10
    assert system not in shown and "--full shows them" in shown and system in full
    head, *lines = shown.split("--- findings", 1)[1].splitlines()
    from engine import CHECKS_VERSION

    assert head == f" (checks v{CHECKS_VERSION})"  # the checks ran on it: a live run's episodes are checked
    assert lines[0].startswith("diagnosis: ") and "generation_prompt_missing" in lines[0] + lines[1]
    roots_ = [ln for ln in lines[1:] if ln.startswith("  [")]
    follow = [ln for ln in lines[1:] if ln.startswith("      <- ")]
    assert roots_[0].startswith("  [error] generation_prompt_missing")
    assert len(roots_) + len(follow) == len(record.all_findings())


def test_tag_star_and_note_several_episodes_by_id_or_where(tmp_path):
    db = tmp_path / "c.db"
    rollscope("run", "--env", "math", "--preset", "areal-math", "--tasks", "0:3", "--mistake-rate", "0.5",
              "--db", str(db), "--quiet")
    ids = sorted(e.id for e in Store(db).list_episodes(limit=10))
    out = rollscope("tag", ids[0][:8], ids[1], "--add", "gold", "--add", "look", "--db", str(db)).stdout
    assert out.strip() == "tagged gold, look: 2 episodes"
    assert rollscope("tag", "--where", "tag=look", "--remove", "look", "--db", str(db)).stdout.strip() == \
        "untagged look: 2 episodes"
    # An untag counts what it took off: a tag none of them had is said so.
    assert rollscope("tag", ids[2], "--remove", "gold", "--db", str(db)).stdout.strip() == \
        "untagged gold: 0 episodes (none of the 1 episode chosen had it)"
    assert rollscope("star", "--where", "tag=gold", "--db", str(db)).stdout.strip() == "starred 2 episodes"
    rollscope("note", "checked by hand", ids[2], "--db", str(db))
    store = Store(db)
    eps = {e.id: e for e in store.iter_episodes()}
    assert [eps[i].tags for i in ids] == [("gold",), ("gold",), ()]
    assert [eps[i].starred for i in ids] == [True, True, False] and eps[ids[2]].note == "checked by hand"
    store.close()
    # show says what a person added, under the reward
    shown = [rollscope("show", i, "--db", str(db)).stdout.splitlines()[2] for i in ids]
    assert shown[:2] == ["starred  tags gold"] * 2 and shown[2] == "note: checked by hand"
    swapped = rollscope("note", ids[0][:8], "look here", "--db", str(db), check=False)
    assert swapped.returncode == 2 and swapped.stderr.strip().endswith(
        f"'{ids[0][:8]}' is an episode: the note's text comes first, then the ids (rollscope note TEXT ID...)")
    assert Store(db).get_episode(ids[0]).note == ""
    none = rollscope("star", "--where", "tag=nosuchtag", "--db", str(db), check=False)
    assert none.returncode == 2 and "no episodes match" in none.stderr
    both = rollscope("tag", ids[0], "--where", "env=math", "--add", "x", "--db", str(db), check=False)
    assert both.returncode == 2 and "not both" in both.stderr
    missing = rollscope("tag", "zzzz", "--add", "x", "--db", str(db), check=False)
    assert missing.returncode == 2 and "Traceback" not in missing.stderr


def test_a_named_run_tags_its_episodes_and_a_name_is_used_once(tmp_path):
    db = tmp_path / "n.db"
    rollscope("run", "--env", "math", "--tasks", "0:2", "--run", "baseline-1", "--tag", "baseline", "--tag", "smol",
              "--db", str(db), "--quiet")
    store = Store(db)
    eps = list(store.iter_episodes())
    assert {e.run_id for e in eps} == {"baseline-1"} and {e.tags for e in eps} == {("baseline", "smol")}
    assert [r.run_id for r in store.run_overview()] == ["baseline-1"]
    store.close()
    again = rollscope("run", "--env", "math", "--tasks", "0:1", "--run", "baseline-1", "--db", str(db), "--quiet",
                      check=False)
    assert again.returncode == 2 and "run 'baseline-1' already" in again.stderr
    bad = rollscope("run", "--env", "math", "--tasks", "0:1", "--run", "no spaces", "--db", str(db), check=False)
    assert bad.returncode == 2 and "run name 'no spaces'" in bad.stderr


def test_a_run_level_kind_is_said_by_its_severest_instance_as_the_summary_counts_it(tmp_path):
    """slime's loop over Qwen3's template in a retail run: a user's message renders on its own (a harmless rewrite, a
    warning) before a tool message rewrites history (an error that ends the sample). The run-level line quotes the
    error the summary counts, not the first warning it meets."""
    from tests.conftest import QWEN3_DIR

    db = tmp_path / "r.db"
    rollscope("run", "--env", "retail", "--preset", "slime-tau", "--tasks", "0:2", "--mistake-rate", "0.3",
              "--tokenizer", str(QWEN3_DIR), "--db", str(db), "--run", "r1")
    out = rollscope("check", str(db), check=False).stdout
    line = next(x for x in out.splitlines() if x.startswith("run r1: template_not_prefix_stable"))
    assert "(error)" in line and "non-user token delta" in line, out
    assert "template_not_prefix_stable (run-level) 2" in out
