"""A/B over prompt sets: two configurations (drafter, shape, sampler) decode the same prompts with
the same seeds — or each arm its own prompt set (one configuration on code against prose) — the two
lanes of each race (a prompt of each arm, one seed) taking turns a round at a time
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
from typing import Iterator, Mapping, Optional, Sequence, Union

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


def ab_runs(pairs: Sequence, prompts: Union[Sequence[tuple[str, object]], Mapping[str, Sequence[tuple[str, object]]]],
            arms: Sequence[Arm], seeds: Sequence[int]) -> Iterator[dict]:
    """pairs[i] decodes arms[i]; prompts: [(name, prompt ids [n])] shared by the arms, or {arm label:
    its own list} (two prompt sets: "is the draft worse on code than on prose?"). Yields {"arm":
    label, "prompt", "seed", "race", "trace", "done", "total"} after every round of every run; "done"
    counts the finished runs (total: every arm's prompts × seeds). A race is the i-th prompt of every
    arm with one seed: its lanes take turns a round at a time, the arm that starts alternating
    between races, so each race's runs saw the same machine ("race" numbers it: their tokens/s pair
    up). An arm whose list is shorter sits out the later races. Each pair is warmed up first (not
    counted). Every run recalls from a table of its own, empty (stream_decode's default): an arm
    with recalled guesses gives the same counts run after run. Closing the generator ends the lanes
    after their current round."""
    own = {arm.label: list(prompts[arm.label] if isinstance(prompts, Mapping) else prompts) for arm in arms}
    for pair, arm in zip(pairs, arms):
        warm_up(pair, own[arm.label][0][1], arm.request)
    total, done, race = sum(len(ps) for ps in own.values()) * len(seeds), 0, 0
    for i in range(max(len(ps) for ps in own.values())):
        for seed in seeds:
            order = [j for j in range(len(arms)) if i < len(own[arms[j].label])]
            order = order[race % len(order):] + order[:race % len(order)]
            names = {arms[j].label: own[arms[j].label][i][0] for j in order}
            lanes = {arms[j].label: partial(stream_decode, pairs[j], own[arms[j].label][i][1],
                                            replace(arms[j].request, seed=seed)) for j in order}
            with closing(interleave(lanes)) as turns:
                for label, trace in turns:
                    done += trace.finished
                    yield {"arm": label, "prompt": names[label], "seed": seed, "race": race, "trace": trace,
                           "done": done, "total": total}
            race += 1


def record(trace, arm: str, prompt: str, seed: int, race: Optional[int] = None) -> dict:
    """A finished run as counts: kept/drafted guesses overall and by draft position, Σ min(p, q) and
    the positions it sums over (α), committed tokens by who proposed them (lookup, model, target),
    verify passes, rounds without a guess, out-of-vocabulary counts; and its tokens/s (a timing) with
    the race it ran in (ab_runs: the runs of one race pair up for speed)."""
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
    return {"arm": arm, "prompt": prompt, "seed": seed, "race": race, "new_tokens": new_tokens, "passes": s["rounds"],
            "accepted": s["accepted"], "drafted": s["drafted"], "overlap_sum": sums.overlap_sum, "overlap_n": sums.overlap_n,
            "kept_by_position": list(s["kept_by_position"]), "drafted_by_position": list(s["drafted_by_position"]),
            "no_guess_rounds": s["no_guess_rounds"] or 0, "by_source": by_source,
            "tokens_per_s": s["tokens_per_s"], "output_ids": list(trace.output["ids"]),
            "vocab": None if vocab is None else {k: vocab[k] for k in (
                "draft_vocab", "target_vocab", "written", "written_outside", "rejections", "rejections_outside",
                "outside_tokens")}}

