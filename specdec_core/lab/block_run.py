"""The block drafter's lab commands: `block-train` (one arm) and `block-ablate` (every arm from
the same start, same data order, steps and seed; a table of accepted length and acceptance by
position). Training loop, checkpoints and resuming: train.train; the block's forward, terms and
losses: block.py.

    python -m specdec_core.lab block-ablate --K 4 --steps 120
    python -m specdec_core.lab block-train --arm all --K 8 --steps 300 --out specdec_core/data/block
"""
from __future__ import annotations

import json
from pathlib import Path

import torch

from .block import ARMS, block_loss, block_rollout, block_terms, evaluate_block
from .data import SEED, cache_dir, make_batch

BLOCK_VERSION = 1


def start_block(target, init_head: Path | None, K: int, data: list[dict]):
    """A BlockHead of K outputs from the feature head in init_head (None: the shipped draft, fp32,
    stock kernels: trainable), its slots starting at the mean layer input of a few sequences."""
    from safetensors.torch import load_file

    from ..drafters.block_head import new_block
    from ..drafters.feature_head import FeatureHead, shipped_head
    folder = Path(init_head) if init_head else shipped_head()
    meta = json.loads((folder / "config.json").read_text())
    state = {k: v.float() if v.is_floating_point() else v for k, v in load_file(folder / "weights.safetensors").items()}
    head = FeatureHead(meta["cfg"], state["vocab_ids"])
    head.load_state_dict(state)
    head.attach(target.get_input_embeddings().weight, target.get_output_embeddings().weight)
    with torch.no_grad():
        b = make_batch(data, list(range(min(8, len(data)))))
        x = head.layer_in(head.true_feature(b["feats"][:, :-1]), b["ids"][:, 1:])[b["valid"]]
    torch.manual_seed(SEED)
    return new_block(target, head, K, x.mean(0)), str(folder.resolve())


def block_objective(use: tuple, K: int):
    """(head, batch) -> (loss, anchor terms, anchor rows) for train.train."""
    def objective(head, b):
        terms = block_terms(head, block_rollout(head, b["feats"], b["ids"], K), b)
        return block_loss(terms, use), terms[0], terms[0]["valid"]
    return objective


def _data(a):
    from .cli import _shard_dirs, _source_caps, _train_data
    data, held = _train_data(a.sources, a.shards, "-1")      # the block reads the final state only
    manifests = {s: _shard_dirs(s)[0].name for s, _ in _source_caps(a.sources)}
    return data, held, manifests


def train_arm(a, target, data, held, manifests, arm: str, name: str):
    """Train one arm from the start weights; returns (head, held-out metrics) and records a row."""
    from .cli import _record
    from .train import train
    head, init = start_block(target, a.init_head, a.K, data)
    train(head, data, loss=f"block-{arm}", steps=a.steps, ckpt=cache_dir() / f"ckpt_{name}.pt", batch=a.batch,
          lr=a.lr, K=a.K, objective=block_objective(ARMS[arm], a.K),
          settings={"data": manifests, "init": init, "arm": arm, "block_size": a.K})
    res = evaluate_block(head, held, a.K)
    _record({"name": name, "arm": arm, "K": a.K, "steps": a.steps, "batch": a.batch, "lr": a.lr,
             "sources": a.sources, "train_seqs": len(data), "held_seqs": len(held), **res})
    return head, res


def cmd_block_train(a) -> None:
    from ..drafters.feature_head import save_head
    from .cli import _target
    pair = _target()
    data, held, manifests = _data(a)
    n_pos = int(sum(len(d["ids"]) for d in data))
    print(f"{len(data)} train sequences, {n_pos} positions; {len(held)} held out")
    head, res = train_arm(a, pair.target, data, held, manifests, a.arm, a.name or f"block_{a.arm}_K{a.K}_{a.steps}")
    if a.out:
        save_head(head, Path(a.out), {"version": BLOCK_VERSION, "kind": "block", "arm": a.arm,
                                      "interventions": list(ARMS[a.arm]), "block_size": a.K, "steps": a.steps,
                                      "batch": a.batch, "lr": a.lr, "sources": a.sources, "init": "shipped feature head",
                                      "train_sequences": len(data), "train_positions": n_pos, "heldout_offline": res})


def cmd_block_ablate(a) -> None:
    from .cli import _target
    pair = _target()
    data, held, manifests = _data(a)
    rows = []
    for arm in a.arms.split(","):
        rows.append((arm, train_arm(a, pair.target, data, held, manifests, arm, f"block_ablate_{arm}_K{a.K}_{a.steps}")[1]))
    print(ablation_table(rows, a.K))


def ablation_table(rows: list, K: int) -> str:
    """Markdown: per arm, accepted drafts per round (greedy, T = 1), its change vs plain CE, and
    acceptance by position."""
    base = dict(rows).get("ce")
    out = [f"| arm | accepted / round, greedy (k = {K}) | vs plain CE | accepted / round, T = 1 | "
           "acceptance by position (greedy, given all before accepted) |", "|---|---|---|---|---|"]
    for arm, r in rows:
        gain = f"{100 * (r['accepted_greedy'] / base['accepted_greedy'] - 1):+.1f} %" if base else "—"
        out.append(f"| {arm} | {r['accepted_greedy']:.3f} | {gain} | {r['accepted_t1']:.3f} | "
                   f"{' / '.join(f'{x:.2f}' for x in r['accept_by_position'])} |")
    return "\n".join(out)


def add_parsers(sub, run_name) -> None:
    """The two commands' arguments (cli.main registers them)."""
    for name, helptext in [("block-train", "train the block drafter (one arm of the losses)"),
                           ("block-ablate", "every arm from the same start; a table")]:
        t = sub.add_parser(name, help=helptext)
        if name == "block-train":
            t.add_argument("--arm", choices=tuple(ARMS), default="all")
            t.add_argument("--name", default=None, type=run_name)
            t.add_argument("--out", default=None, help="save the block here (e.g. specdec_core/data/block)")
        else:
            t.add_argument("--arms", default=",".join(ARMS))
        t.add_argument("--K", type=int, default=8, help="block size: outputs per draft pass (≤ 8 ships)")
        t.add_argument("--steps", type=int, default=200)
        t.add_argument("--batch", type=int, default=8)
        t.add_argument("--lr", type=float, default=5e-4)
        t.add_argument("--shards", type=int, default=10**9)
        t.add_argument("--sources", default="gen")
        t.add_argument("--init-head", default=None, help="feature head to start from (default: the shipped draft)")
