"""The one glossary: every symbol and word the page, the CLI and the README use for speculative
decoding, each defined in one plain sentence for a reader who knows only that a language model
writes one token at a time. Data only; the page shows these sentences on hover, the README's
Glossary section is `markdown()` (tests/test_glossary.py checks it), the CLI prints `lines()`."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Term:
    key: str        # how it is written on the page: "α", "E[τ]", "acceptance rate"
    name: str       # how it is read aloud ("alpha"), or "" for a word
    text: str       # one plain sentence


SYMBOLS = (
    Term("α", "alpha",
         "The chance that the target keeps one drafted token, computed from p and q at the checked positions "
         "(the sum over all tokens of min(p, q)): how well the draft agrees with the target, the number the "
         "theory uses."),
    Term("c", "",
         "The cost of one draft call as a fraction of one plain step of the target: c = 0.1 means guessing "
         "costs a tenth of a target step."),
    Term("v", "",
         "The cost of one verify pass of the target over the guesses, in plain target steps; v(k) is the "
         "cost with k guesses, and v = 1 would mean checking them costs no more than writing one token."),
    Term("τ", "tau",
         "The number of tokens one round commits: the guesses the target kept plus the one token it adds "
         "itself, so between 1 and k + 1."),
    Term("E[τ]", "expected tau",
         "The average τ, the tokens one round commits on average; for a chain of k guesses with acceptance "
         "α it is (1 − α^(k+1)) / (1 − α)."),
    Term("k", "",
         "How many tokens the draft guesses in one round (the length of its chain) before the target checks "
         "them."),
    Term("p", "",
         "The target's probability for a token at a position: how much the big model wants to write it there."),
    Term("q", "",
         "The draft's probability for the token it guessed: how sure the small model was of its guess."),
    Term("u", "",
         "A random number drawn evenly between 0 and 1 to decide one guess: the guess is kept if u < p/q, "
         "so it always stays when p ≥ q."),
    Term("r", "",
         "What a rejected guess's replacement is drawn from: the target's probabilities with the part the "
         "draft already offered taken out, norm(max(0, p − q)) (in a token tree, p with the rejected guesses "
         "removed)."),
)

WORDS = (
    Term("draft", "",
         "The small, fast model that guesses the next tokens; here a head of about 4 million parameters "
         "that reads the target's hidden state, helped by a memory of phrases the target itself wrote (or "
         "prompt lookup, which copies earlier text and costs no model pass)."),
    Term("target", "",
         "The large model whose text we want, here SmolLM2-135M (135 million parameters); speculation never "
         "changes what it would write, only how fast."),
    Term("round", "",
         "One cycle of the race: the draft guesses, the target checks every guess in one pass, and between "
         "1 and k + 1 tokens are committed."),
    Term("acceptance rate", "",
         "Kept guesses ÷ all guesses drafted in this run, a count of what happened in which guesses never "
         "checked (after a rejection, or beside a kept one in a token tree) count as not kept, while α is "
         "computed from p and q as the chance of keeping one checked guess drawn from q, so the two differ "
         "and either can be the larger."),
    Term("prefill", "",
         "The target's first pass over the whole prompt, before the first new token; both lanes pay it once."),
    Term("recalled guess", "",
         "A guess recycled from the target's own earlier passes: for every token the target's top choices of "
         "what follows it, kept from the last time it read that token, so proposing them costs no model pass "
         "(draft \"recycle\", or \"lookup+…+recycle\" beside a draft)."),
    Term("token tree", "",
         "Several alternative guesses at once, branching where the draft is unsure; the target checks the "
         "whole tree in one pass and keeps the longest path it agrees with."),
)

GLOSSARY = SYMBOLS + WORDS
_BY_KEY = {t.key: t for t in GLOSSARY}


def define(key: str) -> str:
    """The sentence for a symbol or word (KeyError for one the glossary does not define)."""
    return _BY_KEY[key].text


def title(key: str) -> str:
    """A hover text: 'α (alpha): …' — the symbol, how it is read, its sentence."""
    t = _BY_KEY[key]
    return f"{t.key} ({t.name}): {t.text}" if t.name else f"{t.key}: {t.text}"


def markdown() -> str:
    """The README's Glossary section body: one bullet per term, symbols first."""
    return "\n".join(f"- **{t.key}**" + (f" ({t.name})" if t.name else "") + f" — {t.text}" for t in GLOSSARY)


def lines() -> list[str]:
    """Plain-text lines for a terminal: 'α  (alpha) …'."""
    width = max(len(t.key) for t in GLOSSARY)
    return [f"{t.key:<{width}}  " + (f"({t.name}) " if t.name else "") + t.text for t in GLOSSARY]


if __name__ == "__main__":      # python -m specdec_core.glossary
    print("\n".join(lines()))
