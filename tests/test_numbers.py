"""One number policy where numbers enter: a reward that is not finite refuses its record, in every reader and
in the store; a logprob that is not finite is stored unknown with a ``logprob_not_finite`` warning on its token;
``schema --validate`` says so; a database an earlier version poisoned is repaired when it is opened."""

from __future__ import annotations

import json
import math
import sqlite3

import numpy as np
import pytest

from engine import Store, formats
from engine.errors import StoreError
from engine.records.episode import Episode
from engine.store import codec

from .fixtures_formats import areal_record, slime_sample, verl_rows, write_jsonl, write_slime_dump
from .synthetic import synthetic_episode
from .test_cli import rollscope


def _line(ep: Episode, **changes) -> str:
    """One JSONL line of ``ep`` with fields replaced by raw JSON text (``NaN``, ``Infinity``: what Python writes)."""
    d = ep.to_dict()
    d.update(changes)
    return json.dumps(d, ensure_ascii=False)  # allow_nan: the hostile file a careless writer makes


def _marks(ep: Episode) -> list[tuple[int | None, int | None]]:
    return [(f.token_start, f.token_end) for f in ep.all_findings() if f.kind == "logprob_not_finite"]


def _exports_strictly(store: Store, tmp_path) -> None:
    n = store.count()
    with_ids = sum(1 for e in store.iter_episodes() if e.n_tokens)  # formats of ids leave out the rest, and say so
    for fmt, name in (("jsonl", "x.jsonl"), ("parquet", "x.parquet"), ("slime", "x.pt"), ("areal", "a.jsonl")):
        want = with_ids if fmt in formats.ON_IDS else n
        assert formats.export(store.iter_episodes(), fmt, tmp_path / name) == want, fmt
    for line in (tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in an export"))


def test_a_jsonl_nan_reward_is_refused_naming_line_and_field_and_never_replaces_a_good_episode(tmp_path):
    good, other = synthetic_episode(0), synthetic_episode(1)
    store = Store(tmp_path / "x.db")
    first = write_jsonl(tmp_path / "good.jsonl", [_line(good)])
    assert formats.import_path(first, "jsonl", store).new == 1
    turns = other.to_dict()["turns"]
    turns[0]["reward"] = math.inf
    bad = write_jsonl(tmp_path / "bad.jsonl", [
        _line(good, reward=math.nan),  # the same id as the stored good episode
        _line(other, turns=turns),
        _line(other, turn_rewards=[-math.inf]),
    ])
    report = formats.import_path(bad, "jsonl", store)
    assert report.new == report.already_present == 0
    assert [str(e) for e in report.errors] == [
        f"{bad}:1: field 'reward': must be a finite number, got NaN: nothing downstream can hold it; write the "
        "value the source meant, or leave the record out",
        f"{bad}:2: field 'turns.0.reward': must be a finite number, got Infinity: nothing downstream can hold it; "
        "write the value the source meant, or leave the record out",
        f"{bad}:3: field 'turn_rewards.0': must be a finite number, got -Infinity: nothing downstream can hold it; "
        "write the value the source meant, or leave the record out",
    ]
    assert store.get_episode(good.id).reward == good.reward and store.count() == 1
    assert [r.reward for r in store.list_episodes()] == [good.reward]
    store.close()


def test_jsonl_logprobs_that_are_not_finite_are_stored_unknown_with_a_warning_on_their_tokens(tmp_path):
    ep = synthetic_episode(2)
    seg = next(s for s in ep.segments if s.kind == "assistant")
    d = ep.to_dict()
    d["logprobs"][seg.start] = math.inf
    d["logprobs"][seg.start + 1] = math.nan  # NaN as a number: not the file's null
    d["logprobs"][seg.start + 5] = -math.inf
    d["turns"][0]["generation"]["logprobs"][5] = -math.inf
    d["turns"][0]["generation"]["logprobs"][9] = math.inf  # in the generation only
    src = write_jsonl(tmp_path / "lp.jsonl", [json.dumps(d)])
    store = Store(tmp_path / "x.db")
    report = formats.import_path(src, "jsonl", store, check=True)
    assert report.new == 1 and not report.errors
    back = store.get_episode(ep.id)
    lp = back.tokens.logprobs
    assert np.isnan(lp[[seg.start, seg.start + 1, seg.start + 5]]).all()
    assert np.isfinite(lp[[seg.start + 2, seg.start + 9]]).all()  # the arrays' own value stays where only the
    gen = back.turns[0].generation.logprobs  # generation's was not finite; the generation's is unknown
    assert math.isnan(gen[5]) and math.isnan(gen[9]) and math.isfinite(gen[4])
    assert _marks(back) == [(seg.start, seg.start + 2), (seg.start + 5, seg.start + 6), (seg.start + 9, seg.start + 10)]
    marked = [f for f in back.all_findings() if f.kind == "logprob_not_finite"]
    assert {f.severity.value for f in marked} == {"warning"} and marked[0].evidence["values"] == ["Infinity", "NaN"]
    assert all(0 <= f.token_start < f.token_end <= len(back.tokens) for f in marked)
    # The checks keep the warning and do not call those tokens missing on top of it.
    missing = [f for f in back.all_findings() if f.kind == "logprobs_missing"]
    assert not any(seg.start <= p < seg.start + 10 for f in missing for p in f.evidence.get("positions", []))
    _exports_strictly(store, tmp_path)
    ls = rollscope("ls", "--db", str(tmp_path / "x.db"))
    assert ep.id in ls.stdout
    store.close()


def test_parquet_with_a_nan_reward_and_infinite_logprobs(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    eps = [synthetic_episode(i) for i in range(3)]
    src = tmp_path / "good.parquet"
    formats.export(eps, "parquet", src)
    table = pq.read_table(src)
    records = table.column("record").to_pylist()
    rec = json.loads(records[1])
    rec["reward"] = math.nan
    records[1] = json.dumps(rec)
    logprobs = table.column("logprobs").to_pylist()
    seg = next(s for s in eps[2].segments if s.kind == "assistant")
    logprobs[2][seg.start + 3] = math.inf
    table = table.set_column(table.schema.get_field_index("record"), "record", pa.array(records))
    table = table.set_column(table.schema.get_field_index("logprobs"), "logprobs",
                             pa.array(logprobs, type=pa.list_(pa.float32())))
    bad = tmp_path / "bad.parquet"
    pq.write_table(table, bad)
    store = Store(tmp_path / "x.db")
    report = formats.import_path(bad, "parquet", store)
    assert report.new == 2
    assert [str(e) for e in report.errors] == [
        f"{bad}: row 1: field 'reward': must be a finite number, got NaN: nothing downstream can hold it; write the "
        "value the source meant, or leave the record out"]
    assert _marks(store.get_episode(eps[2].id)) == [(seg.start + 3, seg.start + 4)]
    _exports_strictly(store, tmp_path)
    store.close()


def test_foreign_readers_refuse_a_nan_reward_and_mark_logprobs_that_are_not_finite(tmp_path, smol_tokenizer):
    store = Store(tmp_path / "x.db")
    ids = list(range(10, 30))
    dump = write_slime_dump(tmp_path / "slime" / "0.pt", [
        slime_sample(ids, 8, index=0, rollout_log_probs=[-0.5, math.inf, math.nan, -0.5, -0.5, -math.inf, -0.5, -0.5]),
        slime_sample(ids, 8, index=1, reward=math.nan),
        slime_sample(ids, 8, index=2, reward={"score": math.inf}),
    ])
    report = formats.import_path(dump, "slime", store)
    assert report.new == 1
    assert [(e.where, e.field) for e in report.errors] == [(f"{dump}: sample 1", "reward"),
                                                           (f"{dump}: sample 2", "reward.score")]
    assert "must be a finite number, got NaN" in str(report.errors[0])
    (ep,) = store.iter_episodes()
    assert _marks(ep) == [(13, 15), (17, 18)] and np.isnan(ep.tokens.logprobs[[13, 14, 17]]).all()
    assert "rollout_log_probs" in next(f for f in ep.findings if f.kind == "logprob_not_finite").message

    tok = smol_tokenizer
    p, g = tok.encode("Q?", add_special_tokens=False), tok.encode("A.", add_special_tokens=False)
    areal = write_jsonl(tmp_path / "areal.jsonl", [
        areal_record(tok, 1, 0, [("prompt", p), ("gen", g)], reward=math.nan),
        {"episode_id": "e", "turn": 0, "input_ids": p + g, "loss_mask": [0] * len(p) + [1] * len(g),
         "logprobs": [0.0] * len(p) + [math.inf] + [-0.1] * (len(g) - 1), "rewards": 1.0},
    ])
    report = formats.import_path(areal, "areal", store, tokenizer=tok)
    assert report.new == 1 and [(e.where, e.field) for e in report.errors] == [(f"{areal}:1", "reward")]
    packed = next(e for e in store.iter_episodes() if e.source.kind == "areal")
    assert _marks(packed) == [(len(p), len(p) + 1)]

    verl = write_jsonl(tmp_path / "verl.jsonl", verl_rows(1, [("q", "a", math.nan), ("q", "b", 1.0)]))
    report = formats.import_path(verl, "verl", store)
    assert report.new == 1 and [(e.where, e.field) for e in report.errors] == [(f"{verl}:1", "score")]

    msgs = write_jsonl(tmp_path / "m.jsonl", [
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "reward": NaN}',
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "reward": 1}'])
    report = formats.import_path(msgs, "messages", store)
    assert report.new == 1 and [(e.where, e.field) for e in report.errors] == [(f"{msgs}:1", "reward")]

    results = tmp_path / "results.json"
    traj = [{"role": "system", "content": "# Retail agent policy"}, {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"}]
    results.write_text('[{"task_id": 0, "reward": Infinity, "info": {}, "traj": ' + json.dumps(traj)
                       + ', "trial": 0}, {"task_id": 1, "reward": 1.0, "info": {}, "traj": ' + json.dumps(traj)
                       + ', "trial": 0}]', encoding="utf-8")
    report = formats.import_path(results, "taubench", store)
    assert report.new == 1 and [e.field for e in report.errors] == ["reward"]
    assert "got Infinity" in str(report.errors[0])
    _exports_strictly(store, tmp_path)
    store.close()


def test_an_integer_past_what_a_float_or_64_bits_hold_refuses_its_record_alone_in_every_reader(tmp_path, smol_tokenizer):
    """JSON's integers have no bound: a reward of 400 digits is as unusable as Infinity, and a sample index past 64
    bits does not fit SQLite. Each refuses its own record, named; the records around it are stored (an import ended
    in a traceback, storing nothing)."""
    huge = "1" + "0" * 400
    good, other, third = synthetic_episode(0), synthetic_episode(1), synthetic_episode(2)
    f = write_jsonl(tmp_path / "huge.jsonl", [
        _line(good), _line(other).replace(f'"reward": {json.dumps(other.reward)}', f'"reward": {huge}', 1),
        _line(third, sample_index=2 ** 64),
        _line(third, turn_rewards=[10 ** 400] + list(third.turn_rewards[1:])),
        _line(third, sample_index=-(2 ** 63))])
    store = Store(tmp_path / "x.db")
    for check in (False, True):
        report = formats.import_path(f, "jsonl", store, check=check)
        assert report.new + report.already_present == 2, report
        assert [(e.where, e.field) for e in report.errors] == [
            (f"{f}:2", "reward"), (f"{f}:3", "sample_index"), (f"{f}:4", "turn_rewards.0")]
        assert "got an integer of 401 digits, past what a float holds" in str(report.errors[0])
    assert store.get_episode(third.id).sample_index == -(2 ** 63)
    wide = write_jsonl(tmp_path / "wide.jsonl", [_line(other, sample_index=2 ** 63)])
    report = formats.import_path(wide, "jsonl", store)
    assert report.new == 0 and "must be an integer within 64 bits, got one of 19 digits" in str(report.errors[0])
    # In a list too: a generation's ids (the store could not hold it: "could not be stored: OverflowError").
    d = other.to_dict()
    d["turns"][0]["generation"]["token_ids"][0] = 10 ** 30
    report = formats.import_path(write_jsonl(tmp_path / "ids.jsonl", [json.dumps(d)]), "jsonl", store)
    assert report.new == 0 and [e.field for e in report.errors] == ["turns.0.generation.token_ids.0"]
    assert "must be an integer within 64 bits, got one of 31 digits" in str(report.errors[0])
    msgs = write_jsonl(tmp_path / "m.jsonl", [
        '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "reward": ' + huge
        + "}", '{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "reward": 1}'])
    report = formats.import_path(msgs, "messages", store)
    assert report.new == 1 and [(e.where, e.field) for e in report.errors] == [(f"{msgs}:1", "reward")]
    verl = write_jsonl(tmp_path / "verl.jsonl", verl_rows(1, [("q", "a", 1.0), ("q", "b", 1.0)]))
    lines = verl.read_text().splitlines()
    first = json.loads(lines[0])
    verl.write_text(json.dumps({**first, "score": 0}).replace('"score": 0', f'"score": {huge}') + "\n" + lines[1] + "\n")
    report = formats.import_path(verl, "verl", store)
    assert report.new == 1 and [(e.where, e.field) for e in report.errors] == [(f"{verl}:1", "score")]
    # A logprob past a float is an infinite one: unknown, and marked.
    lp = [None if math.isnan(x) else float(x) for x in good.tokens.logprobs]
    at = next(i for i, m in enumerate(good.tokens.loss_mask) if m)
    lp[at] = -12345.0
    text = _line(good.evolve(id="lp-1"), logprobs=lp).replace("-12345.0", "-" + huge, 1)
    report = formats.import_path(write_jsonl(tmp_path / "lp.jsonl", [text]), "jsonl", store)
    assert report.new == 1 and not report.errors
    assert _marks(store.get_episode("lp-1"))[0][0] == at
    store.close()


def test_a_record_that_repeats_an_id_is_named_by_its_line_checked_or_not(tmp_path):
    ep = synthetic_episode(0)
    f = write_jsonl(tmp_path / "dup.jsonl", [_line(ep), _line(ep, reward=ep.reward + 1)])
    for check in (False, True):
        report = formats.import_path(f, "jsonl", Store(tmp_path / f"{check}.db"), check=check)
        assert report.new == 1 and report.clashed == 1
        assert str(report.errors[0]).startswith(f"{f}:2: episode {ep.id} again, with other content"), report.errors


def test_the_store_refuses_a_reward_that_is_not_finite_and_marks_infinite_logprobs(tmp_path):
    store = Store(tmp_path / "x.db")
    ep = synthetic_episode(0)
    with pytest.raises(StoreError, match="episode ep0000000: field 'reward' must be a finite number, got NaN"):
        store.save_episode(ep.evolve(reward=math.nan))
    with pytest.raises(StoreError, match="field 'turns.0.reward' must be a finite number, got Infinity"):
        store.save_episode(ep.evolve(turns=(ep.turns[0].__class__(**{**ep.turns[0].__dict__, "reward": math.inf}),)))
    assert store.count() == 0
    lp = ep.tokens.logprobs.copy()
    lp[41] = np.inf
    store.save_episode(ep.evolve(tokens=type(ep.tokens)(ep.tokens.ids, ep.tokens.loss_mask, lp, ep.tokens.versions)))
    assert _marks(store.get_episode(ep.id)) == [(41, 42)]
    store.close()


def test_schema_validate_rejects_a_nan_reward_and_warns_of_logprobs_that_are_not_finite(tmp_path):
    ep = synthetic_episode(0)
    lp = ep.to_dict()["logprobs"]
    lp[41] = math.inf
    src = write_jsonl(tmp_path / "x.jsonl", [_line(ep, reward=math.nan), _line(ep, logprobs=lp), _line(ep)])
    proc = rollscope("schema", "--validate", str(src), check=False)
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines() == [
        f"{src}:1: reward: must be a finite number, got NaN: nothing downstream can hold it; write the value the "
        "source meant, or leave the record out",
        f"{src}:2: warning: logprobs.41: Infinity is not a finite number: import keeps it as unknown (null) and marks "
        "the token logprob_not_finite",
        "2 of 3 records conform to the episode schema; 1 with logprobs that are not finite numbers (imported as "
        "unknown)",
    ]


def _poison(path) -> None:
    """What an earlier Rollscope stored from a NaN reward, an infinite turn reward and return, and +Infinity
    logprobs: SQLite keeps a bound NaN as NULL, JSON text holds NaN and Infinity, the packed arrays hold inf."""
    conn = sqlite3.connect(path)
    conn.execute("UPDATE episodes SET reward = ? WHERE id = 'ep0000000'", [math.nan])
    row = conn.execute("SELECT data FROM episodes WHERE id = 'ep0000001'").fetchone()
    data = codec.unpack_json(row[0])
    data["returns"] = [math.inf]
    conn.execute("UPDATE episodes SET data = ? WHERE id = 'ep0000001'", [codec.pack_json(data)])
    row = conn.execute("SELECT data FROM turns WHERE episode_id = 'ep0000001' AND idx = 0").fetchone()
    turn = codec.unpack_json(row[0])
    turn["reward"] = -math.inf
    conn.execute("UPDATE turns SET reward = ?, data = ? WHERE episode_id = 'ep0000001' AND idx = 0",
                 [-math.inf, codec.pack_json(turn)])
    tokens = codec.unpack_tokens(conn.execute("SELECT packed FROM tokens WHERE episode_id = 'ep0000002'").fetchone()[0])
    lp = tokens.logprobs.copy()
    lp[[41, 42]] = np.inf
    conn.execute("UPDATE tokens SET packed = ? WHERE episode_id = 'ep0000002'",
                 [codec.pack_tokens(type(tokens)(tokens.ids, tokens.loss_mask, lp, tokens.versions))])
    conn.execute("DELETE FROM migrations WHERE name = '0010_finite_numbers'")  # as a file from before the step
    conn.commit()
    conn.close()


def test_a_database_poisoned_by_an_earlier_version_lists_shows_exports_and_charts_after_its_first_open(tmp_path):
    db = tmp_path / "old.db"
    store = Store(db)
    store.save_episodes(synthetic_episode(i) for i in range(4))
    store.close()
    _poison(db)
    with sqlite3.connect(db) as conn:  # what the earlier version left: a NULL reward nothing reads
        assert conn.execute("SELECT reward FROM episodes WHERE id = 'ep0000000'").fetchone() == (None,)

    store = Store(db)
    assert "0010_finite_numbers" in store.applied
    assert store.repaired == ["ep0000000", "ep0000001", "ep0000002"]
    first, second, third, fourth = (store.get_episode(f"ep000000{i}") for i in range(4))
    assert first.reward == 0.0 and set(first.tags) == set(synthetic_episode(0).tags) and first.starred  # kept
    (said,) = [f for f in first.findings if f.kind == "reward_not_finite"]
    assert said.severity.value == "error" and "reward was NaN (stored as NULL)" in said.message and said.id
    assert second.returns == (0.0,) and second.turns[0].reward == 0.0
    assert set(next(f for f in second.findings if f.kind == "reward_not_finite").evidence["fields"]) == {
        "returns.0", "turns.0.reward"}
    assert _marks(third) == [(41, 43)] and np.isnan(third.tokens.logprobs[[41, 42]]).all()
    assert fourth == synthetic_episode(3) or fourth.to_dict() == synthetic_episode(3).to_dict()
    assert {r.id: r.n_errors > 0 for r in store.list_episodes()} == {
        "ep0000000": True, "ep0000001": True, "ep0000002": any(f.severity.value == "error" for f in third.all_findings()),
        "ep0000003": any(f.severity.value == "error" for f in fourth.all_findings())}
    stats = store.stats()
    assert stats.total == 4 and all(math.isfinite(r.mean) for r in stats.tasks)
    store.close()
    assert Store(db).repaired == []  # once
    ls = rollscope("ls", "--db", str(db))
    assert "ep0000000" in ls.stdout
    show = rollscope("show", "ep0000000", "--db", str(db))
    assert "reward_not_finite" in show.stdout
    rollscope("export", "--db", str(db), "--format", "jsonl", "-o", str(tmp_path / "all.jsonl"))
    lines = (tmp_path / "all.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and all(json.loads(x, parse_constant=pytest.fail) for x in lines)


# -- re-importing keeps a person's work ---------------------------------------------------------------------


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_re_importing_a_lossless_file_keeps_stars_notes_and_tags_and_says_what_it_replaced(tmp_path, fmt):
    eps = [synthetic_episode(i).evolve(tags=("from-file",), starred=False, note="") for i in range(3)]
    src = tmp_path / f"x.{fmt}"
    formats.export(eps, fmt, src)
    store = Store(tmp_path / "x.db")
    assert formats.import_path(src, fmt, store).new == 3
    store.curate([eps[0].id, eps[1].id], add_tags=["mine"], starred=True, note="looked at this")
    again = formats.import_path(src, fmt, store)
    assert (again.new, again.already_present, again.replaced, again.unchanged) == (0, 3, 0, 3)
    assert "0 replaced: their content changed; 3 unchanged; stars, notes and tags kept" in again.summary()
    changed = [eps[0].evolve(reward=0.5, tags=("from-file", "new-tag")), eps[1], eps[2]]
    formats.export(changed, fmt, src)
    report = formats.import_path(src, fmt, store)
    assert (report.already_present, report.replaced) == (3, 1) and "1 replaced" in report.summary()
    first, second = store.get_episode(eps[0].id), store.get_episode(eps[1].id)
    assert first.reward == 0.5 and first.starred and first.note == "looked at this"
    assert first.tags == ("from-file", "mine", "new-tag")
    assert second.starred and second.note == "looked at this" and second.tags == ("from-file", "mine")
    assert not store.get_episode(eps[2].id).starred
    store.close()


def test_re_importing_a_foreign_dump_leaves_annotated_episodes_as_they_were(tmp_path):
    ids = list(range(10, 30))
    dump = write_slime_dump(tmp_path / "0.pt", [slime_sample(ids, 8, index=i, rollout_log_probs=[-0.5] * 8)
                                                 for i in range(2)])
    msgs = write_jsonl(tmp_path / "m.jsonl", [
        {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}], "reward": 1}])
    store = Store(tmp_path / "x.db")
    for path, fmt in ((dump, "slime"), (msgs, "messages")):
        assert formats.import_path(path, fmt, store).new >= 1
    every = store.episode_ids()
    store.curate(every, add_tags=["mine"], starred=True, note="kept")
    for path, fmt in ((dump, "slime"), (msgs, "messages")):
        report = formats.import_path(path, fmt, store)
        assert report.new == 0 and "left as they were" in report.summary()
    assert all(e.starred and e.note == "kept" and "mine" in e.tags for e in store.iter_episodes())
    store.close()


# -- servers and envs ---------------------------------------------------------------------------------------


def test_a_server_s_infinite_and_nan_logprobs_are_stored_unknown_and_marked_and_the_database_exports(
        smol_tokenizer, tmp_path):
    import asyncio

    from engine import BackendSettings, plan_run, run_batch
    from engine.backends.openai import OpenAIBackend
    from engine.backends.sglang import SGLangBackend

    from .hostile import HostileServer

    store = Store(tmp_path / "x.db")
    plan = plan_run("math", "0:1", 1, "tito", "max_turns = 1", 2, BackendSettings(max_new_tokens=64), preflight=False)
    with HostileServer(smol_tokenizer) as server:
        async def every():
            out = []
            for mode in ("infinity", "nonfinite"):
                for backend in (SGLangBackend(f"{server.url}/{mode}", tokenizer=smol_tokenizer, timeout=20),
                                OpenAIBackend(f"{server.url}/{mode}", model="hostile", mode="chat",
                                              tokenizer=smol_tokenizer, timeout=20)):
                    out.append(await run_batch(plan.spec(), plan.make_env, backend, smol_tokenizer, store))
            return out

        asyncio.run(every())
    eps = list(store.iter_episodes())
    assert len(eps) == 4
    for ep in eps:
        seg = next(s for s in ep.segments if s.kind == "assistant")
        assert np.isnan(ep.tokens.logprobs[seg.start:seg.end]).all(), ep.backend
        (mark,) = [f for f in ep.all_findings() if f.kind == "logprob_not_finite"]
        assert (mark.token_start, mark.token_end, mark.turn) == (seg.start, seg.end, 0)
        assert mark.evidence["values"] in (["Infinity"], ["NaN"])
        assert ep.turns[0].generation.logprobs is not None and all(map(math.isnan, ep.turns[0].generation.logprobs))
    store.close()
    check = rollscope("check", str(tmp_path / "x.db"), check=False)
    assert "Traceback" not in check.stderr and check.returncode in (0, 1), check.stderr
    store = Store(tmp_path / "x.db")  # the checks keep the marks they did not make
    assert all(len([f for f in e.all_findings() if f.kind == "logprob_not_finite"]) == 1 for e in store.iter_episodes())
    _exports_strictly(store, tmp_path)
    store.close()


def test_an_env_reward_that_is_not_finite_ends_the_episode_with_an_env_error(smol_tokenizer, tmp_path):
    import asyncio

    from engine.envs.base import StepResult
    from engine.envs.math import MathEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS

    from .planted import SampledScripted

    class NanEnv(MathEnv):
        def step(self, action):
            return StepResult(super().step(action).observation, math.nan, False, {})

    backend = SampledScripted(MathEnv, smol_tokenizer, mistake_rate=0.0)
    ep = asyncio.run(run_episode(NanEnv(), backend, smol_tokenizer, PRESETS["tito"].with_(max_turns=3),
                                 MathEnv().tasks[0], preset="tito"))
    assert ep.status.value == "aborted" and ep.reason == "env error: reward NaN is not a finite number"
    assert ep.reward == 0.0 and ep.turns[0].reward == 0.0 and len(ep.turns) == 1
    assert [f.kind for f in ep.turns[0].findings if f.kind == "env_error"] == ["env_error"]
    store = Store(tmp_path / "x.db")
    store.save_episode(ep)
    assert store.get_episode(ep.id).reward == 0.0
    store.close()
