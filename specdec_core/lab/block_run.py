"""The block drafter's lab commands: `block-train` (one arm) and `block-ablate` (every arm from
the same start, same data order, steps and seed; a table of accepted length and acceptance by
position) and `block-eval` (named runs on the frozen yardstick, with the arms' gains and their
ranges over resampled prompts). Training loop, checkpoints and resuming: train.train; the block's forward, terms and
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
from .sources import record, shard_dirs, source_caps, target_pair, train_data

BLOCK_VERSION = 1


def start_block(target, init_head: Path | None, K: int, data: list[dict], init_from: str | None = None):
    """A BlockHead of K outputs from the feature head in init_head (None: the shipped draft, fp32,
    stock kernels: trainable), its slots starting at the mean layer input of a few sequences; with
    init_from, the weights of block run NAME (its checkpoint in the lab cache), slots it lacks
    starting at the mean of its slots."""
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
    block = new_block(target, head, K, x.mean(0))
    if init_from:
        state = torch.load(cache_dir() / f"ckpt_{init_from}.pt", weights_only=True)["head"]
        slots = state.pop("slots")
        block.load_state_dict(state, strict=False)
        with torch.no_grad():
            n = min(len(slots), K - 1)
            block.slots[:n] = slots[:n]
            block.slots[n:] = slots.mean(0) + 0.02 * torch.randn_like(block.slots[n:])
        return block, f"block run {init_from}"
    return block, str(folder.resolve())


def block_objective(use: tuple, K: int):
    """(head, batch) -> (loss, anchor terms, anchor rows) for train.train."""
    def objective(head, b):
        terms = block_terms(head, block_rollout(head, b["feats"], b["ids"], K), b)
        return block_loss(terms, use), terms[0], terms[0]["valid"]
    return objective


def _data(a):
    data, held = train_data(a.sources, a.shards, "-1")      # the block reads the final state only
    manifests = {s: shard_dirs(s)[0].name for s, _ in source_caps(a.sources)}
    return data, held, manifests


def train_arm(a, target, data, held, manifests, arm: str, name: str):
    """Train one arm from the start weights; returns (head, held-out metrics) and records a row."""
    from .train import train
    head, init = start_block(target, a.init_head, a.K, data, getattr(a, "init_from", None))
    train(head, data, loss=f"block-{arm}", steps=a.steps, ckpt=cache_dir() / f"ckpt_{name}.pt", batch=a.batch,
          lr=a.lr, K=a.K, objective=block_objective(ARMS[arm], a.K),
          settings={"data": manifests, "init": init, "arm": arm, "block_size": a.K})
    res = evaluate_block(head, held, a.K)
    record({"name": name, "arm": arm, "K": a.K, "steps": a.steps, "batch": a.batch, "lr": a.lr,
             "sources": a.sources, "train_seqs": len(data), "held_seqs": len(held), **res})
    return head, res


def cmd_block_train(a) -> None:
    from ..drafters.feature_head import save_head
    pair = target_pair()
    data, held, manifests = _data(a)
    n_pos = int(sum(len(d["ids"]) for d in data))
    print(f"{len(data)} train sequences, {n_pos} positions; {len(held)} held out")
    head, res = train_arm(a, pair.target, data, held, manifests, a.arm, a.name or f"block_{a.arm}_K{a.K}_{a.steps}")
    if a.out:
        save_head(head, Path(a.out), {"version": BLOCK_VERSION, "kind": "block", "arm": a.arm,
                                      "interventions": list(ARMS[a.arm]), "block_size": a.K, "steps": a.steps,
                                      "batch": a.batch, "lr": a.lr, "sources": a.sources,
                                      "init": a.init_from and f"block run {a.init_from}" or "shipped feature head",
                                      "train_sequences": len(data), "train_positions": n_pos, "heldout_offline": res})


def cmd_block_ablate(a) -> None:
    pair = target_pair()
    data, held, manifests = _data(a)
    rows = []
    for arm in a.arms.split(","):
        rows.append((arm, train_arm(a, pair.target, data, held, manifests, arm, f"block_ablate_{arm}_K{a.K}_{a.steps}")[1]))
    print(ablation_table(rows, a.K))


def cmd_block_eval(a) -> None:
    """Each named block run (its checkpoint in the lab cache) on the frozen yardstick, teacher-
    forced (the target's greedy answers to data/heldout_prompts.json): the ablation table, each
    arm's gain over "ce" with a 95 % interval from resampling the prompts (paired: the same
    resample for both arms)."""
    from .yardstick import heldout_sequences
    from .data import select_taps
    pair = target_pair()
    seqs = select_taps(heldout_sequences(pair, a.max_new), [-1])
    rows, blocks = [], {}
    for name in a.runs.split(","):
        st = torch.load(cache_dir() / f"ckpt_{name}.pt", weights_only=True)
        arm, K = st["settings"]["arm"], st["settings"]["block_size"]
        head, _ = start_block(pair.target, None, K, seqs)
        head.load_state_dict(st["head"])
        res = evaluate_block(head, seqs, K, keep_blocks=True)
        blocks[arm] = res.pop("blocks")
        rows.append((arm, res))
        record({"name": name, "arm": arm, "K": K, "eval": "yardstick", "prompts": len(seqs), **res})
    print(ablation_table(rows, K))
    if "ce" in blocks:
        print("\n" + gain_intervals(blocks, len(seqs)))


def gain_intervals(blocks: dict, n_seqs: int, n_boot: int = 1000) -> str:
    """Per arm: accepted drafts per round (greedy) ÷ plain CE's − 1, with the 2.5–97.5 % range over
    n_boot resamples of the prompts (the same resample for every arm)."""
    gen = torch.Generator().manual_seed(SEED)
    per_seq = {}
    for arm, (mt, _, owner) in blocks.items():
        accepted = torch.cumprod(mt, -1).sum(-1)
        per_seq[arm] = (torch.zeros(n_seqs).index_add_(0, owner, accepted),
                        torch.zeros(n_seqs).index_add_(0, owner, torch.ones_like(accepted)))
    draws = torch.randint(0, n_seqs, (n_boot, n_seqs), generator=gen)
    mean = lambda arm, idx: per_seq[arm][0][idx].sum(-1) / per_seq[arm][1][idx].sum(-1)
    out = ["| arm | gain over plain CE | 95 % range (prompts resampled) |", "|---|---|---|"]
    for arm in blocks:
        if arm == "ce":
            continue
        gain = mean(arm, torch.arange(n_seqs)) / mean("ce", torch.arange(n_seqs)) - 1
        boot = (mean(arm, draws) / mean("ce", draws) - 1).quantile(torch.tensor([0.025, 0.975]))
        out.append(f"| {arm} | {100 * gain:+.1f} % | {100 * boot[0]:+.1f} … {100 * boot[1]:+.1f} % |")
    return "\n".join(out)


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
    """The commands' arguments (cli.main registers them)."""
    e = sub.add_parser("block-eval", help="block runs on the frozen yardstick (teacher-forced); the ablation table")
    e.add_argument("--runs", required=True, help="run names, ',' separated (checkpoints in the lab cache)")
    e.add_argument("--max-new", type=int, default=64)
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
        t.add_argument("--init-from", default=None, type=run_name, help="start from block run NAME's weights")
