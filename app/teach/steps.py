"""The walkthrough's steps — data only. Each step names what the token strip shows and which
chart goes with it; its text is a template filled with the round's real numbers
(walkthrough.round_facts). `when` picks the steps that apply to a round: a round either has a
rejection (step "rejection") or was fully accepted (step "bonus"); a round that verified a token
tree also gets the step "tree"."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Step:
    id: str
    title: str
    text: str                         # template, {names} from walkthrough.round_facts
    strip: str                        # token strip stage: plain | drafted | questions | decided | corrected | committed
    chart: str                        # figure: plain_steps | draft_q | verify_cost | tree_cost | accept_line | residual | bonus | committed | routes | theory
    when: str = "always"              # always | rejection | all_accepted | tree
    text_greedy: Optional[str] = None  # replaces `text` at temperature 0, where no u is drawn
    text_chosen: Optional[str] = None  # replaces `text` when the guesses were chosen, not drawn (kept by r(x)/Σr)
    title_chosen: Optional[str] = None  # replaces `title` likewise


STEPS = (
    Step("plain", "Plain decoding: one target pass per token",
         "Without speculation the target makes **one forward pass per token**: this round's {n_committed} "
         "token(s) would cost {n_committed} pass(es). Every pass reads **all the weights** from memory "
         "({weights}) to produce a single token — here one plain step took **{step_ms} ms**. That read, "
         "not the arithmetic, is what makes decoding slow.",
         strip="plain", chart="plain_steps"),
    Step("draft", "The draft proposes k tokens",
         "Round {round}: the draft ({draft}) guesses **k = {k}** token(s): {drafted}. {draft_how} "
         "Each is drawn from the draft's distribution q; its q is under the token. Drafting this round "
         "took {draft_ms} ms (c = {c}: one draft call costs {c} of a target step; {draft_calls}).",
         strip="drafted", chart="draft_q"),
    Step("verify", "The target checks all of them in one pass",
         "The target reads the prefix plus all {k} drafts **in one forward pass** and so answers "
         "**{n_questions} “what comes next?” questions at once** — after the prefix, after d₁, …, after "
         "d₁…{last_d}. The weights are read once for all of them: this pass took **{verify_ms} ms**, "
         "v = {v} plain steps, instead of {n_questions} steps for {n_questions} separate passes.",
         strip="questions", chart="verify_cost"),
    Step("tree", "A token tree: many guesses, one pass",
         "This round did not guess one chain: it verified a **token tree** of **{n_nodes} guesses** in "
         "{tree_depth} levels, all in the **same single target pass** ({n_nodes} + 1 positions; a tree "
         "attention mask lets each guess see only its own ancestors). A pass over more tokens costs "
         "little more here: on the line fitted to this run's passes it costs **{tree_v} plain steps** "
         "(the chart) instead of {n_positions}. The target then walks down from the committed text: at "
         "each node it tries the children **in order**, keeping a guess x with probability **r(x)/Σr** "
         "(r starts as the target's p there); a rejected guess leaves r (r(x) ← 0) before the next is "
         "tried, so whatever comes next is still drawn from the target's p:\n\n{tree_trials}\n\n"
         "Kept: {tree_path}. The shape rule chose this tree because {tree_why}. The round "
         "inspector draws it.",
         strip="decided", chart="tree_cost", when="tree"),
    Step("accept", "Token by token: accept if u < p/q",
         "Left to right, draft dᵢ is kept if a uniform draw **u < p(dᵢ)/q(dᵢ)** (always when p ≥ q). "
         "{accept_lines}",
         text_greedy="At temperature 0 p and q are one-hot: a draft is kept **iff it is the target's own "
                     "top token** (p/q = 1), no random draw needed. {accept_lines}",
         title_chosen="Guess by guess: keep x if u < r(x)/Σr",
         text_chosen="These guesses were **chosen** by the draft, not drawn from q (a token tree, or a chain "
                     "the shape rule cut from one), so the test is not p/q: each guess x is kept if "
                     "**u < r(x)/Σr**, r being the target's p after it with every guess already rejected "
                     "there removed (r(x) ← 0). {accept_lines}",
         strip="decided", chart="accept_line"),
    Step("rejection", "The first rejection: resample from the residual",
         "**{rejected}** (draft position {rejected_pos}) fails: u = {rejected_u} ≥ min(1, p/q) = {rejected_ratio}. "
         "The round stops there; the {n_not_reached} draft(s) after it are discarded unchecked. The "
         "replacement is drawn from the **residual norm(max(0, p − q))** — the target's probability "
         "where the draft proposed too little: **{correction}** (residual probability: {correction_residual}).",
         text_chosen="**{rejected}** (draft position {rejected_pos}) fails: u = {rejected_u} ≥ r(x)/Σr = "
                     "{rejected_ratio}. The round stops there; the {n_not_reached} guess(es) after it are not "
                     "checked. The replacement is drawn from **norm(r)** — the target's p with every rejected "
                     "guess removed, i.e. what the target wanted and the draft did not offer: **{correction}** "
                     "(its probability there: {correction_residual}).",
         text_greedy="**{rejected}** (draft position {rejected_pos}) is not the target's top token, so it "
                     "is rejected; the {n_not_reached} draft(s) after it are discarded unchecked. The "
                     "replacement is the target's own top token there: **{correction}**.",
         strip="corrected", chart="residual", when="rejection"),
    Step("bonus", "All accepted: a bonus token for free",
         "All {k} drafts passed. The verify pass also scored the position **after** the last draft, so "
         "the target's next token comes for free: **{correction}**, drawn from p (p = {correction_p}).",
         strip="corrected", chart="bonus", when="all_accepted"),
    Step("committed", "What the round committed",
         "This round committed **{n_committed} token(s)** — {committed} — for one target pass "
         "({n_accepted} accepted draft(s) + 1 {correction_kind}). Worst case a round still commits one "
         "token (the correction), so speculation never produces fewer tokens per target pass than "
         "plain decoding. Over the run: **{tokens_per_round} tokens per round** on average.",
         strip="committed", chart="committed"),
    Step("exact", "Why the output is exactly the target's",
         "A token reaches the output by two routes: drafted and kept (probability q·min(1, p/q) = "
         "min(p, q)) or resampled after a rejection (the residual gives back exactly max(0, p − q), the "
         "mass the draft under-proposed). min(p, q) + max(0, p − q) = p for every token: the chart adds "
         "the two routes up at this round's position. {race_exact}",
         strip="committed", chart="routes"),
    Step("theory", "When does it pay? α, E[τ] and the choice of k",
         "With acceptance α per draft, a round commits on average **E[τ] = (1 − α^(k+1)) / (1 − α)** "
         "tokens. This run: α = {alpha}, so with k = {k} E[τ] = {expected_tau} (measured: "
         "{tokens_per_round}). It pays when E[τ] beats the round's cost k·c + v(k), with v(k) on the line "
         "1 + {slope}·k fitted to this run's verify passes (v({k}) = {theory_v}): predicted **{predicted}×** "
         "at k = {k}. The chart shows the predicted speedup against k, with this run's point{measured_speedup}.",
         strip="committed", chart="theory"),
)

# How a round's guesses were made, the draft step's {draft_how}: walkthrough.draft_kind picks the
# entry from the trace (Round.draft_source, Round.levels against the depth of its guesses) and
# fills it. "mixed" (a tree holding a copy and the model's guesses) is followed by "mixed_<how the
# model drafted>"; "trimmed" follows a sequential entry when the shape rule kept fewer levels.
DRAFT_HOW = {
    "sequential": "They came from **{calls} small draft passes**, one per token, each reading the guess "
                  "before it.",
    "sequential_tree": "They came from **{calls} small draft passes**, one per level of the tree, each "
                       "reading the level before it.",
    "single": "**One small draft pass** drafted this round's guess(es).",
    "block": "**One pass** of the block drafter filled all {depth} slots at once: no slot saw another's guess "
             "(the target still checks them left to right).",
    "lookup": "They were **copied from earlier text**: the last tokens repeat an earlier passage, and prompt "
              "lookup proposes what followed it there — **no model pass**, and each q is 1 (a copy is one sure "
              "guess).",
    "mixed": "Two sources made this tree: prompt lookup **copied earlier text** as a branch tried first (no "
             "model pass), and the model drafted the rest — ",
    "mixed_sequential": "one small pass per level, each reading the level before it.",
    "mixed_block": "**one pass** of the block drafter filled its slots at once, no slot seeing another's guess.",
    "trimmed": " The shape rule kept the first {depth} of the {calls} levels drafted.",
    "recycled": "They were **recalled**: for each token the target's own top choices of what follows it, kept "
                "from an earlier pass (token recycling) — **no model pass**, and the target still checks each.",
    "with_recycled": " Guesses **recalled** from the target's own earlier passes (token recycling, no model pass) "
                     "join the tree as well.",
}

DRAFT_CALLS = {"lookup": "this round made none: a lookup in the text is free", "one": "this round made one",
               "recycled": "this round made none with a model: a look-up in the table of recalled choices",
               "many": "this round made {calls}",
               "mixed": "this round made {model}, and one free lookup in the text"}


def steps_for(has_rejection: bool, tree: bool = False) -> list[Step]:
    """The steps that apply to a round: the rejection step or the bonus step, and the tree step
    when the round verified a token tree."""
    skip = {"all_accepted" if has_rejection else "rejection"} | (set() if tree else {"tree"})
    return [s for s in STEPS if s.when not in skip]
