"""Hostile files and places: imports with text UTF-8 cannot hold or numbers JSON cannot, deep nesting,
non-UTF-8 files, read-only databases, paths that cannot be created, a run killed with SIGKILL."""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine import Store, formats
from engine.records.episode import ToolCall
from engine.records.jsonbounds import TooDeep, loads
from engine.records.schema import problems
from engine.records.textsafe import NONFINITE_KEY, json_safe

from .hostile import HostileServer
from .test_cli import rollscope

ROOT = Path(__file__).resolve().parents[1]


def _conversation(content: str, args: str) -> str:
    """One OpenAI-messages record as a line of JSON text (escapes written by hand)."""
    return ('{"messages": [{"role": "user", "content": "' + content + '"}, {"role": "assistant", "content": "", '
            '"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "' + args
            + '"}}]}, {"role": "tool", "tool_call_id": "c1", "content": "ok"}], "reward": 1.0}\n')


def test_an_import_with_lone_surrogates_and_nan_arguments_is_stored_whole_and_exports(tmp_path):
    src = tmp_path / "msgs.jsonl"
    src.write_text(_conversation("2+2? \\ud800 and \\udfff", "{\\\"x\\\": NaN, \\\"y\\\": -Infinity}")
                   + _conversation("fine", "{}") + "[" * 5000 + "\n", encoding="utf-8")
    store = Store(tmp_path / "x.db")
    report = formats.import_path(src, "messages", store)
    assert report.new == 2 and [str(e) for e in report.errors] == [f"{src}:3: not valid JSON (nested too deeply to read)"]
    eps = sorted(store.iter_episodes(), key=lambda e: e.source.line)
    first, second = eps
    assert first.messages[0].content == "2+2? \ufffd and \ufffd"
    replaced = [f for f in first.findings if f.kind == "text_replaced"]
    assert [f.evidence for f in replaced] == [{"where": f"{src}:1", "replaced": 2}]
    assert not [f for f in second.findings if f.kind == "text_replaced"]
    args = first.messages[1].tool_calls[0].arguments
    assert math.isnan(args["x"]) and args["y"] == -math.inf  # read back as the numbers they were
    for fmt, name in (("jsonl", "x.jsonl"), ("parquet", "x.parquet"), ("messages", "m.jsonl")):
        assert formats.export(store.iter_episodes(), fmt, tmp_path / name) == 2, fmt
    # Messages without a tokenizer hold no token ids: a format of ids leaves them out, and says so.
    said: list[str] = []
    assert formats.export(store.iter_episodes(), "areal", tmp_path / "a.jsonl", said) == 0
    assert said == [formats.no_ids("areal", 2)]
    record = json.loads((tmp_path / "x.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert problems(record) == []
    # Re-importing the export keeps the finding and the numbers (the lossless round trip).
    back = Store(tmp_path / "back.db")
    formats.import_path(tmp_path / "x.jsonl", "jsonl", back)
    again = back.get_episode(first.id)
    assert math.isnan(again.messages[1].tool_calls[0].arguments["x"])
    assert [f.kind for f in again.findings if f.kind == "text_replaced"] == ["text_replaced"]
    store.close()
    back.close()


def test_numbers_json_cannot_hold_are_spelled_so_they_round_trip():
    call = ToolCall("f", {"a": math.nan, "b": [1.5, math.inf], "c": {"d": -math.inf}, "e": "NaN"})
    d = call.to_dict()
    text = json.dumps(d, allow_nan=False)
    assert d["arguments"]["a"] == {NONFINITE_KEY: "NaN"} and d["arguments"]["e"] == "NaN"
    back = ToolCall.from_dict(json.loads(text))
    assert math.isnan(back.arguments["a"]) and back.arguments["b"] == [1.5, math.inf]
    assert back.arguments["c"] == {"d": -math.inf} and back.arguments["e"] == "NaN"
    plain = {"a": [1, {"b": 2.0}]}
    assert json_safe(plain) is plain  # nothing to spell: the same object, no copy


def test_bounded_json_refuses_deep_nesting_with_a_sentence():
    assert loads("[[1]]") == [[1]]
    with pytest.raises(TooDeep, match="nested more than 100 levels deep"):
        loads("[" * 101 + "]" * 101)
    with pytest.raises(TooDeep, match="nested too deeply to read"):
        loads("[" * 100_000 + "]" * 100_000, limit=None)
    from engine.tokens.toolcalls import parse

    deep = '<tool_call>{"name": "f", "arguments": {"a": ' + "[" * 3000 + "]" * 3000 + "}}</tool_call>"
    for parser in ("hermes", "sglang-qwen25", "llama3"):
        text = deep if parser != "llama3" else deep.removeprefix("<tool_call>").removesuffix("</tool_call>")
        result = parse(text, parser, frozenset({"f"}))
        assert result.calls == () and "nested" in (result.error or ""), parser


def test_check_on_a_file_that_is_not_utf8_names_each_bad_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b'\xff\xfe{"a": 1}\n' + b"[" * 5000 + b"\n")
    proc = rollscope("check", str(bad), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"{bad}:1: not UTF-8 text (byte 0)" in proc.stderr
    assert f"{bad}:2: not valid JSON (nested too deeply to read)" in proc.stderr
    # A file named as a database that is not one is said so, not read as a JSONL file of bad lines.
    text = tmp_path / "runs.db"
    text.write_text("this is not sqlite\n", encoding="utf-8")
    proc = rollscope("check", str(text), check=False)
    assert (proc.returncode, proc.stderr) == (2, f"rollscope: error: {text} is not a SQLite database (its first bytes "
                                                 "are not SQLite's), though its name says one: check takes a Rollscope "
                                                 "database or a Rollscope JSONL file\n")


def test_a_db_path_that_cannot_be_created_is_a_one_line_error(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = rollscope("run", "--env", "math", "--tasks", "0:1", "--db", str(blocker / "sub" / "x.db"), "--quiet",
                     check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"rollscope: error: cannot create the folder for {blocker / 'sub' / 'x.db'}: Not a directory"]


def _unprivileged() -> list[str]:
    """A command prefix under which file permissions hold (root ignores them unless it drops the capability)."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: file permissions cannot be made to hold")
    return [setpriv, "--bounding-set", "-dac_override,-dac_read_search", "--"]


def _as_unprivileged(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([*_unprivileged(), sys.executable, "-m", "engine.cli", *args], capture_output=True,
                          text=True, env=env, timeout=300, cwd=ROOT)


def test_a_read_only_database_is_read_listed_checked_and_exported_and_never_written(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    db = folder / "x.db"
    rollscope("run", "--env", "math", "--tasks", "0:2", "--db", str(db), "--quiet")
    Store(db).close()  # a clean close checkpoints the WAL: only the .db file is left
    for extra in folder.glob("x.db-*"):
        extra.unlink()
    db.chmod(0o444)
    folder.chmod(0o555)
    before = db.read_bytes()
    out = tmp_path / "out.jsonl"
    try:
        ls = _as_unprivileged("ls", "--db", str(db))
        assert ls.returncode == 0 and "(2 of 2 episodes)" in ls.stdout, ls.stderr
        first = ls.stdout.splitlines()[1].split()[0]
        show = _as_unprivileged("show", first, "--db", str(db))
        assert show.returncode == 0 and first in show.stdout, show.stderr
        export = _as_unprivileged("export", "--db", str(db), "--format", "jsonl", "--out", str(out))
        assert export.returncode == 0 and len(out.read_text().splitlines()) == 2, export.stderr
        check = _as_unprivileged("check", str(db), "--no-store")
        assert check.returncode in (0, 1) and "checked 2 episodes" in check.stdout, check.stderr
        refused = _as_unprivileged("check", str(db))
        assert refused.returncode == 2 and "add --no-store" in refused.stderr and "Traceback" not in refused.stderr
        run = _as_unprivileged("run", "--env", "math", "--tasks", "0:1", "--db", str(db), "--quiet")
        assert run.returncode == 2 and "open read-only (no write permission): cannot save a run" in run.stderr
        assert db.read_bytes() == before and sorted(p.name for p in folder.iterdir()) == ["x.db"]
    finally:
        folder.chmod(0o755)
        db.chmod(0o644)


def test_a_store_opened_read_only_refuses_changes_with_a_sentence(tmp_path):
    from engine import StoreError

    rollscope("run", "--env", "math", "--tasks", "0:1", "--db", str(tmp_path / "x.db"), "--quiet")
    store = Store(tmp_path / "x.db", read_only=True)
    (row,) = store.list_episodes()
    assert store.read_only and store.get_episode(row.id).id == row.id
    assert store.browse_query("SELECT COUNT(*) FROM episode_index") == [(1,)]
    with pytest.raises(StoreError, match="open read-only .*cannot save a note"):
        store.set_note(row.id, "x")
    store.close()


def test_a_run_killed_with_sigkill_is_marked_interrupted_when_the_database_is_next_opened(tmp_path, smol_tokenizer):
    db = tmp_path / "x.db"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with HostileServer(smol_tokenizer) as server:  # "hang" never answers: the run sits in its first turn
        proc = subprocess.Popen(
            [sys.executable, "-m", "engine.cli", "run", "--env", "math", "--tasks", "0:2", "--policy", "sglang",
             "--url", f"{server.url}/hang", "--db", str(db), "--quiet"], env=env, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                if server.calls.get("hang", 0) >= 1:
                    break
                time.sleep(0.2)
            assert server.calls.get("hang", 0) >= 1, "the run never reached the server"
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
    store = Store(db)
    runs = store.db.execute("SELECT status, pid FROM runs").fetchall()
    assert runs == [("interrupted", None)]
    # An episode is stored from its first turn on; none got that far, and none is left "running".
    assert store.db.execute("SELECT COUNT(*) FROM episodes WHERE status = 'running'").fetchone() == (0,)
    store.close()


class OneBadSave(Store):
    """Cannot store the second episode it is given (a bug in writing or indexing it)."""

    def __init__(self, path):
        super().__init__(path)
        self.seen = 0

    def _save_whole(self, ep, **kw):
        self.seen += 1
        if self.seen == 2:
            super()._save_whole(ep, **kw)  # half written when it fails: the savepoint takes it back
            raise OverflowError("Python int too large to convert to SQLite INTEGER")
        super()._save_whole(ep, **kw)


def test_an_import_goes_on_past_a_record_the_store_cannot_take(tmp_path):
    src = tmp_path / "msgs.jsonl"
    src.write_text("".join(_conversation(f"q{i}", "{}") for i in range(4)), encoding="utf-8")
    store = OneBadSave(tmp_path / "x.db")
    report = formats.import_path(src, "messages", store)
    assert report.new == 3 and store.count() == 3
    assert store.db.execute("SELECT COUNT(DISTINCT episode_id) FROM turns").fetchone() == (3,)  # nothing of it left
    # Nor of its texts in the full-text index, which the writer fills: SQLite's check finds the index whole.
    store.db.execute("INSERT INTO search_fts (search_fts, rank) VALUES ('integrity-check', 1)")
    assert [str(e) for e in report.errors] == [
        f"{src}:2: could not be stored: OverflowError: Python int too large to convert to SQLite INTEGER"]
    store.close()


def test_a_file_that_is_not_jsonl_text_is_named_for_what_it_is(tmp_path):
    """A binary file given as JSONL is refused once, saying what it is, not as thousands of bad lines; nothing is
    stored from it."""
    good = tmp_path / "good.jsonl"
    good.write_text(_conversation("hi", "{}"), encoding="utf-8")
    store = Store(tmp_path / "x.db")
    formats.export(formats.IMPORTERS["messages"](good, formats.ImportContext("messages")), "parquet",
                   tmp_path / "x.parquet")
    (tmp_path / "nul.jsonl").write_bytes(bytes(range(256)) * 40)
    (tmp_path / "gz.jsonl").write_bytes(b"\x1f\x8b\x08\x00" + b"\x00" * 20)
    said = {}
    for name in ("x.parquet", "x.db", "nul.jsonl", "gz.jsonl"):
        with pytest.raises(formats.FormatError) as e:
            formats.import_path(tmp_path / name, "jsonl", store)
        said[name] = e.value.detail
    assert said == {"x.parquet": "not JSONL but a Parquet file: one Rollscope wrote imports with --format parquet",
                    "x.db": "not JSONL but a SQLite database: a Rollscope database is opened with --db, not imported",
                    "nul.jsonl": "not JSONL text: binary data (a NUL byte at byte 0)",
                    "gz.jsonl": "not JSONL but gzip-compressed: gunzip it first"}
    assert store.count() == 0
    # A binary format whose first bytes hold a newline before any NUL (a torch file saved the legacy way, a PNG, a
    # safetensors file whose header length holds 0x0a): one refusal too, not a bad line each.
    import io

    import torch
    legacy = io.BytesIO()
    torch.save({"tokens": torch.arange(600)}, legacy, _use_new_zipfile_serialization=False)
    assert 0 < legacy.getvalue().index(b"\n") < legacy.getvalue().index(b"\x00")
    header = b'{"tokens":{"dtype":"I64","shape":[320],"data_offsets":[0,2560]}}'.ljust(0x0A08)
    for name, data in (("legacy.jsonl", legacy.getvalue()),
                       ("png.jsonl", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)) * 20),
                       ("st.jsonl", len(header).to_bytes(8, "little") + header + bytes(range(256)) * 10)):
        with pytest.raises(formats.FormatError) as e:
            formats.import_path(_write(tmp_path / name, data), "jsonl", store)
        assert e.value.detail == f"not JSONL text: binary data (a NUL byte at byte {data.index(0)})", name
    # UTF-16 and UTF-32, with a byte order mark or without (short, or past ASCII), and a byte order mark before a
    # blank first line: said so, with how to convert it.
    line = _conversation("hi", "{}")
    for name, data, enc in (("bom16.jsonl", line.encode("utf-16"), "UTF-16"),
                            ("le16.jsonl", line.encode("utf-16-le"), "UTF-16LE"),
                            ("be16.jsonl", line.encode("utf-16-be"), "UTF-16BE"),
                            ("short16.jsonl", "{}\n".encode("utf-16-le"), "UTF-16LE"),
                            ("wide16.jsonl", '{"日本": 1}\n'.encode("utf-16-le"), "UTF-16LE"),
                            ("blank16.jsonl", ("\n" + line).encode("utf-16"), "UTF-16"),
                            ("bomonly16.jsonl", b"\xff\xfe", "UTF-16"),
                            ("bom32.jsonl", line.encode("utf-32"), "UTF-32"),
                            ("le32.jsonl", line.encode("utf-32-le"), "UTF-32LE"),
                            ("be32.jsonl", line.encode("utf-32-be"), "UTF-32BE")):
        with pytest.raises(formats.FormatError) as e:
            formats.import_path(_write(tmp_path / name, data), "messages", store)
        assert e.value.detail == (f"not UTF-8 but {enc} text: convert it to UTF-8 (iconv -f {enc} -t UTF-8 FILE > "
                                  "out.jsonl)"), name
    # NUL bytes past the first line (a file whose end a crash zeroed) are that line's error: the rest is read.
    zeroed = _write(tmp_path / "zeroed.jsonl", line.encode() + line.replace("hi", "bye").encode() + b"\x00" * 300)
    report = formats.import_path(zeroed, "messages", store)
    assert report.new == 2 and [e.where for e in report.errors] == [f"{zeroed}:3"]
    # So with a first line that is not UTF-8, or that starts with the bytes of a UTF-16 byte order mark: each is
    # its line's error, and the records after it are read.
    for name, first in (("latin1.jsonl", line.replace("hi", "h\xe9").encode("latin-1")),
                        ("fffe.jsonl", b"\xff\xfe" + line.encode())):
        others = "".join(line.replace("hi", f"hi {i}") for i in range(3)).encode()
        path = _write(tmp_path / name, first + others + b"\x00" * 300)
        report = formats.import_path(path, "messages", Store(tmp_path / f"{name}.db"))
        assert report.new == 3 and [(e.where, e.detail) for e in report.errors] == [
            (f"{path}:1", "not UTF-8 text (byte 0)" if name == "fffe.jsonl" else
             f"not UTF-8 text (byte {first.index(0xE9)})"), (f"{path}:5", "not valid JSON (Expecting value at column 1)")], name


def test_a_file_of_no_json_lines_is_refused_once_and_one_with_some_bad_lines_is_read(tmp_path):
    """A CSV, or one JSON document spread over lines (a pretty-printed array or object), given as JSONL is refused
    whole, saying what it is and how to convert it, not as a bad line each; a file whose bad lines sit among
    records, or whose first record is longer than the bytes looked at, is read as before."""
    store = Store(tmp_path / "x.db")
    line = _conversation("hi", "{}")
    csv = "id,prompt,reward\n" + "".join(f"{i},what is 2+2,1.0\n" for i in range(5000))
    records = [{"messages": [{"role": "user", "content": "hi"}], "reward": 1.0}] * 3
    refused = {
        "data.csv": (csv, "not JSON lines: none of its first 20 lines holds a JSON object (line 1 reads "
                          "'id,prompt,reward'): a CSV or other text?"),
        "two.csv": ("a,b\n1,2\n", "not JSON lines: none of its first 2 lines holds a JSON object (line 1 reads "
                                   "'a,b'): a CSV or other text?"),
        "array.json": (json.dumps(records, indent=2) + "\n",
                       "not JSON lines but one JSON document, an array, spread over lines: JSONL holds one record a "
                       "line (jq -c '.[]' FILE > out.jsonl writes its items so; a tau-bench results file imports with "
                       "--format taubench)"),
        "object.json": ("\ufeff" + json.dumps({"episodes": records}, indent=1).replace("\n", "\r\n") + "\r\n",
                        "not JSON lines but one JSON document, an object, spread over lines: JSONL holds one record "
                        "a line (jq -c . FILE > out.jsonl writes it so)"),
    }
    for name, (text, said) in refused.items():
        with pytest.raises(formats.FormatError) as e:
            formats.import_path(_write(tmp_path / name, text.encode()), "messages", store)
        assert e.value.detail == said, name
    assert store.count() == 0
    # `schema --validate`, which says what an import would refuse, refuses the file with the same sentence.
    proc = rollscope("schema", "--validate", str(tmp_path / "data.csv"), check=False)
    assert proc.returncode == 2 and proc.stdout == "" and refused["data.csv"][1] in proc.stderr
    # Bad lines first, then records: each bad line its error, the records read.
    mixed = _write(tmp_path / "mixed.jsonl", ("[1, 2]\nid,prompt\n" + line * 2).encode())
    report = formats.import_path(mixed, "messages", store)
    assert report.new == 2 and [e.where for e in report.errors] == [f"{mixed}:1", f"{mixed}:2"]
    # A long first record (no line ends in the first 4 KB), then a CSV line: read, one error.
    long = line.replace("hi", "h" + "i" * 5000)
    tail = _write(tmp_path / "long.jsonl", (long + "a,b\n").encode())
    report = formats.import_path(tail, "messages", Store(tmp_path / "long.db"))
    assert report.new == 1 and [e.where for e in report.errors] == [f"{tail}:2"]


def test_a_last_line_cut_off_is_called_so_and_an_empty_file_says_it_holds_nothing(tmp_path):
    line = _conversation("hi", "{}")
    cut = tmp_path / "cut.jsonl"
    cut.write_text(line + line[: len(line) // 2], encoding="utf-8")
    whole = tmp_path / "whole.jsonl"
    whole.write_text(line + line.rstrip("\n"), encoding="utf-8")  # a last line without its newline, but whole
    store = Store(tmp_path / "x.db")
    report = formats.import_path(cut, "messages", store)
    (e,) = report.errors
    assert report.new == 1 and e.where == f"{cut}:2" and e.detail.startswith("not valid JSON (") and e.detail.endswith(
        "): the file's last line, with no newline after it, so cut off (a file still being written, or copied short?)")
    assert formats.import_path(whole, "messages", Store(tmp_path / "w.db")).errors == []
    # A last line that ends its object but is wrong inside was written wrong, not cut.
    wrong = _write(tmp_path / "wrong.jsonl", (line + line.replace('"hi"', '"hi",,').rstrip("\n")).encode())
    (e,) = formats.import_path(wrong, "messages", Store(tmp_path / "wr.db")).errors
    assert e.detail.startswith("not valid JSON (") and "cut off" not in e.detail
    # Cut inside a string, or after a value whose object the cut left open: cut off. Wrong before the end: not.
    for last, is_cut in (('{"messages": [{"role": "user", "content": "h', True),
                         ('{"messages": [{"role": "user", "content": "hi"}]', True),
                         ('{"messages": [{"role": "user", "content": "hi"}]] ', False),
                         ('{"messages": [{"role": "user" "content": "hi"}]', False),
                         # inside a number, a literal or an escape: cut; a backslash before a closing quote: not
                         ('{"logprobs": [-0.25, -', True), ('{"logprobs": [-0.25, -0.', True),
                         ('{"logprobs": [-0.25, -1e', True), ('{"done": tru', True), ('{"reward": nul', True),
                         ('{"text": "caf\\u00', True), ('{"path": "C:\\"}', False), ('{"x": 1.}', False)):
        (e,) = formats.import_path(_write(tmp_path / "c.jsonl", (line + last).encode()), "messages",
                                   Store(tmp_path / "c.db")).errors
        assert e.detail.startswith("not valid JSON (") and ("cut off" in e.detail) == is_cut, (last, e.detail)
        if last.endswith('"h'):  # the column the string starts at, said once
            assert e.detail.startswith(f"not valid JSON (Unterminated string starting at column {len(last) - 1}): ")
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    got = formats.import_path(empty, "jsonl", store)
    assert (got.new, got.errors, got.notes) == (0, [], [f"{empty} holds no records: nothing imported"])


def test_a_file_that_starts_with_a_byte_order_mark_reads_as_without_it(tmp_path, capsys):
    from engine.cli.main import main
    from engine.formats import jsonl

    line = _conversation("hi", "{}")
    plain = Store(tmp_path / "p.db")
    formats.import_path(_write(tmp_path / "plain.jsonl", line.encode()), "messages", plain)
    bom = _write(tmp_path / "bom.jsonl", b"\xef\xbb\xbf" + line.encode() + line.replace("hi", "bye").encode())
    store = Store(tmp_path / "b.db")
    report = formats.import_path(bom, "messages", store)
    assert (report.new, report.errors) == (2, [])
    first = min(store.iter_episodes(), key=lambda e: e.source.line)
    assert first.source.line == 1 and first.messages == plain.get_episode(plain.episode_ids()[0]).messages
    # A Rollscope export with one: imported, read by `check FILE`, and valid to `schema --validate`.
    out = tmp_path / "x.jsonl"
    formats.export(store.iter_episodes(), "jsonl", out)
    marked = _write(tmp_path / "xb.jsonl", b"\xef\xbb\xbf" + out.read_bytes())
    assert formats.import_path(marked, "jsonl", Store(tmp_path / "x.db")).new == 2
    report2 = jsonl.ReadReport()
    assert len(list(jsonl.read(marked, report2))) == 2 and report2.errors == []
    assert main(["schema", "--validate", str(marked)]) == 0
    assert "2 of 2 records conform" in capsys.readouterr().out


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def test_an_export_imported_as_another_format_is_refused_once_naming_the_format_that_reads_it(tmp_path):
    """Each JSON-lines export, imported with another --format, is refused whole in one sentence saying what its
    records are and which format reads them (an areal-realhf export: that none does), where it gave an error a
    line; on workers too. With its own format each imports."""
    from engine.checks.fanout import Fanout
    from engine.formats import jsonl as jsonl_format
    from tests.synthetic import synthetic_episodes

    store = Store(tmp_path / "src.db")
    store.save_episodes(synthetic_episodes(6))
    files = {}
    for fmt in ("jsonl", "verl", "areal", "areal-realhf", "messages"):
        files[fmt] = tmp_path / f"e.{fmt}"
        formats.export(store.iter_episodes(), fmt, files[fmt])
    store.close()
    said = {"jsonl": "Rollscope episode records: import them with --format jsonl",
            "verl": "verl AgentLoopOutput rows: import them with --format verl",
            "areal": "AReaL per-turn sequences: import them with --format areal",
            "areal-realhf": "an areal-realhf export (realhf's SequenceSample fields), which Rollscope writes for "
                            "AReaL's RealHF trainer and does not read back: import the jsonl or areal export of the "
                            "same episodes",
            "messages": "OpenAI messages records: import them with --format messages"}
    refused = 0
    for written, path in files.items():
        for fmt in ("jsonl", "verl", "areal", "messages"):
            into = Store(tmp_path / f"{written}-{fmt}.db")
            try:
                if fmt == written:
                    assert formats.import_path(path, fmt, into).new >= 6, (written, fmt)  # areal: a row a turn
                    continue
                with pytest.raises(formats.FormatError) as e:
                    formats.import_path(path, fmt, into)
                # A Rollscope record holds its messages, but read as messages alone it would lose its tokens.
                lost = (" (read as messages they would keep their messages and lose their token ids, loss mask, "
                        "logprobs and findings)") if (written, fmt) == ("jsonl", "messages") else ""
                assert str(e.value) == f"{path}: not {fmt} records but {said[written]}{lost}", (written, fmt)
                assert into.count() == 0
                refused += 1
            finally:
                into.close()
    assert refused == 16
    # schema --validate of another format's file says what it holds, once, not every missing field of every line;
    # a Rollscope record that lacks a field is what --validate is for: named, as before.
    broken = _write(tmp_path / "broken.jsonl", b'{"schema_version": 10, "id": "x", "turns": [], "messages": []}\n')
    proc = rollscope("schema", "--validate", str(broken), check=False)
    assert proc.returncode == 1 and f"{broken}:1: (record): 'env' is a required property" in proc.stdout
    for written in ("verl", "areal", "messages"):
        proc = rollscope("schema", "--validate", str(files[written]), check=False)
        assert (proc.returncode, proc.stdout) == (2, ""), written
        assert proc.stderr == (f"rollscope: error: {files[written]}: not Rollscope episode records but {said[written]}; "
                               "--validate checks Rollscope's own records (export --format jsonl)\n"), written
    # tau-bench's results are one JSON document, a list: each JSON-lines export given as them says what it is and
    # which format reads it; lines of no known shape (tau-bench's results written a line each) say how to make
    # the list; a binary file says what it is.
    into = Store(tmp_path / "taubench.db")
    for written, path in files.items():
        with pytest.raises(formats.FormatError) as e:
            formats.import_path(path, "taubench", into)
        assert str(e.value) == (f"{path}: not a tau-bench results file (one JSON document) but JSON lines, one record "
                                f"a line: {said[written]}"), written
    deep = _write(tmp_path / "deep.jsonl", b'{"a": ' + b"[" * 200_000 + b"]" * 200_000 + b'}\n{"b": 1}\n')
    with pytest.raises(formats.FormatError, match="not valid JSON"):  # the parser's own word, not a RecursionError
        formats.import_path(deep, "taubench", into)
    lines = _write(tmp_path / "results.jsonl", b'{"task_id": 0, "reward": 1.0, "traj": []}\n{"task_id": 1}\n')
    with pytest.raises(formats.FormatError, match=r"one record a line: --format taubench reads one JSON document, "
                                                  r"a list \(jq -s \. FILE > out\.json writes the lines so\)$"):
        formats.import_path(lines, "taubench", into)
    with pytest.raises(formats.FormatError, match="not a tau-bench results file but a SQLite database"):
        formats.import_path(tmp_path / "src.db", "taubench", into)
    assert into.count() == 0
    into.close()
    # Read on workers, the first line is looked at before any goes out.
    monkey = jsonl_format.WORKERS_FROM_BYTES
    jsonl_format.WORKERS_FROM_BYTES = 0
    try:
        into = Store(tmp_path / "workers.db")
        with Fanout(2) as pool, pytest.raises(formats.FormatError, match="not jsonl records but verl AgentLoopOutput"):
            formats.import_path(files["verl"], "jsonl", into, fanout=pool)
        into.close()
    finally:
        jsonl_format.WORKERS_FROM_BYTES = monkey
