"""slime dumps: exact round trips, the --dump-details layout, and hostile files."""

from __future__ import annotations

import math

import numpy as np
import pytest

from engine.checks import CheckOptions, run_checks
from engine.errors import FormatError
from engine.formats import export, import_path
from engine.formats.base import ImportContext, safe_torch_load
from engine.formats.slime import episode_to_sample
from engine.records.episode import Message, Severity, Status
from engine.store import Store
from engine.tokens import chat
from tests.fixtures_formats import (
    loop_episodes,
    slime_sample,
    truncate,
    write_dump_details,
    write_malicious_pt,
    write_slime_dump,
)


@pytest.fixture(scope="module")
def eps(smol_tokenizer):
    base = loop_episodes(smol_tokenizer)
    # every status the loop can end with, on real token arrays
    statuses = [Status.COMPLETED, Status.TRUNCATED, Status.ABORTED, Status.FAILED, Status.INTERRUPTED, Status.COMPLETED]
    return [e.evolve(status=s) for e, s in zip(base, statuses)]


def _db(tmp_path, name="a.db"):
    return Store(tmp_path / name)


def test_round_trip_rollscope_slime_rollscope_is_exact(tmp_path, eps, smol_tokenizer):
    src = _db(tmp_path)
    for e in eps:
        src.save_episode(e)
    out = tmp_path / "dump.pt"
    assert export(src.iter_episodes(), "slime", out) == len(eps)
    assert not (tmp_path / "dump.pt.part").exists()
    pack = safe_torch_load(out)  # what slime's own loader gets: plain types under weights_only
    s0 = pack["samples"][0]
    assert isinstance(s0["tokens"][0], int) and isinstance(s0["loss_mask"][0], int)
    assert isinstance(s0["reward"], float) and isinstance(s0["status"], str)
    assert all(len(s["loss_mask"]) == s["response_length"] for s in pack["samples"])
    assert all(s["rollout_log_probs"] is None or all(math.isfinite(x) for x in s["rollout_log_probs"]) for s in pack["samples"])

    dst = _db(tmp_path, "b.db")
    report = import_path(out, "slime", dst, tokenizer=smol_tokenizer)
    assert (report.new, report.already_present, report.skipped) == (len(eps), 0, 0)
    back = {e.source.details["original_id"]: e for e in dst.iter_episodes()}
    for e in eps:
        b = back[e.id]
        assert b.tokens == e.tokens  # ids, mask, logprobs (NaN where unknown) and versions, exactly
        assert b.reward == e.reward and b.status is e.status and b.prompt_len == e.prompt_len
        assert b.env == e.env and b.task_id == e.task_id and b.source.kind == "slime"
        assert b.n_turns == len([s for s in e.segments if s.kind == "assistant"])


def test_imported_episode_is_checkable_like_a_live_one(tmp_path, eps, smol_tokenizer):
    tito = eps[0]
    pack_sample = episode_to_sample(tito, 0, 0)
    f = write_slime_dump(tmp_path / "0.pt", [pack_sample])
    st = _db(tmp_path)
    import_path(f, "slime", st, tokenizer=smol_tokenizer)
    ep = next(st.iter_episodes())
    kinds = {x.kind for x in run_checks(ep, CheckOptions(tokenizer=smol_tokenizer))}
    assert not kinds & {"mask_misaligned", "logprobs_misaligned", "response_length_mismatch", "tokens_not_rendering"}
    assert ep.turns[0].generation.text.startswith(tito.turns[0].generation.text[:20])
    assert [s.kind for s in ep.segments][:2] == ["prompt", "assistant"]


def test_dump_details_folder_with_tokenizer_and_train_data(tmp_path, qwen3_tokenizer):
    tok = qwen3_tokenizer
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    prompt_ids = chat.encode(tok, chat.render(tok, [Message.from_dict(m) for m in msgs], add_generation_prompt=True))
    resp = "<think>\n\n</think>\n\nThe answer is 4.<|im_end|>"  # what Qwen3 writes with thinking off
    resp_ids = tok.encode(resp, add_special_tokens=False)
    samples = [
        slime_sample(prompt_ids + resp_ids, len(resp_ids), index=i, group_index=7, prompt=msgs, response=resp,
                     loss_mask=[1] * len(resp_ids), rollout_log_probs=[-0.1 * (i + 1)] * len(resp_ids),
                     reward={"score": 1.0, "format": 0.5}, status="completed", label="4", weight_versions=["12"])
        for i in range(2)
    ]
    root = write_dump_details(tmp_path / "dump", {3: samples}, tokenizer=tok)
    st = _db(tmp_path)
    report = import_path(root, "slime", st)
    assert report.new == 2 and not report.errors
    assert any("tokenizer saved beside the dump" in n for n in report.notes)
    ep = sorted(st.iter_episodes(), key=lambda e: e.sample_index)[1]
    assert ep.tokenizer == str((root / "tokenizer").resolve())
    assert ep.task_id == "7" and ep.group_id == "slime:3:7" and ep.reward == 1.0
    assert ep.source.details["reward"] == {"score": 1.0, "format": 0.5} and ep.source.details["rollout_id"] == 3
    n = len(prompt_ids)
    assert ep.prompt_len == n and ep.tokens.loss_mask[:n].sum() == 0 and ep.tokens.loss_mask[n:].all()
    assert np.isnan(ep.tokens.logprobs[:n]).all() and np.allclose(ep.tokens.logprobs[n:], -0.2)
    assert (ep.tokens.versions[n:] == 12).all() and (ep.tokens.versions[:n] == -1).all()
    assert [m.role for m in ep.messages] == ["user", "assistant"] and ep.messages[1].content.endswith("</think>\n\nThe answer is 4.")
    train = ep.source.details["train"]
    assert train["log_probs"] == pytest.approx([-0.5] * len(resp_ids)) and len(train["advantages"]) == len(resp_ids)
    assert "ref_log_probs" in train and "tokens" not in train
    kinds = {x.kind for x in run_checks(ep, CheckOptions(tokenizer=tok))}
    assert not kinds & {"mask_misaligned", "tokens_not_rendering", "logprobs_missing"}


def test_malicious_pickle_is_refused_and_never_executed(tmp_path):
    for zip_format in (True, False):
        marker = tmp_path / f"pwned_{zip_format}"
        f = write_malicious_pt(tmp_path / f"evil_{zip_format}.pt", marker, zip_format=zip_format)
        st = _db(tmp_path)
        with pytest.raises(FormatError, match="refusing to unpickle.*only plain tensors/lists/dicts are accepted"):
            import_path(f, "slime", st)
        assert not marker.exists()
        assert st.count() == 0


def test_truncated_empty_and_foreign_files_raise_clearly(tmp_path):
    bad = truncate(write_slime_dump(tmp_path / "1.pt", [slime_sample([1, 2, 3, 4], 2)]))
    (tmp_path / "2.pt").write_bytes(b"")
    for f, msg in ((bad, "truncated or corrupt"), (tmp_path / "2.pt", "empty file")):
        with pytest.raises(FormatError, match=msg):
            import_path(f, "slime", _db(tmp_path))
    import torch

    torch.save([1, 2, 3], tmp_path / "3.pt")
    with pytest.raises(FormatError, match="expected a dict with a 'samples' list"):
        import_path(tmp_path / "3.pt", "slime", _db(tmp_path))
    # an empty rollout is fine: nothing to import
    write_slime_dump(tmp_path / "4.pt", [])
    assert import_path(tmp_path / "4.pt", "slime", _db(tmp_path, "e.db")).imported == 0


def test_malformed_samples_are_reported_and_skipped(tmp_path):
    good = slime_sample([5, 6, 7, 8, 9], 3, index=0, loss_mask=[1, 1, 0], rollout_log_probs=[-1.0, -2.0, 0.0])
    samples = [
        good,
        slime_sample([5.0, 6.0, 7.0], 1, index=1),  # float tokens
        slime_sample([5, 6, 7], 1, index=2, reward="high"),  # string reward
        slime_sample([5, 6, 7], 5, index=3),  # response longer than the sample
        slime_sample([5, 6, 7], 2, index=4, loss_mask=[1, 2]),  # not a 0/1 mask
        slime_sample([5, 6, 7], 2, index=5, loss_mask=[1]),  # a mask of another length is shown, not skipped
        slime_sample([5, 6, 7], 2, index=6, status="exploded"),
        {k: v for k, v in good.items() if k != "tokens"},
        "not a dict",
    ]
    f = write_slime_dump(tmp_path / "r.pt", samples, rollout_id=9)
    st = _db(tmp_path)
    report = import_path(f, "slime", st)
    assert report.new == 2 and report.skipped == 7
    msgs = [str(e) for e in report.errors]
    assert f"{f}: sample 1: field 'tokens': must be integer token ids, got floats" in msgs[0]
    assert "sample 2: field 'reward': must be a number" in msgs[1]
    assert "sample 3: field 'response_length': is 5 but the sample has 3 tokens" in msgs[2]
    assert "sample 4: field 'loss_mask': must contain only 0 and 1" in msgs[3]
    assert "sample 6: field 'status': unknown status 'exploded'" in msgs[4]
    assert "sample 7: field 'tokens': missing" in msgs[5]
    assert "sample 8: expected a dict" in msgs[6]
    assert all(e.where.startswith(str(f)) and e.field for e in report.errors[:6])
    ep = next(e for e in st.iter_episodes() if e.n_tokens == 5)
    assert ep.tokens.loss_mask.tolist() == [0, 0, 1, 1, 0] and ep.tokens.logprobs[2:].tolist() == [-1.0, -2.0, 0.0]


def test_loss_mask_longer_than_response_is_kept_and_found_by_checks(tmp_path, smol_tokenizer):
    f = write_slime_dump(tmp_path / "m.pt", [slime_sample([1, 2, 3, 4, 5], 3, loss_mask=[1, 1, 1, 1, 1])])
    st = _db(tmp_path)
    report = import_path(f, "slime", st)
    assert report.new == 1 and any("mask_misaligned" in n for n in report.notes)
    ep = next(st.iter_episodes())
    assert ep.source.details["loss_mask_length"] == 5 and ep.source.details["response_length"] == 3
    assert ep.tokens.loss_mask.tolist() == [0, 0, 1, 1, 1]
    found = [x for x in run_checks(ep, CheckOptions()) if x.kind == "mask_misaligned"]
    assert found and "5 entries for a response of 3 tokens" in found[0].message


def test_statuses_rewards_and_reimport(tmp_path):
    samples = [
        slime_sample([1, 2, 3], 1, index=0, status="pending", reward=None),
        slime_sample([1, 2, 4], 1, index=1, status="truncated", reward={"acc": 1.0, "len_penalty": -0.25}),
        slime_sample([1, 2, 5], 0, index=2, status="aborted", reward=0),
    ]
    f = write_slime_dump(tmp_path / "s.pt", samples)
    st = _db(tmp_path)
    first = import_path(f, "slime", st, reward_key="acc")  # slime's --reward-key: which score is the reward
    eps = sorted(st.iter_episodes(), key=lambda e: e.sample_index)
    assert [e.status for e in eps] == [Status.INTERRUPTED, Status.TRUNCATED, Status.ABORTED]
    assert [e.source.details["status"] for e in eps] == ["pending", "truncated", "aborted"]
    assert [e.reward for e in eps] == [0.0, 1.0, 0.0]
    assert eps[1].turns[-1].generation.finish_reason == "length" and eps[2].n_turns == 0
    st.set_tags(eps[0].id, ["keep"])
    again = import_path(f, "slime", st, reward_key="acc")
    assert (first.new, again.new, again.already_present, again.differ) == (3, 0, 3, 0)
    assert st.count() == 3 and st.get_episode(eps[0].id).tags == ("keep",)  # a re-import keeps annotations


def test_context_notes_without_tokenizer(tmp_path):
    f = write_slime_dump(tmp_path / "t.pt", [slime_sample([1, 2, 3], 1, response="x")])
    report = import_path(f, "slime", _db(tmp_path))
    assert any("no tokenizer" in n for n in report.notes)
    ctx = ImportContext("slime")
    ctx.note("a")
    ctx.note("a")
    assert ctx.notes == ["a"]


def test_a_reply_cut_mid_episode_reads_back_cut_and_checks_as_it_did(tmp_path, smol_tokenizer):
    """slime keeps one status a sample; a loop that goes on after a reply cut by the length limit appends the
    end-of-turn token untrained. Exported and imported, that turn is cut again, and the checks find what they found
    on the episode itself (the cut turn), not a mask that leaves assistant output untrained."""
    import asyncio

    from engine.backends.base import SamplingParams
    from engine.backends.scripted import ScriptedBackend
    from engine.envs.math import MathEnv
    from engine.launch.demo import _rambling_first_reply
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS

    env = MathEnv()
    backend = ScriptedBackend(_rambling_first_reply(env.reference_reply), smol_tokenizer, mistake_rate=0.0, seed=0)
    ep = asyncio.run(run_episode(env, backend, smol_tokenizer, PRESETS["tito"], env.tasks[0],
                                 sampling=SamplingParams(max_new_tokens=48)))
    assert ep.n_turns >= 2 and ep.turns[0].generation.finish_reason == "length"
    assert ep.turns[-1].generation.finish_reason == "stop" and ep.status is Status.COMPLETED
    opts = CheckOptions(tokenizer=smol_tokenizer)
    # The loop logged the cut turn as it ran; the checks add what it did not.
    before = sorted((f.kind, f.turn) for f in (*ep.all_findings(), *run_checks(ep, opts)) if f.severity.value != "info")
    assert before == [("truncated_turn", 0)]
    dump = write_slime_dump(tmp_path / "0.pt", [episode_to_sample(ep, 0, 0)])
    st = _db(tmp_path)
    try:
        import_path(dump, "slime", st, tokenizer=smol_tokenizer)
        back = next(st.iter_episodes())
    finally:
        st.close()
    assert [t.generation.finish_reason for t in back.turns] == [t.generation.finish_reason for t in ep.turns]
    after = sorted((f.kind, f.turn) for f in run_checks(back, opts) if f.severity.value != "info")
    assert after == before


def test_a_file_of_another_format_given_as_slime_says_what_it_is(tmp_path, eps):
    """Not a pickle's "arbitrary code" refusal: a JSONL export, a gzip file, a Parquet file and a database given as
    a slime dump are each named, with the format that reads them; a real dump still reads."""
    import gzip

    src = _db(tmp_path)
    src.save_episode(eps[0])
    jsonl_file, parquet_file = tmp_path / "e.jsonl", tmp_path / "e.parquet"
    export(src.iter_episodes(), "jsonl", jsonl_file)
    export(src.iter_episodes(), "parquet", parquet_file)
    src.close()
    dump = write_slime_dump(tmp_path / "0.pt", [episode_to_sample(eps[0], 0, 0)])
    zipped = tmp_path / "0.pt.gz"
    zipped.write_bytes(gzip.compress(dump.read_bytes()))
    bom_array = tmp_path / "rows.json"
    bom_array.write_bytes(b"\xef\xbb\xbf[\n  {\"prompt_ids\": [1]}\n]\n")
    cases = [(jsonl_file, "not a torch.save dump but JSON text: a Rollscope export imports with --format jsonl"),
             (bom_array, "but JSON text"), (zipped, "gzip-compressed: gunzip it first"),
             (parquet_file, "a Parquet file: one Rollscope wrote imports with --format parquet"),
             (tmp_path / "a.db", "a SQLite database")]
    for f, said in cases:
        with pytest.raises(FormatError) as e:
            import_path(f, "slime", _db(tmp_path, "x.db"))
        assert said in str(e.value) and "arbitrary code" not in str(e.value), f.name
    assert import_path(dump, "slime", _db(tmp_path, "ok.db")).new == 1


def test_trainer_exports_name_their_tokenizer_and_read_back_with_it_as_with_tokenizer(tmp_path, smol_tokenizer):
    """slime's and AReaL's exports write the tokenizer beside the trainer's fields; imported without --tokenizer,
    they are read with it (said in a note) and check as an import given it does. The seed loops' bugs survive the
    trip: slime's replies glued without headers, and in AReaL's per-turn rows the system block each feedback
    message brought, inside the next turn's context. A name that is not a folder here is said, not fetched."""
    from transformers import AutoTokenizer

    from engine.envs.math import MathEnv
    from engine.envs.retail import RetailEnv
    from tests.test_presets_fidelity import run

    seed, _ = run(RetailEnv, smol_tokenizer, "slime-tau-seed", 1, 0.0)
    areal, _ = run(MathEnv, smol_tokenizer, "areal-math", 1, 0.5)
    assert seed.tokenizer == areal.tokenizer == "smollm2" and areal.n_turns > 1

    def roots(store):
        return {(e.source.details.get("original_id") or e.source.details.get("episode_id"),
                 e.source.details.get("turn")): sorted(f.kind for f in e.all_findings()
                                                       if f.severity is Severity.ERROR and f.caused_by is None)
                for e in store.iter_episodes()}

    for fmt in ("slime", "areal"):
        out = tmp_path / f"x.{fmt}"
        export([seed, areal], fmt, out)
        named, given = _db(tmp_path, f"{fmt}-named.db"), _db(tmp_path, f"{fmt}-given.db")
        report = import_path(out, fmt, named, check=True)
        assert "read with the tokenizer the records name, smollm2 (--tokenizer reads them with another)" in report.notes
        assert not any(n.startswith("no tokenizer given") for n in report.notes)
        import_path(out, fmt, given, tokenizer=smol_tokenizer, check=True)
        assert {e.tokenizer for e in named.iter_episodes()} == {"smollm2"}
        assert roots(named) == roots(given), fmt
        if fmt == "slime":
            assert roots(named) == {(seed.id, None): ["generation_prompt_missing"],
                                    (areal.id, None): ["system_block_injected"]}
        else:  # a row a turn: each later math turn's context holds the block the feedback before it brought
            got = roots(named)
            assert {k: v for k, v in got.items() if k[0] == areal.id} == {
                (areal.id, t): (["system_block_injected"] if t > 0 else []) for t in range(areal.n_turns)}
            assert {k: v for k, v in got.items() if k[0] == seed.id} == {
                (seed.id, t): (["generation_prompt_missing"] if t > 0 else []) for t in range(seed.n_turns)}
        named.close()
        given.close()
    rows = (tmp_path / "x.areal").read_text(encoding="utf-8").replace('"tokenizer": "smollm2"',
                                                                       '"tokenizer": "Qwen/Qwen3-8B"')
    (tmp_path / "hub.areal").write_text(rows, encoding="utf-8")
    report = import_path(tmp_path / "hub.areal", "areal", _db(tmp_path, "hub.db"))
    (said,) = [n for n in report.notes if "Qwen/Qwen3-8B" in n]  # looked up in the local cache alone, once
    assert said.startswith("the records name the tokenizer 'Qwen/Qwen3-8B', which could not be loaded (")
    assert said.endswith("): --tokenizer gives one to decode their ids and run the token-level checks")
    assert {e.tokenizer for e in _db(tmp_path, "hub.db").iter_episodes()} == {""}
    # Episodes of two tokenizers in one file: each record is read with the one it names, not the first one's.
    from tests.conftest import QWEN3_DIR

    qwen, _ = run(RetailEnv, AutoTokenizer.from_pretrained(str(QWEN3_DIR)), "slime-tau", 0, 0.0)
    qwen = qwen.evolve(tokenizer=str(QWEN3_DIR))
    export([qwen, seed], "slime", tmp_path / "two.slime")
    mixed = _db(tmp_path, "two.db")
    report = import_path(tmp_path / "two.slime", "slime", mixed, check=True)
    assert sum(n.startswith("read with the tokenizer the records name") for n in report.notes) == 2
    got = {e.source.details["original_id"]: e for e in mixed.iter_episodes()}
    assert (got[qwen.id].tokenizer, got[seed.id].tokenizer) == (str(QWEN3_DIR), "smollm2")
    assert qwen.turns[0].generation.text in got[qwen.id].turns[0].generation.text  # decoded with its own vocabulary
    assert not [f for f in got[qwen.id].all_findings() if f.kind == "token_out_of_vocab"]


def test_a_rescored_dump_says_which_stored_episodes_it_differs_from_and_replaces_them_when_asked(tmp_path, capsys):
    from engine.cli import main

    def dump(rewards, mask_of_1=None):
        return write_slime_dump(tmp_path / "s.pt", [
            slime_sample([1, 2, 3, 4], 2, index=i, reward=r, rollout_log_probs=[-0.5, -0.25],
                         loss_mask=[0, 1] if i == mask_of_1 else None) for i, r in enumerate(rewards)])

    dump([0.0, 1.0, 0.0])
    st = _db(tmp_path)
    assert import_path(tmp_path / "s.pt", "slime", st).new == 3
    first = {e.sample_index: e for e in st.iter_episodes()}
    st.set_tags(first[0].id, ["look"])
    st.curate([first[0].id], starred=True, note="odd")
    dump([1.0, 1.0, 0.0], mask_of_1=1)  # rewards fixed on sample 0, sample 1's mask corrected; sample 2 the same
    again = import_path(tmp_path / "s.pt", "slime", st)
    assert (again.new, again.already_present, again.replaced, again.differ) == (0, 3, 0, 2)
    assert dict(again.differing) == {"reward": 1, "loss mask": 1}
    assert "2 of them differ from the dump in" in again.summary() and "--replace" in again.summary()
    assert st.get_episode(first[0].id).reward == 0.0  # left as it was

    db = str(tmp_path / "a.db")
    st.close()
    assert main(["import", str(tmp_path / "s.pt"), "--format", "slime", "--db", db, "--replace", "--quiet"]) == 0
    out = capsys.readouterr()
    assert "0 new, 3 already present (2 replaced: the dump says otherwise in" in out.out, out.out
    assert "1 left as they were; stars, notes and tags kept" in out.out
    assert "2 replaced episodes not checked" in out.err
    st = _db(tmp_path)
    now = {e.sample_index: e for e in st.iter_episodes()}
    assert now[0].reward == 1.0 and now[0].starred and now[0].note == "odd" and now[0].tags == ("look",)
    assert now[1].tokens.loss_mask.tolist()[-2:] == [0, 1] and now[2].created_at == first[2].created_at
    assert import_path(tmp_path / "s.pt", "slime", st).differ == 0  # the dump and the store agree now
    st.close()


def test_two_samples_of_one_id_in_a_dump_store_the_first_and_list_the_second_when_they_differ(tmp_path):
    same = slime_sample([1, 2, 3, 4], 2, index=0, reward=1.0)
    f = write_slime_dump(tmp_path / "s.pt", [same, dict(same), {**same, "reward": 0.0}])
    st = _db(tmp_path)
    report = import_path(f, "slime", st)
    assert (report.new, report.repeated, report.clashed, report.already_present) == (1, 1, 1, 0)
    (err,) = report.errors
    assert "again, with other content" in str(err) and "import a file that holds it alone" not in str(err)
    assert [e.reward for e in st.iter_episodes()] == [1.0]
    st.close()


def _cut_reply_found(tmp_path, tok, msgs, prompt, reply):
    """The checks' findings on a slime sample whose one reply, ``reply``, the length limit cut."""
    f = write_slime_dump(tmp_path / "s.pt", [slime_sample(
        prompt + reply, len(reply), prompt=[m.to_dict() for m in msgs], response=chat.decode(tok, reply),
        status="truncated", reward=0.0, rollout_log_probs=[-0.5] * len(reply))])
    st = _db(tmp_path)
    import_path(f, "slime", st, tokenizer=tok)
    (ep,) = st.iter_episodes()
    st.close()
    return run_checks(ep, CheckOptions(tokenizer=tok))


@pytest.mark.parametrize("cut_inside", [True, False])
def test_a_reply_cut_inside_a_character_is_a_warning_of_its_text_not_an_error_of_its_ids(tmp_path, smol_tokenizer,
                                                                                        cut_inside):
    """slime trains the ids the model generated; a reply the length limit cut inside a multi-byte character has a
    text that cannot hold its last bytes, so no render of the conversation gives its ids. That is the reply's text
    (retokenization_drift, a warning), not ids that are wrong (tokens_not_rendering, an error)."""
    tok = smol_tokenizer
    msgs = [Message("system", "You are a helpful math assistant."), Message("user", "What is 6 * 7?")]
    prompt = chat.encode(tok, chat.render(tok, msgs, add_generation_prompt=True))
    reply = chat.encode(tok, "Done 🎉🎉 \\boxed{42}")
    emoji = chat.encode(tok, "🎉")
    at = next(k for k in range(len(reply)) if reply[k:k + len(emoji)] == emoji)
    cut = reply[:at + 1] if cut_inside else reply[:at]  # one byte of the emoji, or the word before it
    assert ("\ufffd" in chat.decode(tok, cut)) is cut_inside
    found = _cut_reply_found(tmp_path, tok, msgs, prompt, cut)
    assert [x.kind for x in found if x.severity is Severity.ERROR] == []
    drift = [x for x in found if x.kind == "retokenization_drift"]
    assert [x.severity for x in drift] == ([Severity.WARNING] if cut_inside else [])
    assert all("cut the reply inside a character" in x.message for x in drift)
    assert "truncated_turn" in {x.kind for x in found}


def test_a_reimport_reads_duplicates_across_batches_and_a_stored_copy_it_cannot_read(tmp_path):
    import sqlite3

    def sample(i, reward):
        return slime_sample([1, 2, 3, 4], 2, index=i, reward=reward, rollout_log_probs=[-0.5, -0.25])

    # The first record of an id is committed before its second comes (one episode a batch): listed, not stored twice.
    f = write_slime_dump(tmp_path / "a.pt", [sample(0, 1.0), sample(1, 1.0), sample(0, 0.0)])
    st = _db(tmp_path)
    first = import_path(f, "slime", st, batch=1)
    assert (first.new, first.clashed, first.already_present, first.differ) == (2, 1, 0, 0)
    # An episode stored before the import, twice in the dump: compared once, the second listed or counted as one.
    f = write_slime_dump(tmp_path / "b.pt", [sample(0, 0.5), sample(0, 0.5), sample(1, 1.0), sample(1, 0.0)])
    again = import_path(f, "slime", st)
    assert (again.already_present, again.differ, again.repeated, again.clashed) == (2, 1, 1, 1)
    assert dict(again.differing) == {"reward": 1} and "1 of them differs from the dump in reward (1)" in again.summary()
    # A stored copy whose token blob is damaged: it differs from any dump, and --replace writes the dump's over it.
    ids = {e.sample_index: e.id for e in st.iter_episodes()}
    st.close()
    with sqlite3.connect(tmp_path / "a.db") as conn:
        conn.execute("UPDATE tokens SET ids = x'001122', packed = NULL WHERE episode_id = ?", [ids[1]])
    st = _db(tmp_path)
    f = write_slime_dump(tmp_path / "c.pt", [sample(1, 1.0)])
    damaged = import_path(f, "slime", st)
    assert damaged.differ == 1 and dict(damaged.differing) == {"the stored copy, which cannot be read": 1}
    fixed = import_path(f, "slime", st, replace_changed=True)
    assert fixed.replaced == 1 and st.get_episode(ids[1]).tokens.ids.tolist() == [1, 2, 3, 4]
    st.close()


def test_replacing_an_episode_with_a_dumps_record_drops_the_replays_of_its_old_content(tmp_path):
    import asyncio

    from engine.loop.replay import replay_stored

    f = write_slime_dump(tmp_path / "s.pt", [slime_sample([1, 2, 3, 4], 2, index=0, reward=1.0)])
    st = _db(tmp_path)
    import_path(f, "slime", st)
    (ep,) = st.iter_episodes()
    st.save_replay(asyncio.run(replay_stored(ep)))
    assert len(st.replays(ep.id)) == 1
    write_slime_dump(tmp_path / "s.pt", [slime_sample([1, 2, 3, 4], 2, index=0, reward=0.0)])
    assert import_path(f, "slime", st).differ == 1 and len(st.replays(ep.id)) == 1  # left as it was
    assert import_path(f, "slime", st, replace_changed=True).replaced == 1
    assert st.replays(ep.id) == [] and st.get_episode(ep.id).reward == 0.0
    st.close()


def test_a_mask_one_token_off_its_logprobs_says_either_may_have_moved_without_a_tokenizer(tmp_path):
    """Without a tokenizer nothing says which tokens are the assistant's output, so a mask and logprobs a token apart
    are one finding that names both, and how to tell them apart; not "shifted logprobs"."""
    f = write_slime_dump(tmp_path / "s.pt", [slime_sample(
        [5, 6, 7, 10, 11, 12, 13], 4, loss_mask=[0, 1, 1, 1], rollout_log_probs=[-0.5, -0.5, -0.5, 0.0])])
    st = _db(tmp_path)
    import_path(f, "slime", st)
    (ep,) = st.iter_episodes()
    st.close()
    found = [x for x in run_checks(ep, CheckOptions()) if x.severity is Severity.ERROR]
    assert [x.kind for x in found] == ["logprobs_misaligned"]
    assert "moved 1 token after: the loss mask or the logprobs is shifted (a tokenizer tells which" in found[0].message


def test_a_slime_rollout_exported_again_keeps_its_rollout_id_indexes_groups_and_reward_scores(tmp_path):
    """What slime's train dumps join on (the rollout id, each sample's index) and a reward model's scores survive an
    import and an export, a skipped sample leaving its index unused; read again, the samples are the same episodes."""
    samples = [slime_sample([1, 2, 3, 4 + i], 2, index=i, group_index=i // 2, reward={"score": 1.0, "acc": True})
               for i in range(5)]
    samples[3]["reward"] = "1.0"  # malformed: skipped
    f = write_slime_dump(tmp_path / "7.pt", samples, rollout_id=7)
    st = _db(tmp_path)
    first = import_path(f, "slime", st)
    assert first.new == 4 and first.skipped == 1
    out = tmp_path / "back.pt"
    assert export(st.iter_episodes(), "slime", out) == 4
    back = safe_torch_load(out)
    assert back["rollout_id"] == 7
    got = sorted(back["samples"], key=lambda s: s["index"])
    assert [s["index"] for s in got] == [0, 1, 2, 4] and [s["group_index"] for s in got] == [0, 0, 1, 2]
    assert all(s["reward"] == {"score": 1.0, "acc": True} for s in got)
    again = import_path(out, "slime", st)
    assert (again.new, again.already_present, again.differ) == (0, 4, 0)
    st.close()


def test_a_sample_that_generated_nothing_says_so(tmp_path):
    """An empty response trains nothing, yet its reward counts in its group: a warning, not a clean episode."""
    f = write_slime_dump(tmp_path / "s.pt", [slime_sample([1, 2, 3], 0, index=0, reward=0.0),
                                             slime_sample([1, 2, 3, 4, 5], 2, index=1, reward=1.0)])
    st = _db(tmp_path)
    import_path(f, "slime", st)
    empty, fine = sorted(st.iter_episodes(), key=lambda e: e.n_tokens)
    st.close()
    (found,) = [x for x in run_checks(empty, CheckOptions()) if x.kind == "nothing_trained"]
    assert found.severity is Severity.WARNING and "the response is empty" in found.message
    assert not [x for x in run_checks(fine, CheckOptions()) if x.kind == "nothing_trained"]


def test_a_folder_of_dumps_beside_an_empty_rollout_data_folder_reads_its_own(tmp_path):
    write_slime_dump(tmp_path / "d" / "3.pt", [slime_sample([1, 2, 3], 1, index=0)])
    (tmp_path / "d" / "rollout_data").mkdir()
    st = _db(tmp_path)
    assert import_path(tmp_path / "d", "slime", st).new == 1
    (tmp_path / "e" / "rollout_data").mkdir(parents=True)
    with pytest.raises(FormatError, match="no \\*.pt file in it, nor in a rollout_data/ folder of it"):
        import_path(tmp_path / "e", "slime", st)
    st.close()


def test_a_reply_cut_inside_a_character_does_not_hide_ids_that_differ_earlier(tmp_path, smol_tokenizer):
    """Only the unfinished character's own bytes are let go: ids tokenized otherwise earlier in the reply are still
    an error of the rendering, and the drift warning there does not blame the cut."""
    tok = smol_tokenizer
    msgs = [Message("user", "What is 6 * 7?")]
    prompt = chat.encode(tok, chat.render(tok, msgs, add_generation_prompt=True))
    odd = chat.encode(tok, "Well") + chat.encode(tok, " D") + chat.encode(tok, "one")  # " Done", split otherwise
    assert odd != chat.encode(tok, "Well Done")
    emoji = chat.encode(tok, " 🎉")
    reply = odd + emoji[:-1]  # cut inside the emoji
    assert "\ufffd" in chat.decode(tok, reply)
    found = _cut_reply_found(tmp_path, tok, msgs, prompt, reply)
    assert "tokens_not_rendering" in {x.kind for x in found if x.severity is Severity.ERROR}
    assert not any("inside a character" in x.message for x in found)


def test_a_checked_episode_with_an_infinite_logprob_reads_back_checked(tmp_path, eps, smol_tokenizer):
    """The store keeps an infinite logprob unknown; the hash of the arrays the checks judged takes it so too."""
    from engine.checks import with_checks

    ep = eps[0]
    lp = ep.tokens.logprobs.copy()
    at = int(np.flatnonzero(~np.isnan(lp))[0])
    lp[at] = -np.inf
    checked = with_checks(ep.evolve(tokens=ep.tokens.evolve(logprobs=lp)), CheckOptions(tokenizer=smol_tokenizer))
    st = _db(tmp_path)
    st.save_episode(checked)
    assert st.get_episode(checked.id).checked == checked.checked
    st.close()


def test_one_more_token_carrying_a_logprob_is_not_called_a_shift(tmp_path):
    f = write_slime_dump(tmp_path / "s.pt", [slime_sample(
        [5, 6, 7, 10, 11, 12, 13], 4, loss_mask=[1, 1, 1, 0], rollout_log_probs=[-0.5, -0.5, -0.5, -0.5])])
    st = _db(tmp_path)
    import_path(f, "slime", st)
    (ep,) = st.iter_episodes()
    st.close()
    (found,) = [x for x in run_checks(ep, CheckOptions()) if x.kind == "logprobs_misaligned"]
    assert "shifted" not in found.message and "misplaced" in found.message


def test_two_samples_of_one_index_with_other_tokens_are_two_episodes_and_said(tmp_path):
    f = write_slime_dump(tmp_path / "s.pt", [slime_sample([1, 2, 3, 4], 2, index=0), slime_sample([1, 2, 3, 5], 2, index=1),
                                             slime_sample([1, 2, 3, 6], 2, index=0)])
    st = _db(tmp_path)
    report = import_path(f, "slime", st)
    st.close()
    assert report.new == 3
    assert any("samples share an index (first: index 0, at samples 0 and 2)" in n and "train dumps join on index" in n
               for n in report.notes), report.notes
