"""`python -m specdec_core.lab corpus | extract | train | ablate | yardstick | prompts | block-train | block-ablate | v3-run | v3-measure | v3-report | v4-run | v4-report | v4-mix`.

    python -m specdec_core.lab corpus --minutes 60          # the target's answers to diverse instructions (resumes)
    python -m specdec_core.lab extract --minutes 60         # teacher-force every source (resumes)
    python -m specdec_core.lab train --loss fkl --steps 4000 --vocab 16384
    python -m specdec_core.lab train --loss rollout --steps 1500 --init-from fkl --name final --out specdec_core/data/draft
    python -m specdec_core.lab yardstick --head specdec_core/data/draft   # per task type, on the frozen held-out file
    python -m specdec_core.lab ablate --init-from fkl --steps 60
    python -m specdec_core.lab block-ablate --K 4 --steps 120   # the block drafter (lab/block_run.py)
    python -m specdec_core.lab v3-run --out specdec_core/lab/runs/v3   # draft v3: natural prompts, streamed (lab/v3.py)

Sources (corpus.py): "gen" (the corpus step's answers, read in place from --corpus, default
../shared/distill-data/corpus), "shared" (../shared/distill-data/selfdistill.npz), "text"
(Debian-installed text). Extracted shards live in <cache>/{train,val}_<source>_<manifest hash>;
nothing of them is committed. Threads: DISTILL_THREADS (default: all cores).
"""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import numpy as np
import torch

from . import block_run, corpus, v3_cli, v4_cli, v5_cli
from .data import FEATURE_LAYERS, ENV_CACHE, ENV_CORPUS, ENV_DATA, SEED, cache_dir, extract, keyed_dir, load_sequences, split
from .losses import LOSSES
from .sources import (SOURCES, VAL_PER_SOURCE, draft_vocab, record, shard_dirs, source_caps, source_sets,
                      target_outputs, target_pair, train_data)
from .train import evaluate, new_head, train
from .yardstick import coverage_table, yardstick_table

HEAD_VERSION = 2        # of the recipe (traces record "<name> v<N>"): 2 = three taps, the corpus

def _train_one(a, target, vocab, data, held, loss: str, name: str, init_from):
    torch.manual_seed(SEED)
    layers = [int(x) for x in a.layers.split(",")]
    head = new_head(target, vocab, a.init_layer, layers)
    state = None
    if getattr(a, "init_head", None):   # a saved head folder (safetensors), e.g. a committed run
        from safetensors.torch import load_file
        init_from = str(Path(a.init_head).resolve())
        state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(Path(a.init_head) / "weights.safetensors").items()}
    elif init_from:   # curriculum: continue from another run's weights (fresh optimizer)
        state = torch.load(cache_dir() / f"ckpt_{init_from}.pt", weights_only=True)["head"]
    if state is not None:   # another vocabulary's output bias and ids are not carried over
        head.load_state_dict({k: v for k, v in state.items() if not (k in ("bias", "vocab_ids") and v.shape != head.bias.shape)},
                             strict=False)
    manifests = {s: shard_dirs(s)[0].name for s, _ in source_caps(a.sources)}
    train(head, data, loss=loss, steps=a.steps, ckpt=cache_dir() / f"ckpt_{name}.pt", batch=a.batch, lr=a.lr, K=a.K,
          settings={"data": manifests, "vocab": len(vocab), "vocab_sum": int(vocab.sum()), "layers": layers,
                    "init_layer": a.init_layer, "init_from": init_from})
    res = evaluate(head, held)
    record({"name": name, "loss": loss, "init_from": init_from, "steps": a.steps, "batch": a.batch, "lr": a.lr,
             "vocab": len(vocab), "sources": a.sources, "train_seqs": len(data), **res})
    return head, res


def cmd_corpus(a) -> None:
    pair = target_pair()
    folder = Path(a.out) if a.out else cache_dir() / "corpus"
    folder.mkdir(parents=True, exist_ok=True)
    items = corpus.build_instructions(pair, folder, a.templated, a.invented, a.batch)
    print(f"{len(items)} instructions ({sum(it['task'] == 'invented' for it in items)} invented by the target)")
    corpus.generate_answers(pair, folder, items, a.batch, a.max_new, a.minutes)


def cmd_extract(a) -> None:
    """Teacher-force every source, held-out sides first; one time budget across all of them."""
    import time
    pair, deadline = target_pair(), time.time() + a.minutes * 60
    left = lambda: max(0.0, (deadline - time.time()) / 60)
    for source in a.sources.split(","):
        seqs, train_idx, test_idx, man = source_sets(source, pair)
        extract(pair.target, seqs, test_idx[:VAL_PER_SOURCE], keyed_dir(f"val_{source}", man), minutes=left())
        extract(pair.target, seqs, train_idx, keyed_dir(f"train_{source}", man), minutes=left())


def cmd_train(a) -> None:
    from ..drafters.feature_head import save_head
    pair, vocab = target_pair(), draft_vocab(a.vocab, a.sources)
    data, held = train_data(a.sources, a.shards, a.layers)
    n_pos = int(sum(len(d["ids"]) for d in data))
    print(f"{len(data)} train sequences, {n_pos} positions")
    head, res = _train_one(a, pair.target, vocab, data, held, a.loss, a.name or a.loss, a.init_from)
    if a.out:
        save_head(head, Path(a.out), {"version": HEAD_VERSION, "feature_layers": head.cfg["feature_layers"], "loss": a.loss, "steps": a.steps, "batch": a.batch, "lr": a.lr, "vocab": len(vocab),
                                      "init_from": a.init_from, "sources": a.sources, "train_sequences": len(data),
                                      "train_positions": n_pos, "init_layer": a.init_layer, "heldout_offline": res})


def cmd_ablate(a) -> None:
    """Every loss from the same start (fresh, or --init-from's weights), same data order, steps, seed."""
    pair, vocab = target_pair(), draft_vocab(a.vocab, a.sources)
    data, held = train_data(a.sources, a.shards, a.layers)
    rows = []
    for loss in a.losses.split(","):
        name = f"ablate_{loss}_{a.steps}" + (f"_from_{a.init_from}" if a.init_from else "")
        rows.append({"loss": loss, **_train_one(a, pair.target, vocab, data, held, loss, name, a.init_from)[1]})
    print("\n| loss | greedy agreement step 1..4 | α (T=1) step 1..4 | τ greedy (k=4) | τ T=1 (k=4) |\n|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['loss']} | {' / '.join(f'{x:.3f}' for x in r['agree'])} | "
              f"{' / '.join(f'{x:.3f}' for x in r['alpha_t1'])} | {r['tau_greedy']:.3f} | {r['tau_t1']:.3f} |")


def cmd_yardstick(a) -> None:
    """Per task type on the frozen held-out prompts (or --prompts FILE): the head online (greedy,
    k = 4 rounds, the fast path the app runs) and teacher-forced, and the vocabulary coverage curve."""
    from ..drafters.feature_head import load_head
    from ..models import load_pair
    from .yardstick import online_table, prompt_file
    spec = f"distilled:{a.head}" if a.head else "distilled"
    prompts, f = prompt_file(a.prompts)
    print(f"## Online ({spec}, greedy, k = {a.k}, {a.max_new} new tokens, {len(prompts)} prompts of {f})\n")
    print(online_table(load_pair("smollm2-135m", draft=spec, device="cpu"), a.k, a.max_new, prompts))
    # Stock kernels offline: the fast path folds the head's output rows into a prepacked matrix,
    # and offline scoring needs them dense (the numbers are the same).
    pair = load_pair("smollm2-135m", draft="ngram", device="cpu", fast_path=False)
    head = load_head(pair.target, a.head)
    print("\n## Teacher-forced (the target's greedy answers)\n")
    print(yardstick_table(pair, head, a.max_new, a.prompts))
    if a.coverage:
        print("\n## Vocabulary coverage\n")
        print(coverage_table(pair, [s["gen"] for s in target_outputs()], a.max_new, a.prompts))


def cmd_prompts(a) -> None:
    """Held-out instructions of the shared data as a bench prompt file (the templated held-out set)."""
    seqs, _ = load_sequences()
    held = sorted({seqs[i]["instruction"] for i in split(seqs)[1]})
    pick = np.random.default_rng(1).permutation(held)[: a.n]
    Path(a.out).write_text(json.dumps({"prompts": [{"name": f"heldout{i}", "text": t} for i, t in enumerate(pick)]}, indent=1) + "\n")
    print(f"wrote {len(pick)} held-out prompts to {a.out}")


def run_name(text: str) -> str:
    """A run name becomes a file name in the lab cache: letters, digits, '.', '-', '_' only."""
    import re
    if not re.fullmatch(r"[\w.-]+", text) or text.startswith("."):
        raise argparse.ArgumentTypeError(f"run names are letters, digits, '.', '-', '_': got {text!r}")
    return text


def main(argv=None) -> None:
    torch.set_num_threads(int(os.environ.get("DISTILL_THREADS", str(os.cpu_count() or 1))))
    p = argparse.ArgumentParser(prog="python -m specdec_core.lab", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--data", default=None, help=f"self-distillation data folder (default: ${ENV_DATA} or ../shared/distill-data)")
    p.add_argument("--corpus", default=None, help=f"the corpus step's shards, read in place (default: ${ENV_CORPUS} or <data>/corpus)")
    p.add_argument("--cache", default=None, help=f"corpus, shards, checkpoints, results (default: ${ENV_CACHE} or ~/.cache/specdec-explainer/lab)")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("corpus", help="the target's answers to templated and self-invented instructions (resumes)")
    c.add_argument("--minutes", type=float, default=60.0)
    c.add_argument("--templated", type=int, default=9000)
    c.add_argument("--invented", type=int, default=3000)
    c.add_argument("--batch", type=int, default=48)
    c.add_argument("--max-new", type=int, default=160)
    c.add_argument("--out", default=None, help="write the shards here (default: <cache>/corpus); "
                   "a copy of the shared corpus resumes where it stopped with the same arguments")
    e = sub.add_parser("extract", help="teacher-force the target over every source (resumes)")
    e.add_argument("--minutes", type=float, default=20.0)
    e.add_argument("--sources", default=",".join(SOURCES), help="of gen, shared, text")
    for name, helptext in [("train", "train a feature-head draft on the extracted shards"),
                           ("ablate", "train one head per loss, same data/steps/seed; a table")]:
        t = sub.add_parser(name, help=helptext)
        if name == "train":
            t.add_argument("--loss", choices=LOSSES, default="fkl")
            t.add_argument("--name", default=None, type=run_name, help="checkpoint/result name (default: the loss)")
            t.add_argument("--out", default=None, help="save the trained head here (e.g. specdec_core/data/draft)")
        else:
            t.add_argument("--losses", default=",".join(LOSSES))
        t.add_argument("--steps", type=int, default=1000)
        t.add_argument("--batch", type=int, default=8)
        t.add_argument("--lr", type=float, default=1e-3)
        t.add_argument("--K", type=int, default=None, help="rollout steps (default: per loss)")
        t.add_argument("--vocab", type=int, default=8192)
        t.add_argument("--init-layer", type=int, default=29)
        t.add_argument("--layers", default=",".join(map(str, FEATURE_LAYERS)),
                       help="hidden_states indices the head reads (the last -1); the shards must hold them")
        t.add_argument("--shards", type=int, default=10**9, help="at most this many shards per source")
        t.add_argument("--sources", default=",".join(SOURCES), help="of gen, shared, text; NAME:N uses its first N shards")
        t.add_argument("--init-from", default=None, type=run_name, help="start from the weights of run NAME")
        t.add_argument("--init-head", default=None, help="start from a saved head folder (e.g. specdec_core/lab/runs/v2)")
    y = sub.add_parser("yardstick", help="offline agreement per task type on the frozen held-out prompts")
    y.add_argument("--head", default=None, help="a head folder (default: the shipped draft)")
    y.add_argument("--max-new", type=int, default=64)
    y.add_argument("--k", type=int, default=4, help="draft length of the online rounds")
    y.add_argument("--coverage", action="store_true", help="also the vocabulary coverage curve")
    y.add_argument("--prompts", default=None, help="a prompt file ({\"prompts\": [{name, task?, text}]}, as the bench's); "
                   "default: the frozen yardstick, data/heldout_prompts.json")
    pr = sub.add_parser("prompts", help="write the shared data's held-out instructions as a bench prompt file")
    pr.add_argument("--n", type=int, default=8)
    pr.add_argument("--out", default="specdec_core/data/templated_heldout_prompts.json")
    block_run.add_parsers(sub, run_name)
    v3_cli.add_parsers(sub)
    v4_cli.add_parsers(sub)
    v5_cli.add_parsers(sub)
    a = p.parse_args(argv)
    # The folders travel in the environment: one visible channel for every command below.
    for value, env in ((a.data, ENV_DATA), (a.cache, ENV_CACHE), (a.corpus, ENV_CORPUS)):
        if value:
            os.environ[env] = str(Path(value).resolve())
    cache_dir().mkdir(parents=True, exist_ok=True)
    {"corpus": cmd_corpus, "extract": cmd_extract, "train": cmd_train, "ablate": cmd_ablate,
     "yardstick": cmd_yardstick, "prompts": cmd_prompts,
     "block-train": block_run.cmd_block_train, "block-ablate": block_run.cmd_block_ablate,
     "block-eval": block_run.cmd_block_eval, "v3-run": v3_cli.cmd_run, "v3-measure": v3_cli.cmd_measure,
     "v3-report": v3_cli.cmd_report, "v4-run": v4_cli.cmd_run, "v4-report": v4_cli.cmd_report, "v4-mix": v4_cli.cmd_mix, "v4-docs": v4_cli.cmd_docs, "v4-score": v4_cli.cmd_score, "memory": v4_cli.cmd_memory,
     "v5-asks": v5_cli.cmd_asks, "v5-run": v5_cli.cmd_run, "v5-score": v5_cli.cmd_score, "v5-report": v5_cli.cmd_report, "v5-export": v5_cli.cmd_export, "v5-misses": v5_cli.cmd_misses, "v5-phrases": v5_cli.cmd_phrases, "v5-probe": v5_cli.cmd_probe}[a.cmd](a)
