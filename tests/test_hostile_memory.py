"""Memory is bounded by the record limit, not by what a file holds.

A zip entry that would inflate a thousandfold is refused before it inflates; a record over
``--max-record-mb`` (a JSONL line, a slime sample, a Parquet row) is skipped and named without being
held whole, and the records around it are imported.
"""

from __future__ import annotations

import tracemalloc
from pathlib import Path

import pytest

from engine import Store, formats
from engine.cli.main import main
from engine.errors import FormatError
from engine.formats import jsonl

from .fixtures_formats import slime_sample, write_long_line, write_slime_dump, write_zip_bomb
from .synthetic import synthetic_episode


def _peak(fn):
    tracemalloc.start()
    try:
        out = fn()
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_zip_bomb_dump_is_refused_before_it_inflates(tmp_path):
    bomb = write_zip_bomb(tmp_path / "bomb.pt", 100)
    assert bomb.stat().st_size < 2 * 2**20
    store = Store(tmp_path / "x.db")

    def run():
        with pytest.raises(FormatError, match=r"refusing to inflate archive/data.pkl: .* would become 95 MB, more "
                                              r"than 100 times its size and over the 64 MB record limit") as e:
            formats.import_path(bomb, "slime", store)
        return e

    e, peak = _peak(run)
    assert str(bomb) in str(e.value)
    assert peak < 8 * 2**20 and store.count() == 0
    store.close()


def _samples(n: int, big: dict[int, int]) -> list[dict]:
    return [slime_sample(range(10, 42), 16, index=i, response="x" * big.get(i, 2)) for i in range(n)]


@pytest.mark.parametrize("at", [3, 6], ids=["middle", "last"])
def test_a_slime_sample_over_the_record_limit_is_skipped_and_named_and_the_others_imported(tmp_path, at):
    path = write_slime_dump(tmp_path / "d.pt", _samples(7, {at: 6 * 2**20}))  # torch.save: stored, not deflated
    store = Store(tmp_path / "x.db")
    report, peak = _peak(lambda: formats.import_path(path, "slime", store, max_record_mb=1))
    assert report.new == 6 and store.count() == 6
    assert [str(e) for e in report.errors] == [
        f"{path}: sample {at}: the sample is 6 MB, over the 1 MB record limit: skipped without being read "
        "(--max-record-mb raises the limit)"]
    assert sorted(ep.sample_index for ep in store.iter_episodes()) == [i for i in range(7) if i != at]
    assert peak < 5 * 2**20  # a block or two of the file, never the 6 MB sample
    store.close()


def test_a_first_sample_over_the_limit_defines_what_the_others_refer_to_so_the_rest_is_refused(tmp_path):
    # The first sample's keys are written once and referred to by every later one: without it they cannot be
    # read, and loading the file whole would bring the skipped sample back.
    path = write_slime_dump(tmp_path / "d.pt", _samples(4, {0: 3 * 2**20}))
    store = Store(tmp_path / "x.db")
    with pytest.raises(FormatError, match=r"cannot read past sample 1: it refers to what a sample skipped for its "
                                          r"size defined .*--max-record-mb above that sample's size reads it"):
        formats.import_path(path, "slime", store, max_record_mb=1)
    assert store.count() == 0
    assert formats.import_path(path, "slime", store, max_record_mb=4).new == 4
    store.close()


def test_a_deflated_dump_inflating_within_bounds_is_read(tmp_path):
    # A thousandfold inflation is allowed when the entry stays within one record's size.
    bomb = write_zip_bomb(tmp_path / "small.pt", 3)
    store = Store(tmp_path / "x.db")
    report = formats.import_path(bomb, "slime", store, max_record_mb=4)
    assert report.new == 3 and not report.errors
    store.close()


def _records(n: int = 3) -> list[dict]:
    return [synthetic_episode(i).to_dict() for i in range(n)]


def test_a_jsonl_line_over_the_limit_is_skipped_without_being_held(tmp_path):
    path = write_long_line(tmp_path / "x.jsonl", 70, _records())
    store = Store(tmp_path / "x.db")
    report, peak = _peak(lambda: formats.import_path(path, "jsonl", store))
    assert report.new == 2 and store.count() == 2
    assert [str(e) for e in report.errors] == [
        f"{path}:2: the line is 67 MB, over the 64 MB record limit: skipped without being read "
        "(--max-record-mb raises the limit)"]
    assert peak < 16 * 2**20
    store.close()


def test_import_takes_the_limit_from_the_command_line_and_check_reads_files_with_it(tmp_path, capsys):
    path = write_long_line(tmp_path / "x.jsonl", 2, _records())
    db = tmp_path / "x.db"
    assert main(["import", str(path), "--db", str(db), "--quiet", "--max-record-mb", "1"]) == 0
    out = capsys.readouterr()
    assert f"rollscope: skipped {path}:2: the line is 2 MB, over the 1 MB record limit" in out.err
    assert "imported 2 new" in out.out and "0 malformed records skipped, 1 over the record limit skipped" in out.out
    report = jsonl.ReadReport()  # what `check FILE` reads with
    assert len(list(jsonl.read(path, report, max_record=2**20))) == 2
    assert [e.where for e in report.errors] == [f"{path}:2"]


def test_the_record_limit_must_be_a_positive_number(tmp_path, capsys):
    path = write_long_line(tmp_path / "x.jsonl", 1, _records(1), at=5)
    with pytest.raises(SystemExit):
        main(["import", str(path), "--db", str(tmp_path / "x.db"), "--max-record-mb", "0"])
    assert "--max-record-mb: must be a positive number of MB, not 0" in capsys.readouterr().err


def test_a_parquet_row_over_the_limit_is_skipped_and_named(tmp_path):
    eps = [synthetic_episode(i) for i in range(3)]
    eps[1] = eps[1].evolve(note="n" * (2 * 2**20))
    formats.export(eps, "parquet", tmp_path / "x.parquet")
    store = Store(tmp_path / "x.db")
    report = formats.import_path(tmp_path / "x.parquet", "parquet", store, max_record_mb=1)
    assert report.new == 2 and [e.where for e in report.errors] == [f"{tmp_path / 'x.parquet'}: row 1"]
    assert "over the 1 MB record limit" in str(report.errors[0])
    store.close()


def test_a_file_whose_records_fit_is_read_as_before(tmp_path):
    path = write_long_line(tmp_path / "x.jsonl", 1, _records())
    store = Store(tmp_path / "x.db")
    assert formats.import_path(Path(path), "jsonl", store, max_record_mb=2).new == 3
    store.close()
