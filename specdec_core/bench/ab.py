"""A/B over a prompt set: two configurations (drafter, shape, sampler) decode the same prompts with
the same seeds, the two lanes of each (prompt, seed) taking turns a round at a time
(decoding.interleave), so timings see the same machine; every finished run is kept as a compact
record of counts (record()), which ab_stats.summarise pools with intervals. Used by the app's
Debugger ("is this draft really worse on code?"). A generator: the caller can stop after any round
and keep the runs so far.

Timing-free: a fixed shape (a chain of k, a tree budget) decides every round from the models' numbers
and the seed alone, so its acceptance, α and tokens per pass are the same run after run; the shape
rule (auto) reads this machine's measured costs, so its numbers move with the clock.
"""
from __future__ import annotations

import json
from contextlib import closing
from dataclasses import dataclass, replace
from functools import partial
from importlib import resources
from typing import Iterator, Sequence

from ..costs import run_costs
from ..decoding.interleave import interleave
from ..decoding.plan import Request
from ..decoding.speculative import stream_decode
from ..decoding.warmup import warm_up
from ..trace.mismatch import vocab_coverage
from ..trace.trees import drafted_sources

TARGET = "target"     # committed tokens the target drew itself (a correction or a bonus token)


@dataclass(frozen=True)
class Arm:
    """One configuration of an A/B: a drafter (the registry's text) and a request (shape, sampler,
    length); each run replaces the request's seed with its own."""
    label: str
    draft: str
    request: Request

    @property
    def timing_free(self) -> bool:
        """Its rounds never read the clock: a fixed shape (the shape rule reads measured costs)."""
        return not self.request.plan.auto

    def describe(self) -> str:
        cfg = self.request.sampling
        sampler = "greedy" if cfg.greedy else f"T {cfg.temperature:g}" + (f", top-p {cfg.top_p:g}" if cfg.top_p < 1 else "") \
            + (f", top-k {cfg.top_k}" if cfg.top_k else "")
        return f"{self.draft}, {self.request.plan.label()}, {sampler}"


def _data(name: str) -> dict:
    return json.loads(resources.files("specdec_core.data").joinpath(name).read_text(encoding="utf-8"))


def prompt_sets() -> dict:
    """{set name: [{"name", "text"}, ...]}: the bundled sets (data/ab_prompt_sets.json), six held-out
    prompts each (data/heldout_prompts.json: never used for training)."""
    heldout = {p["name"]: p for p in _data("heldout_prompts.json")["prompts"]}
    return {name: [{"name": n, "text": heldout[n]["text"]} for n in names]
            for name, names in _data("ab_prompt_sets.json")["sets"].items()}


def own_prompts(text: str) -> list[dict]:
    """A user's list, one prompt per line (blank lines skipped) -> [{"name": "own1", "text"}, ...]."""
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return [{"name": f"own{i}", "text": line} for i, line in enumerate(lines, 1)]


def seeds_for(arms: Sequence[Arm], first: int, n: int) -> list[int]:
    """The seeds each prompt runs with: first, first + 1, ... (n of them), or only the first when
    every arm is greedy (a greedy decode never reads its seed: more seeds would repeat it)."""
    if all(arm.request.sampling.greedy for arm in arms):
        return [first]
    return [first + i for i in range(n)]


def ab_runs(pairs: Sequence, prompts: Sequence[tuple[str, object]], arms: Sequence[Arm],
            seeds: Sequence[int]) -> Iterator[dict]:
    """pairs[i] decodes arms[i]; prompts: [(name, prompt ids [n])]. Yields {"arm": label, "prompt",
    "seed", "trace", "done", "total"} after every round of every run; "done" counts the finished
    runs (total = arms × prompts × seeds). For each (prompt, seed) the arms' lanes take turns a
    round at a time, the arm that starts alternating. Each pair is warmed up first (not counted).
    Every run recalls from a table of its own, empty (stream_decode's default): an arm with recalled
    guesses gives the same counts run after run, as a timing-free one does. Closing the generator ends
    the lanes after their current round."""
    for pair, arm in zip(pairs, arms):
        warm_up(pair, prompts[0][1], arm.request)
    total, done, unit = len(arms) * len(prompts) * len(seeds), 0, 0
    for name, ids in prompts:
        for seed in seeds:
            order = list(range(len(arms)))
            order = order[unit % len(order):] + order[:unit % len(order)]
            unit += 1
            lanes = {arms[i].label: partial(stream_decode, pairs[i], ids, replace(arms[i].request, seed=seed))
                     for i in order}
            with closing(interleave(lanes)) as turns:
                for label, trace in turns:
                    done += trace.finished
                    yield {"arm": label, "prompt": name, "seed": seed, "trace": trace, "done": done, "total": total}


def record(trace, arm: str, prompt: str, seed: int) -> dict:
    """A finished run as counts: kept/drafted guesses overall and by draft position, Σ min(p, q) and
    the positions it sums over (α), committed tokens by who proposed them (lookup, model, target),
    verify passes, rounds without a guess, out-of-vocabulary counts; and its tokens/s (a timing)."""
    s = trace.stats
    by_source = {TARGET: 0}
    for rnd in trace.rounds:
        for src in drafted_sources(trace.config, rnd)[:rnd.n_accepted]:
            key = getattr(src, "value", None) or "model"
            by_source[key] = by_source.get(key, 0) + 1
    sums = run_costs.round_sums(trace.rounds)          # α's sum and count, as the stats define it
    new_tokens = s["new_tokens"]
    by_source[TARGET] = new_tokens - sum(n for k, n in by_source.items() if k != TARGET)
    vocab = vocab_coverage(trace, n=10**6)
    return {"arm": arm, "prompt": prompt, "seed": seed, "new_tokens": new_tokens, "passes": s["rounds"],
            "accepted": s["accepted"], "drafted": s["drafted"], "overlap_sum": sums.overlap_sum, "overlap_n": sums.overlap_n,
            "kept_by_position": list(s["kept_by_position"]), "drafted_by_position": list(s["drafted_by_position"]),
            "no_guess_rounds": s["no_guess_rounds"] or 0, "by_source": by_source,
            "tokens_per_s": s["tokens_per_s"], "output_ids": list(trace.output["ids"]),
            "vocab": None if vocab is None else {k: vocab[k] for k in (
                "draft_vocab", "target_vocab", "written", "written_outside", "rejections", "rejections_outside",
                "outside_tokens")}}

