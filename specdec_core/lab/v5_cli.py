"""The draft-v5 commands of `python -m specdec_core.lab` (issue 57; v5.py):

    v5-asks    user turns for the target to answer (asks.py), chat-templated, into one .npz (CPU)
    v5-run     the write-and-train loop (a lent GPU: --device cuda; a CPU runs it too, slowly)
    v5-score   first-guess acceptance online on the selection prompts of every head a run saved,
               without and with the shipped phrase memory
    v5-report  the run's learning curve (teacher-forced selection, per head, prose and code apart),
               what it wrote, and its pace on each machine
    v5-export  one head as its run's checkpoint holds it, as a folder the app loads, with a phrase
               memory (the run untouched: it may be running)
    v5-misses  why heads' first guesses miss on the scoring sets: by how sure the target is of its
               own token, and how often that token is outside the head's vocabulary
    v5-phrases the weights of the text's own phrases (memory.TextPhrases) chosen on the selection set,
               reported on the yardstick, teacher-forced with the phrase memory
    v5-probe   why the curve flattens: heads of other shapes or lrs side by side on a second pass over
               what the run wrote (v5_probe.py; a lent GPU)
"""
from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

from .v5_tables import misses_table, report


def add_parsers(sub) -> None:
    a = sub.add_parser("v5-asks", help="draft v5: user turns for the target to answer, into an .npz")
    a.add_argument("-n", type=int, default=60_000)
    a.add_argument("--seed", type=int, default=0)
    a.add_argument("--file", default="specdec_core/lab/runs/v5/asks.npz")
    r = sub.add_parser("v5-run", help="draft v5: the target writes answers in batches; the heads train on them")
    r.add_argument("--asks", default="specdec_core/lab/runs/v5/asks.npz")
    r.add_argument("--out", default="specdec_core/lab/runs/v5", help="checkpoint folder (committed; resumed from)")
    r.add_argument("--device", default="cpu", help="cpu or cuda")
    r.add_argument("--seconds", type=float, default=3600.0, help="stop (checkpointed) after this long, setup included")
    r.add_argument("--budget", type=int, default=10_000_000, help="positions the lr's cosine spans (0: what this pace reaches by --seconds)")
    r.add_argument("--ckpt-minutes", type=float, default=10.0)
    r.add_argument("--max-rounds", type=int, default=None, help="stop (checkpointed) after this many rounds here")
    r.add_argument("--write-batch", type=int, default=64, help="answers written per round (64 on a CPU: 116 answer tokens/s against 79 at 24; a GPU takes 2048)")
    r.add_argument("--max-new", type=int, default=320)
    r.add_argument("--max-tokens", type=int, default=None,
                   help="padded tokens per forcing pass (default: 65536 on a GPU, 2048 on a CPU: 5x the positions/s of 65536 there)")
    r.add_argument("--lr", type=float, default=None, help="peak lr (default: the resumed run's, else 3e-4)")
    r.add_argument("--replay", type=float, default=0.0,
                   help="written positions trained on again each round, per new position (oldest first; a forward pass each)")
    r.add_argument("--train-batch", type=int, default=8, help="sequences per optimiser step (a GPU takes 32)")
    r.add_argument("--head", action="append", default=None, metavar="NAME=FOLDER[:VOCAB.npy[:TAPS[:WIDTH]]]",
                   help="a head to train (repeat; default: v5.HEADS): its start weights, vocabulary, taps, MLP width "
                        "(a head new to a resumed run joins it from the first head's weights)")
    r.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 1),
                   help="torch threads (default: the cores, at most 8; more threads than cores write ~20 %% slower)")
    r.add_argument("--writer", default="auto", choices=("auto", "fp32", "bf16"),
                   help="the CPU's writer: the fp32 target, or its matrix products in bf16 (1.4x on a CPU with AMX; "
                        "labels captured from it); auto: bf16 where the CPU has bf16 math")
    p = sub.add_parser("v5-report", help="draft v5: the learning curve, the written mix and the pace (no model)")
    p.add_argument("--out", default="specdec_core/lab/runs/v5")
    p.add_argument("--every", type=int, default=0, help="curve rows at least this many positions apart (0: all)")
    e = sub.add_parser("v5-export", help="draft v5: one head of a run's checkpoint as an app folder, with a phrase memory "
                                         "(reads the run only: it may go on running)")
    e.add_argument("head", help="the head's name in the run (a, d, …)")
    e.add_argument("--out", required=True, help="the folder to write (weights, config, memory.npz); load it as distilled:<folder>")
    e.add_argument("--run", default="specdec_core/lab/runs/v5")
    e.add_argument("--memory", default="written", choices=("written", "shipped", "none"),
                   help="written: counted anew over the shared answers and every answer the run wrote; "
                        "shipped: the shipped head's; none: the head alone")
    e.add_argument("--phrases", default="0.25,1,2", help="the text's own phrases' weights after a match of 1, 2, 3 tokens "
                                                         "(v5-phrases chooses them), or 'none'")
    m = sub.add_parser("v5-misses", help="draft v5: where heads' forced first guesses miss, by the target's own certainty "
                                         "and the head's vocabulary (reads the run only)")
    m.add_argument("heads", nargs="+", help="head folders: app folders (specdec_core/data/draft) or a run's checkpoints (…/v5/a)")
    m.add_argument("--run", default="specdec_core/lab/runs/v5", help="whose scoring sets (their written answers) to read")
    m.add_argument("--sets", default="select,yardstick")
    m.add_argument("--threads", type=int, default=2)
    ph = sub.add_parser("v5-phrases", help="draft v5: choose the text's own phrases' weights on the selection set "
                                           "(teacher-forced, with the phrase memory); the yardstick reported")
    ph.add_argument("head", help="a head folder (app folder or a run's checkpoint)")
    ph.add_argument("--run", default="specdec_core/lab/runs/v5")
    ph.add_argument("--memory", default="", help="the phrase memory's folder (default: the head's own, else the shipped one)")
    ph.add_argument("--threads", type=int, default=2)
    pr = sub.add_parser("v5-probe", help="draft v5: heads of other shapes or lrs trained side by side on what the run wrote, "
                                         "paired against the first")
    pr.add_argument("--head", action="append", required=True, metavar="NAME=SPEC[@LR]",
                    help="a head (repeat; the first is the baseline): a trainable_head spec FOLDER[:VOCAB[:TAPS[:WIDTH[:DEPTH]]]], "
                         "its peak lr (default 1e-4)")
    pr.add_argument("--run", default="specdec_core/lab/runs/v5")
    pr.add_argument("--out", required=True, help="its checkpoint folder (state.json, a folder a head): resumed from")
    pr.add_argument("--device", default="cpu")
    pr.add_argument("--positions", type=int, default=4_000_000, help="the cosine's span and the most positions trained")
    pr.add_argument("--seconds", type=float, default=300.0)
    pr.add_argument("--every", type=int, default=500_000)
    pr.add_argument("--rows", type=int, default=2048, help="written rows forced a round")
    pr.add_argument("--train-batch", type=int, default=32)
    pr.add_argument("--micro", type=int, default=None,
                    help="sequences a forward/backward within a step (the same step; a CPU takes 8: a step of 32 at once peaks near 15 GB)")
    pr.add_argument("--max-tokens", type=int, default=None, help="padded tokens per forcing pass (default 65536 on a GPU, 2048 on a CPU)")
    pr.add_argument("--seed", type=int, default=0, help="the rows' shuffle and the feature noise")
    pr.add_argument("--ckpt-minutes", type=float, default=10.0)
    pr.add_argument("--max-rounds", type=int, default=None, help="stop (checkpointed) after this many rounds here")
    pr.add_argument("--threads", type=int, default=min(8, os.cpu_count() or 1))
    s = sub.add_parser("v5-score", help="draft v5: score every head a run saved (CPU), the learning curve")
    s.add_argument("--out", default="specdec_core/lab/runs/v5")
    s.add_argument("--threads", type=int, default=2)
    s.add_argument("--only", default="", help="comma-separated head folder names (default: all)")


def cmd_asks(a) -> None:
    from .asks import make_asks
    from .v3 import load_target
    from .v5 import save_asks
    t0 = time.monotonic()
    asks = make_asks(a.n, a.seed)
    pair = load_target("cpu")
    ids = [pair.encode_prompt(x["text"]) for x in asks]
    save_asks(asks, ids, Path(a.file))
    kinds = {}
    for x in asks:
        kinds[x["kind"]] = kinds.get(x["kind"], 0) + 1
    print(f"{len(asks)} asks ({kinds}), {sum(map(len, ids)):,} prompt tokens -> {a.file} "
          f"({Path(a.file).stat().st_size / 1e6:.1f} MB), {time.monotonic() - t0:.0f} s")


def _run_lr(out: str) -> float:
    """The peak lr a resumed run last ran with (3e-4 for a new run)."""
    state = Path(out) / "state.json"
    return json.loads(state.read_text())["settings"].get("lr", 3e-4) if state.is_file() else 3e-4


def cmd_run(a) -> None:
    from .stream import StreamConfig
    from .v5 import V5Config, run
    torch.set_num_threads(a.threads)
    from .v5 import HEADS
    heads = dict(kv.split("=", 1) for kv in a.head) if a.head else dict(HEADS)
    cfg = V5Config(asks=a.asks, out=a.out, device=a.device, heads=heads, write_batch=a.write_batch, max_new=a.max_new,
                   max_tokens=a.max_tokens or (65536 if a.device == "cuda" else 2048), seconds=a.seconds, budget=a.budget, ckpt_minutes=a.ckpt_minutes,
                   max_rounds=a.max_rounds, writer=a.writer,
                   replay=a.replay, stream=StreamConfig(lr=a.lr or _run_lr(a.out), train_batch=a.train_batch, warmup=50))
    run(cfg, log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))


def cmd_export(a) -> None:
    """The head `a.head` as the run's last checkpoint holds it (never the live process's memory: a
    checkpoint every ~10 minutes), saved as an app folder with its card, plus a phrase memory."""
    import shutil
    from ..drafters import memory
    from ..drafters.feature_head import shipped_head
    from .stream import StreamConfig
    from .train import trainable_head
    from .v3 import load_target
    from .v4_cli import memory_answers
    from .v5 import _save
    run_dir, out = Path(a.run), Path(a.out)
    if not (run_dir / a.head / "state.json").is_file():
        raise SystemExit(f"{run_dir} has no checkpoint of a head named {a.head!r}")
    state = json.loads((run_dir / "state.json").read_text())
    if out.resolve() == (run_dir / a.head).resolve():
        raise SystemExit("--out is the run's own checkpoint folder: pick another")
    try:
        weights = None if a.phrases == "none" else [float(w) for w in a.phrases.split(",")]
    except ValueError:
        raise SystemExit(f"--phrases {a.phrases!r}: weights like 0.25,1,2 or 'none'") from None
    pair = load_target("cpu")
    head = trainable_head(pair, str(run_dir / a.head), "cpu")
    head.text_phrases = {"weights": weights, "eps": 1e-3} if weights else None
    _save(head, out, a.head, state, StreamConfig(loss=state["settings"]["loss"]), "checkpoint")
    (out / memory.FILE).unlink(missing_ok=True)
    if a.memory == "shipped":
        shutil.copy(Path(shipped_head()) / memory.FILE, out / memory.FILE)
    elif a.memory == "written":     # a probe's heads (v5_probe) count the answers of the run it reads
        reads = state.get("reads")
        seqs = memory_answers(written=reads if reads and Path(reads).is_dir() else str(run_dir))
        memory.build(seqs).save(out)         # the memory command's defaults: order 3, top 8, min count 2, β 0.5
    print(f"{a.head} at {state['positions']:,} positions -> {out} (memory: {a.memory}; phrases: {a.phrases}"
          + (f", {sum(map(len, seqs)):,} tokens of answers" if a.memory == "written" else "") + ")")


def cmd_misses(a) -> None:
    """The miss anatomy (curve.miss_anatomy) of each head on each scoring set of a run."""
    from .curve import miss_anatomy, selection_set
    from .train import trainable_head
    from .v3 import load_target
    torch.set_num_threads(a.threads)
    for h in a.heads:
        if not Path(h).is_dir():
            raise SystemExit(f"{h}: no such head folder")
    pair = load_target("cpu")
    W = pair.target.get_output_embeddings().weight.detach()
    sets = {name: selection_set(pair, Path(a.run), "cpu", 4096, name) for name in a.sets.split(",")}
    rows = {}
    for h in a.heads:
        head = trainable_head(pair, h, "cpu")
        for name, seqs in sets.items():
            rows[(name, h)] = miss_anatomy(head, seqs, W)
    print(misses_table(rows))


PHRASE_GRID = [(w1, w2, w3) for w1 in (0.0, 0.25, 0.5) for w2 in (0.5, 1.0, 2.0) for w3 in (1.0, 2.0, 4.0)]


def cmd_phrases(a) -> None:
    """Each weight triple of PHRASE_GRID (after a match of 1, 2, 3 tokens) scored on the selection
    set; the best few, with the head alone and with the memory alone, also on the yardstick."""
    from ..drafters import memory
    from ..drafters.feature_head import shipped_head
    from .curve import drafting_first_guess, head_logits, selection_set
    from .train import trainable_head
    from .v3 import load_target
    torch.set_num_threads(a.threads)
    pair = load_target("cpu")
    head = trainable_head(pair, a.head, "cpu")
    mem = memory.load(Path(a.memory)) if a.memory else (memory.load(Path(a.head)) or memory.load(shipped_head()))
    sets = {n: selection_set(pair, Path(a.run), "cpu", 4096, n) for n in ("select", "yardstick")}
    logits = {n: head_logits(head, seqs) for n, seqs in sets.items()}
    score = lambda n, m, w: drafting_first_guess(head, sets[n], logits[n], m, {"weights": list(w)} if w else None)
    on_select = {w: score("select", mem, w) for w in PHRASE_GRID}      # each weight triple scored once
    grid = sorted(PHRASE_GRID, key=lambda w: -on_select[w])
    print("| rule | selection | yardstick |\n|---|---|---|")
    for name, m, w in [("head alone", None, None), ("head + memory", mem, None),
                       *[(f"head + memory + phrases {w}", mem, w) for w in grid[:5]]]:
        print(f"| {name} | {on_select[w] if w else score('select', m, w):.4f} | {score('yardstick', m, w):.4f} |", flush=True)


def cmd_score(a) -> None:
    from ..drafters import memory
    from ..drafters.feature_head import load_head, shipped_head
    from .v3 import load_target
    from .v4 import score, selection_prompts
    torch.set_num_threads(a.threads)
    out = Path(a.out)
    pair = load_target("cpu")
    select = selection_prompts()
    mem = memory.load(shipped_head())
    path = out / "scores.json"
    scores = json.loads(path.read_text()) if path.is_file() else {}
    only = set(a.only.split(",")) if a.only else None
    folders = [p for p in (out / "milestones").iterdir() if (p / "weights.safetensors").is_file()]
    for folder in sorted(folders, key=lambda p: json.loads((p / "config.json").read_text()).get("positions", 0)):
        if (only and folder.name not in only) or folder.name in scores:
            continue
        head = load_head(pair.target, folder)
        card = json.loads((folder / "config.json").read_text())
        row = {"positions": card.get("positions")}
        for name, m in (("alone", None), ("memory", mem)):
            head.memory, head.memory_cols = None, None
            if m is not None:
                head.attach_memory(m)
            res = score(pair, head, select, 64)
            row[name] = {k: res[k] for k in ("first", "prose", "code", "top3", "rounds")}
        scores[folder.name] = row
        path.write_text(json.dumps(scores, indent=1))
        print(f"{folder.name} ({row['positions']:,} positions): first guess {row['alone']['first']:.3f} alone "
              f"(prose {row['alone']['prose']:.3f}, code {row['alone']['code']:.3f}), {row['memory']['first']:.3f} "
              f"with the memory", flush=True)


def cmd_probe(a) -> None:
    from .v5_probe import ProbeConfig, parse_head, probe
    torch.set_num_threads(a.threads)
    try:
        heads = {n: (spec, lr) for n, spec, lr in map(parse_head, a.head)}
    except ValueError as e:
        raise SystemExit(str(e)) from None
    for spec, _ in heads.values():
        if not Path(spec.split(":")[0]).is_dir():
            raise SystemExit(f"{spec}: no such head folder")
    cfg = ProbeConfig(run=a.run, out=a.out, heads=heads, device=a.device, positions=a.positions, seconds=a.seconds,
                      every=a.every, rows_per_round=a.rows, train_batch=a.train_batch,
                      max_tokens=a.max_tokens or (65536 if a.device == "cuda" else 2048), seed=a.seed,
                      ckpt_minutes=a.ckpt_minutes, max_rounds=a.max_rounds, micro=a.micro)
    probe(cfg, log=lambda m: print(time.strftime("%H:%M:%S"), m, flush=True))


def cmd_report(a) -> None:
    print(report(json.loads((Path(a.out) / "state.json").read_text()), a.every))
