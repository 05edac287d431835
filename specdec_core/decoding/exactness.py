"""The exactness experiment: draw one token many times with plain sampling and with the rejection
rule, and test both against the target's exact distribution.

For the first generated token everything is known exactly: the target's p and the draft's q after
the prompt. One target pass and one draft step give both; then every trial is one speculative
round at that position, a chain of one draft (x ~ q, keep it if u < p(x)/q(x), else draw from
norm(max(0, p − q))) or a tree's root with guessed children (each kept with probability r(x)/Σr),
through the steps of `rule.py` that rule.accept_tree runs at every node, in its float64 (same p, q
and u: same decisions, tests/test_rule.py). Trials are vectorised: thousands take
milliseconds.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..drafters.base import fit_vocab
from ..sampling import warp_probs
from .rule import guess_masses, keeps_draft, last_distribution, point_masses
from .grow import draft_round
from .plan import parse_request
from .speculative import start_decode
from .tree import Shape


@torch.inference_mode()
def first_token_distributions(pair, prompt_ids, temperature: float = 1.0, top_k: int = 0,
                              top_p: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """(p_target [V], q_draft [V]) of the first generated token, on the CPU, float64-summable.

    The decoder's own prefill and drafter give them, as in round 0 of a decode with k = 1. Raises
    ValueError when the drafter proposes nothing there (prompt lookup without a match)."""
    request = parse_request(1, None, temperature, top_k, top_p, max_new_tokens=2, seed=0)
    st = start_decode(pair, prompt_ids, request, drafter=pair.new_drafter())
    proposal, _, _ = draft_round(st.drafter, st.committed, Shape(1, 1), 1, st.cfg, st.generator)
    if len(proposal) == 0:
        raise ValueError("the drafter proposes nothing after this prompt: pick a model draft")
    # The target's own step after the prompt: a verify pass of the root alone, on the decode's passes.
    nothing = proposal.subtree([])
    logits, _ = st.passes.verify(st.committed[-1:], nothing, None)
    st.passes.close()
    p_target = warp_probs(fit_vocab(logits[-1], pair.vocab_size), st.cfg)
    return p_target.float().cpu(), proposal.q_probs[0].float().cpu()


def sample_plain(p_target: torch.Tensor, n: int, generator: torch.Generator) -> torch.Tensor:
    """n independent draws from p_target [V] -> [n] token ids."""
    return torch.multinomial(p_target, n, replacement=True, generator=generator)


def sample_speculative(p_target: torch.Tensor, q_draft: torch.Tensor, n: int,
                       generator: torch.Generator) -> torch.Tensor:
    """n independent one-draft rounds at one position -> [n] token ids (each ~ p_target exactly).

    p_target, q_draft [V] (q may be one-hot: prompt lookup). Draws: x [n], then u [n], then the
    resamples [n], from `generator` in that order."""
    # 1. The draft proposes x ~ q in every trial.
    x = torch.multinomial(q_draft, n, replacement=True, generator=generator)
    # 2. Keep x if u < p(x)/q(x): the decoder's test at a sampled node (r = p, Σr = 1).
    u = torch.rand(n, generator=generator, device=p_target.device)
    kept = keeps_draft(u.double(), p_target[x].double(), q_draft[x].double())
    # 3. Otherwise the token comes from norm(max(0, p − q)), as the decoder's last token after a rejection.
    residual = last_distribution(p_target, q_draft)
    resampled = torch.multinomial(residual, n, replacement=True, generator=generator)
    return torch.where(kept, x, resampled)


def sample_tree_first(p_target: torch.Tensor, guesses: torch.Tensor, n: int,
                      generator: torch.Generator) -> torch.Tensor:
    """n independent tree rounds at one position -> [n] token ids (each ~ p_target exactly): the
    root's children are the `guesses` [m], tried in order as the decoder tries a node's guesses (kept
    with probability r(x)/Σr, a rejected one removed from r); when none is kept the token comes from
    norm(r), p without the guesses. Draws: u [n, m], then the fallbacks [n]."""
    m = len(guesses)
    # 1. One u per guess per trial; guess i is tried (only after 0..i-1 were rejected) against what
    #    they left: the same r(x) and Σr in every trial.
    dev = p_target.device
    u = torch.rand(n, m, generator=generator, device=dev)
    r_x, r_mass, removed = guess_masses(guesses.tolist(), p_target[guesses].tolist())
    kept = keeps_draft(u.double(), torch.tensor(r_x, dtype=torch.float64, device=dev), 1.0,
                       torch.tensor(r_mass, dtype=torch.float64, device=dev))            # [n, m]
    first = torch.where(kept.any(-1), kept.float().argmax(-1), m)      # the first kept guess, m: none
    # 2. No guess kept: draw from norm(p with every guess removed), the guesses' q their point masses.
    rest = last_distribution(p_target, point_masses(list(removed), p_target))
    fallback = torch.multinomial(rest, n, replacement=True, generator=generator)
    return torch.where(first < m, guesses[first.clamp_max(m - 1)], fallback)


@dataclass
class ChiSquare:
    statistic: float
    dof: int
    p_value: float          # P(a statistic this large | the samples follow the expected distribution)
    impossible: int = 0     # samples of tokens whose expected probability is 0 (p_value is then 0)


def chi_square(counts: torch.Tensor, expected_probs: torch.Tensor, min_expected: float = 5.0) -> ChiSquare:
    """Pearson goodness of fit of counts [B] against expected_probs [B] (any shape, flattened).

    Cells expected below `min_expected` are pooled into one cell, as the test requires. A sample of
    a token whose probability is 0 is an outright failure (p = 0)."""
    counts, expected = counts.flatten().double(), expected_probs.flatten().double() * counts.sum()
    impossible = int(counts[expected == 0].sum())
    big = expected >= min_expected
    obs = torch.cat([counts[big], counts[~big].sum()[None]])
    exp = torch.cat([expected[big], expected[~big].sum()[None]])
    keep = exp > 0
    obs, exp = obs[keep], exp[keep]
    stat = float(((obs - exp) ** 2 / exp).sum())
    dof = max(len(obs) - 1, 1)
    p_value = float(torch.special.gammaincc(torch.tensor(dof / 2.0, dtype=torch.float64),
                                            torch.tensor(stat / 2, dtype=torch.float64)))
    return ChiSquare(stat, dof, 0.0 if impossible else p_value, impossible)
