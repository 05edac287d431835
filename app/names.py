"""A drafter's and a drafting shape's names in a few plain words, for the banner a class reads first:
the trace names them for experts ("lookup+distilled-feature-head", "tree = auto"; the stats, the
Advanced settings and the Debugger keep those), a student reads "prompt lookup and a small head",
"a tree of guesses, sized each round"."""
from __future__ import annotations

# Each part of a drafter's name (drafters' `name`, joined by "+" for a combined drafter), in words;
# a part not listed (a model id, a folder) is shown as it is.
DRAFTER_PARTS = {
    "lookup": "prompt lookup",
    "ngram": "prompt lookup",
    "distilled-feature-head": "a small head",
    "block-drafter": "a small head guessing a block at once",
    "recycle": "recycled guesses",
}


def drafter_words(name: str) -> str:
    """"lookup+distilled-feature-head" → "prompt lookup and a small head"."""
    parts = list(dict.fromkeys(DRAFTER_PARTS.get(part, part) for part in (name or "—").split("+")))
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else parts[0]


def shape_words(label: str) -> str:
    """A drafting shape's label (decoding.plan's `label`) in words; "plain" and unknown labels as they are."""
    if label == "tree = auto":
        return "a tree of guesses, sized each round"
    if label == "chain k = auto":
        return "a row of guesses, its length set each round"
    if label.startswith("tree = "):
        nodes, _, depth = label[len("tree = "):].partition(",")
        return f"a tree of up to {nodes} guesses, {depth} deep"
    if label.startswith("chain k = "):
        return f"a row of {label[len('chain k = '):]} guesses"
    return label
