"""What a token tree's guesses were worth, one definition for the shape rule's calibration and
the Debugger: for every guess whose parent the walk reached (the root, or a node on the accepted
path), was it the token the round committed right after its parent? For a guessed child that
happens with the target's probability p(x) (accept_tree draws the node's token from p), so the
hit rate against the draft's confidence is the draft's calibration."""
from __future__ import annotations

from ..drafters.base import Source, node_depths, sibling_ranks
from ..drafters.ngram import NGramDrafter


def child_outcomes(parents: list, ids: list, path: list, tokens: list) -> list:
    """[(node, hit)] for every node whose parent was reached. parents / ids: the tree's; path: the
    accepted nodes, root's child first; tokens: the round's tokens before any cut (the path's ids,
    then the token drawn where the walk stopped), one per depth."""
    reached = {-1: 0, **{node: d + 1 for d, node in enumerate(path)}}
    return [(i, ids[i] == tokens[reached[p]]) for i, p in enumerate(parents)
            if p in reached and reached[p] < len(tokens)]


def guess_outcomes(trace) -> list:
    """Per guess of every tree round whose parent was reached: {"round", "depth", "rank" (1: the
    first child its parent tried), "conf" (the draft's q at temperature 1), "hit", "source",
    "decision"}."""
    rows = []
    for rnd in trace.rounds:
        tree = rnd.tree
        if not tree:
            continue
        parents, ids = [n.parent for n in tree], [n.id for n in tree]
        path = [i for i, n in enumerate(tree) if n.on_path]
        depth, rank = node_depths(parents), sibling_ranks(parents)
        for i, hit in child_outcomes(parents, ids, path, [ids[i] for i in path] + [rnd.correction.id]):
            rows.append({"round": rnd.index, "depth": depth[i], "rank": rank[i], "conf": tree[i].q_raw,
                         "hit": hit, "source": tree[i].source, "decision": tree[i].decision})
    return rows


def chosen(rnd) -> bool:
    """True when a round's guesses were chosen, not drawn from q (a token tree, or a chain cut from
    one by the shape rule: Round.plan of width or frontier > 1): rule.accept_tree then keeps each
    with probability r(x)/Σr; a sampled chain keeps each with min(1, p/q)."""
    return bool(rnd.tree) or (rnd.plan is not None and (rnd.plan.width > 1 or rnd.plan.frontier > 1))


def round_sources(config, rnd) -> frozenset:
    """{Source} that proposed a round's verified guesses (empty: a plain step). A tree's nodes name
    theirs; a chain of a drafter of several sources names them in Round.draft_source ("lookup",
    "model", "lookup+model"); a single-source drafter's rounds name none: prompt lookup alone
    (config.draft "ngram") is LOOKUP, every other drafter a MODEL."""
    if rnd.tree:
        return frozenset(Source(n.source) if n.source else Source.MODEL for n in rnd.tree)
    if not rnd.drafted:
        return frozenset()
    if rnd.draft_source:
        return frozenset(Source(s) for s in rnd.draft_source.split("+"))
    return frozenset({Source.LOOKUP if config.draft == NGramDrafter.name else Source.MODEL})


def keep_thresholds(rnd) -> list:
    """[n] what each verified guess's u was tested against (kept iff u < it), in the order tried
    (Round.tree's nodes, or the chain's drafts): min(1, p/q) for a sampled chain; for chosen guesses
    r(x)/Σr, r = p at the parent's row with the siblings rejected before it removed (r(x) ← 0).
    None where p is not recorded. At temperature 0 no u is drawn: a guess is kept iff it is the
    target's top token."""
    if rnd.tree:
        nodes = [(n.parent, n.p, n.q, n.decision) for n in rnd.tree]
    else:
        nodes = [(i - 1, t.p, t.q, "accepted" if t.accepted else "rejected" if t.evaluated else "not reached")
                 for i, t in enumerate(rnd.drafted)]
    by_r = chosen(rnd)
    out, removed = [], {}
    for parent, p, q, decision in nodes:
        if p is None or (not by_r and not q):
            out.append(None)
        elif not by_r:
            out.append(min(1.0, p / q))
        else:
            left = 1.0 - removed.get(parent, 0.0)
            out.append(min(1.0, p / left) if left > 0 else None)
            if decision == "rejected":
                removed[parent] = removed.get(parent, 0.0) + p
    return out


def main_line(rnd) -> list:
    """The verified-guess index of each of a round's `drafted` tokens (its main line: the accepted
    path, then the first child tried where the walk stopped and its first children, as the
    recorder builds it); a chain: 0..k−1."""
    if not rnd.tree:
        return list(range(len(rnd.drafted)))
    kids: dict = {}
    for i, n in enumerate(rnd.tree):
        kids.setdefault(n.parent, []).append(i)
    spine = [i for i, n in enumerate(rnd.tree) if n.on_path]
    node = spine[-1] if spine else -1
    while kids.get(node):
        node = kids[node][0]
        spine.append(node)
    return spine[: len(rnd.drafted)]
