"""What a drafter's and a drafting shape's names mean, in a few plain words for the banner: the trace
names them for experts ("lookup+distilled-feature-head", "tree = auto"), a student reads the gloss."""
from __future__ import annotations

# Each part of a drafter's name (drafters' `name`, joined by "+" for a combined drafter), in words.
DRAFTER_PARTS = {
    "lookup": "copies text that repeats",
    "ngram": "copies text that repeats",
    "distilled-feature-head": "a small head guesses from the target's state",
    "block-drafter": "a small head guesses several at once",
    "recycle": "reuses the target's earlier choices",
}


def drafter_words(name: str) -> str:
    """A drafter's name in words: "lookup+distilled-feature-head" → "copies text that repeats + a small
    head guesses …"; a part it does not know (a model id) is "a smaller model guesses"."""
    if not name or name == "—":
        return ""
    parts = [DRAFTER_PARTS.get(part, "a smaller model guesses") for part in name.split("+")]
    return " + ".join(dict.fromkeys(parts))


def shape_words(label: str) -> str:
    """A drafting shape's label (decoding.plan's `label`) glossed in words."""
    if label == "tree = auto":
        return "a tree of guesses, sized each round by a rule"
    if label == "chain k = auto":
        return "a row of guesses, its length set each round by a rule"
    if label.startswith("tree = "):
        nodes, _, depth = label[len("tree = "):].partition(",")
        return f"a tree of up to {nodes} guesses, {depth} deep"
    if label.startswith("chain k = "):
        return f"a row of {label[len('chain k = '):]} guesses"
    return ""


def glossed(name: str, words: str) -> str:
    """"name (words)", or the name alone when there are no words."""
    return f"{name} ({words})" if words else name
