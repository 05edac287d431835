"""The draft-v4 commands of `python -m specdec_core.lab` (issue 57):

    v4-run      the long run (v4.py): existing text teacher-forced by the target, trained on once as it
                streams; resumes from --out (default specdec_core/lab/runs/v4); --device cuda for a GPU
    v4-report   the run's mix (by source and kind), throughput, vocabulary coverage and learning curve
    v4-mix      a look at the next documents of the mixture (no model)
    memory      the phrase memory (drafters/memory.py) from the target's written answers, beside a head;
                --score: first-guess acceptance online on the selection prompts without and with it
"""
from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from .stream import StreamConfig


def add_parsers(sub) -> None:
    r = sub.add_parser("v4-run", help="draft v4: existing text teacher-forced, streamed training (resumes)")
    r.add_argument("--out", default="specdec_core/lab/runs/v4", help="checkpoint folder (committed; resumed from)")
    r.add_argument("--device", default="cpu", help="cpu or cuda (forcing and training)")
    r.add_argument("--threads", type=int, default=2, help="torch threads")
    r.add_argument("--init-head", default="specdec_core/lab/runs/v3", help="start weights ('' for none)")
    r.add_argument("--cycle-docs", type=int, default=48, help="documents forced and trained on per cycle")
    r.add_argument("--max-tokens", type=int, default=4096, help="padded tokens per forward batch (a GPU takes 65536)")
    r.add_argument("--select-every", type=int, default=500_000)
    r.add_argument("--ckpt-minutes", type=float, default=10.0)
    r.add_argument("--minutes", type=float, default=None, help="stop (checkpointed) after this much wall time")
    r.add_argument("--stop-at", type=int, default=None, help="stop (checkpointed) at this many positions")
    r.add_argument("--docs", default=None, help="documents from a v4-docs file instead of the sources (a lent GPU)")
    r.add_argument("--no-score", action="store_true", help="save milestone heads unscored (v4-score scores them later)")
    d = StreamConfig(positions=10_000_000)
    for name, typ in (("loss", str), ("lr", float), ("weight_decay", float), ("noise", float), ("warmup", int),
                      ("train_batch", int), ("positions", int)):
        r.add_argument("--" + name.replace("_", "-"), type=typ, default=getattr(d, name))
    p = sub.add_parser("v4-report", help="mix, throughput, vocabulary coverage and learning curve of a v4 run")
    p.add_argument("--out", default="specdec_core/lab/runs/v4")
    c = sub.add_parser("v4-score", help="score the milestone heads and the current head a run saved unscored")
    c.add_argument("--out", default="specdec_core/lab/runs/v4")
    c.add_argument("--threads", type=int, default=2)
    w = sub.add_parser("v4-docs", help="write the next documents of a run's mixture to a file (for a machine without the sources)")
    w.add_argument("--out", default="specdec_core/lab/runs/v4")
    w.add_argument("-n", type=int, default=20000)
    w.add_argument("--file", required=True, help="the .jsonl.gz to write")
    mm = sub.add_parser("memory", help="build the phrase memory from the target's written answers (train splits)")
    mm.add_argument("--out", default="specdec_core/data/draft", help="the head folder that gets memory.npz")
    mm.add_argument("--order", type=int, default=3)
    mm.add_argument("--top", type=int, default=8)
    mm.add_argument("--min-count", type=int, default=2)
    mm.add_argument("--beta", type=float, default=0.5)
    mm.add_argument("--eps", type=float, default=1e-3)
    mm.add_argument("--written", default="", help="also count the answers a v5 run wrote (its folder's written_*.npz shards)")
    mm.add_argument("--score", action="store_true", help="score the head online without and with the memory")
    mm.add_argument("--threads", type=int, default=2)
    m = sub.add_parser("v4-mix", help="print the next documents the mixture draws (no model)")
    m.add_argument("-n", type=int, default=12)


def cmd_run(a) -> None:
    from .v4 import RunConfig, run
    torch.set_num_threads(a.threads)
    stream = StreamConfig(loss=a.loss, lr=a.lr, weight_decay=a.weight_decay, noise=a.noise, warmup=a.warmup,
                          train_batch=a.train_batch, positions=a.positions)
    cfg = RunConfig(out=a.out, device=a.device, init_head=a.init_head or None, cycle_docs=a.cycle_docs,
                    max_tokens=a.max_tokens, select_every=a.select_every, ckpt_minutes=a.ckpt_minutes, stream=stream,
                    minutes=a.minutes, stop_at=a.stop_at, docs=a.docs, score=not a.no_score)
    run(cfg, log=lambda s: print(time.strftime("%H:%M:%S"), s, flush=True))


def report(state: dict) -> str:
    """Markdown: the mix, the throughput, the vocabulary choice and the learning curve."""
    lines = [f"Positions trained: {state['positions']:,} ({state['cycle']} cycles); forced {state['forced']:,} tokens "
             f"(prompts included) at {state['forced'] / max(1e-9, state['force_s']):.0f}/s, trained "
             f"{state['positions'] / max(1e-9, state['train_s']):.0f} positions/s; both in sequence "
             f"{state['positions'] / max(1e-9, state['force_s'] + state['train_s']):.0f} positions/s.", "",
             "| mix by source | positions | share |", "|---|---|---|"]
    total = max(1, sum(state["by_source"].values()))
    lines += [f"| {k} | {v:,} | {v / total:.1%} |" for k, v in sorted(state["by_source"].items(), key=lambda kv: -kv[1])]
    lines += ["", "| mix by kind | positions | share |", "|---|---|---|"]
    lines += [f"| {k} | {v:,} | {v / total:.1%} |" for k, v in sorted(state["by_kind"].items(), key=lambda kv: -kv[1])]
    voc = state["vocabulary"]
    lines += ["", f"Vocabulary (chosen: {voc['chosen']}): share of held-out natural answers ({voc['answers_tokens']} tokens), "
              f"of held-out mixed text ({voc['mixed_tokens']}) and of its code that each size covers, and its c:", "",
              "| size | natural answers | mixed | code | c |", "|---|---|---|---|---|"]
    lines += [f"| {n} | {v['all']:.3f} | {v['mixed']:.3f} | {'–' if v['code'] is None else format(v['code'], '.3f')} | {v['c']} |"
              for n, v in voc["by_size"].items()]
    lines += ["", "| positions | first guess (all) | prose | code | top-3 | rounds |", "|---|---|---|---|---|---|"]
    lines += [f"| {h['positions']:,} | {h['first']:.3f} | {h['prose']:.3f} | {h['code']:.3f} | {h['top3']:.3f} | {h['rounds']} |"
              for h in state["history"]]
    return "\n".join(lines)


def cmd_report(a) -> None:
    print(report(json.loads((Path(a.out) / "state.json").read_text())))


def cmd_score(a) -> None:
    from .v4 import RunConfig, score_saved
    torch.set_num_threads(a.threads)
    state = json.loads((Path(a.out) / "state.json").read_text())
    s = state["settings"]
    stream = StreamConfig(**{k: s[k] for k in ("loss", "K", "lr", "weight_decay", "noise", "warmup", "train_batch", "positions")})
    print(report(score_saved(RunConfig(out=a.out, layers=tuple(s["layers"]), stream=stream),
                             log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))))


def cmd_docs(a) -> None:
    from .texts import write_docs
    from .v4 import RunConfig, _supply
    state = json.loads((Path(a.out) / "state.json").read_text())
    mix = _supply(RunConfig(seed=state["settings"]["seed"]), state, print)
    write_docs(mix, a.n, Path(a.file))
    print(f"{a.n} documents from draw {mix.drawn - a.n} into {a.file} ({Path(a.file).stat().st_size / 1e6:.1f} MB)")


def cmd_mix(a) -> None:
    from .texts import Mixture
    mix = Mixture()
    print(mix.available())
    for d in mix.take(a.n):
        print(f"--- {d.source} / {d.kind}\nUSER: {d.ask}\nANSWER: {(d.answer or '')[:400]!r}")


def memory_answers(order: int = 3, written: str = "") -> list:
    """What the phrase memory counts: the train splits of the target's written answers (the shared
    data), each after its prompt's last `order` tokens, and — with `written`, a v5 run's folder —
    every answer that run wrote. A list of int arrays."""
    import numpy as np
    from .sources import target_outputs
    seqs = [np.concatenate([np.asarray(s["prompt"])[-order:], np.asarray(s["gen"])]) for s in target_outputs("shared,gen")]
    if written:
        from .written import written_answers
        seqs += written_answers(Path(written), order)
    return seqs


def cmd_memory(a) -> None:
    """The memory from the train splits of the target's written answers: each answer with the
    prompt's last `order` tokens before it (how an answer starts is the target's; the user's words
    are not)."""
    from ..drafters import memory
    t0 = time.monotonic()
    seqs = memory_answers(a.order, a.written)
    mem = memory.build(seqs, a.order, a.top, a.min_count, a.beta, a.eps)
    mem.save(Path(a.out))
    print(f"{len(seqs)} answers ({sum(map(len, seqs)):,} tokens) -> {mem.n_contexts:,} contexts, {len(mem.next_ids):,} "
          f"entries in {Path(a.out) / memory.FILE} ({(Path(a.out) / memory.FILE).stat().st_size / 1e6:.1f} MB), "
          f"{time.monotonic() - t0:.0f} s")
    if a.score:
        from ..drafters.feature_head import load_head
        from .select import first_guess
        from .v3 import load_target
        from .v4 import CODE_KINDS, selection_prompts
        torch.set_num_threads(a.threads)
        pair = load_target("cpu")
        head = load_head(pair.target, Path(a.out))
        select = selection_prompts()
        for name, use in (("without", False), ("with", True)):
            res = first_guess(pair, head, select, use_memory=use)
            print(f"{name} the memory: first guess {res['first']:.3f}, top-3 {res['top3']:.3f}, {res['rounds']} rounds; "
                  f"code kinds {[res['by_kind'].get(k) for k in CODE_KINDS]}", flush=True)
