"""The benchmark's lanes: what is timed, and how one run of one lane on one prompt is measured.

A lane is one way to decode: ours (plain, speculative with the default tree = "auto", a chain of a
fixed k or the shape rule as a chain, a fixed tree budget; with the pair's drafter or the n-gram
drafter) or transformers' generate() (plain, assisted generation with the
pair's draft model, prompt lookup). Every run is timed from outside with the same wall clock, and
forward hooks on the target and draft modules add up the time spent inside model forward passes,
so "share of wall time outside forward passes" is measured alike for our loop and for transformers'.
"""
from __future__ import annotations

import copy
import time
from dataclasses import dataclass, field
from typing import Optional

import torch

from ..decoding.autoregressive import autoregressive_generate
from ..drafters import NGramDrafter
from ..decoding.speculative import speculative_generate

MODES = {"greedy": dict(temperature=0.0, top_k=0, top_p=1.0),
         "sampling": dict(temperature=0.7, top_k=0, top_p=0.9)}


@dataclass(frozen=True)
class Lane:
    name: str                      # e.g. "spec_k4", "hf_assisted_dynamic"
    impl: str                      # "ours" | "hf"
    label: str                     # human-readable, for the report
    k: object = None               # ours: 0 (plain), int (a chain), "auto" (the rule as a chain), None (tree)
    tree: object = None            # ours: "auto" (the defaults) or (nodes, depth); None: a chain
    ngram: bool = False            # ours: use the n-gram drafter instead of the pair's drafter
    hf: Optional[dict] = None      # hf: kind ("plain" | "assisted" | "lookup") + settings
    sweep: bool = False            # part of the k sweep only (greedy)
    stock: bool = False            # runs on the stock-kernel copy of the pair (fast path off)
    draft: Optional[str] = None    # ours: another draft's drafter on the same target (--vs-draft)


def build_lanes(pair, k: int, sweep_ks, mode: str, trees=(), other_drafts=()) -> list[Lane]:
    """The lanes to run for one mode. HF assisted lanes need an HF draft model in the pair; the
    n-gram lane of ours is separate only when the pair's own drafter is not the n-gram one.
    spec_auto is the defaults (tree = "auto"), spec_chain_auto the shape rule as a chain (the
    chain defaults, tree = None, k = "auto"); trees: fixed (nodes, depth) budgets, one lane each;
    other_drafts: draft names (e.g. "lookup+block") whose drafters also run spec_auto, spec_chain_auto
    and spec_k{k} on the same target, lanes named "<lane>@<draft>"."""
    has_model = pair.draft_model is not None
    pair_is_ngram = pair.draft_name == "ngram"
    lanes = [Lane("plain", "ours", "ours plain", k=0),
             Lane(f"spec_k{k}", "ours", f"ours spec k={k} ({pair.draft_name})", k=k),
             Lane("spec_auto", "ours", f"ours spec tree=auto, the defaults ({pair.draft_name})", tree="auto"),
             Lane("spec_chain_auto", "ours", f"ours spec chain k=auto ({pair.draft_name})", k="auto"),
             *[Lane(f"tree_{n}x{d}", "ours", f"ours spec tree {n},{d} ({pair.draft_name})", tree=(n, d))
               for n, d in trees],
             *[Lane(f"{name}@{d}", "ours", f"ours spec {what} ({d})", k=lk, tree=lt, draft=d)
               for d in other_drafts for name, what, lk, lt in (
                   ("spec_auto", "tree=auto", None, "auto"), ("spec_chain_auto", "chain k=auto", "auto", None),
                   (f"spec_k{k}", f"k={k}", k, None))],
             Lane("hf_plain", "hf", "HF generate plain", hf={"kind": "plain"})]
    if has_model:
        lanes += [Lane(f"hf_assisted_k{k}", "hf", f"HF assisted k={k} (constant, threshold 0)",
                       hf={"kind": "assisted", "num_assistant_tokens": k,
                           "num_assistant_tokens_schedule": "constant",
                           "assistant_confidence_threshold": 0.0}),
                  Lane("hf_assisted_dynamic", "hf", "HF assisted, default (dynamic) settings",
                       hf={"kind": "assisted"})]
    lanes.append(Lane(f"hf_prompt_lookup_k{k}", "hf", f"HF prompt lookup k={k}",
                      hf={"kind": "lookup", "prompt_lookup_num_tokens": k}))
    if not pair_is_ngram:
        lanes.append(Lane(f"ngram_k{k}", "ours", f"ours n-gram k={k}", k=k, ngram=True))
    if mode == "greedy":
        lanes += [Lane(f"spec_k{j}", "ours", f"ours spec k={j} ({pair.draft_name})", k=j, sweep=True)
                  for j in sweep_ks if j != k]
    return lanes


STOCK_SUFFIX = "_stock"


def stock_lanes(k: int, draft_name: str) -> list[Lane]:
    """The lanes that also run with the CPU fast path off: they separate the kernels' share of
    a speedup from the decoder's (ours plain and HF generate on the same stock model)."""
    return [Lane("plain" + STOCK_SUFFIX, "ours", "ours plain, stock kernels", k=0, stock=True),
            Lane(f"spec_k{k}" + STOCK_SUFFIX, "ours", f"ours spec k={k} ({draft_name}), stock kernels",
                 k=k, stock=True),
            Lane("hf_plain" + STOCK_SUFFIX, "hf", "HF generate plain, stock kernels",
                 hf={"kind": "plain"}, stock=True)]


class ForwardTimer:
    """Sums wall time inside the forward() of the given modules (top-level calls only).

    On CUDA the reading is only meaningful with synchronisation; the bench syncs around runs,
    not around forwards, so on a GPU this measures launch time (reported as such)."""

    def __init__(self, modules: dict):
        self.totals = {name: 0.0 for name in modules}
        self._t0, self._depth, self._handles = {}, {}, []
        for name, mod in modules.items():
            self._depth[name] = 0
            self._handles.append(mod.register_forward_pre_hook(self._pre(name)))
            self._handles.append(mod.register_forward_hook(self._post(name)))

    def _pre(self, name):
        def hook(module, args):
            if self._depth[name] == 0:
                self._t0[name] = time.perf_counter()
            self._depth[name] += 1
        return hook

    def _post(self, name):
        def hook(module, args, output):
            self._depth[name] -= 1
            if self._depth[name] == 0:
                self.totals[name] += time.perf_counter() - self._t0[name]
        return hook

    def reset(self) -> None:
        self.totals = {name: 0.0 for name in self.totals}

    def remove(self) -> None:
        for h in self._handles:
            h.remove()


def timed_modules(pair, suffix: str = "") -> dict:
    """{"target": module, "draft": module} whose forward passes the timer hooks (draft if any)."""
    mods = {"target" + suffix: pair.target}
    draft = pair.draft_model
    if draft is None:   # a custom drafter (e.g. a feature head): time its module if it has one
        d = pair.new_drafter()
        draft = next((m for m in vars(d).values() if isinstance(m, torch.nn.Module)), None)
    if draft is not None and draft is not pair.target:
        mods["draft" + suffix] = draft
    return mods


@dataclass
class Run:
    lane: str
    mode: str
    prompt: str
    repeat: int
    wall_s: float                   # outside wall clock around the whole call (prefill included)
    output_ids: list
    forward_s: dict                 # {"target": s, "draft": s}
    trace: object = None            # ours: the Trace (stats, rounds); hf: None
    extra: dict = field(default_factory=dict)


def _sync(pair) -> None:
    if pair.device_type == "cuda":
        torch.cuda.synchronize()


def run_lane(pair, lane: Lane, prompt_ids: list, mode: str, max_new_tokens: int, seed: int,
             timer: ForwardTimer, draft_cfg0=None, other_pairs=None) -> tuple[float, list, object]:
    """Run one lane once -> (wall seconds, new token ids, Trace or None). other_pairs: {draft name:
    pair on the same target} for the lanes of other drafts."""
    settings = dict(MODES[mode], max_new_tokens=max_new_tokens, seed=seed)
    timer.reset()
    _sync(pair)
    if lane.impl == "ours":
        t0 = time.perf_counter()
        if lane.k == 0:
            trace = autoregressive_generate(pair, prompt_ids, **settings)
        else:
            drafter = (NGramDrafter(pair.vocab_size, pair.input_device) if lane.ngram else
                       other_pairs[lane.draft].new_drafter() if lane.draft else None)
            trace = speculative_generate(pair, prompt_ids, lane.k, tree=lane.tree, drafter=drafter, **settings)
        _sync(pair)
        return time.perf_counter() - t0, list(trace.output_ids), trace
    return _run_hf(pair, lane, prompt_ids, mode, max_new_tokens, seed, draft_cfg0)


def _hf_kwargs(pair, mode: str, max_new_tokens: int) -> dict:
    s = MODES[mode]
    eos = sorted(pair.eos_ids)
    kw = dict(max_new_tokens=max_new_tokens, pad_token_id=eos[0] if eos else 0,
              eos_token_id=eos or None)
    if s["temperature"] == 0:
        kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
    else:   # top_k=0 turns transformers' default top-k of 50 off, as ours has it
        kw.update(do_sample=True, temperature=s["temperature"], top_p=s["top_p"], top_k=0)
    return kw


@torch.inference_mode()
def _run_hf(pair, lane, prompt_ids, mode, max_new_tokens, seed, draft_cfg0):
    device = pair.input_device
    ids = torch.tensor([prompt_ids], dtype=torch.long, device=device)
    kw = _hf_kwargs(pair, mode, max_new_tokens)
    kind = lane.hf["kind"]
    draft = pair.draft_model
    saved_cfg = None
    if kind == "assisted":
        # A fresh copy of the assistant's generation config for every call: transformers keeps
        # schedule / threshold state there, and a target-layers draft shares the target's object.
        saved_cfg = draft.generation_config
        cfg = copy.deepcopy(draft_cfg0)
        for key in ("num_assistant_tokens", "num_assistant_tokens_schedule",
                    "assistant_confidence_threshold"):
            if key in lane.hf:
                setattr(cfg, key, lane.hf[key])
        draft.generation_config = cfg
        kw["assistant_model"] = draft
    elif kind == "lookup":
        kw["prompt_lookup_num_tokens"] = lane.hf["prompt_lookup_num_tokens"]
    torch.manual_seed(seed)
    try:
        _sync(pair)
        t0 = time.perf_counter()
        out = pair.target.generate(ids, attention_mask=torch.ones_like(ids), **kw)
        _sync(pair)
        wall = time.perf_counter() - t0
    finally:
        if saved_cfg is not None:
            draft.generation_config = saved_cfg
    return wall, out[0, len(prompt_ids):].tolist(), None
