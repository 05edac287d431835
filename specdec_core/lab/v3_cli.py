"""The draft-v3 commands of `python -m specdec_core.lab` (issue 38):

    v3-run      the long run (v3.py): natural prompts → answers captured in one pass → trained once;
                resumes from --out (default specdec_core/lab/runs/v3); --device cuda for a GPU
    v3-measure  positions per second made (generation + capture) and trained, at batch 1, 8, 16, 32
    v3-report   the run's prompt diversity next to v2's prompt data, its coverage and selection history
"""
from __future__ import annotations

import gzip
import json
import time
from pathlib import Path

import torch

from .stream import StreamConfig


def add_parsers(sub) -> None:
    r = sub.add_parser("v3-run", help="draft v3: natural prompts, one-pass capture, streaming training (resumes)")
    r.add_argument("--out", default="specdec_core/lab/runs/v3", help="checkpoint folder (committed; resumed from)")
    r.add_argument("--device", default="cpu", help="cpu or cuda (generation and training)")
    r.add_argument("--threads", type=int, default=1, help="torch threads (the machine is shared)")
    r.add_argument("--vocab", type=int, default=16384)
    r.add_argument("--init-head", default="specdec_core/lab/runs/v2", help="start weights ('' for none)")
    r.add_argument("--gen-batch", type=int, default=16)
    r.add_argument("--max-new", type=int, default=160)
    r.add_argument("--select-n", type=int, default=32)
    r.add_argument("--vocab-n", type=int, default=96)
    r.add_argument("--select-every", type=int, default=60_000)
    r.add_argument("--patience", type=int, default=12)
    r.add_argument("--ckpt-minutes", type=float, default=5.0)
    d = StreamConfig()
    for name, typ in (("loss", str), ("lr", float), ("weight_decay", float), ("noise", float), ("warmup", int),
                      ("train_batch", int), ("positions", int)):
        r.add_argument("--" + name.replace("_", "-"), type=typ, default=getattr(d, name))
    m = sub.add_parser("v3-measure", help="positions/s made (generate + capture) and trained at several batch sizes")
    m.add_argument("--batches", default="1,8,16,32")
    m.add_argument("--max-new", type=int, default=64)
    m.add_argument("--threads", type=int, default=1)
    m.add_argument("--device", default="cpu")
    m.add_argument("--vocab", type=int, default=16384)
    m.add_argument("--loss", default="rollout")
    m.add_argument("--cost", action="store_true", help="instead: the draft cost c (one head step ÷ one target step) "
                   "at draft vocabularies 8k / 16k / 32k, fast path as the drafter runs it")
    p = sub.add_parser("v3-report", help="prompt diversity (v3 vs v2's prompts), coverage, selection history")
    p.add_argument("--out", default="specdec_core/lab/runs/v3")


def cmd_run(a) -> None:
    from .v3 import RunConfig, run
    torch.set_num_threads(a.threads)
    stream = StreamConfig(loss=a.loss, lr=a.lr, weight_decay=a.weight_decay, noise=a.noise, warmup=a.warmup,
                          train_batch=a.train_batch, positions=a.positions)
    cfg = RunConfig(out=a.out, device=a.device, vocab=a.vocab, init_head=a.init_head or None, gen_batch=a.gen_batch,
                    max_new=a.max_new, select_n=a.select_n, vocab_n=a.vocab_n, select_every=a.select_every,
                    patience=a.patience, ckpt_minutes=a.ckpt_minutes, stream=stream)
    run(cfg, log=lambda s: print(time.strftime("%H:%M:%S"), s, flush=True))


def cmd_measure(a) -> None:
    """Per batch size B: B prompts answered with capture (max_new tokens) and the same sequences
    trained on in one step of B; positions = generated tokens (made) / trained rows (trained)."""
    from .instructions import make_instructions
    from .stream import new_optimizer, train_on
    from .v3 import RunConfig, _new_head, load_target
    from .yardstick import frequent_vocab_of
    from .capture import generate
    torch.set_num_threads(a.threads)
    pair = load_target(a.device)
    if a.cost:
        return measure_cost(pair, a.device)
    texts = [it["text"] for it in make_instructions(64, seed=7)]
    cfg = RunConfig(device=a.device, init_head=None)
    head = _new_head(pair, cfg, frequent_vocab_of([torch.arange(pair.vocab_size).numpy()], a.vocab))
    stream = StreamConfig(loss=a.loss, noise=0.05)
    print(f"| batch | made (tokens/s) | trained (positions/s, {a.loss}) | made + trained (positions/s) |\n|---|---|---|---|")
    for B in [int(x) for x in a.batches.split(",")]:
        prompts = [pair.encode_prompt(t) for t in texts[:B]]
        generate(pair.target, prompts[:1], 4)                                     # warm-up
        t0 = time.monotonic()
        seqs = generate(pair.target, prompts, a.max_new, temperature=0.0, layers=cfg.layers)
        t_make = time.monotonic() - t0
        made = sum(len(s["ids"]) - s["plen"] for s in seqs)
        opt = new_optimizer(head, dataclass_replace(stream, train_batch=B))
        gen = torch.Generator(device=a.device).manual_seed(0)
        train_on(head, opt, seqs[:1], dataclass_replace(stream, train_batch=B), 0, 0, gen)   # warm-up
        r = train_on(head, opt, seqs, dataclass_replace(stream, train_batch=B), 0, 0, gen)
        mk, tr = made / t_make, r["positions"] / r["wall_s"]
        print(f"| {B} | {mk:.0f} | {tr:.0f} | {r['positions'] / (t_make + r['wall_s']):.0f} |", flush=True)


def dataclass_replace(x, **kw):
    import dataclasses
    return dataclasses.replace(x, **kw)


def cmd_report(a) -> None:
    from .data import data_dir
    from .natural import diversity
    from .sources import target_pair
    out = Path(a.out)
    prompts = json.loads(gzip.decompress((out / "prompts.json.gz").read_bytes()))
    state = json.loads((out / "state.json").read_text())
    v3 = [p["text"] for p in prompts if p["split"] == "train"]
    # v2's prompt data: the shared data's instructions and the corpus's (decoded from its prompts).
    v2 = sorted(set(json.loads((data_dir() / "instructions.json").read_text())))
    try:
        from .corpus import load_corpus
        from .data import corpus_dir
        tok = target_pair().tokenizer
        for s in load_corpus(corpus_dir(), "gen"):
            text = tok.decode(s["prompt"])
            v2.append(text.split("<|im_start|>user\n")[-1].split("<|im_end|>")[0])
        v2 = sorted(set(v2))
    except (FileNotFoundError, ImportError):
        pass
    from .natural import normalise
    budget = min(20_000, *(sum(len(normalise(t).split()) for t in x) for x in (v2, v3)))
    print(f"## Prompt diversity (random samples of about {budget:,} words each: distinct-n falls as a sample grows)\n")
    print("| prompts | distinct prompts | sampled | distinct-1 | distinct-2 | distinct-3 | distinct 3-word openings | words / prompt |\n"
          "|---|---|---|---|---|---|---|---|")
    for name, texts in (("v2 (templated + invented)", v2), ("v3 (natural, written by the target)", v3)):
        d = diversity(texts, 10**9, max_words=budget)
        print(f"| {name} | {len(texts)} | {d['prompts']} | {d['distinct_1']} | {d['distinct_2']} | {d['distinct_3']} | "
              f"{d['openings']} | {d['words']} |")
    kinds, topics = {}, set()
    for p in prompts:
        if p["split"] == "train":
            kinds[p["kind"]] = kinds.get(p["kind"], 0) + 1
            topics.add(p["topic"])
    print(f"\nv3 train prompts by kind: {kinds}; distinct seed topics: {len(topics)}")
    print(f"\ncoverage: {json.dumps(state.get('coverage'))}")
    print("\n| positions | first guess | top-3 |\n|---|---|---|")
    for h in state["history"]:
        print(f"| {h['positions']:,} | {h['first']:.3f} | {h['top3']:.3f} |")


@torch.no_grad()
def measure_cost(pair, device: str, sizes=(8192, 16384, 32768), context: int = 100, reps: int = 40) -> None:
    """c = median time of one head draft step (one token over a cache of `context` entries, logits
    over N rows) ÷ median time of one target decode step over the same context; interleaved reps."""
    from transformers import DynamicCache
    from ..drafters.base import crop_cache
    from .select import drafting_copy
    from .v3 import RunConfig, _new_head
    from .yardstick import frequent_vocab_of
    target, dev = pair.target, torch.device(device)
    ids = torch.randint(3, 1000, (1, context), device=dev)
    cache = DynamicCache(config=target.config)
    target(ids, past_key_values=cache, use_cache=True)
    heads = {}
    for n in sizes:
        h = drafting_copy(pair, _new_head(pair, RunConfig(device=device, init_head=None),
                                          frequent_vocab_of([torch.arange(pair.vocab_size).numpy()], n)))
        feat = torch.randn(1, context, h.fc.out_features, device=dev)
        _, hc = h(feat, ids, torch.arange(context, device=dev), None)
        heads[n] = (h, hc)
    one = ids[:, -1:]
    def t_target():
        t0 = time.perf_counter()
        target(one, past_key_values=cache, use_cache=True)
        crop_cache(cache, context)
        return time.perf_counter() - t0
    def t_head(n):
        h, hc = heads[n]
        t0 = time.perf_counter()
        g, c2 = h(torch.randn(1, 1, h.fc.out_features, device=dev), one, torch.tensor([context], device=dev), hc)
        h.logits(g[0])
        heads[n] = (h, [x[:, :, :context] for x in c2])
        return time.perf_counter() - t0
    times = {"target": []} | {n: [] for n in sizes}
    for _ in range(reps):
        times["target"].append(t_target())
        for n in sizes:
            times[n].append(t_head(n))
    med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
    print(f"target step {med['target'] * 1e3:.1f} ms (context {context})\n\n| draft vocabulary | head step (ms) | c |\n|---|---|---|")
    for n in sizes:
        print(f"| {n:,} | {med[n] * 1e3:.2f} | {med[n] / med['target']:.3f} |")
