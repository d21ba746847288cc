"""Episodes exported in a trainer's format and read back: what the format can hold comes back as it was, and a
re-import into the database they came from is the stored episodes again, said to be the same."""

from __future__ import annotations

import json

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
    says how it ended (Rollscope's field beside AReaL's), the rows before it completed."""
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
        last = by_row[ep.id, mine[-1]].turns[-1].generation
        assert last.finish_reason == {Status.ABORTED: "abort", Status.TRUNCATED: "length"}[ep.status]
    assert {r["status"] for r in rows} == {"completed", "aborted", "truncated"}
    st.close()
