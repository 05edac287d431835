"""Natural prompts at scale (issue 38): the target writes user turns itself by continuing the chat
template's *user* turn — no instruction template — steered by a short seed: a system line naming a
topic, a task kind and a length, and the first words of the user turn (an opener of that kind).

    seeds = make_seeds(n, seed)                    # [Seed]: topic, kind, length, system line, opener
    texts = write_prompts(pair, seeds, batch)      # the user turns the target wrote (None: dropped)
    kept = Dedup(held=held_texts()).add_all(...)   # normalised exact + word-3-gram near duplicates
    diversity(texts) -> {distinct-1/2/3, openings, words}  # the report next to v2's prompts

A prompt is opener + the target's continuation, up to its <|im_end|>; turns that hit the length
cap, echo the template, or are too short are dropped. Held-out texts (the yardstick, the templated
held-out file, every bench prompt file) are refused exactly and as near duplicates, and
`instructions.check_disjoint` is run on what is kept.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..settings import SettingsError, check_prompt_text
from .capture import EOS, generate
from .instructions import LANGUAGES, PERSONAS, TOPICS, check_disjoint, heldout_texts

# Topics beyond the templated set: code, data and everyday life, so the vocabulary sees them.
MORE_TOPICS = """pandas DataFrames; CSV files; JSON parsing; REST APIs; SQL joins; Python decorators; async code;
list comprehensions; error handling; logging; type hints; web scraping; HTML forms; CSS layout; React components;
shell scripts; cron jobs; Linux permissions; SSH keys; Excel formulas; data visualisation; linear regression;
sorting algorithms; memory leaks; unit conversions; recipes for dinner; grocery budgets; a job offer; a landlord;
a doctor's appointment; a broken phone screen; a school project; a book report; a cover letter; a complaint email;
a thank-you note; a wedding speech; a travel itinerary; a workout plan; a study schedule; a garden plan; a pet's
diet; a car purchase; a mortgage; insurance; a resignation letter; a product review; a history essay; a poem for
mum; a bedtime story; a riddle; a joke; a debate; philosophy; ethics of AI; the meaning of life; astronomy; weather
forecasts; chemistry homework; physics problems; calculus; word problems; unit tests in JavaScript; Git merge
conflicts; a slow laptop; passwords; a team conflict; a birthday gift; a dinner party; a road trip playlist""".replace("\n", " ")
ALL_TOPICS = TOPICS + [t.strip() for t in MORE_TOPICS.split(";") if t.strip()]

# Task kinds: (what the system line says the user wants, openers of the user turn).
KINDS = {
    "question": ("asks a question", ["What", "Why", "How", "Is it true that", "Can you tell me", "Do you know"]),
    "explain": ("asks for an explanation", ["Can you explain", "Explain", "I don't understand", "Help me understand"]),
    "howto": ("asks how to do something", ["How do I", "How can I", "What's the best way to", "Any tips on"]),
    "code": ("asks for {lang} code", ["Write a {lang} function that", "Write {lang} code to", "How do I write a {lang}",
                                       "Can you write a {lang} script that", "Fix this {lang} code:", "In {lang},"]),
    "debug": ("has a bug in {lang} code and pastes it", ["I'm getting an error", "Why does my {lang} code", "This {lang} code",
                                                         "My program"]),
    "list": ("asks for a list", ["List", "Give me", "What are some", "Name"]),
    "write": ("asks for a piece of writing", ["Write", "Draft", "Can you write", "Help me write"]),
    "creative": ("asks for something creative", ["Write a poem", "Tell me a story", "Write a short story", "Make up"]),
    "rewrite": ("pastes a text and asks to rewrite or summarise it", ["Summarize this:", "Rewrite this", "Make this shorter:",
                                                                      "Can you proofread"]),
    "compare": ("asks to compare two things", ["What's the difference between", "Compare", "Which is better,"]),
    "advice": ("asks for advice", ["I need advice", "Should I", "What should I do", "My friend"]),
    "maths": ("asks a maths question", ["What is", "Calculate", "Solve", "If I have"]),
    "translate": ("asks for a translation", ["Translate", "How do you say", "What does"]),
    "chat": ("chats casually", ["Hi!", "Hey,", "Hello,", "Good morning!", "I'm bored."]),
    "plan": ("asks for a plan", ["Plan", "Make a schedule", "Help me plan", "Create a"]),
}
LENGTHS = {"short": ("one short sentence", 56), "medium": ("two or three sentences", 80),
           "long": ("a detailed message with context", 160)}


@dataclass(frozen=True)
class Seed:
    topic: str
    kind: str
    length: str
    system: str     # the system line of the writing prompt
    opener: str     # the first words of the user turn

    @property
    def max_new(self) -> int:
        return LENGTHS[self.length][1]


def make_seeds(n: int, seed: int = 0) -> list[Seed]:
    """n seeds, kinds and lengths drawn evenly-ish, topics uniformly; fixed seed."""
    rng = np.random.default_rng(seed)
    kinds, lengths = list(KINDS), list(LENGTHS)
    out = []
    for i in range(n):
        kind = kinds[rng.integers(len(kinds))]
        length = lengths[rng.choice(3, p=[0.45, 0.35, 0.2])]
        topic, lang, persona = ALL_TOPICS[rng.integers(len(ALL_TOPICS))], rng.choice(LANGUAGES), rng.choice(PERSONAS)
        want, openers = KINDS[kind]
        system = (f"Below is a message that a {persona} types to an AI assistant. The message is about {topic}; "
                  f"the user {want.format(lang=lang)}, in {LENGTHS[length][0]}.")
        out.append(Seed(topic, kind, length, system, openers[rng.integers(len(openers))].format(lang=lang)))
    return out


def writing_prompt(tokenizer, s: Seed) -> list[int]:
    """Chat template up to the user turn's content (system line, then the opener): ids."""
    text = tokenizer.apply_chat_template([{"role": "system", "content": s.system}, {"role": "user", "content": "\x00"}],
                                         tokenize=False)
    text = text[: text.index("\x00")] + s.opener
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def clean_turn(opener: str, gen_text: str) -> str | None:
    """The user turn (opener + continuation), or None if it leaks the template or is too short/long."""
    text = (opener + gen_text).strip()
    if any(tag in text for tag in ("<|im_start|>", "<|im_end|>", "assistant\n")):
        return None
    try:
        check_prompt_text(text)     # what the decoder accepts as a typed prompt (no control characters)
    except SettingsError:
        return None
    words = text.split()
    return text if 3 <= len(words) <= 300 else None


def write_prompts(pair, seeds: list[Seed], batch: int = 16, seed: int = 0, log=print) -> list[str | None]:
    """The target's user turns for seeds (T = 1.0, top-p 0.95), in order; None where dropped (no
    <|im_end|> within the seed's length cap, or clean_turn refused it). Batches group seeds by length."""
    out: list[str | None] = [None] * len(seeds)
    order = sorted(range(len(seeds)), key=lambda i: seeds[i].max_new)
    for b in range(0, len(order), batch):
        idx = order[b:b + batch]
        rows = generate(pair.target, [writing_prompt(pair.tokenizer, seeds[i]) for i in idx],
                        max(seeds[i].max_new for i in idx), temperature=1.0, top_p=0.95, seed=seed + b, capture=False)
        for i, r in zip(idx, rows):
            g = r["ids"][r["plen"]:]
            if len(g) and int(g[-1]) == EOS and len(g) <= seeds[i].max_new:
                out[i] = clean_turn(seeds[i].opener, pair.tokenizer.decode(g[:-1], skip_special_tokens=True))
    return out


# -- de-duplication and disjointness -----------------------------------------------------------
def normalise(text: str) -> str:
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


def shingles(text: str, n: int = 3) -> set[str]:
    w = normalise(text).split()
    return {" ".join(w[i:i + n]) for i in range(max(1, len(w) - n + 1))}


class Dedup:
    """Keeps texts that are neither an exact (normalised) nor a near duplicate (word-3-gram Jaccard
    ≥ `near`) of a kept text or of a held-out text; an inverted index keeps the check cheap.
    near_kept=False checks near duplicates of held-out texts only (tens of thousands of templated
    texts share most 3-grams with each other: the near check among them would cost O(n²) and drop
    what the templates are for); exact duplicates are refused either way."""

    def __init__(self, held: list[str] = (), near: float = 0.6, near_kept: bool = True):
        self.near, self.near_kept, self.exact, self.index, self.sets = near, near_kept, set(), {}, []
        self.held_exact = {normalise(h) for h in held}
        self.held = Dedup(near=near) if held else None
        for h in held:
            self.held._keep(h)

    def _near_of(self, sh: set[str]) -> bool:
        hits: dict[int, int] = {}
        for g in sh:
            for j in self.index.get(g, ()):
                hits[j] = hits.get(j, 0) + 1
        return any(c / len(sh | self.sets[j]) >= self.near for j, c in hits.items())

    def _keep(self, text: str) -> None:
        sh = shingles(text)
        self.exact.add(normalise(text))
        for g in sh:
            self.index.setdefault(g, []).append(len(self.sets))
        self.sets.append(sh)

    def add(self, text: str) -> bool:
        """True (and remembered) if text is new and not held out."""
        key, sh = normalise(text), shingles(text)
        if not key or key in self.exact or key in self.held_exact or (self.near_kept and self._near_of(sh)):
            return False
        if self.held is not None and self.held._near_of(sh):
            return False
        if self.near_kept:
            self._keep(text)
        else:
            self.exact.add(key)
        return True


def held_texts(root: Path | None = None) -> list[str]:
    """Every held-out prompt text: the yardstick, the templated held-out file, each bench prompt file."""
    from .. import data
    texts = heldout_texts() + [p["text"] for p in json.loads(data.file("templated_heldout_prompts.json").read_text())["prompts"]]
    root = root or Path(__file__).resolve().parents[2]
    for f in sorted((root / "docs" / "bench").glob("*/prompts.json")):
        texts += [p["text"] for p in json.loads(f.read_text())["prompts"]]
    return texts


def keep_disjoint(texts: list[str], held: list[str]) -> None:
    """instructions.check_disjoint over every held-out text (raises ValueError on a leak)."""
    check_disjoint(texts, held=held)


# -- diversity -----------------------------------------------------------------------------------
def diversity(texts: list[str], n_sample: int = 1000, seed: int = 0, max_words: int | None = None) -> dict:
    """On a fixed-size sample (distinct-n falls as a sample grows): at most n_sample prompts, and
    with max_words, prompts drawn until that many words (compare sets with prompts of other
    lengths at equal words): distinct-1/2/3 (distinct word n-grams ÷ n-grams), distinct 3-word
    openings ÷ prompts, mean words per prompt."""
    rng = np.random.default_rng(seed)
    words, total = [], 0
    for i in rng.permutation(len(texts))[:n_sample]:
        if max_words is not None and total >= max_words:
            break
        words.append(normalise(texts[i]).split())
        total += len(words[-1])
    res = {"prompts": len(words), "total_words": total}
    for n in (1, 2, 3):
        grams = [tuple(w[i:i + n]) for w in words for i in range(len(w) - n + 1)]
        res[f"distinct_{n}"] = round(len(set(grams)) / max(1, len(grams)), 3)
    res["openings"] = round(len({tuple(w[:3]) for w in words}) / max(1, len(words)), 3)
    res["words"] = round(float(np.mean([len(w) for w in words])), 1)
    return res
