"""User turns by the ten thousand for the target to answer (issue 57, draft v5): what people type,
about everything this machine has words for, none of it a held-out prompt or a held-out template.

    asks = make_asks(60_000, seed=0)          # [{"task", "text"}], disjoint from every held-out set

Three kinds, mixed by share (`SHARES`):
- everyday asks: templates (none of the held-out prompts' or `instructions.TEMPLATES`) over ~4,000
  common English nouns (WordNet, ranked by tagged-sense counts) and the lab's hand-made topics;
- asks about a passage: summarise, paraphrase, translate, explain or test a real text or function
  (sayings in five languages, dictionary entries, the Python code installed here, man pages' names) —
  answers that quote their prompt, as real use does;
- the instructions the lab already had (`instructions.make_instructions`, the shared data's, v3's
  natural training turns), so nothing it learnt from is dropped.
Held-out texts (`natural.held_texts` and v3's selection prompts) are refused exactly and as near
duplicates (`natural.Dedup`); a template that fits a held-out prompt is refused by `template_leaks`.
"""
from __future__ import annotations

import ast
import gzip
import json
import re
from pathlib import Path

import numpy as np

from .instructions import LANGS, PERSONAS, SENTENCES, TOPICS, make_instructions
from .texts import LANG_NAMES, _fortune_units, _py_files

EVERYDAY = {
    "explanation": ["Can you tell me what {noun} is, in a few sentences?", "Explain the idea of {topic} to a ten-year-old.",
                    "What's the history of {topic}?", "How would you describe {topic} to someone who has never heard of it?",
                    "I keep hearing about {topic}. What is it, really?", "what is the point of {noun}",
                    "Where does the word '{noun}' come from?", "Give me the big picture of {topic}."],
    "howto": ["What's the easiest way to get into {topic}?", "How can I teach my kids about {topic}?",
              "I'm new to {topic}. Where should I begin?", "Got any practical tips about {noun}?",
              "What do beginners usually get wrong about {topic}?", "how to choose a good {noun}?"],
    "list": ["Give me {n} fun facts about {topic}.", "Jot down {n} words that go with '{noun}'.",
             "List {n} questions a curious student might ask about {topic}.", "Name {n} things you might find next to a {noun}.",
             "What are {n} surprising uses for a {noun}?", "Brainstorm {n} blog post titles about {topic}."],
    "comparison": ["Is {topic} more like {topic2} or completely different?", "Contrast {topic} with {topic2} in a short table.",
                   "{topic} vs {topic2}: what are the key differences?", "Which came first, {topic} or {topic2}?",
                   "Would you rather learn about {topic} or {topic2}? Explain your choice."],
    "creative": ["Write a short fable featuring a {noun}.", "Write a six-line poem about {topic}.",
                 "Write a riddle whose answer is '{noun}'.", "Write a product description for a magical {noun}.",
                 "Write a diary entry from the point of view of a {noun}.", "Invent a short myth that explains {topic}.",
                 "write a rap verse about {topic}", "Describe a {noun} using only the five senses."],
    "chat": ["what do you think about {topic}?", "Honestly, is {topic} worth my time?",
             "Can you recommend something to read about {topic}?", "I just learned about {topic} and it's fascinating! Tell me more.",
             "I'm a {persona} and I love {topic}. Any fun ideas?", "my {persona} friend won't stop talking about {topic} lol. why?"],
    "email": ["Draft a polite email to my {person} about {topic}.", "Write a short text message inviting a friend to a talk on {topic}.",
              "Write a note to my {person} apologising for forgetting the {noun}."],
    "definition": ["Is '{noun}' the right word for {gloss}?", "Define '{noun}' and use it in a sentence.",
                   "What do you call {gloss}?"],
}
PASSAGE = {
    "summary": ["Sum up the following in one or two sentences:\n\n{text}", "What is the gist of this?\n\n{text}",
                "Please condense this passage:\n{text}", "Write a headline for this text: {text}",
                "Explain this passage in plain English:\n\n{text}", "What is the author trying to say here? {text}"],
    "rewrite": ["Rewrite this more formally:\n\n{text}", "Make this easier to read: {text}", "Paraphrase the following: {text}",
                "Turn this into a short poem:\n{text}", "Make this sound more cheerful: {text}"],
    "foreign": ["What does this {lang} text say in English?\n\n{text}", "I found this {lang} saying, what does it mean? {text}",
                "Put this {lang} quote into English, please:\n{text}", "Explain this {lang} joke:\n\n{text}"],
    "to-language": ["Put this into {language}:\n{text}", "Could you give me this in {language}? \"{text}\""],
    "code": ["What does this function do?\n\n```python\n{code}\n```", "Add a docstring to this function:\n```python\n{code}\n```",
             "Are there any bugs in this code?\n\n{code}", "Make this Python more readable:\n```python\n{code}\n```",
             "Write unit tests for this:\n```python\n{code}\n```", "Explain line by line:\n```python\n{code}\n```"],
    "code-ask": ["Could you code up a Python function which {what}?", "In JavaScript, how would I write something that {what}?",
                 "I need Python code that {what}. Keep it short.", "What's a clean way to write a function that {what}?"],
    "shell": ["How do I use the `{cmd}` command? Show examples.", "What is `{cmd}` used for on Linux?",
              "Give me three useful `{cmd}` one-liners."],
}
MATHS = ["Work out {a} percent of {b}.", "Find x if {a}x - {b} = {c}.", "A car drives {b} miles in {d} hours. How fast is it going?",
         "How many seconds are there in {d} days?", "Add {a}, {b} and {c}, then divide by 3.", "What's {a} squared minus {b}?",
         "A pizza is cut into {d} slices and I eat {e}. What fraction is left?", "Convert {b} kilometres to miles.",
         "If {d} workers build a wall in {b} hours, how long would {e} workers take?", "Is {a} divisible by {d}?"]
PEOPLE = ["boss", "landlord", "teacher", "neighbour", "coach", "grandfather", "aunt", "team", "doctor", "colleague"]
SHARES = {"everyday": 0.42, "passage": 0.33, "maths": 0.05, "existing": 0.20}


def _norm_template(t: str) -> str:
    return re.sub(r"\\\{\w+\\\}", ".+", re.escape(" ".join(t.lower().split())))


def template_leaks(held: list[str]) -> list[tuple[str, str]]:
    """(template, held-out prompt) pairs where one of this module's templates produces the prompt."""
    out = []
    for t in [t for group in (*EVERYDAY.values(), *PASSAGE.values(), MATHS) for t in group]:
        pat = re.compile(_norm_template(t).rstrip(r"\.\?!") + r"[.?!]*", flags=re.S)
        out += [(t, h) for h in held if pat.fullmatch(" ".join(h.lower().split()))]
    return out


def common_nouns(n: int = 4000) -> list[tuple[str, str]]:
    """[(noun, gloss)] the n most tagged one-word nouns of WordNet (their first sense's gloss)."""
    root = Path("/usr/share/wordnet")
    if not (root / "data.noun").is_file():
        return []
    counts: dict[str, int] = {}
    for line in (root / "cntlist.rev").read_text(errors="ignore").splitlines():
        key, _, cnt = line.split()
        lemma, _, sense = key.partition("%")
        if sense.startswith("1:") and lemma.isalpha() and lemma.islower():
            counts[lemma] = counts.get(lemma, 0) + int(cnt)
    gloss = {}
    for line in (root / "data.noun").read_text(errors="ignore").splitlines():
        if not line.startswith("  ") and "|" in line:
            head, g = line.split("|", 1)
            w = head.split()[4]
            gloss.setdefault(w, g.split(";")[0].strip())
    ranked = sorted((w for w in counts if w in gloss and len(w) > 2), key=lambda w: -counts[w])
    return [(w, gloss[w]) for w in ranked[:n]]


def _functions(rng, n: int) -> list[tuple[str, str]]:
    """[(source, what it does)] of n functions of the Python installed here (10–30 lines each)."""
    files = _py_files()
    out = []
    for i in rng.permutation(len(files)):
        if len(out) >= n:
            break
        try:
            src = Path(files[i]).read_text(encoding="utf-8")
            tree = ast.parse(src)
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError, RecursionError):
            continue
        lines, taken = src.splitlines(), 0
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_") and 10 <= node.end_lineno - node.lineno < 30:
                doc = (ast.get_docstring(node) or "").split("\n\n")[0].replace("\n", " ").strip().rstrip(".")
                first = doc.split(" ")[0]
                # "Returns the …" reads on after "a function which": keep verb-first docstrings only
                ok = 15 <= len(doc) <= 120 and first[:1].isupper() and first.endswith("s") and first.lower() != "this"
                what = doc[:1].lower() + doc[1:] if ok else ""
                out.append(("\n".join(lines[node.lineno - 1: node.end_lineno]), what))
                taken += 1
                if taken == 3:          # a few per file: many files, and fewer of them parsed
                    break
    return out


def _commands() -> list[str]:
    root = Path("/usr/share/man/man1")
    return sorted({p.name.split(".")[0] for p in root.glob("*.gz") if not p.name.startswith("gcloud")}) if root.is_dir() else []


def _existing(rng) -> list[dict]:
    """Instructions the lab had: the shared data's, v3's natural training turns, templated ones."""
    from .data import data_dir
    out = []
    path = data_dir() / "instructions.json"
    if path.is_file():
        out += [{"task": "shared", "text": t} for t in sorted(set(json.loads(path.read_text())))]
    v3 = Path(__file__).parent / "runs" / "v3" / "prompts.json.gz"
    out += [{"task": p["kind"], "text": p["text"]} for p in json.loads(gzip.decompress(v3.read_bytes())) if p["split"] == "train"]
    return out + make_instructions(12_000, seed=int(rng.integers(1 << 30)))


def _typeable(text: str) -> bool:
    """What the app accepts as a prompt (no control characters but newline and tab)."""
    from ..settings import SettingsError, check_prompt_text
    try:
        check_prompt_text(text)
        return True
    except SettingsError:
        return False


def make_asks(n: int, seed: int = 0, n_functions: int = 3000) -> list[dict]:
    """n user turns [{"kind", "task", "text"}] by SHARES, deduplicated, disjoint from every held-out
    set; n_functions: the pool of installed Python functions the code asks quote."""
    from .natural import Dedup, held_texts
    from .v4 import selection_prompts
    rng = np.random.default_rng(seed)
    held = held_texts() + [p["text"] for p in selection_prompts()]
    leaks = template_leaks(held)
    if leaks:
        raise ValueError(f"templates that make held-out prompts: {leaks[:3]}")
    # Where Debian's word lists are missing (a bare CI machine) the lab's own topics and sentences stand in.
    nouns, topics = common_nouns() or [(t, t) for t in TOPICS], TOPICS
    sayings = [u.split("|", 1) for u in _fortune_units()]
    english = [t for lang, t in sayings if not lang and len(t) < 700] or list(SENTENCES)
    foreign = [(LANG_NAMES[lang], t) for lang, t in sayings if lang in LANG_NAMES and len(t) < 500]
    funcs, cmds = _functions(rng, n_functions), _commands()
    passage_tasks = [t for t in ("summary", "summary", "rewrite", "foreign", "to-language", "code", "code", "code-ask", "shell")
                     if (t != "foreign" or foreign) and (t != "shell" or cmds)]      # in the order the committed asks drew
    pick = lambda xs: xs[int(rng.integers(len(xs)))]
    num = lambda lo, hi: int(rng.integers(lo, hi))

    def everyday() -> dict:
        task = pick(list(EVERYDAY))
        (noun, gloss), topic, topic2 = pick(nouns), pick(topics + [w for w, _ in nouns[:1500]]), pick(topics)
        text = pick(EVERYDAY[task]).format(noun=noun, gloss=gloss, topic=topic, topic2=topic2, n=num(3, 11),
                                           persona=pick(PERSONAS), person=pick(PEOPLE))
        return {"task": task, "text": text[:1].upper() + text[1:] if task != "chat" else text}

    def passage() -> dict:
        task = pick(passage_tasks)
        if task in ("code", "code-ask"):
            code, what = pick(funcs)
            if task == "code-ask" and not what:
                task = "code"
            return {"task": task, "text": pick(PASSAGE[task]).format(code=code, what=what)}
        if task == "shell":
            return {"task": task, "text": pick(PASSAGE[task]).format(cmd=pick(cmds))}
        if task == "foreign":
            lang, text = pick(foreign)
            return {"task": task, "text": pick(PASSAGE[task]).format(lang=lang, text=text)}
        text = pick([t for t in (pick(english) for _ in range(4)) if len(t) < 160] or [pick(english)]) \
            if task == "to-language" else pick(english)
        return {"task": task, "text": pick(PASSAGE[task]).format(text=text, language=pick(LANGS))}

    def maths() -> dict:
        return {"task": "maths", "text": pick(MATHS).format(a=num(12, 999), b=num(20, 500), c=num(2, 90), d=num(2, 12), e=num(1, 6))}

    existing = _existing(rng)
    existing = [existing[i] for i in rng.permutation(len(existing))]
    make = {"everyday": everyday, "passage": passage, "maths": maths}
    kinds = list(SHARES)
    p = np.array([SHARES[k] for k in kinds])
    keep, out = Dedup(held=held, near_kept=False), []
    for _ in range(30 * n):
        if len(out) >= n:
            break
        kind = kinds[int(rng.choice(len(kinds), p=p))]
        if kind == "existing":
            if not existing:
                continue
            ask = existing.pop()
        else:
            ask = make[kind]()
        if _typeable(ask["text"]) and keep.add(ask["text"]):
            out.append({"kind": kind, **ask})
    return out
