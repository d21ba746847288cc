"""The published episode schema: built from the records, kept in docs/, met by every export, old files too."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

from engine.formats import jsonl
from engine.records import SCHEMA_VERSION
from engine.schema import episode_schema, field_docs, problems, validator
from engine.store import Store
from tests.conftest import ROOT

GOLDEN = Path(__file__).parent / "golden"


def _walk(schema: dict, path: str = "") -> list[tuple[str, dict]]:
    out = []
    for name, prop in schema.get("properties", {}).items():
        out.append((f"{path}{name}", prop))
    for name, sub in schema.get("$defs", {}).items():
        out.extend(_walk(sub, f"{name}."))
    return out


def test_the_schema_is_a_valid_2020_12_schema_with_a_description_on_every_field():
    from jsonschema import Draft202012Validator

    schema = episode_schema()
    Draft202012Validator.check_schema(schema)
    props = _walk(schema)
    assert len(props) >= 80
    assert not [p for p, prop in props if not prop.get("description")]
    assert schema["properties"]["schema_version"]["const"] == SCHEMA_VERSION
    # The descriptions are the docstrings in records.py, word for word.
    assert schema["$defs"]["Finding"]["properties"]["caused_by"]["description"] == field_docs()["Finding"]["caused_by"]


def test_the_copy_in_docs_is_what_rollscope_schema_prints():
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "schema"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.returncode == 0
    assert json.loads(proc.stdout) == episode_schema()
    assert json.loads((ROOT / "docs" / "episode.schema.json").read_text(encoding="utf-8")) == episode_schema(), \
        "docs/episode.schema.json is stale: run `rollscope schema > docs/episode.schema.json`"


def test_schema_1_files_read_upgraded_and_export_valid_records(tmp_path):
    report = jsonl.ReadReport()
    episodes = list(jsonl.read(GOLDEN / "schema1-episodes.jsonl", report))
    assert len(episodes) == 10 and not report.errors
    linked = [f for ep in episodes for f in ep.all_findings()]
    assert linked and all(f.id.startswith("f") for f in linked)
    buf = io.StringIO()
    jsonl.write(episodes, buf)
    v = validator()
    for line in buf.getvalue().splitlines():
        record = json.loads(line)
        assert record["schema_version"] == SCHEMA_VERSION
        assert not list(v.iter_errors(record)), problems(record)


def test_exports_from_an_upgraded_database_and_from_live_runs_conform(tmp_path, smol_tokenizer):
    from tests.planted import play
    from tests.toolenv import PriceEnv

    db = tmp_path / "old.sqlite"
    shutil.copy(GOLDEN / "dbschema2.sqlite", db)
    store = Store(db)
    try:
        store.save_episode(play(PriceEnv, smol_tokenizer, "slime-tau", task=0, tokenizer_name="smollm2"))
        out = tmp_path / "all.jsonl"
        proc = subprocess.run([sys.executable, "-m", "engine.cli", "export", "--db", str(db), "--format", "jsonl",
                               "-o", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=300)
        assert proc.returncode == 0, proc.stderr
    finally:
        store.close()
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "schema", "--validate", str(out)],
                          capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert proc.returncode == 0 and "11 of 11 records conform" in proc.stderr, proc.stdout + proc.stderr


def test_a_record_that_does_not_conform_is_named_at_its_field(tmp_path):
    good = json.loads((GOLDEN / "schema1-episodes.jsonl").read_text(encoding="utf-8").splitlines()[0])
    bad = {**good, "schema_version": SCHEMA_VERSION, "status": "finished"}
    bad["turns"] = [{**bad["turns"][0], "reward": "high"}, *bad["turns"][1:]]
    del bad["loss_mask"]
    found = problems(bad)
    assert any(p.startswith("(record): 'loss_mask' is a required property") for p in found)
    assert any(p.startswith("status: 'finished' is not one of") for p in found)
    assert any(p.startswith("turns.0.reward: 'high' is not of type 'number'") for p in found)
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps(bad) + "\n", encoding="utf-8")
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "schema", "--validate", str(path)],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert proc.returncode == 1 and f"{path}:1: status:" in proc.stdout and "0 of 1 records conform" in proc.stderr
