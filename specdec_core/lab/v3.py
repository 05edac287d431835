"""The draft-v3 run (issue 38): natural prompts written by the target, answered and captured in one
pass, trained on once as they come, selected online on a held-out selection split; checkpoints into a
committed folder and resumes from it on any machine.

    python -m specdec_core.lab v3-run --out specdec_core/lab/runs/v3 [--device cuda]

A fresh run first writes the selection split (natural prompts never trained on) and a vocabulary
sample (natural prompts answered, counted with the corpus outputs) and builds the draft
vocabulary; then each *cycle* c writes `gen_batch` user turns from seeds of cycle c, keeps the new
and held-out-disjoint ones, answers them (even cycles greedy, odd ones T 0.8 / top-p 0.95, seeded
by c) capturing taps and the target's top-k, and trains on them once. Everything a cycle draws is
seeded by its index, so a resumed run repeats the cycle a killed one was in. Every `select_every`
positions the head is scored on the selection split (select.first_guess); the best is kept in
<out>/best (a head folder: `--head <out>/best` / `distilled:<out>/best`); the run stops after
`patience` scorings without a gain, or at the position budget.

Pausing (kill -STOP / -CONT) is safe: no deadline is read from the clock; a checkpoint is due when
`ckpt_minutes` of wall time passed since the last, so after a long pause the next cycle writes one.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from . import checkpoint
from .capture import generate
from .natural import Dedup, held_texts, keep_disjoint, make_seeds, write_prompts
from .stream import StreamConfig, new_optimizer, train_on

SELECT_SEED, VOCAB_SEED, TRAIN_SEED = 1_000_000, 2_000_000, 0


@dataclass
class RunConfig:
    out: str = "specdec_core/lab/runs/v3"
    device: str = "cpu"
    layers: tuple = (10, 20, -1)
    vocab: int = 16384
    init_head: str | None = "specdec_core/lab/runs/v2"   # start weights (another vocab's bias is not carried)
    init_layer: int = 29
    gen_batch: int = 16            # user turns written and answered per cycle
    max_new: int = 160             # answer length cap
    select_n: int = 32             # selection prompts
    vocab_n: int = 96              # natural prompts answered for the vocabulary
    select_every: int = 60_000     # positions trained between online scorings
    patience: int = 12             # scorings without a gain before stopping
    ckpt_minutes: float = 5.0
    stream: StreamConfig = field(default_factory=StreamConfig)


def load_target(device: str):
    from ..models import load_pair
    # fp32 on every device: "auto" picks bf16 on a GPU, and the head trains in fp32 on the captured states
    return load_pair("smollm2-135m", draft="ngram", device=device, dtype="float32")


def _answer(pair, texts: list[str], cfg: RunConfig, cycle: int, capture: bool = True) -> list[dict]:
    greedy = cycle % 2 == 0
    return generate(pair.target, [pair.encode_prompt(t) for t in texts], cfg.max_new, temperature=0.0 if greedy else 0.8,
                    top_p=0.95, seed=cycle, layers=cfg.layers, capture=capture)


def _write(pair, dedup: Dedup, held: list[str], seeds, seed: int, batch: int, split: str, tag) -> list[dict]:
    """New prompts from seeds: written, de-duplicated (against everything kept and held out), checked."""
    kept = []
    for i, (s, text) in enumerate(zip(seeds, write_prompts(pair, seeds, batch, seed=seed))):
        if text and dedup.add(text):
            kept.append({"text": text, "kind": s.kind, "topic": s.topic, "length": s.length, "split": split, "seed": [tag, i]})
    keep_disjoint([p["text"] for p in kept], held)
    return kept


def build_vocab(pair, cfg: RunConfig, sample: list[dict], log=print) -> tuple[torch.Tensor, dict]:
    """The draft vocabulary: the cfg.vocab most frequent tokens of the corpus outputs plus the
    answers to the natural vocabulary sample (greedy and sampled halves); with its coverage of the
    selection split's greedy answers next to the corpus-only vocabulary at 8k / 16k / 32k."""
    from .sources import target_outputs
    from .yardstick import frequent_vocab_of
    texts = [p["text"] for p in sample if p["split"] == "vocab"]
    answers = []
    for b in range(0, len(texts), cfg.gen_batch):
        answers += [r["ids"][r["plen"]:].numpy() for r in _answer(pair, texts[b:b + cfg.gen_batch], cfg, b // cfg.gen_batch, False)]
    log(f"vocabulary sample: {len(answers)} answers, {sum(map(len, answers))} tokens")
    sel = [p["text"] for p in sample if p["split"] == "select"]
    held = np.concatenate([r["ids"][r["plen"]:].numpy() for b in range(0, len(sel), cfg.gen_batch)
                           for r in _answer(pair, sel[b:b + cfg.gen_batch], cfg, 0, False)])
    corpus = [s["gen"] for s in target_outputs("shared,gen")]
    cov = {}
    for n in (8192, 16384, 32768):
        cov[n] = {"corpus": round(float(np.isin(held, frequent_vocab_of(corpus, n).numpy()).mean()), 4),
                  "corpus+natural": round(float(np.isin(held, frequent_vocab_of(corpus + answers, n).numpy()).mean()), 4)}
    log(f"coverage of the selection split's greedy answers ({len(held)} tokens): {cov}")
    return frequent_vocab_of(corpus + answers, cfg.vocab), {"tokens": int(len(held)), "by_size": cov}


def _new_head(pair, cfg: RunConfig, vocab: torch.Tensor):
    from .train import new_head
    torch.manual_seed(0)
    head = new_head(pair.target, vocab.to(pair.target.get_input_embeddings().weight.device), cfg.init_layer, cfg.layers)
    if cfg.init_head:
        from safetensors.torch import load_file
        st = load_file(str(Path(cfg.init_head) / "weights.safetensors"))
        head.load_state_dict({k: v.float() if v.is_floating_point() else v for k, v in st.items()
                              if not (k in ("bias", "vocab_ids") and v.shape != head.bias.shape)}, strict=False)
    return head.to(cfg.device)


def _head_from_folder(pair, cfg: RunConfig, folder: Path):
    from safetensors.torch import load as st_load
    vocab = st_load((folder / "head.safetensors").read_bytes())["vocab_ids"]
    return _new_head(pair, dataclasses.replace(cfg, init_head=None), vocab)


def _save_best(head, out: Path, state: dict) -> None:
    from ..drafters.feature_head import save_head
    save_head(head, out / "best", {"version": 3, "feature_layers": head.cfg["feature_layers"], "loss": state["settings"]["loss"],
                                   "positions": state["positions"], "selection": state["best"]})


def run(cfg: RunConfig, log=print) -> dict:
    """The run (fresh or resumed from cfg.out); returns its final state."""
    out = Path(cfg.out)
    pair = load_target(cfg.device)
    held = held_texts()
    settings = {**dataclasses.asdict(cfg.stream), "vocab": cfg.vocab, "layers": list(cfg.layers), "gen_batch": cfg.gen_batch,
                "max_new": cfg.max_new, "init_head": cfg.init_head}
    if checkpoint.exists(out):
        head = _head_from_folder(pair, cfg, out)
        opt = new_optimizer(head, cfg.stream)
        state, prompts = checkpoint.resume(out, head, opt, settings)
        log(f"resumed {out}: cycle {state['cycle']}, {state['positions']} positions trained, {len(prompts)} prompts")
    else:
        dedup = Dedup(held=held)
        prompts = _write(pair, dedup, held, make_seeds(2 * cfg.select_n, SELECT_SEED), SELECT_SEED, cfg.gen_batch, "select", "select")
        prompts = prompts[: cfg.select_n]
        dedup = Dedup(held=held)     # rebuilt from what is kept (the selection split was cut)
        for p in prompts:
            dedup.add(p["text"])
        prompts += _write(pair, dedup, held, make_seeds(cfg.vocab_n, VOCAB_SEED), VOCAB_SEED, cfg.gen_batch, "vocab", "vocab")
        log(f"selection split {cfg.select_n} prompts, vocabulary sample {len(prompts) - cfg.select_n}")
        vocab, coverage = build_vocab(pair, cfg, prompts, log)
        head = _new_head(pair, cfg, vocab)
        opt = new_optimizer(head, cfg.stream)
        checkpoint._ensure_opt_state(head, opt)
        state = {"settings": settings, "cycle": 0, "step": 0, "positions": 0, "made": 0, "coverage": coverage,
                 "history": [], "best": None, "since_best": 0, "next_select": 0, "cpu_s": 0.0}
        checkpoint.save(out, head, opt, state, prompts)
    dedup = Dedup(held=held)
    for p in prompts:
        dedup._keep(p["text"])
    select = [{"name": f"sel{i}", "task": p["kind"], "text": p["text"]} for i, p in enumerate(prompts) if p["split"] == "select"]
    last_ckpt = time.monotonic()
    while state["positions"] < cfg.stream.positions and state["since_best"] < cfg.patience:
        c = state["cycle"]
        if state["positions"] >= state["next_select"]:
            res = first_guess_of(pair, head, select)
            state["history"].append({"positions": state["positions"], "cycle": c, **res})
            if state["best"] is None or res["first"] > state["best"]["first"] + 0.002:
                state["best"], state["since_best"] = {"positions": state["positions"], **res}, 0
                _save_best(head, out, state)
            else:
                state["since_best"] += 1
            state["next_select"] = state["positions"] + cfg.select_every
            log(f"selection at {state['positions']} positions: first guess {res['first']:.3f}, top-3 {res['top3']:.3f} "
                f"({res['rounds']} rounds); best {state['best']['first']:.3f} at {state['best']['positions']}")
            checkpoint.save(out, head, opt, state, prompts)
            last_ckpt = time.monotonic()
        c0 = time.process_time()      # the stream's own CPU time (writing, answering, training)
        new = _write(pair, dedup, held, make_seeds(cfg.gen_batch, TRAIN_SEED + c), TRAIN_SEED + c * 1000, cfg.gen_batch, "train", c)
        prompts += new
        seqs = _answer(pair, [p["text"] for p in new], cfg, c) if new else []
        made = sum(len(s["ids"]) - s["plen"] for s in seqs)
        gen = torch.Generator(device=cfg.device).manual_seed(c)
        r = train_on(head, opt, seqs, cfg.stream, state["step"], state["positions"], gen)
        state.update(cycle=c + 1, step=state["step"] + r["steps"], positions=state["positions"] + r["positions"],
                     made=state["made"] + made, cpu_s=state["cpu_s"] + time.process_time() - c0)
        log(f"cycle {c}: {len(new)} new prompts, {made} tokens made, {r['positions']} positions trained "
            f"(total {state['positions']}, {state['positions'] / max(1e-9, state['cpu_s']):.0f}/CPU-s), "
            f"loss {r['loss']:.3f}, agree {r['agree']:.3f}")
        if time.monotonic() - last_ckpt >= cfg.ckpt_minutes * 60:
            checkpoint.save(out, head, opt, state, prompts)
            last_ckpt = time.monotonic()
    checkpoint.save(out, head, opt, state, prompts)
    log(f"stopped: {state['positions']} positions trained; best {state['best']}")
    return state


def first_guess_of(pair, head, select: list[dict]) -> dict:
    from .select import first_guess
    return first_guess(pair, head, select)
