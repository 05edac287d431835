"""The draft-v4 run (issue 57): the target teacher-forced over text that already exists (texts.py),
trained on once as it streams by, selected online on natural held-out prompts, checkpointed into a
compact committed folder that any machine resumes.

    python -m specdec_core.lab v4-run --out specdec_core/lab/runs/v4 [--device cuda --max-tokens 65536]

A fresh run (1) forces the first `vocab_docs` documents of the mixture and counts the target's own
next-token choices (argmax) there and in its written answers (the shared data and the corpus),
(2) measures how much of natural held-out answers and of code each vocabulary size covers and picks
the size (`choose_vocab`), (3) starts the head from `init_head` (v3's committed layer; biases carried
by token id) and trains on those forced documents first. Then each *cycle* draws `cycle_docs`
documents, forces them in one batched pass (labels: the target's full distribution over the draft
vocabulary, `teacher_logp`), trains on them once and drops them. Every `select_every` positions the
head is scored online (greedy; k = 1 first guess, prose and code apart) on natural prompts the target
wrote for v3 that no training source holds; the best is kept in <out>/best; heads at the learning
curve's milestones go to <cache>/v4-milestones. A checkpoint (`checkpoint.py`) is written every
`ckpt_minutes`; the mixture's cursor is in state.json, so a resumed run draws the documents the
killed one would have. Pausing with kill -STOP / -CONT is safe (no deadline is read from the clock).
"""
from __future__ import annotations

import dataclasses
import gzip
import json
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..atomic import write_atomic
from . import checkpoint
from .force import force
from .stream import StreamConfig, new_optimizer, train_on
from .texts import Mixture, encode, list_kind, read_docs
from .v3 import first_guess_of, load_target

CODE_KINDS = ("code", "debug")
SIZES = (8192, 16384, 32768)
# Draft cost c of one head step by vocabulary size (docs/lab/draft-v3.md, "Draft cost c by vocabulary size").
C_BY_SIZE = {8192: 0.074, 16384: 0.086, 32768: 0.129}
MILESTONES = (1_000_000, 2_000_000, 5_000_000, 10_000_000)


@dataclass
class RunConfig:
    out: str = "specdec_core/lab/runs/v4"
    device: str = "cpu"
    layers: tuple = (10, 20, -1)
    init_head: str | None = "specdec_core/lab/runs/v3"   # a checkpoint folder (head.safetensors) or a head folder
    init_layer: int = 29           # the target layer the head's layer starts from (before init_head's weights)
    vocab_docs: int = 384          # documents forced for the vocabulary count (then trained on)
    cycle_docs: int = 48           # documents forced and trained on per cycle
    max_answer: int = 320          # answer tokens kept per document
    max_tokens: int = 4096         # padded tokens per forward batch (raise on a GPU)
    select_every: int = 500_000
    select_new: int = 64           # new tokens per selection prompt
    ckpt_minutes: float = 10.0
    seed: int = 0
    stop_at: int | None = None     # stop (checkpointed) at this many positions, the budget unchanged
    minutes: float | None = None   # stop (checkpointed) after this much wall time
    docs: str | None = None        # documents from a `v4-docs` file instead of the sources (a lent GPU)
    score: bool = True             # False: milestone heads are saved unscored (v4-score scores them later)
    stream: StreamConfig = field(default_factory=lambda: StreamConfig(positions=10_000_000))


def selection_prompts(v3_folder: Path = Path(__file__).parent / "runs" / "v3") -> list[dict]:
    """Natural prompts the target wrote for v3 and nothing trains on: its selection split and its
    vocabulary sample ({"name", "task", "text"})."""
    prompts = json.loads(gzip.decompress((v3_folder / "prompts.json.gz").read_bytes()))
    return [{"name": f"{p['split']}{i}", "task": p["kind"], "text": p["text"]}
            for i, p in enumerate(prompts) if p["split"] in ("select", "vocab")]


def score(pair, head, prompts: list[dict], max_new: int) -> dict:
    """First-guess acceptance online (greedy, k = 1): all, prose (every kind but code), code."""
    res = first_guess_of(pair, head, prompts)
    rounds_of = Counter()
    for p in prompts:
        rounds_of[p["task"]] += 1
    by = res["by_kind"]
    # by_kind holds per-kind rates; weight them by prompt counts for the two groups (rounds are ~even).
    group = lambda keep: sum(by[k] * rounds_of[k] for k in by if keep(k)) / max(1, sum(rounds_of[k] for k in by if keep(k)))
    return {**res, "code": round(group(lambda k: k in CODE_KINDS), 4), "prose": round(group(lambda k: k not in CODE_KINDS), 4)}


def choose_vocab(coverage: dict) -> int:
    """The size whose covered share, net of its cost, is largest: a first guess outside the draft
    vocabulary always misses, so covered share ≈ the ceiling on acceptance; each point of c costs
    about as much as a point of acceptance at the defaults (tokens per round ≈ 1 + α … against 1 + c)."""
    net = {n: coverage[n]["all"] - C_BY_SIZE[n] for n in SIZES}
    return max(SIZES, key=lambda n: (round(net[n], 3), -n))


def _counts(seqs: list[dict], vocab_size: int) -> np.ndarray:
    c = np.zeros(vocab_size, dtype=np.int64)
    for s in seqs:
        a = s["argmax"][s["plen"] - 1: len(s["ids"]) - 1].numpy()
        c += np.bincount(a, minlength=vocab_size)
    return c


def build_vocab(pair, seqs: list[dict], log=print) -> tuple[int, torch.Tensor, dict]:
    """Counts of the target's own choices (argmax on the forced documents + its written answers),
    coverage of held-out natural answers and of held-out code per size, the chosen size and vocab."""
    from .sources import target_outputs
    V = pair.target.get_output_embeddings().weight.shape[0]
    half = len(seqs) // 2                      # count on one half, measure coverage on the other
    counts = _counts(seqs[:half], V)
    for s in target_outputs("shared,gen"):
        counts += np.bincount(np.asarray(s["gen"]), minlength=V)
    held = seqs[half:]
    held_all = np.concatenate([s["argmax"][s["plen"] - 1: len(s["ids"]) - 1].numpy() for s in held])
    held_code = np.concatenate([s["argmax"][s["plen"] - 1: len(s["ids"]) - 1].numpy() for s in held if s.get("kind") == "code"] or [np.zeros(0, np.int64)])
    sel = selection_prompts()
    from .capture import generate
    answers = np.concatenate([r["ids"][r["plen"]:].numpy() for b in range(0, len(sel), 16)
                              for r in generate(pair.target, [pair.encode_prompt(p["text"]) for p in sel[b:b + 16]], 64, capture=False)])
    order = np.argsort(-counts, kind="stable")
    cov = {}
    for n in SIZES:
        keep = np.zeros(V, bool)
        keep[order[:n]], keep[2] = True, True
        cov[n] = {"all": round(float(keep[answers].mean()), 4), "mixed": round(float(keep[held_all].mean()), 4),
                  "code": round(float(keep[held_code].mean()), 4) if len(held_code) else None, "c": C_BY_SIZE[n]}
    n = choose_vocab(cov)
    keep = np.sort(np.unique(np.append(order[:n - 1], 2)))
    if len(keep) < n:
        keep = np.sort(np.unique(np.append(keep, [t for t in order[n - 1:] if t not in set(keep)][: n - len(keep)])))
    log(f"vocabulary: coverage {cov} (selection answers {len(answers)} tokens, mixed {len(held_all)}, code {len(held_code)}); chose {n}")
    return n, torch.from_numpy(keep.astype(np.int64)), {"by_size": {str(k): v for k, v in cov.items()}, "chosen": n,
                                                        "answers_tokens": int(len(answers)), "mixed_tokens": int(len(held_all))}


def _new_head(pair, cfg: RunConfig, vocab: torch.Tensor):
    """v3's layer (or another head's), its output bias carried over by token id."""
    from safetensors.torch import load as st_load
    from .train import load_start, new_head
    torch.manual_seed(cfg.seed)
    head = new_head(pair.target, vocab.to(pair.target.get_input_embeddings().weight.device), cfg.init_layer, cfg.layers)
    if cfg.init_head:
        folder = Path(cfg.init_head)
        path = folder / ("head.safetensors" if (folder / "head.safetensors").is_file() else "weights.safetensors")
        load_start(head, st_load(path.read_bytes()))
    return head.to(cfg.device)


def _head_from_folder(pair, cfg: RunConfig, folder: Path):
    from safetensors.torch import load as st_load
    vocab = st_load((folder / "head.safetensors").read_bytes())["vocab_ids"]
    return _new_head(pair, dataclasses.replace(cfg, init_head=None), vocab)


def _save_head(head, folder: Path, state: dict, note: dict) -> None:
    from ..drafters.feature_head import save_head
    save_head(head, folder, {"version": 4, "feature_layers": head.cfg["feature_layers"], "loss": state["settings"]["loss"],
                             "positions": state["positions"], **note})


def forced_docs(pair, docs, cfg: RunConfig) -> list[dict]:
    """Documents -> forced sequences (capture format), each tagged with its source and kind."""
    rows = [encode(pair.tokenizer, pair.encode_prompt, d, cfg.max_answer) for d in docs]
    seqs = force(pair.target, [(ids, plen) for ids, plen, _ in rows], cfg.layers, cfg.max_tokens)
    for s, d in zip(seqs, docs):
        s["source"], s["kind"] = d.source, d.kind
        if d.kind == "target-written":     # the target's own answers, classified like the rest
            text = pair.tokenizer.decode(s["ids"][s["plen"]:].tolist())
            s["kind"] = "code" if "```" in text else list_kind(text)
    return seqs


def _tally(state: dict, seqs: list[dict]) -> None:
    """Positions by source and by kind (prose / code / list / non-English / target-written)."""
    for s in seqs:
        n = len(s["ids"]) - s["plen"]
        for key, name in (("by_source", s["source"]), ("by_kind", s["kind"])):
            state[key][name] = state[key].get(name, 0) + n


class FileDocs:
    """Documents of a `v4-docs` file, as the mixture would draw them from the state it starts at;
    state() is the run's mixture state with "skip": how many draws past it the file has given."""

    def __init__(self, path: str, state: dict):
        start, self.docs = read_docs(Path(path))
        self.base, self.start = state["mixture"], start["drawn"]
        at = self.base["drawn"] + self.base.get("skip", 0)          # the run's position in the draws
        self.used = at - self.start
        if start["seed"] != self.base["seed"] or not 0 <= self.used <= len(self.docs):
            raise SystemExit(f"{path} starts at draw {self.start}; the run is at draw {at}: "
                             "write a new file with v4-docs from this checkpoint")

    def take(self, n: int) -> list:
        out = self.docs[self.used:self.used + n]
        self.used += len(out)
        return out

    def state(self) -> dict:
        return {**self.base, "skip": self.start + self.used - self.base["drawn"]}


def _supply(cfg: RunConfig, state: dict, log):
    """Where the next documents come from: the documents file, or the sources (the mixture moved
    past what a documents file already gave: its "skip")."""
    if cfg.docs:
        return FileDocs(cfg.docs, state)
    st = state["mixture"]
    mix = Mixture(seed=cfg.seed, state=st)
    if st.get("skip"):
        log(f"skipping the {st['skip']} documents a documents file gave")
        mix.take(st["skip"])
    return mix


def _milestones(head, out: Path, state: dict) -> list[int]:
    """The learning curve's milestones just passed; the head is kept beside the run (not committed)."""
    due = [m for m in MILESTONES if m <= state["positions"] and m not in state["milestones_done"]]
    if due:
        _save_head(head, out / "milestones" / str(due[-1]), state, {})
        state["milestones_done"] += due
    return due


def _score_into(pair, head, select, cfg: RunConfig, state: dict, out: Path, log=print) -> dict:
    """Score the head on the selection prompts, add it to the history, keep it in <out>/best when best."""
    res = score(pair, head, select, cfg.select_new)
    state["history"].append({"positions": state["positions"], "cycle": state["cycle"], **res})
    state["history"].sort(key=lambda h: h["positions"])
    if state["best"] is None or res["first"] > state["best"]["first"]:
        state["best"] = {"positions": state["positions"], **res}
        _save_head(head, out / "best", state, {"selection": state["best"]})
    state["next_select"] = state["positions"] - state["positions"] % cfg.select_every + cfg.select_every
    log(f"selection at {state['positions']}: first guess {res['first']:.3f} (prose {res['prose']:.3f}, code {res['code']:.3f}), "
        f"top-3 {res['top3']:.3f}, {res['rounds']} rounds; best {state['best']['first']:.3f} at {state['best']['positions']}")
    return res


def score_saved(cfg: RunConfig, log=print) -> dict:
    """Score what a run saved unscored (a GPU run with score=False): each milestone head not yet in
    the history, then the run's current head; the history and best are updated in state.json."""
    from ..drafters.feature_head import load_head
    out = Path(cfg.out)
    pair = load_target(cfg.device)
    head = _head_from_folder(pair, cfg, out)
    opt = new_optimizer(head, cfg.stream)
    state, _ = checkpoint.load(out, head, opt)
    select, seen = selection_prompts(), {h["positions"] for h in state["history"]}
    for folder in sorted((out / "milestones").glob("[0-9]*"), key=lambda p: int(p.name)):
        card = json.loads((folder / "config.json").read_text())
        if card["positions"] not in seen:
            m = load_head(pair.target, folder)
            res = score(pair, m, select, cfg.select_new)
            state["history"].append({"positions": card["positions"], "cycle": None, **res})
            seen.add(card["positions"])
            log(f"milestone {folder.name} ({card['positions']} positions): first guess {res['first']:.3f}")
    if state["positions"] not in seen:
        _score_into(pair, head, select, cfg, state, out, log)
    state["history"].sort(key=lambda h: h["positions"])
    # Only the counters change: the weights and moments stay the files they are.
    write_atomic(out / "state.json", lambda f: f.write(json.dumps(state, indent=1).encode()))
    return state


def run(cfg: RunConfig, log=print) -> dict:
    """The run (fresh or resumed from cfg.out); returns its final state."""
    out = Path(cfg.out)
    pair = load_target(cfg.device)
    settings = {**dataclasses.asdict(cfg.stream), "layers": list(cfg.layers), "init_head": cfg.init_head, "seed": cfg.seed,
                "max_answer": cfg.max_answer, "cycle_docs": cfg.cycle_docs, "vocab_docs": cfg.vocab_docs}
    select = selection_prompts()
    if checkpoint.exists(out):
        head = _head_from_folder(pair, cfg, out)
        opt = new_optimizer(head, cfg.stream)
        state, _ = checkpoint.resume(out, head, opt, settings)
        mix = _supply(cfg, state, log)
        if cfg.docs is None and mix.available() != state["mixture"]["available"]:
            log(f"warning: the text sources here differ from the run's ({mix.available()} vs "
                f"{state['mixture']['available']}): docs/lab/draft-v4.md says what to install")
        pending = []
        log(f"resumed {out}: cycle {state['cycle']}, {state['positions']} positions trained")
    else:
        mix = Mixture(seed=cfg.seed)
        log(f"sources here: {mix.available()}")
        t0 = time.monotonic()
        pending = forced_docs(pair, mix.take(cfg.vocab_docs), cfg)
        force_s = time.monotonic() - t0
        n, vocab, coverage = build_vocab(pair, pending, log)
        head = _new_head(pair, cfg, vocab)
        opt = new_optimizer(head, cfg.stream)
        checkpoint._ensure_opt_state(head, opt)
        state = {"settings": settings, "cycle": 0, "step": 0, "positions": 0, "forced": 0, "force_s": force_s, "train_s": 0.0,
                 "vocabulary": coverage, "by_source": {}, "by_kind": {}, "history": [], "best": None, "next_select": 0,
                 "milestones_done": [], "mixture": mix.state()}
        state["forced"] = sum(len(s["ids"]) for s in pending)
    last_ckpt = started = time.monotonic()
    saved = False
    while state["positions"] < min(cfg.stream.positions, cfg.stop_at or cfg.stream.positions):
        if cfg.minutes is not None and time.monotonic() - started > cfg.minutes * 60:
            log(f"time limit: {cfg.minutes} minutes")
            break
        due = _milestones(head, out, state)
        if cfg.score and (state["positions"] >= state["next_select"] or due):
            _score_into(pair, head, select, cfg, state, out, log)
            checkpoint.save(out, head, opt, state, [])
            last_ckpt = time.monotonic()
        t0 = time.monotonic()
        if pending:
            seqs, pending = pending, []
        else:
            docs = mix.take(cfg.cycle_docs)
            if not docs:
                log("the documents file is used up")
                break
            seqs = forced_docs(pair, docs, cfg)
            state["forced"] += sum(len(s["ids"]) for s in seqs)
            state["force_s"] += time.monotonic() - t0
        t1 = time.monotonic()
        gen = torch.Generator(device=cfg.device).manual_seed(cfg.seed * 1_000_003 + state["cycle"])
        r = train_on(head, opt, seqs, cfg.stream, state["step"], state["positions"], gen)
        _tally(state, seqs)
        state.update(cycle=state["cycle"] + 1, step=state["step"] + r["steps"], positions=state["positions"] + r["positions"],
                     train_s=state["train_s"] + time.monotonic() - t1, mixture=mix.state())
        log(f"cycle {state['cycle'] - 1}: {len(seqs)} docs, {r['positions']} positions (total {state['positions']}), "
            f"loss {r['loss']:.3f}, agree {r['agree']:.3f}; forced {state['forced'] / max(1e-9, state['force_s']):.0f}/s, "
            f"trained {state['positions'] / max(1e-9, state['train_s']):.0f}/s")
        saved = time.monotonic() - last_ckpt >= cfg.ckpt_minutes * 60
        if saved:
            checkpoint.save(out, head, opt, state, [])
            last_ckpt = time.monotonic()
    if _milestones(head, out, state) and cfg.score:
        _score_into(pair, head, select, cfg, state, out, log)
        saved = False
    if not saved:   # a second save of a snapped state could round its 8-bit moments differently
        checkpoint.save(out, head, opt, state, [])
    log(f"stopped: {state['positions']} positions trained; best {state['best']}")
    return state
