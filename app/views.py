"""From a (speculative, plain) pair of traces to the value of every view on the page.

`views()` is used for the first paint (the recorded example), after an upload and after a run,
so every view is always rebuilt from Trace objects only."""
from __future__ import annotations

import functools
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Optional

from specdec_core import Plan, Trace, data, describe_machine
from specdec_core.trace import measured_speedup
from specdec_core.trace.decisions import DECISIONS, draft_decision
from specdec_core.trace.token_text import round_labels

from . import charts, explain, names, player, race, round_charts
from .limit import limit_html
from .teach.worked import worked_html
from .timeline import with_best_round, plain_lane_html, spec_lane_html, timeline_html

EXAMPLE_FILES = ("example_speculative.trace.json", "example_plain.trace.json")
CHART_NAMES = ("chart_acceptance", "chart_histogram", "chart_time", "chart_split", "chart_speedup")


def load_example(files: tuple[str, str] = EXAMPLE_FILES) -> tuple[Optional[Trace], Optional[Trace]]:
    """Recorded (speculative, plain) traces shipped with specdec_core in data/examples/ (None where
    a file is missing): the first paint by default, or another pair of files (the walkthrough's)."""
    out = []
    for name in files:
        file = data.file("examples", name)
        out.append(Trace.from_json(file.read_bytes()) if file.is_file() else None)
    return out[0], out[1]


def recorded_races() -> dict:
    """The bundled races the page opens on (explain.FIRST_PAINT, recorded by app.record_examples), in order:
    {stem: (speculative, plain)}; a race whose files are missing is left out."""
    out = {}
    for stem, _, _ in explain.FIRST_PAINT:
        spec, plain = load_example((f"{stem}_speculative.trace.json", f"{stem}_plain.trace.json"))
        if spec is not None and plain is not None:
            out[stem] = (spec, plain)
    return out


def recorded_choices(races: dict) -> list[tuple[str, str]]:
    """The recorded-race switch's (label, stem) choices: the example's label and its speedup."""
    names = {stem: explain.EXAMPLES[i][0] for stem, i, _ in explain.FIRST_PAINT}
    out = []
    for stem, (spec, plain) in races.items():
        speedup = measured_speedup(spec, plain)
        out.append((f"{names[stem]} · " + (f"{speedup:.2f}×" if speedup else "no speedup"), stem))
    return out


def _kept(spec) -> int:
    return sum(r.n_accepted for r in spec.rounds)


@functools.lru_cache(maxsize=1)
def recorded_kept() -> tuple:
    """(short name, kept guesses, tokens) of each bundled recorded race, read once: the files never
    change while the app serves."""
    names = {stem: name for stem, _, name in explain.FIRST_PAINT}
    return tuple((names[stem], _kept(spec), len(spec.output_ids)) for stem, (spec, _) in recorded_races().items())


def recorded_why(spec=None) -> str:
    """One sentence on why speedups differ, from the traces: how many of each recorded race's tokens
    were the draft's kept guesses ("" unless both races are bundled); with `spec` (a race run or
    loaded on the page), that race's share beside theirs."""
    races = recorded_kept()
    if len(races) < 2:
        return ""
    (name_a, kept_a, n_a), (name_b, kept_b, n_b) = races[:2]
    fields = dict(kept_a=kept_a, n_a=n_a, name_a=name_a, kept_b=kept_b, n_b=n_b, name_b=name_b)
    if spec is not None and spec.output_ids and not spec.config.plain:
        return explain.RUN_WHY.format(kept=_kept(spec), n=len(spec.output_ids),
                                      share=_kept(spec) / len(spec.output_ids), **fields)
    return explain.RECORDED_WHY.format(**fields)


def split_traces(traces) -> tuple[Optional[Trace], Optional[Trace]]:
    """(speculative, plain) from a list of traces, by their recorded mode / k."""
    spec = plain = None
    for t in traces:
        if t.config.plain:
            plain = t
        else:
            spec = t
    return spec, plain


def default_focus(trace) -> tuple[int, int]:
    """(round, position) worth inspecting first: the first rejection, else round 0 position 1."""
    if trace is None:
        return 0, 1
    for r in trace.rounds:
        for i, t in enumerate(r.drafted):
            if t.evaluated and not t.accepted:
                return r.index, i + 1
    first = next((r.index for r in trace.rounds if r.drafted), 0)
    return first, 1


def position_choices(trace, round_index: int) -> list[tuple[str, int]]:
    """Dropdown choices for the drafted positions of a round: 'i · token · decision'."""
    if trace is None or not 0 <= round_index < len(trace.rounds):
        return []
    out = []
    rnd = trace.rounds[round_index]
    for i, (t, label) in enumerate(zip(rnd.drafted, round_labels(trace, rnd)[0])):
        d = DECISIONS[draft_decision(t)]
        out.append((f"{i + 1} · {charts._label(label)} · {d.mark} {d.label}", i + 1))
    return out


def this_machine() -> str:
    """The machine a Run here would race on (a GPU when there is one), named as a trace's config names
    the machine it was recorded on (models.machine.describe)."""
    import torch
    return describe_machine("cuda" if torch.cuda.is_available() else "cpu")


def banner(spec, plain, kind: str, files: str = "") -> str:
    t = spec or plain
    if t is None:
        return "No trace yet: press **Run**."
    cfg = t.config
    fields = dict(device=cfg.device or "?", machine=cfg.machine or cfg.device or "?", target=cfg.target, draft=(spec.config.draft if spec else "—"),
                  shape=(Plan.from_config(spec.config).label() if spec else "plain"),
                  temperature=cfg.temperature, files=files, here=this_machine())
    # the expert's names in a student's words (app/names.py; the stats and Advanced keep the names)
    fields["draft"], fields["shape"] = names.drafter_words(fields["draft"]), names.shape_words(fields["shape"])
    template = {"example": explain.RECORDED_BANNER, "run": explain.RUN_BANNER, "upload": explain.UPLOAD_BANNER}[kind]
    runs = spec.config.recalled_runs if spec is not None else None
    recalled = "" if runs is None else explain.RECALLED_NOTE.format(runs=runs, s="" if runs == 1 else "s")
    return template.format(**fields) + recalled


def trace_dir() -> Path:
    """Where runs' trace files are written for download: one folder per run."""
    return Path(tempfile.gettempdir()) / "specdec-explainer"


def prune_trace_files(base: Path, max_age_s: float, max_runs: int) -> int:
    """Remove run folders older than max_age_s, then the oldest beyond max_runs; returns how many.
    The disk used by downloads stays bounded however long the app serves."""
    folders = sorted((p.stat().st_mtime, p) for p in base.glob("run-*") if p.is_dir())
    now, removed = time.time(), 0
    for i, (mtime, folder) in enumerate(folders):
        if now - mtime > max_age_s or len(folders) - i > max_runs:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
    return removed


def download_folder() -> tuple[Path, str]:
    """(a fresh folder for one run's downloads, a time stamp for file names); older folders are
    pruned first, by the deployment's age and count budget."""
    from .deploy import Policy
    policy = Policy.from_env()
    base = trace_dir()
    base.mkdir(exist_ok=True)
    prune_trace_files(base, policy.trace_max_age_s, max(policy.trace_max_runs - 1, 0))
    return Path(tempfile.mkdtemp(dir=base, prefix="run-")), time.strftime("%Y%m%d-%H%M%S")


def write_files(spec, plain) -> list[str]:
    """The traces as JSON files in a fresh download folder."""
    folder, stamp = download_folder()
    paths = []
    for trace, name in ((spec, "speculative"), (plain, "plain")):
        if trace is not None:
            path = folder / f"{name}-{stamp}.trace.json"
            trace.save(path)          # atomic: a crash never leaves a half-written trace
            paths.append(str(path))
    return paths


def inspector(spec, round_index: int, position: Optional[int]) -> dict:
    choices = position_choices(spec, round_index)
    if position is None or not any(v == position for _, v in choices):
        rnd = spec.rounds[round_index] if choices else None
        position = next((i + 1 for i, t in enumerate(rnd.drafted) if t.evaluated and not t.accepted),
                        1) if rnd else None
    return {"position_choices": choices, "position": position,
            "round_plot": round_charts.round_figure(spec, round_index),
            "position_plot": round_charts.position_figure(spec, round_index, position or 1)}


def plots(spec, plain, round_index: int, position: Optional[int]) -> dict:
    """Just the race's figures (charts and inspector) for these traces, keyed by component name."""
    out = dict(zip(CHART_NAMES, charts.all_run_charts(spec, plain)))
    if spec is not None and 0 <= round_index < len(spec.rounds):
        out.update(round_plot=round_charts.round_figure(spec, round_index),
                   position_plot=round_charts.position_figure(spec, round_index, position or 1))
        out[CHART_NAMES[2]] = time_chart(spec, plain, round_index)     # the player rests where the inspector is
    else:
        out.update(round_plot=round_charts.round_figure(spec, 0), position_plot=round_charts.position_figure(spec, 0, 1))
    return out


def player_start(spec, wanted: Optional[int]) -> int:
    """The round the player opens on: `wanted` (a share link's, the last one rested on) when the race
    has it, else the inspector's default focus."""
    if spec is not None and wanted is not None and 0 <= int(wanted) < len(spec.rounds):
        return int(wanted)
    return default_focus(spec)[0]


def resting_on(spec, plain, round_index: int, position: Optional[int] = None) -> dict:
    """The views linked to the round the player rests on, all on that one round from the first paint:
    the round picker, the inspector, the player (opening there) and the tokens-vs-time marker. The
    server draws them together, so the player's own notice on opening only records its round (a
    late one can never undo a click made meanwhile)."""
    return {"round": round_index, **inspector(spec, round_index, position),
            "player": player.player_html(spec, plain, start_round=round_index),
            CHART_NAMES[2]: time_chart(spec, plain, round_index)}


def time_chart(spec, plain, at_round: Optional[int] = None):
    """The tokens-vs-time chart (CHART_NAMES[2]) as all_run_charts lays it out, with the round
    player's round marked."""
    return charts.set_width(charts.tokens_vs_time(spec, plain, at_round), charts.NARROW_PX, charts.RUN_CHART_HEIGHT)


def views(spec, plain, kind: str = "run", files: str = "", rest_round: Optional[int] = None) -> dict:
    """Values of every view for this pair of traces, keyed by component name; the player and the
    views linked to it on `rest_round` when the race has it (the last round the player rested on, a
    share link's), else on the default focus."""
    r, pos = default_focus(spec)
    start = player_start(spec, rest_round)
    if start != r:      # another round: its own first rejection, as the inspector picks
        r, pos = start, None
    out = {
        "banner": banner(spec, plain, kind, files),
        "plain_lane": plain_lane_html(plain, status="finished" if plain is not None and plain.finished else ""),
        "spec_lane": spec_lane_html(spec, status="finished" if spec is not None and spec.finished else ""),
        # what limited the race, one line under the verdict (app/limit.py)
        "verdict": race.verdict_html(spec, plain) + limit_html(spec, plain),
        "worked": worked_html(spec),      # the rule worked in words on this run's numbers (teach/worked.py)
        "timeline": timeline_html(spec),
        "stats": with_best_round(race.stats_markdown(spec, plain), spec),   # the best round named (issue 59)
        "round_max": max(len(spec.rounds) - 1, 0) if spec is not None else 0,
        **resting_on(spec, plain, r, pos),
        # Under the banner: why the recorded races differ, or, after a Run or an upload, this race beside them.
        "recorded_why": recorded_why(spec if kind != "example" else None),
    }
    # the run charts, but the tokens-vs-time one resting_on drew with the player's marker
    out.update((name, fig) for name, fig in zip(CHART_NAMES, charts.all_run_charts(spec, plain)) if name not in out)
    return out


def read_uploads(paths) -> tuple[Optional[Trace], Optional[Trace], str]:
    """Parse uploaded trace files; raises TraceFormatError / ValueError naming the bad file."""
    from specdec_core import TraceFormatError

    if not paths:
        raise ValueError("no file uploaded")
    traces, names = [], []
    for p in paths if isinstance(paths, (list, tuple)) else [paths]:
        name = os.path.basename(str(p))
        try:
            traces.append(Trace.load(p))
        except TraceFormatError as e:
            raise TraceFormatError(f"{name}: {e}") from None
        names.append(re.sub(r"[^\w.\-]", "_", name))
    spec, plain = split_traces(traces)
    return spec, plain, ", ".join(names)

