"""A slime dump read sample by sample: the same samples as a whole load, in a fraction of its memory."""

from __future__ import annotations

import tracemalloc
import zipfile
from pathlib import Path

import pytest

from engine.errors import FormatError
from engine.formats import base, slime, torchstream
from tests.fixtures_formats import slime_sample, synthetic_slime_samples, write_slime_dump


def _whole(path: Path):
    return base.safe_torch_load(path)["samples"]


def _streamed(path: Path):
    stream = torchstream.open_dump(path)
    return stream.header, list(stream.samples()), stream.tail


def test_more_than_a_thousand_samples_read_alone_equal_the_whole_load(tmp_path):
    # The pickler closes the samples list every 1,000 items and opens it again: a cut there too.
    samples = [slime_sample(list(range(i % 7, i % 7 + 12)), 5, index=i, group_index=i // 4, reward=float(i % 3),
                            prompt=f"prompt {i // 4}", status=("completed", "truncated")[i % 2]) for i in range(2300)]
    path = write_slime_dump(tmp_path / "d.pt", samples, rollout_id=9)
    header, got, tail = _streamed(path)
    assert header == {"rollout_id": 9} and tail == {}
    assert got == _whole(path) == samples


def test_objects_the_samples_of_a_group_share_are_found_again(tmp_path):
    prompt = [{"role": "user", "content": "solve " * 200}]  # one list, one long string: pickled once, then referred to
    label = "the answer " * 50
    samples = [slime_sample([1, 2, 3, 4, 5], 2, index=i, group_index=i // 8, prompt=prompt, label=label,
                            metadata={"k": label}) for i in range(40)]
    path = write_slime_dump(tmp_path / "d.pt", samples)
    _, got, _ = _streamed(path)
    assert got == samples


def test_a_reference_further_back_than_the_memo_keeps_falls_back_to_the_whole_load(tmp_path, monkeypatch):
    monkeypatch.setattr(torchstream, "WINDOW", 40)
    shared = "shared " * 100
    samples = [slime_sample([1, 2, 3], 1, index=i, response=shared if i in (3, 60) else f"r{i}",
                            loss_mask=[1], rollout_log_probs=[-0.5]) for i in range(80)]
    path = write_slime_dump(tmp_path / "d.pt", samples)
    stream = torchstream.open_dump(path)
    with pytest.raises(torchstream.NotStreamable, match="too far back"):
        list(stream.samples())
    assert stream.read == 60  # the samples before the one that refers back
    eps = list(slime.read(path, base.ImportContext("slime")))  # the importer carries on from the whole file
    assert [e.sample_index for e in eps] == list(range(80))
    assert eps[60].turns[0].generation.text == shared


def test_dumps_with_tensors_or_of_another_shape_are_not_cut(tmp_path):
    import torch

    tensors = tmp_path / "t.pt"
    torch.save({"rollout_id": 0, "samples": [{"tokens": torch.tensor([1, 2])}]}, tensors)
    other = tmp_path / "o.pt"
    torch.save([{"tokens": [1, 2]}], other)
    for path in (tensors, other):
        with pytest.raises(torchstream.NotStreamable):
            torchstream.open_dump(path)


def test_damage_in_the_middle_keeps_the_samples_before_it_and_names_the_place(tmp_path, monkeypatch):
    monkeypatch.setattr(torchstream, "BLOCK", 1 << 16)  # a file of many blocks
    samples = synthetic_slime_samples(30, 600, prompt_len=64)
    path = write_slime_dump(tmp_path / "d.pt", samples)
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        info = next(i for i in z.infolist() if i.filename.endswith("data.pkl"))
    start = info.header_offset + 30 + len(info.filename.encode()) + len(info.extra)
    middle = start + info.file_size // 2
    data[middle : middle + 4000] = b"\xff" * 4000  # stored, not compressed: the pickle's own bytes
    path.write_bytes(bytes(data))
    ctx = base.ImportContext("slime")
    got = []
    with pytest.raises(FormatError, match=r"cannot read past sample \d+|truncated or corrupt"):
        for ep in slime.read(path, ctx):
            got.append(ep)
    assert 5 < len(got) < 30 and [e.sample_index for e in got] == list(range(len(got)))
    # Imported, the samples before the damage are stored (written while the rest was read), then the error.
    from engine.formats import import_path
    from engine.store import Store

    store = Store(tmp_path / "d.db")
    with pytest.raises(FormatError, match="cannot read past sample"):
        import_path(path, "slime", store)
    assert store.count() == len(got)
    store.close()


def test_reading_sample_by_sample_holds_what_one_sample_needs_whatever_the_file_size(tmp_path):
    def peak(fn) -> int:
        tracemalloc.start()
        fn()
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    def stream(path: Path) -> None:
        for s in torchstream.open_dump(path).samples():
            del s

    small = write_slime_dump(tmp_path / "small.pt", synthetic_slime_samples(20, 8000))
    large = write_slime_dump(tmp_path / "large.pt", synthetic_slime_samples(80, 8000, seed=1))
    assert large.stat().st_size > 3.5 * small.stat().st_size
    loaded = peak(lambda: _whole(large))
    assert loaded > 3 * large.stat().st_size  # Python objects of ids, mask and logprobs
    streamed_small, streamed_large = peak(lambda: stream(small)), peak(lambda: stream(large))
    assert streamed_large < 1.3 * streamed_small  # a sample and a block or two of the file at a time
    assert streamed_large < loaded / 8
