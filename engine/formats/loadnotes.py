"""What a trainer's loader does with an export that its file cannot say, counted as the episodes are written and
said once each as a note (``export(notes=...)``): the trainers' code, read in their sources, decides.

- slime (``slime/ray/rollout.py``, ``_convert_samples_to_train_data``) keeps a batch's rollout logprobs only when
  its first sample has them, then reads each sample's: a sample without them after one with them stops training,
  one with them after one without has them dropped. An unknown logprob has no place in ``rollout_log_probs``: it
  is written 0.0 (a probability of 1), which slime trains on with ``--use-rollout-logprobs`` or TIS.
- verl's agent loop batches ``response_logprobs`` the same way (the first row's decides, then ``torch.cat``).
- AReaL's ``torch.tensor(logprobs)`` refuses a null, where a trained token's logprob is unknown.
- A chat record cannot say that a reply was cut by the length limit: an SFT loader renders it closed by an
  end-of-turn token the model never wrote, and trains that.
- slime's GRPO reward normalization (``_post_process_rewards``) reshapes the rewards ``n_samples_per_prompt`` at a
  time in the file's order, not by ``group_index``: groups of different sizes, or interleaved, mix prompts.
- An episode that trains no token (a prompt longer than the limit, a failed start) adds nothing to learn from and
  counts in its group's statistics.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

from ..records.episode import Episode

SHOWN = 3  # episode ids a note names
CUT = frozenset({"truncated_turn", "response_cut_trained"})  # the checks' findings of a reply cut in its ids


class LoadNotes:
    """Counts, over the episodes of one export in ``fmt``, what its trainer's loader would do otherwise than the
    records say (``see`` each episode written, then ``notes``)."""

    def __init__(self, fmt: str) -> None:
        self.fmt = fmt
        self.n = 0
        self.with_lp: list[str] = []
        self.without_lp: list[str] = []
        self.unknown: list[tuple[str, int]] = []  # (episode, trained tokens whose logprob is unknown)
        self.cut: list[str] = []
        self.untrained: list[str] = []
        self.groups: list[str] = []  # each episode's group, in file order (slime's reward normalization reads it so)

    def see(self, ep: Episode) -> None:
        self.n += 1
        self.groups.append(ep.group_id or "")  # "": the record does not say (no note on groups it cannot tell)
        mask, lps = ep.tokens.loss_mask, ep.tokens.logprobs
        trained = mask == 1
        if self.fmt in ("slime", "areal", "areal-realhf", "verl") and ep.n_tokens:
            if not trained.any():
                self.untrained.append(ep.id)
            unknown = int(np.count_nonzero(trained & np.isnan(lps)))
            # what the writer puts in the file: slime an array unless every response logprob is unknown, verl null
            # unless every trained one is known
            resp = lps[ep.prompt_len:]
            has = not bool(np.isnan(resp).all()) if self.fmt == "slime" else (bool(trained.any()) and not unknown)
            (self.with_lp if has else self.without_lp).append(ep.id)
            if unknown and (has or self.fmt != "slime"):  # slime's array of none holds no made-up value
                self.unknown.append((ep.id, unknown))
        if self.fmt == "messages" and (
                any(t.generation is not None and t.generation.finish_reason == "length" for t in ep.turns)
                or any(f.kind in CUT for f in ep.all_findings())):
            self.cut.append(ep.id)

    def notes(self) -> list[str]:
        out: list[str] = []
        mixed = self.with_lp and self.without_lp
        if mixed and self.fmt in ("slime", "verl"):
            field = "rollout_log_probs" if self.fmt == "slime" else "response_logprobs"
            out.append(
                f"{len(self.without_lp)} of {self.n} exported {self.fmt} samples hold no {field} "
                f"({_ids(self.without_lp)}) beside {len(self.with_lp)} that do: {self.fmt} keeps a batch's logprobs "
                "only when its first sample has them and then reads every sample's, so a batch that mixes them stops "
                "training or drops the logprobs. Export them apart (by --id)")
        if self.unknown and self.fmt in ("slime", "areal", "areal-realhf"):
            k = sum(n for _, n in self.unknown)
            how = ("written 0.0 (a probability of 1; listed in metadata.rollscope.nan_logprobs, which slime does not "
                   "read): slime trains them on that value with --use-rollout-logprobs or TIS"
                   if self.fmt == "slime" else
                   "written null, which AReaL's torch.tensor(logprobs) refuses" if self.fmt == "areal" else
                   "written 0.0 (a probability of 1), which realhf trains them on")
            out.append(f"{k:,} trained tokens in {len(self.unknown)} episodes have no rollout logprob "
                       f"({_ids([e for e, _ in self.unknown])}): {how}. `rollscope check` says where they are")
        if self.cut:
            out.append(f"{len(self.cut)} episodes hold a reply cut by the length limit ({_ids(self.cut)}): a chat "
                       "record cannot say so, and an SFT loader renders the reply closed by an end-of-turn token the "
                       "model never wrote, and trains it. Leave them out (export the others by --id) or train them as they are")
        if self.fmt == "slime" and self.groups and all(self.groups):
            sizes = Counter(self.groups)
            runs = [g for i, g in enumerate(self.groups) if i == 0 or self.groups[i - 1] != g]
            if len(set(sizes.values())) > 1 or len(runs) != len(sizes):
                shape = (f"groups of {', '.join(str(k) for k in sorted(set(sizes.values())))} samples"
                         if len(set(sizes.values())) > 1 else "a group's samples apart from each other")
                out.append(f"this slime dump holds {shape}: slime's GRPO normalization reshapes the rewards "
                           "n_samples_per_prompt at a time in the file's order (or takes them all as one group), not "
                           "by group_index, so it would pair samples of different prompts. Export whole groups of one "
                           "size (a run or a step: --where run=NAME --where step=N; --id, --tag)")
        if self.untrained:
            out.append(f"{len(self.untrained)} exported episodes train no token ({_ids(self.untrained)}): nothing to "
                       "learn from, yet each counts in its group's reward statistics")
        return out


def _ids(ids: list[str]) -> str:
    shown = ", ".join(i[:8] for i in ids[:SHOWN])
    return f"{shown}, ..." if len(ids) > SHOWN else shown
