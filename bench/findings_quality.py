"""How far the findings can be trusted: the planted-bug corpus, read as a researcher reads it.

Every planted episode carries one realistic bug (``tests/planted.py``: shifted
masks, missing generation prompts, tokens split by re-encoding, lost and
shifted logprobs, truncated turns trained as complete, history-rewriting
templates, injected system blocks and more), built by the real loop on the
real Qwen3 tokenizer and on SmolLM2. Each is checked in two forms:

* ``jsonl``: written as Rollscope JSONL and read back;
* ``slime-pt``: written as a slime rollout dump (``torch.save``), with
  Rollscope's own metadata removed, and imported as any slime dump is.

Figures, per form:

* recall: the planted kind is a root finding;
* exactness: that root starts at the first wrong token;
* noise: root errors per planted bug (the aim is exactly 1; 0 for a bug
  that is a warning);
* false errors: errors of any kind on clean episodes of every preset and
  every importer (the aim is 0).

Run: ``python bench/findings_quality.py`` (about a minute).
"""

from __future__ import annotations

import io
import logging
import sys
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
logging.getLogger("math_verify").setLevel(logging.ERROR)

from engine.backends.tokenizers import load_tokenizer  # noqa: E402
from engine.checks import CheckOptions, with_checks  # noqa: E402
from engine.checks.diagnosis import roots  # noqa: E402
from engine.envs.math import MathEnv  # noqa: E402
from engine.formats import jsonl, slime  # noqa: E402
from engine.formats.base import ImportContext  # noqa: E402
from engine.presets import PRESETS  # noqa: E402
from engine.records.episode import Episode, Severity  # noqa: E402
from tests import planted  # noqa: E402
from tests.planted import ANY, BASES, LOOP_PLANTS, VARIANTS, Planted, play  # noqa: E402
from tests.toolenv import PriceEnv  # noqa: E402

QWEN3 = Path(__file__).resolve().parents[1] / ".cache" / "tokenizers" / "qwen3"
BASES_FOR = {"smollm2": tuple(BASES), "qwen3": ("math-tito", "price-tito")}
ERROR = Severity.ERROR


def tokenizers() -> dict[str, tuple[Any, str]]:
    out = {"smollm2": (load_tokenizer(None), "smollm2")}
    if QWEN3.exists():
        out["qwen3"] = (load_tokenizer(str(QWEN3)), str(QWEN3))
    else:
        print(f"(no Qwen3 tokenizer at {QWEN3}: run `make test-deps`; SmolLM2 only)")
    return out


def corpus(toks: dict[str, tuple[Any, str]]) -> Iterator[tuple[str, str, Planted, Any]]:
    """(tokenizer name, plant name, planted episode, tokenizer) for every plant that applies."""
    for tname, (tok, name) in toks.items():
        for bname in BASES_FOR[tname]:
            base = planted.build_base(bname, tok, name)
            for v in VARIANTS:
                if v.applies(BASES[bname]):
                    yield tname, f"{bname}/{v.name}", v.plant(base), tok
        for pname, (build, applies_to) in LOOP_PLANTS.items():
            if tname in applies_to and "without-finding" not in pname:
                yield tname, pname, build(tok, name), tok
        if tname == "qwen3":
            yield tname, "areal-seed/qwen25-style", injected_system_block(tok), _qwen25(tok)


_Q25: list[Any] = []


def _qwen25(tok: Any) -> Any:
    """The Qwen3 vocabulary with a Qwen2.5-style template (a fresh tokenizer: the cached one stays as it is)."""
    from transformers import AutoTokenizer

    from tests.templates import QWEN25_STYLE

    if not _Q25:
        clone = AutoTokenizer.from_pretrained(str(QWEN3))
        clone.chat_template = QWEN25_STYLE
        _Q25.append(clone)
    return _Q25[0]


def injected_system_block(tok: Any) -> Planted:
    """AReaL realhf's feedback, rendered on its own by a template that adds a default system prompt."""
    t25 = _qwen25(tok)
    ep = play(MathEnv, t25, "areal-math", mistake_rate=1.0, seed=1, max_turns=3)
    header = t25.encode("<|im_start|>system", add_special_tokens=False)
    ids = ep.tokens.ids.tolist()
    at = next(i for i in range(ep.prompt_len, len(ids)) if ids[i : i + len(header)] == header)
    return Planted(ep, "system_block_injected", ERROR, at, ANY, "realhf feedback with the template's system block")


# -- the two forms -------------------------------------------------------------------


def as_jsonl(ep: Episode, tok: Any, name: str) -> Episode:
    buf = io.StringIO()
    jsonl.write([ep], buf)
    return jsonl.parse_line(buf.getvalue().splitlines()[0], "bench")


def as_slime_pt(ep: Episode, tok: Any, name: str) -> Episode:
    import torch

    sample = slime.episode_to_sample(ep, 0, 0)
    sample["metadata"].pop("rollscope", None)  # a dump from slime itself carries none of ours
    # A plant in slime's own length fields is written into them, as slime would have.
    if "response_length" in ep.source.details:
        sample["response_length"] = int(ep.source.details["response_length"])
    if "loss_mask_length" in ep.source.details:
        mask = sample["loss_mask"]
        want = int(ep.source.details["loss_mask_length"])
        sample["loss_mask"] = (mask + [0] * want)[:want]
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "0.pt"
        torch.save({"rollout_id": 0, "samples": [sample]}, path)
        ctx = ImportContext("slime", tok, name)
        got = list(slime.read(path, ctx))
    if not got:
        raise Refused(str(ctx.errors[0]) if ctx.errors else "the importer returned nothing")
    return got[0]


class Refused(Exception):
    """The importer refused the record, saying why: the bug surfaces as a skipped record, not a finding."""


FORMS: dict[str, Callable[[Episode, Any, str], Episode]] = {"jsonl": as_jsonl, "slime-pt": as_slime_pt}


@dataclass
class Score:
    n: int = 0
    recalled: int = 0
    exact_n: int = 0
    exact: int = 0
    root_errors: int = 0
    one: int = 0  # plants whose root errors are exactly what the plant asks (1, or 0 for a warning)
    misses: list[str] | None = None
    noisy: list[str] | None = None
    refused: list[str] | None = None

    def add(self, label: str, p: Planted, checked: Episode) -> None:
        self.misses = self.misses or []
        self.noisy = self.noisy or []
        found = list(checked.all_findings())
        rs = roots(found)
        self.n += 1
        hit = [r for r in rs if r.kind == p.kind]
        if hit:
            self.recalled += 1
        else:
            self.misses.append(f"{label}: want {p.kind}, roots {[r.kind for r in rs]}")
        if isinstance(p.token_start, int):
            self.exact_n += 1
            if any(r.token_start == p.token_start for r in hit):
                self.exact += 1
            elif hit:
                self.misses.append(f"{label}: {p.kind} root at {[r.token_start for r in hit]}, bug at {p.token_start}")
        errs = [r for r in rs if r.severity is ERROR]
        self.root_errors += len(errs)
        want = 1 if p.severity is ERROR else 0
        if len(errs) == want:
            self.one += 1
        else:
            self.noisy.append(f"{label}: {len(errs)} root errors {[r.kind for r in errs]}")


def plants(toks: dict[str, tuple[Any, str]]) -> dict[str, Score]:
    scores = {form: Score() for form in FORMS}
    for tname, pname, p, tok in corpus(toks):
        name = toks[tname][1]
        for form, convert in FORMS.items():
            try:
                ep = convert(p.episode, tok, name)
            except Refused as e:
                scores[form].refused = (scores[form].refused or []) + [f"{tname}/{pname}: {e}"]
                continue
            scores[form].add(f"{tname}/{pname}", p, with_checks(ep, CheckOptions(tokenizer=tok)))
    return scores


# -- clean episodes ------------------------------------------------------------------


# Presets that reproduce a loop's own bug on a template: their findings are true, counted apart.
KNOWN_BUGS = {
    ("smollm2", "slime-tau-seed"): "generation_prompt_missing",  # the seed slices after each generation prompt
    ("smollm2", "areal-math"): "system_block_injected",  # realhf renders feedback alone; SmolLM2 adds a system
    # verl appends each answer right after the reply's <|im_end|>, without the template's newline.
    ("smollm2", "verl-tool"): "im_end_newline_missing",
    ("qwen3", "verl-tool"): "im_end_newline_missing",
}


def clean_live(toks: dict[str, tuple[Any, str]], known: bool = False) -> Iterator[tuple[str, Episode, Any]]:
    """Clean episodes of every preset, on every tokenizer where the preset's data is fine (``known``: the
    episodes of presets that reproduce a loop's own bug instead)."""
    for tname, (tok, name) in toks.items():
        for preset in PRESETS:
            env = MathEnv if preset.startswith("areal") or preset == "tito" else PriceEnv
            if tname == "qwen3" and preset.startswith("slime"):
                continue  # Qwen3's template rewrites history: slime's loop really breaks there (a true finding)
            if ((tname, preset) in KNOWN_BUGS) != known:
                continue
            for seed in range(3):
                ep = play(env, tok, preset, task=seed, mistake_rate=0.0 if seed else 0.5, seed=seed,
                          tokenizer_name=name)
                yield f"{tname}/{preset}/{seed}", ep, tok


def clean_imports(toks: dict[str, tuple[Any, str]]) -> Iterator[tuple[str, Episode, Any]]:
    """Clean episodes written by every exporter and read back by the matching importer."""
    from engine.formats import IMPORTERS, export

    tok, name = toks["smollm2"]
    eps = [play(MathEnv, tok, "tito", task=i, tokenizer_name=name) for i in range(2)]
    eps += [play(PriceEnv, tok, "tito", task=0, tokenizer_name=name),
            play(PriceEnv, tok, "slime-tau", task=1, tokenizer_name=name)]
    fmts = {"jsonl": "episodes.jsonl", "slime": "0.pt", "areal": "areal.pt", "messages": "m.jsonl",
            "parquet": "e.parquet"}
    for fmt, fname in fmts.items():
        if fmt not in IMPORTERS:
            continue
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / fname
            export(eps, fmt, path)
            ctx = ImportContext(fmt, tok, name)
            for ep in IMPORTERS[fmt](path, ctx):
                yield f"import-{fmt}/{ep.task_id}", ep, tok


def clean_foreign_dumps(toks: dict[str, tuple[Any, str]]) -> Iterator[tuple[str, Episode, Any]]:
    """Clean records in the shapes AReaL and verl write themselves, read with and without a tokenizer."""
    from engine.formats import IMPORTERS
    from tests.fixtures_formats import areal_record, verl_rows, write_jsonl

    tok, name = toks["smollm2"]
    eps = [play(MathEnv, tok, "tito", task=i, tokenizer_name=name) for i in range(2)]
    eps.append(play(PriceEnv, tok, "tito", task=0, tokenizer_name=name))
    role = {"prompt": "prompt", "assistant": "gen"}
    areal_rows = []
    for i, ep in enumerate(eps):
        pieces = [(role.get(sg.kind, "context"), ep.tokens.ids[sg.start : sg.end].tolist())
                  for sg in sorted(ep.segments, key=lambda sg: sg.start)]
        areal_rows.append(areal_record(tok, i, 0, pieces, ep.reward))
    # verl decodes prompt and response ids with skip_special_tokens=True.
    verl = verl_rows(3, [(tok.decode(ep.tokens.ids[: ep.prompt_len].tolist(), skip_special_tokens=True),
                          tok.decode(list(ep.turns[0].generation.token_ids), skip_special_tokens=True)
                          if ep.turns[0].generation else "", ep.reward)
                         for ep in eps[:2]])
    with tempfile.TemporaryDirectory() as d:
        for fmt, rows in (("areal", areal_rows), ("verl", verl)):
            path = write_jsonl(Path(d) / fmt / "0.jsonl", rows)
            for with_tok in (True, False):
                ctx = ImportContext(fmt, tok if with_tok else None, name if with_tok else "")
                for ep in IMPORTERS[fmt](path, ctx):
                    yield f"{fmt}-dump{'' if with_tok else '-no-tokenizer'}/{ep.task_id}", ep, tok if with_tok else None


def false_errors(items: Iterator[tuple[str, Episode, Any]]) -> tuple[int, int, Counter[str], list[str]]:
    n = errors = 0
    kinds: Counter[str] = Counter()
    where: list[str] = []
    for label, ep, tok in items:
        n += 1
        found = with_checks(ep, CheckOptions(tokenizer=tok)).all_findings()
        errs = [f for f in found if f.severity is ERROR]
        errors += len(errs)
        kinds.update(f.kind for f in errs)
        if errs:
            where.append(f"{label}: {[f.kind for f in errs]}")
    return n, errors, kinds, where


def main() -> None:
    toks = tokenizers()
    scores = plants(toks)
    print("planted bugs (one per episode)")
    print(f"{'form':10s} {'plants':>6s} {'recall':>8s} {'exact':>8s} {'root err/bug':>13s} {'as asked':>9s} "
          f"{'refused at import':>18s}")
    for form, s in scores.items():
        print(f"{form:10s} {s.n:6d} {s.recalled / s.n:8.1%} {s.exact / max(1, s.exact_n):8.1%} "
              f"{s.root_errors / s.n:13.2f} {s.one / s.n:9.1%} {len(s.refused or []):18d}")
    for form, s in scores.items():
        for line in (s.misses or [])[:40]:
            print(f"  miss [{form}] {line}")
        for line in (s.noisy or [])[:40]:
            print(f"  noise [{form}] {line}")
        for line in (s.refused or [])[:10]:
            print(f"  refused [{form}] {line}")
    by: dict[str, tuple[int, int, Counter[str], list[str]]] = defaultdict()
    by["live presets"] = false_errors(clean_live(toks))
    by["importers"] = false_errors(clean_imports(toks))
    by["AReaL/verl dumps"] = false_errors(clean_foreign_dumps(toks))
    by["live as slime-pt"] = false_errors(
        (label, as_slime_pt(ep, tok, ""), tok) for label, ep, tok in clean_live(toks))
    print("clean episodes: false errors")
    for what, (n, errors, kinds, where) in by.items():
        print(f"  {what:17s} {n:4d} episodes, {errors} errors {dict(kinds) if kinds else ''}")
        for line in where[:20]:
            print(f"    {line}")
    print("presets that reproduce a loop's own bug (true findings): root errors per episode")
    for label, ep, tok in clean_live(toks, known=True):
        rs = [r for r in roots(with_checks(ep, CheckOptions(tokenizer=tok)).all_findings()) if r.severity is ERROR]
        print(f"  {label:28s} {len(rs)} {[r.kind for r in rs]}")


if __name__ == "__main__":
    main()
