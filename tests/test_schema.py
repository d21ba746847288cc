"""The published episode schema: built from the records, kept in docs/, met by every export, old files too."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.formats import jsonl
from engine.records.episode import SCHEMA_VERSION, Episode, raw_observations
from engine.records.provenance import RunConfig
from engine.records.schema import episode_schema, field_docs, problems, validator
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


@pytest.mark.parametrize("name", ["schema1-episodes.jsonl", "schema2-episodes.jsonl", "schema3-episodes.jsonl",
                                  "schema4-episodes.jsonl", "schema5-episodes.jsonl",
                                  "schema6-episodes.jsonl", "schema7-episodes.jsonl", "schema10-episodes.jsonl"])
def test_earlier_files_read_upgraded_and_export_valid_records(name):
    report = jsonl.ReadReport()
    episodes = list(jsonl.read(GOLDEN / name, report))
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
    assert proc.returncode == 0 and "11 of 11 records conform" in proc.stdout, proc.stdout + proc.stderr


def _current(k: int) -> dict:
    """Golden record ``k`` as this version writes it."""
    old = json.loads((GOLDEN / "schema2-episodes.jsonl").read_text(encoding="utf-8").splitlines()[k])
    return Episode.from_dict(old).to_dict()


def test_a_record_that_does_not_conform_is_named_at_its_field(tmp_path):
    good = _current(0)
    bad = {**good, "status": "finished"}
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
    assert proc.returncode == 1 and f"{path}:1: status:" in proc.stdout and "0 of 1 records conform" in proc.stdout


def test_every_golden_file_of_every_version_reads_as_the_same_episodes(tmp_path):
    """The golden files hold the same 10 episodes: upgraded, they are equal field for field (the outcome
    its env computes included: read from a file, filled when a database opens)."""
    by_file = {name: {e.id: e.to_dict() for e in jsonl.read(GOLDEN / name)}
               for name in ("schema1-episodes.jsonl", "schema2-episodes.jsonl", "schema3-episodes.jsonl",
                            "schema4-episodes.jsonl", "schema5-episodes.jsonl",
                            "schema6-episodes.jsonl", "schema7-episodes.jsonl", "schema8-episodes.jsonl",
                            "schema9-episodes.jsonl", "schema10-episodes.jsonl")}
    for name in ("dbschema2.sqlite", "dbschema3.sqlite", "dbschema4.sqlite", "dbschema5.sqlite",
                 "dbschema6.sqlite", "dbschema7.sqlite", "dbschema8.sqlite", "dbschema9.sqlite",
                 "dbschema10.sqlite", "dbschema11.sqlite", "dbschema12.sqlite", "dbschema13.sqlite"):
        shutil.copy(GOLDEN / name, tmp_path / name)
        store = Store(tmp_path / name)
        try:
            by_file[name] = {e.id: e.to_dict() for e in store.iter_episodes()}
        finally:
            store.close()
    first = by_file["schema2-episodes.jsonl"]
    assert len(first) == 10
    for name, eps in by_file.items():
        assert eps.keys() == first.keys(), name
        for eid, d in eps.items():
            assert d == first[eid], f"{name}: episode {eid} differs"
    # What the typed parts hold after the upgrade.
    eps = {e.id: e for e in jsonl.read(GOLDEN / "schema1-episodes.jsonl")}
    live = [e for e in eps.values() if e.source.live]
    imported = [e for e in eps.values() if not e.source.live]
    assert len(live) == 8 and len(imported) == 2
    assert all(e.config.loop is not None and e.config.sampling is not None and e.config.env is not None for e in live)
    assert all(e.backend is not None and e.backend.name == "scripted" and e.backend.settings["mistake_rate"] == 0.2
               for e in live)
    assert all(e.config == RunConfig() and e.backend is None and e.source.kind == "messages" for e in imported)
    fork = next(e for e in live if e.parent_id)
    assert fork.source.by_hand and fork.config.loop.max_turns == 4
    retail = [e for e in live if e.env == "retail"]
    assert retail and all(e.config.env.user == "scripted" and e.config.env.details["data_seed"] for e in retail)


def _broken(change) -> str:
    d = _current(4)  # a slime-tau retail episode: tools, turns, generations
    change(d)
    return json.dumps(d)


@pytest.mark.parametrize("change, field", [
    (lambda d: d.pop("status"), "status"),
    (lambda d: d.update(status="finished"), "status"),
    (lambda d: d.pop("reward"), "reward"),
    (lambda d: d.update(reward="1"), "reward"),
    (lambda d: d["config"]["loop"].update(max_turns="5"), "config.loop.max_turns"),
    (lambda d: d["config"]["loop"].update(max_turns=0), "config.loop"),
    (lambda d: d["config"]["loop"].update(warp_speed=True), "config.loop.warp_speed"),
    (lambda d: d["config"]["loop"].pop("token_mode"), "config.loop.token_mode"),
    (lambda d: d["config"]["sampling"].update(temperature=None), "config.sampling.temperature"),
    (lambda d: d["config"]["env"].update(user="robot"), "config.env.user"),
    (lambda d: d["backend"].update(timeout="soon"), "backend.timeout"),
    (lambda d: d["backend"].pop("name"), "backend.name"),
    (lambda d: d["source"].update(kind="ftp"), "source.kind"),
    (lambda d: d.update(source=None), "source"),
    (lambda d: d["messages"][1].update(role="bot"), "messages.1.role"),
    (lambda d: d["messages"][1].pop("content"), "messages.1.content"),
    (lambda d: d["turns"][0]["generation"].update(finish_reason="eos"), "turns.0.generation.finish_reason"),
    (lambda d: d["turns"][0]["generation"]["token_ids"].__setitem__(0, "7"), "turns.0.generation.token_ids.0"),
    (lambda d: d["turns"][1].pop("prompt_len"), "turns.1.prompt_len"),
    (lambda d: d["segments"][0].update(kind="padding"), "segments.0.kind"),
    (lambda d: d["findings"].insert(0, {"kind": "mask_misaligned"}), "findings.0.severity"),
    (lambda d: d["tokens"].__setitem__(3, -2), "tokens.3"),
    (lambda d: d["loss_mask"].__setitem__(3, 2), "loss_mask.3"),
    (lambda d: d["versions"].pop(), "versions"),
    (lambda d: d.update(schema_version=99), "schema_version"),
])
def test_a_malformed_record_is_refused_with_the_field_named(change, field):
    from engine.errors import FormatError

    line = _broken(change)
    with pytest.raises(FormatError) as e:
        jsonl.parse_line(line, "run.jsonl:7")
    assert e.value.field == field and e.value.where == "run.jsonl:7", str(e.value)
    assert str(e.value).startswith(f"run.jsonl:7: field '{field}': ")


def test_the_untouched_record_reads_back_equal():
    d = _current(4)
    ep = jsonl.parse_line(json.dumps(d), "x")
    assert ep.to_dict() == d and ep.backend is not None and ep.config.loop is not None


def test_a_parquet_export_holds_records_that_conform(tmp_path):
    """Parquet is the other lossless export: its record column plus its token columns are a schema record."""
    import math

    import pyarrow.parquet as pq

    from engine.formats import export

    episodes = list(jsonl.read(GOLDEN / "schema1-episodes.jsonl"))
    out = tmp_path / "all.parquet"
    assert export(episodes, "parquet", out) == 10
    table = pq.read_table(out)
    v = validator()
    for row in table.to_pylist():
        record = json.loads(row["record"])
        record.update(tokens=row["tokens"], loss_mask=row["loss_mask"], versions=row["versions"],
                      logprobs=[None if math.isnan(x) else x for x in row["logprobs"]])
        assert row["top_k"] == 0 and not row["top_ids"] and all(math.isnan(x) for x in row["entropy"])
        assert len(row["entropy"]) == len(row["tokens"])
        record.update(entropy=[], top_ids=[], top_logprobs=[])
        assert not list(v.iter_errors(record)), problems(record)
        assert Episode.from_dict(record).to_dict() == record


def _with_no_alternatives(d: dict) -> dict:
    """A record of version 6 as version 11 reads it: no entropy, no top K, none asked for (8); an outcome that says
    the reward counted the last turn, or none where the reward sums every turn's (9: ``read_episode`` computes
    that one again); and (11) no hash of the arrays its checks judged."""
    d.update(entropy=[], top_ids=[], top_logprobs=[], entropy_estimated=False, checked_arrays=None)
    if d["outcome"] is not None:
        summed = d["env"] == "math" and d["config"]["loop"]["episode_reward"] == "first_return"
        d["outcome"] = None if summed else {**d["outcome"], "every_turn": False}
    if d["config"]["sampling"] is not None:
        d["config"]["sampling"]["top_logprobs"] = 0
    for t in d["turns"]:
        if t["generation"] is not None:
            t["generation"].update(top_ids=[], top_logprobs=[], entropy=None, entropy_estimated=False)
    return d


def test_schema_6_records_read_with_no_alternatives_and_nothing_else_changed():
    """Version 8 added per token entropy and top K (7 changed no field), 9 ``every_turn`` on the outcome: a version-6
    record reads with none of them, the rest as it was, and its export conforms."""
    lines = (GOLDEN / "schema6-episodes.jsonl").read_text(encoding="utf-8").splitlines()
    v = validator()
    for line in lines:
        old = json.loads(line)
        assert old["schema_version"] == 6 and "entropy" not in old
        ep = Episode.from_dict(json.loads(line))
        want = _with_no_alternatives({**old, "schema_version": SCHEMA_VERSION})
        assert ep.to_dict() == want
        assert ep.tokens.top_k == 0 and not ep.tokens.has_alternatives
        assert not list(v.iter_errors(ep.to_dict())), problems(ep.to_dict())


def test_schema_5_verl_records_move_raw_observation_and_ground_truth_out_of_info():
    """Version 5 kept verl-tool's raw tool outputs in ``turn.info`` and math's reference answer in every turn's
    ``info.verl``; upgraded, they are the typed fields and nothing else of the record changed."""
    lines = (GOLDEN / "schema5-verl-episodes.jsonl").read_text(encoding="utf-8").splitlines()
    seen_raw = seen_truth = 0
    for line in lines:
        old = json.loads(line)
        assert old["schema_version"] == 5
        ep = Episode.from_dict(json.loads(line))
        want = json.loads(line)
        truth = None
        for t in want["turns"]:
            t["raw_observation"] = t["info"].pop("raw_observation", [])
            truth = t["info"].get("verl", {}).pop("ground_truth", truth)
        want.update(schema_version=SCHEMA_VERSION, ground_truth=truth)
        assert ep.to_dict() == _with_no_alternatives(want)
        assert ep.ground_truth == truth and all("raw_observation" not in t.info for t in ep.turns)
        for t_old, t in zip(old["turns"], ep.turns, strict=True):
            assert list(t.raw_observation) == t_old["info"].get("raw_observation", [])
            assert raw_observations(t) == t.raw_observation
        seen_raw += sum(1 for t in ep.turns if t.raw_observation)
        seen_truth += truth is not None
        assert not list(validator().iter_errors(ep.to_dict())), problems(ep.to_dict())
    retail = Episode.from_dict(json.loads(lines[0]))
    assert "Error when executing tool: 'teleport'" in [r for t in retail.turns for r in t.raw_observation]
    assert any(len(r) > 40 for t in retail.turns for r in t.raw_observation)  # kept whole, past the 40-character cut
    assert seen_raw >= 3 and seen_truth == 2 and retail.ground_truth is None
