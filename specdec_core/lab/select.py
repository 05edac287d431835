"""Honest model selection (issue 38): a head in training is scored *online* — the real decoder,
greedy, k = 1 rounds, 64 new tokens — on a selection split of the generated natural prompts, by
first-guess acceptance (the target's token is the head's top-1) and top-3; the 70-prompt yardstick
and the held-out files are for reporting only.

    res = first_guess(pair, head, prompts)     # {"first", "top3", "rounds", "by_kind": {...}}
"""
from __future__ import annotations

import dataclasses

import torch

from ..drafters.feature_drafter import FeatureDrafter
from ..drafters.feature_head import FeatureHead
from ..kernels import fastpath
from .yardstick import online_rows


def drafting_copy(pair, head, use_memory: bool = True) -> FeatureHead:
    """A frozen copy of a training head for drafting: same weights, attached to the target, eval,
    on the target's fast path where it runs one (the training head is left untouched); its phrase
    memory too unless use_memory is False."""
    target = pair.target
    copy = FeatureHead(head.cfg, head.vocab_ids.detach().clone())
    copy.load_state_dict({k: v.detach().clone() for k, v in head.state_dict().items()})
    copy = copy.to(target.get_input_embeddings().weight.device).eval()
    copy.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight)
    copy.version = "v3 (training)"
    if use_memory and head.memory is not None:   # a phrase memory drafts with it (drafters/memory.py)
        copy.attach_memory(head.memory)
    for p in copy.parameters():
        p.requires_grad_(False)
    if fastpath.kernels_of(target).name == fastpath.FAST:
        copy.use_fast_path()
    return copy


@torch.no_grad()
def first_guess(pair, head, prompts: list[dict], max_new: int = 64, use_memory: bool = True) -> dict:
    """prompts [{"name", "task", "text"}] -> first-guess acceptance and top-3 at draft step 1 over
    every round of every prompt (greedy, k = 1), overall and per task."""
    h = drafting_copy(pair, head, use_memory)
    factory = lambda p: FeatureDrafter(h, p.vocab_size, p.input_device)
    factory.name = FeatureDrafter.name
    scored = dataclasses.replace(pair, make_drafter=factory, draft_name="distilled v3 (training)")
    rows = online_rows(scored, 1, max_new, prompts)
    total = rows[-1]
    return {"first": round(total["pos1"], 4), "top3": round(total["top3"], 4), "rounds": total["rounds"],
            "by_kind": {r["task"]: round(r["pos1"], 3) for r in rows[:-1]}}
