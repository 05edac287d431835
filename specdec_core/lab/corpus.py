"""The lab's diverse training corpus (issue 11), rebuilt by `python -m specdec_core.lab corpus`.

Three sources, each a list of sequences {prompt: int64 [P], gen: int64 [G], task, source}:
- "gen": the target's own answers (greedy and T = 0.8 / top-p 0.95, alternating) to templated
  instructions (instructions.py) and to questions the target invented itself at T = 1.0;
- "text": plain text the project installs by name, teacher-forced as an assistant answer to a
  fitting instruction (WordNet glosses, GCIDE definitions, fortunes, the Python documentation);
- "shared": ../shared/distill-data (data.py).
Generation writes shards of `batch` sequences to <cache>/corpus/gen_XXXX.npz and skips existing
ones, so an interrupted run resumes; nothing here is committed to the repository.
"""
from __future__ import annotations

import gzip
import re
import time
from pathlib import Path

import numpy as np
import torch

from .data import pending_shards, read_shards, save_npz
from .instructions import check_disjoint, clean_question, make_instructions, self_instruct_prompts

EOS = 2


@torch.no_grad()
def generate_batch(target, prompts: list[list[int]], max_new: int, sample: bool, seed: int) -> list[np.ndarray]:
    """Left-padded batched generate; each row's new tokens up to and including the first EOS."""
    width = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), width), EOS, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for r, p in enumerate(prompts):
        ids[r, width - len(p):], mask[r, width - len(p):] = torch.tensor(p), 1
    torch.manual_seed(seed)
    kw = dict(do_sample=True, temperature=0.8 if sample is True else sample, top_p=0.95) if sample else dict(do_sample=False)
    out = target.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new, pad_token_id=EOS, **kw)[:, width:]
    rows = []
    for row in out.numpy():
        end = np.flatnonzero(row == EOS)
        rows.append(row[: end[0] + 1] if len(end) else row)
    return rows


def _shards(folder: Path, stem: str) -> list[Path]:
    return sorted(p for p in folder.glob(f"{stem}_*.npz") if ".tmp" not in p.name)


def _save(path: Path, seqs: list[dict]) -> None:
    """One shard of sequences (atomic)."""
    save_npz(path, prompt=np.concatenate([s["prompt"] for s in seqs]).astype(np.int32),
             gen=np.concatenate([s["gen"] for s in seqs]).astype(np.int32),
             p_off=np.cumsum([0] + [len(s["prompt"]) for s in seqs]), g_off=np.cumsum([0] + [len(s["gen"]) for s in seqs]),
             task=np.array([s["task"] for s in seqs]), greedy=np.array([s["greedy"] for s in seqs]))


def load_corpus(folder: Path, stem: str) -> list[dict]:
    """Every sequence of <folder>/<stem>_*.npz: [{prompt, gen, task, greedy, source}]."""
    seqs = []
    for d in read_shards(folder, stem):
        for i in range(len(d["task"])):
            seqs.append(dict(prompt=d["prompt"][d["p_off"][i]:d["p_off"][i + 1]].astype(np.int64),
                             gen=d["gen"][d["g_off"][i]:d["g_off"][i + 1]].astype(np.int64),
                             task=str(d["task"][i]), greedy=bool(d["greedy"][i]), source=stem))
    return seqs


def build_instructions(pair, folder: Path, n_templated: int, n_invented: int, batch: int, log=print) -> list[dict]:
    """Templated instructions + questions the target invents at T = 1.0 (cached in questions_*.npz),
    shuffled together once (fixed seed) so any prefix of the answers is a fair mix. Prompts are
    encoded by the pair, as the decoder encodes a user's prompt."""
    asks = self_instruct_prompts(n_invented)
    for s in range(len(_shards(folder, "questions")), (len(asks) + batch - 1) // batch):
        prompts = [pair.encode_prompt(a) for a in asks[s * batch:(s + 1) * batch]]
        rows = generate_batch(pair.target, prompts, 48, 1.0, seed=10_000 + s)
        _save(folder / f"questions_{s:04d}.npz", [dict(prompt=np.array(p), gen=r, task="invented", greedy=False)
                                                  for p, r in zip(prompts, rows)])
        log(f"questions {min(len(asks), (s + 1) * batch)}/{len(asks)}")
    invented = []
    for q in load_corpus(folder, "questions"):
        text = clean_question(pair.tokenizer.decode(q["gen"], skip_special_tokens=True))
        if text:
            invented.append({"task": "invented", "text": text})
    items = make_instructions(n_templated) + invented
    check_disjoint([it["text"] for it in items])
    return [items[i] for i in np.random.default_rng(0).permutation(len(items))]


def generate_answers(pair, folder: Path, items: list[dict], batch: int, max_new: int = 160,
                     minutes: float = 1e9, log=print) -> None:
    """The target's answers to items in shards of `batch` (alternately greedy and sampled); resumes."""
    t0, n_tok = time.time(), 0
    n_shards = (len(items) + batch - 1) // batch
    for s, path in pending_shards(folder, "gen", n_shards, minutes, log):
        chunk = items[s * batch:(s + 1) * batch]
        prompts = [pair.encode_prompt(it["text"]) for it in chunk]
        greedy = s % 2 == 0
        rows = generate_batch(pair.target, prompts, max_new, not greedy, seed=s)
        _save(path, [dict(prompt=np.array(p), gen=r, task=it["task"], greedy=greedy)
                     for p, r, it in zip(prompts, rows, chunk)])
        n_tok += sum(len(r) for r in rows)
        rate = n_tok / (time.time() - t0)
        log(f"answers shard {s + 1}/{n_shards}  {n_tok} tok  {rate:.0f} tok/s")


# -- plain text installed by name (Debian packages), as assistant answers ---------------------
def _wordnet(limit: int, rng) -> list[tuple[str, str, str]]:
    out = []
    for pos, name in (("noun", "a noun"), ("verb", "a verb"), ("adj", "an adjective"), ("adv", "an adverb")):
        path = Path(f"/usr/share/wordnet/data.{pos}")
        if not path.is_file():
            continue
        for line in path.read_text(errors="ignore").splitlines():
            if line.startswith("  ") or "|" not in line:
                continue
            head, gloss = line.split("|", 1)
            word = head.split()[4].replace("_", " ")
            asks = [f"What does \"{word}\" mean?", f"Define the word {word}.", f"Meaning of {word}?"]
            out.append((asks[rng.integers(3)], f"\"{word.capitalize()}\" is {name}: {gloss.strip()}", "definition"))
    return [out[i] for i in rng.permutation(len(out))[:limit]]


def _fortunes(limit: int, rng) -> list[tuple[str, str, str]]:
    out, folder = [], Path("/usr/share/games/fortunes")
    for path in sorted(folder.glob("*")) if folder.is_dir() else []:
        if path.suffix or path.name.startswith("README") or not path.is_file():
            continue
        for text in path.read_text(errors="ignore").split("\n%\n"):
            text = text.strip()
            if 40 <= len(text) <= 900 and "\x1b" not in text:
                out.append(("Tell me a quote or a saying, please.", text, "fortune"))
    return [out[i] for i in rng.permutation(len(out))[:limit]]


def _python_docs(limit: int, rng) -> list[tuple[str, str, str]]:
    out = []
    for path in sorted(Path("/usr/share/doc").glob("python3*/html/_sources/**/*.rst.txt")):
        text = path.read_text(errors="ignore")
        title = path.name.removesuffix(".rst.txt").replace("_", " ")
        for para in re.split(r"\n\s*\n", text):
            para = para.strip()
            if 200 <= len(para) <= 1500 and not para.startswith((".. ", "===", "---", "***")):
                out.append((f"Explain this part of the Python documentation about {title}.", para, "python-docs"))
    return [out[i] for i in rng.permutation(len(out))[:limit]]


def _gcide(limit: int, rng) -> list[tuple[str, str, str]]:
    path = Path("/usr/share/dictd/gcide.dict.dz")
    if not path.is_file():
        return []
    text = gzip.decompress(path.read_bytes()).decode("utf-8", errors="ignore")
    out = []
    for entry in text.split("\n\n"):
        head, _, body = entry.strip().partition("\n")
        word = head.split(" \\")[0].strip()
        body = re.sub(r"\s+", " ", body.replace("[1913 Webster]", "")).strip()
        if word.isalpha() and 80 <= len(body) <= 1200:
            out.append((f"Look up \"{word}\" in the dictionary for me.", f"{head.strip()} {body}", "dictionary"))
    return [out[i] for i in rng.permutation(len(out))[:limit]]


TEXT_SOURCES = {"wordnet": _wordnet, "gcide": _gcide, "fortunes": _fortunes, "python-docs": _python_docs}


def text_sequences(pair, per_source: int, max_tokens: int = 256, seed: int = 0) -> list[dict]:
    """Plain text from the installed Debian packages as chat answers (teacher forcing only)."""
    rng = np.random.default_rng(seed)
    seqs = []
    for name, read in TEXT_SOURCES.items():
        for ask, answer, task in read(per_source, rng):
            gen = pair.tokenizer(answer, add_special_tokens=False)["input_ids"][:max_tokens] + [EOS]
            seqs.append(dict(prompt=np.array(pair.encode_prompt(ask)), gen=np.array(gen), task=task, greedy=False, source="text"))
    return [seqs[i] for i in rng.permutation(len(seqs))]
