"""Episodes exported in a trainer's format and read back: what the format can hold comes back as it was, and a
re-import into the database they came from is the stored episodes again, said to be the same."""

from __future__ import annotations

import json

from engine.checks import CheckOptions, run_checks
from engine.formats import export, import_path
from engine.records.episode import Status
from engine.store import Store
from tests.fixtures_formats import loop_episodes


def test_a_slime_export_reads_back_as_the_episodes_it_was_with_their_run(tmp_path, smol_tokenizer):
    eps = [e.evolve(run_id="exp1") for e in loop_episodes(smol_tokenizer)]
    origin = Store(tmp_path / "a.db")
    origin.save_episodes(eps)
    out = tmp_path / "dump.pt"
    export(eps, "slime", out)
    fresh = Store(tmp_path / "b.db")
    assert import_path(out, "slime", fresh, tokenizer=smol_tokenizer).new == len(eps)
    back = {e.id: e for e in fresh.iter_episodes()}
    assert set(back) == {e.id for e in eps} and {e.run_id for e in back.values()} == {"exp1"}
    # Into the database they came from: the same episodes, and nothing the format cannot hold said to differ
    # (a live episode's turn rewards, its turns where the mask says otherwise than the loop counted).
    again = import_path(out, "slime", origin, tokenizer=smol_tokenizer)
    assert (again.new, again.already_present, again.differ) == (0, len(eps), 0), again.differing
    assert origin.count() == len(eps)
    origin.close()
    fresh.close()


def test_a_slime_export_read_into_a_database_that_holds_it_under_its_dumps_id_is_that_one(tmp_path, smol_tokenizer):
    """An import that did not read the episode ids Rollscope's export names stored its samples under the dump's own
    ids: read again, the samples are those episodes, not new ones."""
    import torch

    from engine.formats.base import safe_torch_load

    eps = loop_episodes(smol_tokenizer)[:2]
    out = tmp_path / "dump.pt"
    export(eps, "slime", out)
    unnamed = safe_torch_load(out)
    for sample in unnamed["samples"]:
        del sample["metadata"]["rollscope"]["episode_id"]
    torch.save(unnamed, tmp_path / "unnamed.pt")
    st = Store(tmp_path / "a.db")
    assert import_path(tmp_path / "unnamed.pt", "slime", st, tokenizer=smol_tokenizer).new == 2
    dumped = {e.id for e in st.iter_episodes()}
    assert not dumped & {e.id for e in eps}
    again = import_path(out, "slime", st, tokenizer=smol_tokenizer)
    assert (again.new, again.already_present) == (0, 2) and {e.id for e in st.iter_episodes()} == dumped
    st.close()


def test_an_areal_export_keeps_how_each_episode_ended_on_its_last_reply(tmp_path, smol_tokenizer):
    """AReaL's rows are per turn, each read back as an episode: the row of an aborted or cut episode's last reply
    says how it ended (Rollscope's field beside AReaL's), the rows before it completed, and each row how its reply
    ended: an episode a turn limit cut is not read as a reply the length limit cut."""
    base = [e for e in loop_episodes(smol_tokenizer) if e.n_turns >= 2][:2]
    eps = [base[0].evolve(status=Status.ABORTED), base[1].evolve(status=Status.TRUNCATED)]
    out = tmp_path / "rows.jsonl"
    export(eps, "areal", out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    st = Store(tmp_path / "a.db")
    import_path(out, "areal", st)
    by_row = {(e.source.details["episode_id"], e.source.details["turn"]): e for e in st.iter_episodes()}
    for ep in eps:
        mine = sorted(t for i, t in by_row if i == ep.id)
        assert [by_row[ep.id, t].status for t in mine] == [Status.COMPLETED] * (len(mine) - 1) + [ep.status]
        # the reply itself ended as it did (a turn limit cuts an episode after a reply that ended on its own)
        last = by_row[ep.id, mine[-1]]
        assert last.turns[-1].generation.finish_reason == ep.turns[mine[-1]].generation.finish_reason == "stop"
        cuts = {f.kind for f in run_checks(last, CheckOptions(tokenizer=smol_tokenizer)) if "truncated" in f.kind}
        assert cuts == ({"truncated_episode"} if ep.status is Status.TRUNCATED else set())
    assert {r["status"] for r in rows} == {"completed", "aborted", "truncated"}
    st.close()


def test_an_exported_id_names_only_its_own_sample_and_the_score_it_was_read_with(tmp_path, smol_tokenizer):
    """slime copies a dataset row's metadata into every sample made from that prompt: a prompt set built of an export
    gives many samples naming one episode id, which only the sample exported with it is. The score an import took of
    a dict of scores (``--reward-key``) is kept by the export, so it reads back without the option."""
    import torch

    from engine.formats.base import safe_torch_load
    from tests.fixtures_formats import slime_sample, write_slime_dump

    st = Store(tmp_path / "a.db")
    f = write_slime_dump(tmp_path / "1.pt", [slime_sample([1, 2, 3, 4], 2, reward={"acc": 1.0, "len": 9})])
    assert import_path(f, "slime", st, reward_key="acc").new == 1
    out = tmp_path / "back.pt"
    export(st.iter_episodes(), "slime", out)
    fresh = Store(tmp_path / "b.db")
    assert import_path(out, "slime", fresh).new == 1 and next(fresh.iter_episodes()).reward == 1.0
    sample = safe_torch_load(out)["samples"][0]
    copies = [dict(sample, tokens=[1, 2, 3, 4 + i], index=i) for i in range(3)]  # the same metadata, other samples
    torch.save({"rollout_id": 5, "samples": copies}, tmp_path / "copies.pt")
    other = Store(tmp_path / "c.db")
    report = import_path(tmp_path / "copies.pt", "slime", other)
    assert report.new == 3 and not report.errors
    named = {e.id for e in other.iter_episodes()} & {e.id for e in st.iter_episodes()}
    assert len(named) == 1  # the exported sample's tokens (4) keep its id; the others are their own
    for db in (st, fresh, other):
        db.close()


def test_a_row_whose_status_is_not_a_word_is_skipped_and_named(tmp_path, smol_tokenizer):
    eps = loop_episodes(smol_tokenizer)[:1]
    out = tmp_path / "rows.jsonl"
    export(eps, "areal", out)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    rows[0]["status"] = ["truncated"]
    out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = import_path(out, "areal", Store(tmp_path / "a.db"))
    assert report.new == len(rows) - 1 and report.errors[0].field == "status"
