"""Text that already exists, placed as the assistant's answer to a plausible user turn (issue 57):
the draft-v4 stream teacher-forces the target over it, so every position costs one forward pass
instead of a generated token.

    mix = Mixture(SOURCES, seed=0)              # deterministic; resumes from mix.state()
    docs = mix.take(64)                         # [Doc]: source, kind, ask (user turn), answer (text)

A source is a list of *units* (files, entries, sequences) shuffled once per epoch, each unit
yielding a few documents; its cursor is (epoch, unit, document), so a run resumed on another
machine with the same packages draws the same documents. Which source a draw comes from is a
seeded function of the draw's index alone. Sources that are not installed are skipped (and named
in `available()`); the run's state records what was there.
"""
from __future__ import annotations

import ast
import gzip
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass
from pathlib import Path

import numpy as np

EOS = 2
CODE_CHARS, TEXT_CHARS = (120, 2400), (160, 2000)


@dataclass
class Doc:
    source: str
    kind: str                      # prose | code | list | non-English
    ask: str | None                # the user turn (None: `ids` holds prompt and answer already)
    answer: str | None
    ids: tuple | None = None       # (prompt ids, answer ids) of a target-written sequence


def _rng_choice(rng, options):
    return options[int(rng.integers(len(options)))]


def _seeded(*key) -> np.random.Generator:
    return np.random.default_rng([abs(hash_str(str(k))) % (2**31) for k in key])


def hash_str(s: str) -> int:
    """A hash stable across processes (Python's str hash is salted per process)."""
    h = 2166136261
    for b in s.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


def list_kind(text: str) -> str:
    """prose or list: a list has three or more lines opening with a bullet or a number."""
    n = sum(bool(re.match(r"\s*([-*•]|\d+[.)])\s", line)) for line in text.splitlines())
    return "list" if n >= 3 else "prose"


# -- Python code and docstrings (the standard library and every installed package) -------------
def _py_roots() -> list[Path]:
    roots = {Path(sysconfig.get_paths()["stdlib"]), Path(sysconfig.get_paths()["purelib"])}
    return sorted(r for r in roots if r.is_dir())


def _py_files() -> list[str]:
    skip = ("/test/", "/tests/", "/idlelib/", "/lib2to3/", "/__pycache__/", "/site-packages/pip/_vendor/")
    out = []
    for root in _py_roots():
        out += [str(p) for p in root.rglob("*.py") if not any(s in str(p) for s in skip) and p.stat().st_size < 400_000]
    return sorted(set(out))


CODE_ASKS = ["Write a Python function `{name}` that {what}", "Can you write a Python function that {what}",
             "How would I implement `{name}` in Python? It {what_s}", "Show me Python code for `{name}`: it {what_s}",
             "I need a function that {what}. Can you write it in Python?", "Implement {name} in Python."]
CLASS_ASKS = ["Write a Python class `{name}`: {what}", "Show me how to write a `{name}` class in Python.",
              "Can you implement a Python class that {what}"]
BARE_ASKS = ["Write the Python function `{name}` from the {mod} module.", "Show me an implementation of `{name}` in Python.",
             "Can you write `{name}` in Python?"]
CODE_LEADS = ["", "Here is a Python implementation:\n\n", "Sure! Here's the code:\n\n", "Here's one way to write it:\n\n",
              "Certainly! Below is a Python implementation.\n\n"]
DOC_ASKS = ["What does `{qual}` do?", "Explain the Python function `{qual}`.", "What is `{name}` in {mod} for?",
            "Can you describe what {qual} does?"]


def _first_line(doc: str | None) -> str:
    line = (doc or "").strip().split("\n\n")[0].replace("\n", " ").strip()
    return line[:1].lower() + line[1:] if line else ""


def _code_docs(path: str, rng) -> list[Doc]:
    try:
        src = Path(path).read_text(encoding="utf-8")
        tree = ast.parse(src)
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError, RecursionError):
        return []
    lines, out = src.splitlines(), []
    mod = Path(path).stem
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) or node.name.startswith("__"):
            continue
        code = "\n".join(lines[node.lineno - 1 - len(node.decorator_list): node.end_lineno])
        doc = ast.get_docstring(node)
        what = _first_line(doc).rstrip(".")
        if CODE_CHARS[0] <= len(code) <= CODE_CHARS[1]:
            asks = (CLASS_ASKS if isinstance(node, ast.ClassDef) else CODE_ASKS) if what else BARE_ASKS
            ask = _rng_choice(rng, asks).format(name=node.name, what=what + ".", what_s=what + ".", mod=mod)
            lead = _rng_choice(rng, CODE_LEADS)
            out.append(Doc("python-code", "code", ask, f"{lead}```python\n{code}\n```"))
        if doc and TEXT_CHARS[0] <= len(doc) <= TEXT_CHARS[1]:
            ask = _rng_choice(rng, DOC_ASKS).format(qual=f"{mod}.{node.name}", name=node.name, mod=mod)
            out.append(Doc("docstrings", list_kind(doc), ask, doc))
    return out


# -- The Python documentation (Debian python3.11-doc: reStructuredText sources) ----------------
def _rst_files() -> list[str]:
    return sorted(str(p) for p in Path("/usr/share/doc").glob("python3*/html/_sources/**/*.rst.txt"))


def _rst_docs(path: str, rng) -> list[Doc]:
    text = Path(path).read_text(errors="ignore")
    # Sections: a title line underlined with = - ~ ^ * (the heading names the user's question).
    parts = re.split(r"\n([^\n]{3,80})\n([=\-~^*\"]{3,})\n", "\n" + text)
    out, title = [], Path(path).name.removesuffix(".rst.txt").replace("_", " ")
    for i in range(1, len(parts) - 2, 3):
        heading, body = re.sub(r":[a-z:]+:`~?([^`<]+?)(?: <[^>]+>)?`", r"\1", parts[i]).strip(), parts[i + 2]
        body = re.sub(r"^\.\. [a-z-]+::.*$", "", body, flags=re.M).strip()
        body = re.sub(r":[a-z:]+:`~?([^`<]+?)(?: <[^>]+>)?`", r"`\1`", body)
        for chunk in _chunks(body, TEXT_CHARS[1]):
            if len(chunk) >= TEXT_CHARS[0]:
                ask = _rng_choice(rng, ["Explain {h} in Python.", "How does {h} work in Python?",
                                        "Tell me about {h} ({t}).", "Can you explain {h}?"]).format(h=heading, t=title)
                kind = "code" if chunk.count("\n    ") >= 4 or ">>>" in chunk else list_kind(chunk)
                out.append(Doc("python-docs", kind, ask, chunk))
    return out


def _chunks(text: str, limit: int) -> list[str]:
    """Paragraph-aligned pieces of at most ~limit characters."""
    out, cur = [], ""
    for para in re.split(r"\n\s*\n", text):
        if cur and len(cur) + len(para) > limit:
            out.append(cur.strip())
            cur = ""
        cur += para + "\n\n"
    if cur.strip():
        out.append(cur.strip())
    return [c[:limit] for c in out]


# -- Package READMEs (the long descriptions in installed packages' METADATA: markdown) --------
def _readme_files() -> list[str]:
    roots = _py_roots()
    return sorted(str(p) for r in roots for p in r.glob("*.dist-info/METADATA"))


def _md_sections(body: str) -> list[tuple[str, str]]:
    """(heading, text) of markdown sections; a '#' line inside a ``` fence is code, not a heading."""
    out, heading, cur, fenced = [], "an overview", [], False
    for line in body.splitlines():
        fenced ^= line.lstrip().startswith("```")
        m = None if fenced else re.match(r"#{1,3} (.+)$", line)
        if m:
            out.append((heading, "\n".join(cur)))
            heading, cur = m.group(1).strip(), []
        else:
            cur.append(line)
    return out + [(heading, "\n".join(cur))]


def _readme_docs(path: str, rng) -> list[Doc]:
    text = Path(path).read_text(errors="ignore")
    head, _, body = text.partition("\n\n")
    name = re.search(r"^Name: (.+)$", head, re.M)
    name = name.group(1).strip() if name else Path(path).parent.name.split("-")[0]
    out = []
    for heading, sec in _md_sections(body):
        sec = re.sub(r"<[^>]+>|!\[[^\]]*\]\([^)]*\)", "", sec).strip()
        for chunk in _chunks(sec, TEXT_CHARS[1]):
            if len(chunk) >= TEXT_CHARS[0]:
                ask = _rng_choice(rng, ["What is {n}? Give me {h}.", "Tell me about {h} in the {n} package.",
                                        "I'm using {n}. Explain {h}.", "Explain {h} for the Python library {n}."]
                                  ).format(n=name, h=heading.lower() if heading != "an overview" else heading)
                kind = "code" if "```" in chunk or chunk.count("\n    ") >= 4 else list_kind(chunk)
                out.append(Doc("readme", kind, ask, chunk))
    return out


# -- Manual pages, English and other languages (rendered by man, plain text) -----------------
LANG_NAMES = {"de": "German", "fr": "French", "es": "Spanish", "it": "Italian", "pt": "Portuguese", "nl": "Dutch",
              "pl": "Polish", "sv": "Swedish", "da": "Danish", "fi": "Finnish", "cs": "Czech", "hu": "Hungarian",
              "ro": "Romanian", "ru": "Russian", "uk": "Ukrainian", "tr": "Turkish", "id": "Indonesian", "ja": "Japanese",
              "ko": "Korean", "zh_CN": "Chinese", "vi": "Vietnamese", "sr": "Serbian", "hr": "Croatian", "nb": "Norwegian"}


def _man_files() -> list[str]:
    root = Path("/usr/share/man")
    # The Google Cloud SDK's ~16k generated pages (gcloud_*) would be most of the English pages.
    return sorted(str(p) for p in root.glob("**/man[1-8]/*.gz") if not p.name.startswith("gcloud")) if root.is_dir() else []


def _man_lang(path: str) -> str | None:
    part = Path(path).parts[4] if len(Path(path).parts) > 5 else None
    return part.split(".")[0] if part and not part.startswith("man") else None


def _man_docs(path: str, rng) -> list[Doc]:
    try:
        txt = subprocess.run(["man", "-l", "-Tutf8", path], capture_output=True, timeout=20,
                             env={"MANWIDTH": "100", "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    text = re.sub(r".\x08", "", txt.decode("utf-8", "ignore"))        # overstrike (bold, underline)
    cmd = Path(path).name.split(".")[0]
    lang = _man_lang(path)
    out = []
    for sec in re.split(r"\n(?=[A-ZÄÖÜÉÈ][A-ZÄÖÜÉÈ \-]{2,}\n)", text):
        heading, _, body = sec.partition("\n")
        body = re.sub(r"\n{3,}", "\n\n", "\n".join(line[7:] if line.startswith("       ") else line.strip()
                                                   for line in body.splitlines())).strip()
        for chunk in _chunks(body, TEXT_CHARS[1])[:2]:
            if len(chunk) < TEXT_CHARS[0]:
                continue
            if lang:
                ask = f"Explain the `{cmd}` command ({heading.strip().lower()}) in {LANG_NAMES.get(lang, lang)}."
                out.append(Doc("man", "non-English", ask, chunk))
            else:
                ask = _rng_choice(rng, ["What does the `{c}` command do?", "Explain the {h} of `{c}`.",
                                        "How do I use `{c}` on Linux?"]).format(c=cmd, h=heading.strip().lower())
                out.append(Doc("man", list_kind(chunk), ask, chunk))
    return out


# -- Dictionaries and sayings (Debian dict-gcide, wordnet-base, fortunes[-de|-fr|-es|-it]) ----
def _gcide_units() -> list[str]:
    path = Path("/usr/share/dictd/gcide.dict.dz")
    if not path.is_file():
        return []
    text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="ignore")
    return [e for e in text.split("\n\n") if 80 <= len(e) <= 1500]


def _gcide_docs(entry: str, rng) -> list[Doc]:
    head, _, body = entry.strip().partition("\n")
    word = head.split(" \\")[0].strip()
    body = re.sub(r"\s+", " ", body.replace("[1913 Webster]", "")).strip()
    if not word or len(body) < 60:
        return []
    ask = _rng_choice(rng, ['What does "{w}" mean?', 'Define "{w}".', "Look up {w} in the dictionary for me.",
                            "What's the meaning of the word {w}?"]).format(w=word)
    return [Doc("dictionary", "prose", ask, f"{head.strip()} {body}")]


def _wordnet_units() -> list[str]:
    out = []
    for pos in ("noun", "verb", "adj", "adv"):
        path = Path(f"/usr/share/wordnet/data.{pos}")
        if path.is_file():
            out += [f"{pos}|{line}" for line in path.read_text(errors="ignore").splitlines()
                    if not line.startswith("  ") and "|" in line]
    return out


def _wordnet_docs(unit: str, rng) -> list[Doc]:
    pos, line = unit.split("|", 1)
    head, gloss = line.split("|", 1)
    words = head.split()
    word = words[4].replace("_", " ") if len(words) > 4 else ""
    if not word:
        return []
    article = {"noun": "a noun", "verb": "a verb", "adj": "an adjective", "adv": "an adverb"}[pos]
    ask = _rng_choice(rng, ['What does "{w}" mean?', "Define the word {w}.", "Meaning of {w}?"]).format(w=word)
    return [Doc("wordnet", "prose", ask, f'"{word.capitalize()}" is {article}: {gloss.strip()}')]


def _fortune_units() -> list[str]:
    out = []
    for folder in sorted(Path("/usr/share/games/fortunes").glob("**/")):
        for path in sorted(folder.glob("*")):
            if path.is_file() and not path.suffix and not path.name.startswith("README"):
                lang = path.parent.name if path.parent.name in LANG_NAMES else ""
                out += [f"{lang}|{t.strip()}" for t in path.read_text(errors="ignore").split("\n%\n")
                        if 40 <= len(t.strip()) <= 1200 and "\x1b" not in t]
    return out


def _fortune_docs(unit: str, rng) -> list[Doc]:
    lang, text = unit.split("|", 1)
    if lang:
        ask = _rng_choice(rng, ["Tell me a saying in {l}.", "Share a quote in {l}, please.", "Write something funny in {l}."])
        return [Doc("fortunes", "non-English", ask.format(l=LANG_NAMES[lang]), text)]
    ask = _rng_choice(rng, ["Tell me a quote or a saying, please.", "Say something witty.", "Give me a famous quote.",
                            "Tell me a joke."])
    return [Doc("fortunes", list_kind(text), ask, text)]


# -- The target's own text: its answers (shared data, corpus) and the user turns v3 made it write ---
def _target_units() -> list[tuple]:
    from .sources import target_outputs
    try:
        return [(np.asarray(s["prompt"]), np.asarray(s["gen"])) for s in target_outputs("shared,gen")]
    except (FileNotFoundError, SystemExit):
        return []


def _target_docs(unit: tuple, rng) -> list[Doc]:
    prompt, gen = unit
    return [Doc("target", "target-written", None, None, ids=(prompt, gen))]


def _v3_turn_units() -> list[dict]:
    import json
    path = Path(__file__).parent / "runs" / "v3" / "prompts.json.gz"
    if not path.is_file():
        return []
    return [p for p in json.loads(gzip.decompress(path.read_bytes())) if p.get("split") == "train"]


def _v3_turn_docs(p: dict, rng) -> list[Doc]:
    ask = _rng_choice(rng, ["Write a message someone might send a chatbot about {t}.",
                            "Give me an example of a user's request about {t}.", "What might someone ask about {t}?"])
    return [Doc("v3-turns", list_kind(p["text"]), ask.format(t=p["topic"]), p["text"])]


@dataclass(frozen=True)
class Source:
    name: str
    weight: float                  # share of draws (documents), before a missing source's is spread
    units: object                  # () -> list of units
    docs: object                   # (unit, rng) -> [Doc]
    per_unit: int = 3              # documents kept from one unit (a file) per epoch: more files, less of each


SOURCES = (
    Source("target", 0.30, _target_units, _target_docs),
    Source("python-code", 0.16, _py_files, _code_docs),
    Source("docstrings", 0.06, _py_files, _code_docs),
    Source("python-docs", 0.12, _rst_files, _rst_docs, per_unit=4),
    Source("readme", 0.08, _readme_files, _readme_docs, per_unit=6),
    Source("man", 0.12, _man_files, _man_docs),
    Source("dictionary", 0.05, _gcide_units, _gcide_docs),
    Source("wordnet", 0.02, _wordnet_units, _wordnet_docs),
    Source("fortunes", 0.06, _fortune_units, _fortune_docs),
    Source("v3-turns", 0.03, _v3_turn_units, _v3_turn_docs),
)


class Mixture:
    """Seeded, resumable draws of documents from the sources (cursor state: `state()`)."""

    def __init__(self, sources=SOURCES, seed: int = 0, state: dict | None = None):
        self.seed, self.units, self.buf = seed, {}, {}
        for s in sources:
            units = s.units()
            if units:
                self.units[s.name] = units
        self.sources = [s for s in sources if s.name in self.units]
        w = np.array([s.weight for s in self.sources])
        self.p = w / w.sum()
        st = state or {}
        self.drawn = st.get("drawn", 0)
        self.cursor = {s.name: list(st.get("cursor", {}).get(s.name, [0, 0, 0])) for s in self.sources}

    def available(self) -> dict:
        """{source: number of units} of the sources present on this machine."""
        return {name: len(u) for name, u in self.units.items()}

    def state(self) -> dict:
        return {"seed": self.seed, "drawn": self.drawn, "cursor": {k: list(v) for k, v in self.cursor.items()},
                "available": self.available()}

    def _order(self, name: str, epoch: int) -> np.ndarray:
        key = (name, epoch)
        if key not in self.buf:
            self.buf = {k: v for k, v in self.buf.items() if k[0] != name}
            self.buf[key] = _seeded(self.seed, name, epoch).permutation(len(self.units[name]))
        return self.buf[key]

    def _next(self, src: Source) -> Doc:
        cur = self.cursor[src.name]             # [epoch, unit index, documents of that unit taken]
        for _ in range(10_000):
            order = self._order(src.name, cur[0])
            if cur[1] >= len(order):
                cur[:] = [cur[0] + 1, 0, 0]
                continue
            unit = self.units[src.name][order[cur[1]]]
            rng = _seeded(self.seed, src.name, cur[0], cur[1])
            docs = [d for d in src.docs(unit, rng) if d.source == src.name]
            if len(docs) > src.per_unit:      # a few of the unit's documents, different ones each epoch
                docs = [docs[i] for i in sorted(rng.permutation(len(docs))[: src.per_unit])]
            if cur[2] < len(docs):
                cur[2] += 1
                return docs[cur[2] - 1]
            cur[1], cur[2] = cur[1] + 1, 0
        raise RuntimeError(f"source {src.name} yields no documents")

    def take(self, n: int) -> list[Doc]:
        """The next n documents; draw i's source is a seeded function of i alone."""
        out = []
        for _ in range(n):
            r = _seeded(self.seed, "draw", self.drawn).random()
            out.append(self._next(self.sources[int(np.searchsorted(np.cumsum(self.p), r, side="right").clip(0, len(self.p) - 1))]))
            self.drawn += 1
        return out


def write_docs(mix: Mixture, n: int, path: Path) -> None:
    """The mixture's next n documents into a gzipped JSON-lines file, its first line the state they
    start from: a machine without the sources (a lent GPU) trains on them (`read_docs`)."""
    import json
    start = mix.state()
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.write(json.dumps({"start": start}) + "\n")
        for d in mix.take(n):
            ids = None if d.ids is None else [np.asarray(x).tolist() for x in d.ids]
            f.write(json.dumps({"source": d.source, "kind": d.kind, "ask": d.ask, "answer": d.answer, "ids": ids}) + "\n")


def read_docs(path: Path) -> tuple[dict, list[Doc]]:
    """(the mixture state the documents start from, the documents) of a `write_docs` file."""
    import json
    with gzip.open(path, "rt", encoding="utf-8") as f:
        start = json.loads(f.readline())["start"]
        docs = [Doc(**{**r, "ids": None if r["ids"] is None else tuple(np.asarray(x) for x in r["ids"])})
                for r in map(json.loads, f)]
    return start, docs


def encode(tokenizer, encode_prompt, doc: Doc, max_answer: int = 320) -> tuple[np.ndarray, int, bool]:
    """A document as (ids [n] int64, prompt length, complete): the chat prompt of its user turn, then
    the answer's tokens (at most max_answer), then <|im_end|> when the answer was not cut."""
    if doc.ids is not None:
        prompt, gen = (np.asarray(x, dtype=np.int64) for x in doc.ids)
    else:
        prompt = np.asarray(encode_prompt(doc.ask), dtype=np.int64)
        gen = np.asarray(tokenizer(doc.answer, add_special_tokens=False)["input_ids"], dtype=np.int64)
        if len(gen) < max_answer:
            gen = np.append(gen, EOS)
    complete = bool(len(gen) and gen[min(len(gen), max_answer) - 1] == EOS)
    gen = gen[:max_answer]
    return np.concatenate([prompt, gen]), len(prompt), complete


if __name__ == "__main__":      # a look at the mix: python -m specdec_core.lab.texts [n]
    mix = Mixture()
    print(mix.available())
    for d in mix.take(int(sys.argv[1]) if len(sys.argv) > 1 else 12):
        print(f"--- {d.source} / {d.kind}\nUSER: {d.ask}\nANSWER: {(d.answer or '')[:300]!r}")
