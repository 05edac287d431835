"""One rule: the exactness lab's vectorised samplers and the decoder's accept_tree run the same
steps (decoding/rule.py). Same p, q and u (one generator, the same draws in the same order) give the
same decisions and the same tokens: a one-draft chain, a tree's root of guesses, and prompt lookup's
one-hot q, as a sampled chain node and as a guess."""
import torch

from specdec_core.decoding import rule
from specdec_core.decoding.exactness import sample_speculative, sample_tree_first

P = torch.tensor([0.30, 0.25, 0.20, 0.15, 0.07, 0.03])
Q = torch.tensor([0.05, 0.05, 0.10, 0.20, 0.30, 0.30])
AFTER = torch.tensor([0.10, 0.10, 0.20, 0.20, 0.20, 0.20])     # p after a kept draft (its bonus row)
SEEDS = range(300)


def decoder_first_token(parents, ids, seed, q_sampled=None, skip_draft=None):
    """accept_tree on the root's children `ids`, its generator seeded like the lab's and moved past
    the lab's draft draw (skip_draft: the q x was drawn from): (first token, its acceptance)."""
    gen = torch.Generator().manual_seed(seed)
    if skip_draft is not None:
        torch.multinomial(skip_draft, 1, replacement=True, generator=gen)
    p_target = torch.stack([P] + [AFTER] * len(ids))
    d = rule.accept_tree(parents, torch.tensor(ids), p_target, False, gen, q_sampled)
    return (d.path_ids + [d.correction_id])[0], d


def test_lab_chain_draw_is_the_decoders():
    """sample_speculative (x ~ q, then u, then the resample) against the decoder's one-node sampled
    chain: the same keep decisions and the same token in every trial."""
    outcomes = set()
    for seed in SEEDS:
        gen = torch.Generator().manual_seed(seed)
        x = int(torch.multinomial(Q, 1, replacement=True, generator=gen))
        lab = int(sample_speculative(P, Q, 1, torch.Generator().manual_seed(seed))[0])
        token, d = decoder_first_token([-1], [x], seed, Q[None], skip_draft=Q)
        assert token == lab
        # A rejected x has p(x) < q(x): the residual cannot give it back, so lab == x iff x was kept.
        assert (d.decisions[0] == "accepted") == (lab == x)
        if d.decisions[0] == "rejected":
            assert torch.equal(d.correction_dist, rule.last_distribution(P, Q))
        outcomes.add(d.decisions[0])
    assert outcomes == {"accepted", "rejected"}


def test_lab_tree_draw_is_the_decoders():
    """sample_tree_first (u per guess, then the fallback) against accept_tree on a root with the
    same guesses tried in order: the same token in every trial, every guess kept sometimes."""
    guesses = [5, 3, 0]
    kept = set()
    for seed in SEEDS:
        lab = int(sample_tree_first(P, torch.tensor(guesses), 1, torch.Generator().manual_seed(seed))[0])
        token, d = decoder_first_token([-1] * 3, guesses, seed)
        assert token == lab
        kept.add(d.path[0] if d.path else None)
        if not d.path:
            assert d.decisions == ["rejected"] * 3
            assert torch.equal(d.correction_dist, rule.last_distribution(P, rule.point_masses(guesses, P)))
    assert kept == {0, 1, 2, None}


def test_lookup_one_hot_q_is_a_guess():
    """Prompt lookup's one-hot q: the lab's chain draw, the decoder's sampled chain node and the
    decoder's guess (no q) see the same u, decide alike and give the same token and distribution."""
    q_lookup = torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0, 0.0])
    outcomes = set()
    for seed in SEEDS:
        lab = int(sample_speculative(P, q_lookup, 1, torch.Generator().manual_seed(seed))[0])
        chain, d_chain = decoder_first_token([-1], [4], seed, q_lookup[None], skip_draft=q_lookup)
        guess, d_guess = decoder_first_token([-1], [4], seed, None, skip_draft=q_lookup)
        assert lab == chain == guess
        assert d_chain.decisions == d_guess.decisions and d_chain.u == d_guess.u
        assert torch.equal(d_chain.correction_dist, d_guess.correction_dist)
        outcomes.add(d_chain.decisions[0])
    assert outcomes == {"accepted", "rejected"}


def test_guess_masses_and_point_masses():
    """Children tried in order: each against p less the ones before it; a repeated token has r = 0;
    max(0, r − δ_x) is r with x removed."""
    r_x, r_mass, removed = rule.guess_masses([5, 3, 5, 0], [0.03, 0.15, 0.03, 0.30])
    assert r_x == [0.03, 0.15, 0.0, 0.30]
    assert r_mass == [1.0, 1.0 - 0.03, 1.0 - (0.03 + 0.15), 1.0 - (0.03 + 0.15)]
    assert list(removed) == [5, 3, 0]
    left = rule.residual(P, rule.point_masses([5, 3, 0], P))
    assert torch.equal(left, torch.tensor([0.0, 0.25, 0.20, 0.0, 0.07, 0.0]))
