"""Teaching texts, metric definitions, the walkthrough and the example prompts — data only."""
from __future__ import annotations

import html
import re

from specdec_core import glossary
from specdec_core.trace import SCHEMA_ID
from specdec_core.trace.schema import READABLE
from specdec_core.trace.decisions import SOURCE_CUES

TITLE = "Speculative decoding, explained live"

INTRO = """\
# Speculative decoding, explained live
A small **draft** guesses the next few tokens; the large **target** checks all the guesses in **one** pass
and keeps those it agrees with: fewer target passes for text the target alone could have written (word for
word with the greedy button; when the page samples, as likely as the target's own). Press **Run**.
"""

# The lesson in three facts, on the first two screens (ui.py): what the two models are and how big,
# why one pass over several guesses costs about one step, and how a rejected guess is replaced.
LESSON = (
    ("Two models, one small and one large",
     "The **target** is SmolLM2-135M, **135 million** parameters, one pass per token. The **draft** is a head of "
     "about **4 million** parameters that reads the target's hidden state and guesses the next few tokens, "
     "helped by a memory of phrases the target itself wrote (where the text repeats, prompt lookup copies it "
     "instead)."),
    ("Why checking several guesses costs about one step",
     "Each target pass reads **all its weights** from memory, and that read, not the arithmetic, is most of a "
     "step. A pass over the text plus 4 guesses reads them **once**: about one step, and it answers “what comes "
     "next?” after every guess at once."),
    ("What happens to a wrong guess",
     "The target tests each guess with a random draw u. A guess **drawn** from the draft's q is kept if "
     "u < p/q — p how much the target wants the token, q how much the draft did (always when p ≥ q); a guess "
     "the draft **chose** (a token tree's alternatives, tried in turn) is kept if u < r(x)/Σr, what the target "
     "still wants there. The first failed guess is **replaced by a token drawn from what the target wanted and "
     "the guesses did not offer**, and later guesses are dropped: the text stays exactly as likely as the "
     "target's alone. Each guess's tooltip says which test it met."),
)

FIRST_LOAD_NOTE = ("The first run loads the model pair: for the offline default pair about **25 s** "
                   "the very first time (the GGUF is converted once and cached), then under 2 s. "
                   "Hub models download on their first use.")

FIRST_PAINT_RACES = 5   # app/record_examples.py keeps the race with the median speedup of these
RECORDED_BANNER = ("● **Recorded race** on **{machine}** (this machine: **{here}**; its times are the recording's): "
                   "{target} + {draft}, {shape}, T = {temperature}. Press **Run** to race here.")
                   # how the race shown was picked: RECORDED_LABEL
# The races the page opens on (app/record_examples.py records them at the page's defaults): file stem, the
# EXAMPLES entry raced, a short name. A task whose answer reuses its context — summarising notes, what
# speculative decoding is deployed for — comes first (it is the prompt box's default); an everyday
# question, where the answer is new text and speculation wins little, follows.
FIRST_PAINT = (("example_copy", 0, "notes the answer reuses"), ("example", 1, "an everyday question"))
RECORDED_LABEL = (f"Recorded races: press one to show it (each prompt raced {FIRST_PAINT_RACES} times, the "
                  "middle speedup shown)")
RECORDED_WHY = ("**Why one wins more:** the draft's kept guesses made **{kept_a} of {n_a}** tokens for {name_a} "
                "but **{kept_b} of {n_b}** for {name_b}: words an answer reuses from its prompt can be guessed, "
                "new text mostly cannot, and each kept guess saves a pass of the big model.")
RUN_WHY = ("**Your race:** the draft's kept guesses made **{kept} of {n}** tokens ({share:.0%}), against "
           "**{kept_a} of {n_a}** for {name_a} and **{kept_b} of {n_b}** for {name_b} in the recorded races; "
           "each kept guess saves a pass of the big model.")
RUN_BANNER = "▶ **Your run** on **{machine}**: {target} + {draft}, {shape}, T = {temperature}."
# After the banner of a race whose draft recalls guesses (config.recalled_runs): where they came from.
RECALLED_NOTE = (" Recalled guesses ⟲ came from this page's own table, warmed by **{runs}** earlier "
                 "run{s} (a new page or a share link starts it empty).")
UPLOAD_BANNER = ("⤒ **Loaded from file** ({files}): recorded on **{machine}**, {target} + {draft}, {shape}; this "
                 "machine is **{here}**.")

RACE_HELP = ("Both lanes run the same model, device and sampler, after a warm-up run that is not timed, **taking turns a "
             "round at a time** (the lane behind in tokens goes next), so a busy machine slows both alike; each "
             "lane's clock counts only its own work, and the page shows both at one clock, so the faster lane pulls "
             "ahead. The **round player** below the verdict shows the race again one round at a time: the draft's "
             "guesses, the target's one pass, each guess kept or rejected (alternate rounds shaded in the lane).")

TIMELINE_HELP = ("Each bordered group is one **round**, one pass of the big model: its head gives the round's "
                 "number, the tokens that pass produced and, for a token tree, how many guesses it checked. Hover a token for "
                 "p (target), q (draft), p/q, the uniform draw u and the decision. Spaces show as ␣, "
                 "newlines as ↵. Besides colour, every decision has its own mark: rejected = struck "
                 "through, unchecked = faded and dashed, resampled = underlined, bonus = overlined. "
                 "A small mark before a guess says who proposed it when not the draft model: "
                 + " ".join(f"{cue.mark} {cue.label}," for cue in SOURCE_CUES.values() if cue.mark)[:-1]
                 + ". Click a token to open its round in the inspector below.")

INSPECTOR_HELP = ("Pick a round (or click a token in the timeline) and a position: left, p and q over their top "
                  "tokens (at T = 0 the raw T = 1 softmax); middle, the test the rule ran on this guess — "
                  "u < p/q for a guess drawn from q, u < r(x)/Σr for one the draft chose (a token tree); right, at "
                  "a rejection, what the replacement was drawn from: norm(max(0, p − q)), or norm(r) in a tree.")

FILES_HELP = ("Every run can be saved: the speculative and the plain trace as JSON (schema "
              f"`{SCHEMA_ID}`, also readable by `python -m specdec_core --show FILE`; older "
              f"{' and '.join(f'`{s}`' for s in READABLE if s != SCHEMA_ID)} files load too). Loading one or "
              "both files back rebuilds every view above without running a model.")
FILES_LABEL = f"Download (JSON, {SCHEMA_ID})"

# (name, definition) — the statistics' definitions (README), shown one click away from the stats panel.
METRICS = [
    ("acceptance rate", "accepted drafted tokens ÷ all drafted tokens (unchecked ones after a rejection "
                        "count as drafted) — vLLM's *draft acceptance rate*."),
    ("α", "mean over checked positions of Σₓ min(p(x), q(x)): the probability that one drafted token is "
          "accepted (Leviathan et al.), the number the theory uses."),
    ("mean committed per round", "new tokens ÷ rounds, the correction or bonus token included: the "
                                 "measured E[τ]. Theory: E[τ] = (1 − α^(k+1)) / (1 − α)."),
    ("c", "cost of one draft call ÷ cost of one plain target step (both measured in this run). A "
          "sequential draft makes one call per token (a tree: per level); the block drafter one per round."),
    ("v(k)", "cost of one verify pass over k + 1 tokens ÷ one plain target step. Leviathan assume 1; "
             "on a CPU it grows with k."),
    ("tokens/s", "new tokens ÷ wall time of the decode (prefill included, model loading and warm-up "
                 "excluded)."),
    ("speedup", "tokens/s of the speculative lane ÷ tokens/s of the plain lane. Predicted: "
                "E[τ] / (k·c + v(k))."),
]

WALKTHROUGH = [
    ("1 · Draft", "The draft proposes k tokens d₁…d_k, each drawn from its distribution q: a small model "
                  "or the distilled head one at a time (k small passes, each reading the guess before it), "
                  "the block drafter all at once (one pass fills k slots; no slot sees another's guess), or "
                  "prompt lookup by copying earlier text (no model pass)."),
    ("2 · Verify", "The target scores the whole block [last token, d₁…d_k] in a single forward pass, "
                   "giving its distribution p at k + 1 positions — about the cost of one normal step."),
    ("3 · Accept or reject", "Left to right, dᵢ is kept if a uniform draw u < p(dᵢ)/q(dᵢ). At temperature 0 "
                             "this means: kept iff dᵢ is the target's top token. The first rejection "
                             "ends the round; later drafts are discarded unchecked."),
    ("4 · Correct", "After a rejection a token is drawn from norm(max(0, p − q)) — exactly what makes the "
                    "output distribution equal to the target's. If every draft passed, a bonus token "
                    "is drawn from p for free."),
    ("5 · Roll back", "Both KV caches are cut back to the committed tokens, and the next round starts. "
                      "One round commits between 1 and k + 1 tokens for one target pass."),
    ("6 · When it pays", "Speedup ≈ E[τ] / (k·c + v(k)): high acceptance (α), a cheap draft (small c) and a "
                         "verify pass that costs about one step (v ≈ 1, true on GPUs, less so on CPUs)."),
]

# Example prompts: (label, prompt). The first is the page's default prompt and the recorded first
# paint (app/record_examples.py): notes the answer summarises; the everyday question is the second.
# Reuse ones answer from the prompt's text (prompt lookup shines), easy ones follow rigid patterns,
# hard ones are creative.
EXAMPLES = [
    ("reuses the text · summarise notes",
     "Summarize the following meeting notes in three bullet points, reusing their wording.\n\n"
     "Meeting notes: The team agreed that the release will move to Friday. The team agreed that the "
     "release notes must list every API change. Alice will update the release notes. Bob will run the "
     "full test suite on Thursday."),
    ("everyday · a question", "Why do cats purr? Answer in three sentences."),
    ("reuses the text · code edit",
     "Rename the variable `total` to `running_sum` in this code and print the full code again:\n\n"
     "def add_all(values):\n    total = 0\n    for value in values:\n        total = total + value\n"
     "    return total"),
    ("easy · counting list", "Count from 1 to 30, writing each number as a word, separated by commas."),
    ("hard · short story", "Write a short story about a lighthouse keeper who finds a message in a bottle."),
    ("hard · poem", "Write an unusual poem about the colour of silence."),
]

# The Race tab's draft field hint: the built-in drafters of the embedded target.
DRAFT_CHOICES = ["distilled", "block", "target-layers:2", "target-layers:4"]   # the built-in drafts offered
DRAFT_HINT = ("distilled: the feature head, k guesses in k sequential head steps · block: the block drafter, "
              "all k ≤ 8 guesses in one pass (no guess sees another) · target-layers:N: the target's first N "
              "layers · add +recycle (distilled+recycle, with prompt lookup) for guesses recalled from the "
              "target's own earlier passes in every token tree")

# What the greedy button says when it has set greedy sampling (it does not start a race).
GREEDY_SET = ("Greedy sampling set: temperature 0, top-p 1 (in Advanced). Press Run: both lanes then write "
              "the target's most likely token at every step, so their texts are identical token for token.")

ERRORS = {
    "empty_prompt": "The prompt is empty: type some text or pick an example.",
    "no_draft": "“Draft model” needs a draft: type distilled, block, a model id, a local folder, or "
                "target-layers:N (or choose a drafter without a model: n-gram, or prompt lookup + recycling).",
    "oom": "Out of memory while running {what}. Try a smaller pair, fewer new tokens, or k.",
    "internal": "This run failed inside the decoder ({error}). The models are unharmed: press Run again; "
                "if it keeps failing, please report it with the prompt and settings.",
}


def metrics_markdown() -> str:
    """The stats' definitions, then the whole glossary, every symbol with its hover text."""
    rows = [f"- **{gloss(name)}** — {gloss(text)}" for name, text in METRICS]
    words = [f"- **{abbr(t.key)}**" + (f" ({t.name})" if t.name else "") + f" — {t.text}" for t in glossary.GLOSSARY]
    return "\n".join(rows) + "\n\n**Glossary** (hover a symbol anywhere on the page for its line)\n\n" + "\n".join(words)


# -- the glossary on the page: a symbol's definition on hover -----------------------------------
def abbr(key: str, shown: str = "") -> str:
    """A glossary term as HTML whose hover shows its sentence (specdec_core.glossary)."""
    return (f'<abbr class="sd-gloss" data-term="{html.escape(key, quote=True)}" '
            f'title="{html.escape(glossary.title(key), quote=True)}">{html.escape(shown or key)}</abbr>')


# Symbols where they stand as symbols: E[τ], α, τ anywhere; a latin one (c k v p q u r) alone,
# followed by =, <, ≥, (, / or ÷ (c = 0.1, v(k), p/q, u < …), or q after "/" and k in "(k)".
_SYMBOL = re.compile(r"E\[τ\]|α|τ|(?<![\w\[(/·.])[ckvpqur](?![\w\]])(?=\s?[=<≥>(/÷])|(?<=/)q(?![\w])|(?<=\()k(?=\))")
_WORD = re.compile(r"\b(acceptance rate|prefill|token tree)\b")
_CODE = re.compile(r"(`+)(.+?)\1", re.S)


def _gloss_plain(text: str, words: bool) -> str:
    out = _SYMBOL.sub(lambda m: abbr(m.group(0)), text)
    return _WORD.sub(lambda m: abbr(m.group(1)), out) if words else out


def gloss(text: str, words: bool = False) -> str:
    """Markdown or escaped HTML text with every glossary symbol in it wrapped in abbr() (code spans
    left alone: they hold model text); words=True also wraps the glossary's multi-word terms."""
    out, last = [], 0
    for m in _CODE.finditer(text):
        out.append(_gloss_plain(text[last:m.start()], words))
        out.append(m.group(0))
        last = m.end()
    out.append(_gloss_plain(text[last:], words))
    return "".join(out)


def gloss_stats(markdown: str) -> str:
    """The stats table with its row names glossed (the numbers are left alone)."""
    lines = []
    for line in markdown.split("\n"):
        cells = line.split(" | ")
        if line.startswith("| ") and not line.startswith("| metric") and len(cells) > 1:
            cells[0] = "| " + gloss(cells[0][2:], words=True)
            line = " | ".join(cells)
        lines.append(line)
    return "\n".join(lines)


_WHY = re.compile(r'(<span id="sd-why"[^>]*>)(.*?)(</span>)', re.S)


def gloss_verdict(verdict_html: str) -> str:
    """The verdict with the symbols of its why-line glossed (the first line is left as it is)."""
    return _WHY.sub(lambda m: m.group(1) + gloss(m.group(2)) + m.group(3), verdict_html or "")


def lesson_html() -> str:
    """The three facts of LESSON as three boxes, their symbols glossed."""
    boxes = []
    for head, text in LESSON:
        body = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", html.escape(text, quote=False))
        body = gloss(body).replace("<b>target</b>", "<b>" + abbr("target") + "</b>").replace(
            "<b>draft</b>", "<b>" + abbr("draft") + "</b>")
        boxes.append(f'<div class="sd-fact"><h4>{html.escape(head)}</h4><p>{body}</p></div>')
    return f'<div class="sd-lesson" id="sd-lesson">{"".join(boxes)}</div>'


def walkthrough_markdown() -> str:
    return "\n\n".join(f"**{title}** — {text}" for title, text in WALKTHROUGH)
