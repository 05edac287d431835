"""How a round becomes a Round of the trace: its main line of drafts with their p, q, u and top-N
lists, the correction with its distributions, every node of a branching tree, and the output so
far (its text and the characters each token completes). The decoder (speculative.py) calls
record_round once per round, after the round's timed decision."""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F

from ..drafters.base import Source, TokenTree, values_at
from ..sampling import raw_probs
from ..trace.schema import Correction, DraftToken, Round, RoundPlan, TreeNode
from .tree import Shape

TOP_N = 5  # how many alternatives the trace keeps per distribution


def source_of(tree: TokenTree, drafter) -> Optional[frozenset]:
    """Round.draft_source: the {Source} that proposed the round's nodes, for a drafter of several (a
    combined drafter's lookup, model, or both in one tree); None for a single-source drafter."""
    named = frozenset(Source(s) for s in tree.sources) if len(drafter.sources) > 1 else frozenset()
    return named or None


def record_round(st, tree: TokenTree, acc, logits, p_target, new_ids, shape: Shape, *, times: tuple,
                 reason: Optional[str], policy: Optional[dict], plan: Optional[RoundPlan]) -> Round:
    """Build the Round, once, at the end of the round. `drafted` is the round's main line, the
    chain views read: the accepted path, then the first child tried where the walk stopped and its
    first children (a chain: all its drafts). A branching tree also records every node in
    `Round.tree`. times: (start, drafted, verified) on the decode's clock; the round ends, and its
    overhead (the accept step and this recording) with it, when the Round is made."""
    n = len(tree)
    kids = tree.children()
    spine, node = list(acc.path), (acc.path[-1] if acc.path else -1)
    while kids[node]:
        node = kids[node][0]
        spine.append(node)
    m, last = len(spine), (acc.path[-1] + 1 if acc.path else 0)
    dev = p_target.device
    node_rows = torch.tensor([tree.parents[i] + 1 for i in range(n)], dtype=torch.long, device=dev)
    spine_t = torch.tensor(spine, dtype=torch.long, device=dev)
    ids = tree.ids.to(dev)
    # q's rows stay over the tree's columns (TokenTree.cols; q = 0 elsewhere): the node values,
    # the overlap Σ min(p, q) and q's top-N are read there. Of p only the rows the trace keeps
    # (the spine's parents and the last node) are read over V, raw p made for those rows only.
    cols = None if tree.cols is None else tree.cols.to(dev)
    q_draft, q_raw = tree.q_rows.to(dev), tree.q_raw_rows.to(dev)
    p_rows = node_rows[spine_t] if m else node_rows[:0]
    at = torch.cat([p_rows, torch.tensor([last], dtype=torch.long, device=dev)])   # [m + 1] rows of p read
    p_at, p_raw_at = p_target.index_select(0, at), raw_probs(logits.index_select(0, at))
    p_x = p_target[node_rows, ids]                                    # [n] p(node) at its parent's row
    q_x, q_raw_x = values_at(q_draft, cols, ids), values_at(q_raw, cols, ids)
    p_on_q = p_at[:m] if cols is None else p_at[:m].index_select(1, cols)
    overlap = torch.minimum(p_on_q, q_draft.index_select(0, spine_t)).sum(-1) if m else p_x[:0]
    width = min(TOP_N, p_target.shape[-1])
    p_top, raw_top = p_at.topk(width, dim=-1), p_raw_at.topk(width, dim=-1)
    c_top = acc.correction_dist[None].topk(width, dim=-1)
    q_top = torch.cat([q_draft.index_select(0, spine_t), q_raw.index_select(0, spine_t)]).topk(
        min(TOP_N, q_draft.shape[-1]), dim=-1)
    q_top_i = q_top.indices if cols is None else cols[q_top.indices]
    # q over fewer than TOP_N columns: its rows padded with q = 0 entries, which top() leaves out.
    pad = (0, width - q_top.values.shape[-1])
    q_top_p, q_top_i = F.pad(q_top.values, pad), F.pad(q_top_i, pad)
    # The rows in the order they are read below: p, raw p, q, raw q (the spine), then the last
    # node's p and raw p and the correction's distribution.
    top_p = torch.cat([p_top.values[:m], raw_top.values[:m], q_top_p, p_top.values[m:], raw_top.values[m:],
                       c_top.values])
    top_i = torch.cat([p_top.indices[:m], raw_top.indices[:m], q_top_i, p_top.indices[m:], raw_top.indices[m:],
                       c_top.indices])
    # The round's details to the host in two reads (ARCHITECTURE, Devices): every number (tops,
    # per-node p / q, overlaps) in one, every id (the tops', the nodes') in the other.
    rows_w = top_p.shape[1]
    floats = torch.cat([top_p.flatten(), p_x.flatten(), q_x.flatten(), q_raw_x.flatten(), overlap.flatten()]).cpu().tolist()
    ints = torch.cat([top_i.flatten(), ids.flatten()]).cpu().tolist()
    n_top = top_p.shape[0] * rows_w
    top_p = [floats[r: r + rows_w] for r in range(0, n_top, rows_w)]
    top_i = [ints[r: r + rows_w] for r in range(0, n_top, rows_w)]
    p_h, q_h, qr_h = (floats[n_top + j * n: n_top + (j + 1) * n] for j in range(3))
    ov_h, ids_h = floats[n_top + 3 * n:], ints[n_top:]
    text = _text_noting_bytes(st)

    def top(r):
        return [[i, text(i), pr] for i, pr in zip(top_i[r], top_p[r]) if pr > 0]

    drafted = []
    for j, i in enumerate(spine):
        evaluated = acc.decisions[i] != "not reached"
        drafted.append(DraftToken(
            id=ids_h[i], text=text(ids_h[i]), q=min(q_h[i], 1.0), p=min(p_h[i], 1.0),
            u=acc.u[i], accepted=acc.decisions[i] == "accepted", evaluated=evaluated,
            overlap=min(ov_h[j], 1.0) if evaluated else None, p_top=top(j), p_top_raw=top(m + j),
            q_top=top(2 * m + j), q_top_raw=top(3 * m + j), test=acc.tests[i], keep_at=acc.keep_at[i]))
    correction = Correction(
        kind=acc.kind, id=acc.correction_id, text=text(acc.correction_id), p_top=top(4 * m),
        p_top_raw=top(4 * m + 1), residual_top=top(4 * m + 2) if acc.kind == "resample" else None,
        drawn_from=acc.drawn_from)
    nodes = None
    if not tree.is_chain:
        on_path = set(acc.path)
        nodes = [TreeNode(id=ids_h[i], parent=tree.parents[i], text=text(ids_h[i]),
                          p=min(p_h[i], 1.0), q=min(q_h[i], 1.0), q_raw=min(qr_h[i], 1.0), u=acc.u[i],
                          decision=acc.decisions[i], on_path=i in on_path, source=Source(tree.sources[i]),
                          test=acc.tests[i], keep_at=acc.keep_at[i])
                 for i in range(n)]
    k = n if (shape.width > 1 or not tree.is_chain) else shape.depth
    t_start, t_drafted, t_verified = times
    t_end = st.elapsed()
    return Round(index=len(st.trace.rounds), t_start=t_start, t_end=t_end, draft_s=t_drafted - t_start,
                 verify_s=t_verified - t_drafted, overhead_s=t_end - t_verified, k=k, drafted=drafted,
                 n_accepted=len(acc.path), correction=correction, committed=new_ids, k_reason=reason,
                 k_policy=policy, draft_source=source_of(tree, st.drafter), tree=nodes, plan=plan)


def _text_noting_bytes(st):
    """pair.token_text that also records in trace.token_bytes the raw bytes (hex) of every token
    whose text alone is not whole characters ("�"): views show those as bytes, never as "�"."""
    table, token_text, token_bytes = st.trace.token_bytes, st.pair.token_text, st.pair.token_bytes

    def text(token_id: int) -> str:
        s = token_text(token_id)
        if "\ufffd" in s and str(token_id) not in table:
            b = token_bytes(token_id)
            if b is not None:
                table[str(token_id)] = b.hex().upper()
        return s
    return text


def sync_output(st) -> None:
    """The trace's output: ids, their text (a character not complete yet left out) and which
    characters each token carries (the last round's spans reused: only new tokens are decoded)."""
    ids = list(st.output_ids)        # kept on the host by the round: no read of the device's copy
    text, spans = st.pair.decode_output(ids, st.trace.output.get("spans"))
    st.trace.output = {"ids": ids, "text": text, "spans": spans}
