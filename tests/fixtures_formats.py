"""Fixture writers: files in each trainer's own format, written by our code.

Shapes follow what the trainers write (see the docstrings of the
``engine.formats`` modules for the sources): slime's ``Sample.to_dict()``
dumps and ``--dump-details`` layout, AReaL's trajectory dump records, verl's
``rollout_data_dir`` lines and OpenAI chat records. Also the hostile
inputs: a pickle that would run code, truncated and empty files.
"""

from __future__ import annotations

import builtins
import json
import pickle
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np


def slime_sample(
    tokens: Sequence[int],
    response_length: int,
    *,
    index: int = 0,
    group_index: int = 0,
    prompt: Any = "",
    response: str = "",
    loss_mask: Sequence[int] | None = None,
    rollout_log_probs: Sequence[float] | None = None,
    reward: Any = 1.0,
    status: str = "completed",
    label: str | None = None,
    weight_versions: Sequence[str] = (),
    metadata: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A dict shaped like slime's ``Sample.to_dict()`` (status as its string value)."""
    return {
        "group_index": group_index, "index": index, "prompt": prompt, "tokens": list(tokens),
        "multimodal_inputs": None, "multimodal_train_inputs": None, "response": response,
        "response_length": response_length, "label": label, "reward": reward,
        "loss_mask": None if loss_mask is None else list(loss_mask), "weight_versions": list(weight_versions),
        "rollout_log_probs": None if rollout_log_probs is None else list(rollout_log_probs),
        "rollout_routed_experts": None, "remove_sample": False, "teacher_log_probs": None, "status": status,
        "metadata": metadata or {}, "generate_function_path": None, "train_metadata": None, "session_id": None,
        "non_generation_time": 0.0,
        "spec_info": {"spec_accept_token_num": 0, "spec_draft_token_num": 0, "spec_verify_ct": 0, "completion_token_num": 0},
        "prefix_cache_info": {"cached_tokens": 0, "total_prompt_tokens": 0},
    }


def write_slime_dump(path: Path, samples: list[dict[str, Any]], rollout_id: int = 0) -> Path:
    """``--save-debug-rollout-data``: ``torch.save(dict(rollout_id=..., samples=[...]))``."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": rollout_id, "samples": samples}, path)
    return path


def write_slime_train_dump(path: Path, samples: list[dict[str, Any]], rollout_id: int = 0, rank: int = 0) -> Path:
    """``--save-debug-train-data``: a columnar ``rollout_data`` batch with train-side tensors."""
    import torch

    rl = [s["response_length"] for s in samples]
    data = {
        "tokens": [torch.tensor(s["tokens"]) for s in samples],
        "response_lengths": rl,
        "sample_indices": [s["index"] for s in samples],
        "loss_masks": [torch.tensor(s["loss_mask"] or [1] * n) for s, n in zip(samples, rl)],
        "rewards": [float(s["reward"]["score"] if isinstance(s["reward"], dict) else s["reward"]) for s in samples],
        "log_probs": [torch.full((n,), -0.5) for n in rl],
        "ref_log_probs": [torch.full((n,), -0.75) for n in rl],
        "advantages": [torch.full((n,), 0.25) for n in rl],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save({"rollout_id": rollout_id, "rank": rank, "rollout_data": data}, path)
    return path


def write_dump_details(root: Path, rollouts: dict[int, list[dict[str, Any]]], tokenizer: Any = None) -> Path:
    """``--dump-details DIR``: rollout_data/{id}.pt, train_data/{id}_{rank}.pt, tokenizer/."""
    for rid, samples in rollouts.items():
        write_slime_dump(root / "rollout_data" / f"{rid}.pt", samples, rid)
        write_slime_train_dump(root / "train_data" / f"{rid}_0.pt", samples, rid)
    if tokenizer is not None:
        tokenizer.save_pretrained(str(root / "tokenizer"))
    return root


class Boom:
    """Unpickling this creates ``marker``: the way a malicious checkpoint runs code."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple[Any, ...]:
        return (builtins.open, (self.marker, "w"))


def write_malicious_pt(path: Path, marker: Path, *, zip_format: bool = True) -> Path:
    """A ``.pt`` whose samples hold a :class:`Boom` (torch zip format, or a bare pickle)."""
    pack = {"rollout_id": 0, "samples": [{"tokens": [1, 2, 3], "payload": Boom(marker)}]}
    if zip_format:
        import torch

        torch.save(pack, path)
    else:
        with path.open("wb") as f:
            pickle.dump(pack, f)
    return path


def truncate(path: Path, keep: float = 0.5) -> Path:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


def areal_record(tok: Any, task_id: int, sample_idx: int, pieces: Sequence[tuple[str, Sequence[int]]],
                 reward: float, versions: Sequence[int] | None = None) -> dict[str, Any]:
    """One line of AReaL's trajectory dump, built as ``_dump_trajectory`` builds it.

    ``pieces`` are (role, ids) runs with role ``prompt``, ``gen`` or
    ``context``; text is decoded with special tokens kept.
    """
    ids = [i for _, p in pieces for i in p]
    mask = [1 if r == "gen" else 0 for r, p in pieces for _ in p]
    out_n = sum(mask)
    vers = list(versions) if versions is not None else [3] * out_n
    rle: list[list[int]] = []
    for v in vers:
        if rle and rle[-1][0] == v:
            rle[-1][1] += 1
        else:
            rle.append([v, 1])
    prompt_end = mask.index(1) if 1 in mask else len(ids)
    rec = {
        "task_id": task_id, "sample_idx": sample_idx, "seqlen": len(ids), "prompt_len": prompt_end,
        "head_version": min(vers) if vers else -1, "tail_version": max(vers) if vers else -1, "version_rle": rle,
        "reward": reward,
        "prompt": tok.decode(ids[:prompt_end], skip_special_tokens=False),
        "completion": tok.decode(ids[prompt_end:], skip_special_tokens=False),
    }
    if sum(1 for r, _ in pieces if r == "gen") > 1:
        rec["segments"] = [{"role": r, "len": len(p), "text": tok.decode(list(p), skip_special_tokens=False)} for r, p in pieces]
    return rec


def write_jsonl(path: Path, rows: Sequence[dict[str, Any] | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as f:
        for r in rows:
            f.write(r if isinstance(r, str) else json.dumps(r, ensure_ascii=False))
            f.write("\n")
    return path


def verl_rows(step: int, samples: Sequence[tuple[str, str, float]], uid: str | None = None) -> list[dict[str, Any]]:
    """Lines of verl's ``{step}.jsonl``: input, output, gts, score, step, plus reward extra keys."""
    rows = []
    for inp, out, score in samples:
        row: dict[str, Any] = {"input": inp, "output": out, "gts": "42", "score": score, "step": step,
                               "acc": score > 0.5, "pred": out[-4:]}
        if uid is not None:
            row["uid"] = uid
        rows.append(row)
    return rows


def synthetic_slime_samples(n: int, length: int, *, prompt_len: int = 256, turns: int = 3, seed: int = 0,
                            vocab: int = 150_000) -> list[dict[str, Any]]:
    """Our own synthetic multi-turn samples: random ids, turns separated by env runs, logprobs."""
    rng = np.random.default_rng(seed)
    out = []
    rl = length - prompt_len
    for i in range(n):
        ids = rng.integers(0, vocab, size=length).tolist()
        mask = np.ones(rl, dtype=np.int64)
        step = rl // turns
        for t in range(1, turns):
            mask[t * step : t * step + 40] = 0  # a tool result between generated turns
        lps = np.where(mask == 1, -rng.random(rl), 0.0).tolist()
        out.append(slime_sample(ids, rl, index=i, group_index=i // 8, loss_mask=mask.tolist(), rollout_log_probs=lps,
                                reward=float(i % 2), prompt=[{"role": "user", "content": f"task {i // 8}"}],
                                response="...", weight_versions=[str(i // 100)] * turns))
    return out


def loop_episodes(tok: Any) -> list[Any]:
    """Episodes our own loop produced: tito and retokenize, math and tool use, with logprobs and versions."""
    import asyncio

    from engine.envs.math import MathEnv
    from engine.loop.stepper import run_episode
    from engine.presets import PRESETS
    from tests.planted import SampledScripted
    from tests.toolenv import PriceEnv

    out = []
    for preset in ("tito", "slime-tau", "areal-math"):
        for env_cls, task in ((MathEnv, MathEnv().tasks[0]), (PriceEnv, "fig")):
            backend = SampledScripted(env_cls, tok, mistake_rate=0.3)
            config = PRESETS[preset].with_(max_turns=4)
            out.append(asyncio.run(run_episode(env_cls(), backend, tok, config, task, preset=preset)))
    return out


def write_zip_bomb(path: Path, mb: int, *, before: int = 1, after: int = 1) -> Path:
    """A slime dump in ``torch.save``'s zip whose ``data.pkl`` is deflated, one sample's ``response`` ``mb`` MB of
    one letter between ``before`` and ``after`` small samples: a few hundred KB on disk. Written as it deflates."""
    import zipfile

    marker = "@@BIG@@"
    samples = [slime_sample(range(10, 42), 16, index=i, response=marker if i == before else "ok")
               for i in range(before + 1 + after)]
    data = pickle.dumps({"rollout_id": 0, "samples": samples}, protocol=2)
    head, tail = data.split(b"X" + len(marker).to_bytes(4, "little") + marker.encode())
    size, block = mb * 10**6, b"A" * 2**20
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("archive/version", "3\n")
        with z.open("archive/data.pkl", "w", force_zip64=True) as f:
            f.write(head + b"X" + size.to_bytes(4, "little"))
            left = size
            while left:
                f.write(block[: min(left, len(block))])
                left -= min(left, len(block))
            f.write(tail)
    return path


def write_long_line(path: Path, mb: int, records: Sequence[dict[str, Any]], at: int = 1) -> Path:
    """Episode records one a line, the one at ``at`` with ``mb`` MB in its first message (written in pieces)."""
    with path.open("w", encoding="utf-8") as f:
        for i, d in enumerate(records):
            if i != at:
                f.write(json.dumps(d) + "\n")
                continue
            d = json.loads(json.dumps(d))
            d["messages"][0]["content"] = "@@BIG@@"
            head, tail = json.dumps(d).split("@@BIG@@")
            f.write(head)
            for _ in range(mb):
                f.write("A" * 10**6)
            f.write(tail + "\n")
    return path
