"""What a token tree's guesses were worth, one definition for the shape rule's calibration and
the Debugger: for every guess whose parent the walk reached (the root, or a node on the accepted
path), was it the token the round committed right after its parent? For a guessed child that
happens with the target's probability p(x) (accept_tree draws the node's token from p), so the
hit rate against the draft's confidence is the draft's calibration."""
from __future__ import annotations

from ..drafters.base import Source, node_depths, sibling_ranks
from ..drafters.ngram import NGramDrafter
from ..drafters.recycle import RecycleDrafter
from .decisions import DrawnFrom, KeepTest, draft_decision, guess_masses, keep_threshold


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


def round_test(rnd):
    """The KeepTest the rule recorded for a round's verified guesses (it tests all of a round's
    guesses one way); None: no guess was tried."""
    return next((n.test for n in (rnd.tree or rnd.drafted) if n.test is not None), None)


def _chosen(rnd) -> bool:
    """(An older trace's rounds, derive_tests only.) True when a round's guesses were chosen, not drawn from q (a token tree, or a chain cut from
    one by the shape rule: Round.plan of width or frontier > 1): rule.accept_tree then keeps each
    with probability r(x)/Σr; a sampled chain keeps each with min(1, p/q)."""
    return bool(rnd.tree) or (rnd.plan is not None and (rnd.plan.width > 1 or rnd.plan.frontier > 1))


def round_sources(config, rnd) -> frozenset:
    """{Source} that proposed a round's verified guesses (empty: a plain step). A tree's nodes name
    theirs; a chain of a drafter of several sources names them in Round.draft_source (a set of
    Source); a single-source drafter's rounds name none: prompt lookup alone
    (config.draft "ngram") is LOOKUP, recycling alone ("recycle") RECYCLE, every other drafter a MODEL."""
    if rnd.tree:
        return frozenset(n.source or Source.MODEL for n in rnd.tree)
    if not rnd.drafted:
        return frozenset()
    if rnd.draft_source:
        return frozenset(rnd.draft_source)
    single = {NGramDrafter.name: Source.LOOKUP, RecycleDrafter.name: Source.RECYCLE}
    return frozenset({single.get(config.draft, Source.MODEL)})


def drafted_sources(config, rnd) -> list:
    """[len(rnd.drafted)] the Source that proposed each token of a round's main line: a tree's
    nodes name theirs; a chain comes from one source (round_sources)."""
    if rnd.tree:
        return [rnd.tree[i].source or Source.MODEL for i in main_line(rnd)]
    sources = round_sources(config, rnd)
    one = next(iter(sources)) if len(sources) == 1 else None
    return [one] * len(rnd.drafted)


def derive_tests(rnd, greedy: bool) -> None:
    """Fill in, in place, the tests of a round recorded before the rule wrote them (DraftToken /
    TreeNode .test and .keep_at, Correction.drawn_from), with the rule's own steps
    (decisions.guess_masses, keep_threshold: the rule's own) on the recorded p and q: a sampled chain's drafts met
    min(1, p/q); chosen guesses r(x)/Σr, r = p at the parent's row less the siblings rejected before;
    at T = 0 the top-token test. A round that has them is left as it is."""
    by_r = _chosen(rnd)
    tried = [n for n in (rnd.tree or rnd.drafted) if _decision(n) != "not reached"]
    if all(n.test is not None for n in tried) and rnd.correction.drawn_from is not None:
        return
    if rnd.tree:
        groups: dict = {}
        for n in rnd.tree:
            groups.setdefault(n.parent, []).append(n)
        lists = list(groups.values())
    else:   # a chain: each draft is its parent's only child
        lists = [[t] for t in rnd.drafted]
    test = KeepTest.TOP if greedy else KeepTest.CHOSEN if by_r else KeepTest.SAMPLED
    for kids in lists:
        kids = [n for n in kids if _decision(n) != "not reached"]
        r_x, r_mass, _ = guess_masses([n.id for n in kids], [n.p for n in kids])
        for n, rx, mass in zip(kids, r_x, r_mass):
            keep_at = None if greedy else keep_threshold(rx, 1.0 if by_r else n.q, mass)
            _set(n, test=test, keep_at=keep_at)
    rnd.correction.drawn_from = (DrawnFrom.TOP if greedy else DrawnFrom.P if not rnd.correction.resampled
                                 else DrawnFrom.REST if by_r else DrawnFrom.RESIDUAL)
    if rnd.tree:   # the main line's drafts are copies of tree nodes: the same tests
        for t, i in zip(rnd.drafted, main_line(rnd)):
            t.test, t.keep_at = rnd.tree[i].test, rnd.tree[i].keep_at


def _decision(node) -> str:
    return node.decision if hasattr(node, "decision") else draft_decision(node)


def _set(node, **values) -> None:
    """Set fields of a DraftToken, or of a frozen TreeNode."""
    for key, value in values.items():
        object.__setattr__(node, key, value)


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
