"""The page's components in one typed holder: every name a region creates is declared here with
its kind, grouped by region; setting an undeclared name fails when the page is built (a typo never
becomes a silent new key). Regions set and read attributes (`C.run`); the view protocol, where
handlers return values keyed by name (views.py, handlers.py), reads `C[name]`."""
from __future__ import annotations

from typing import TYPE_CHECKING

import gradio as gr

if TYPE_CHECKING:
    from .handlers import RunSessions


class Page:
    # The page and its per-visitor state.
    demo: gr.Blocks
    sessions: "RunSessions"
    traces: gr.State             # {"spec", "plain", "banner"}: the race on show
    run_number: gr.State
    views_due: gr.State          # the race's last update, for the Run's second step to draw
    in_two_steps: gr.State       # True: the page's Run (the race, then the views)
    in_one_step: gr.State        # False: the API's /run (every view from one call)
    scale: gr.State              # classroom mode's chart scale
    recalled: gr.State           # this page session's RecycleTable: its recalled guesses come from its own runs only
    tabs: gr.Tabs
    # Controls above the tabs (teach/tab.py): classroom mode, the share link.
    classroom: gr.Checkbox
    share: gr.Button
    link: gr.Textbox
    # The banner and the recorded races.
    banner: gr.Markdown
    recorded_why: gr.Markdown
    recorded: gr.Radio
    # Race tab: the first screen.
    race_tab: gr.Tab
    prompt: gr.Textbox
    run: gr.Button
    run_api: gr.Button           # hidden: the API's /run
    stop: gr.Button
    max_new_tokens: gr.Number
    greedy: gr.Button
    plain_lane: gr.HTML
    spec_lane: gr.HTML
    verdict: gr.HTML
    worked: gr.HTML              # the rule worked in words on the run's own numbers (teach/worked.py)
    # Race tab: the round player.
    player: gr.HTML
    player_round: gr.State
    # Race tab: Advanced.
    advanced: gr.Accordion
    preset: gr.Dropdown
    target: gr.Textbox
    draft: gr.Dropdown
    drafter: gr.Radio
    chat: gr.Checkbox
    tree: gr.Dropdown
    k: gr.Dropdown
    device: gr.Dropdown
    temperature: gr.Number
    top_p: gr.Number
    top_k: gr.Number
    seed: gr.Number
    # Race tab: timeline, stats, inspector, charts, files.
    timeline: gr.HTML
    timeline_help: gr.Accordion
    stats_box: gr.Accordion
    stats: gr.Markdown
    inspector_box: gr.Accordion
    round: gr.Slider
    position: gr.Dropdown
    round_plot: gr.Plot
    position_plot: gr.Plot
    chart_acceptance: gr.Plot
    chart_histogram: gr.Plot
    chart_time: gr.Plot
    chart_split: gr.Plot
    chart_speedup: gr.Plot
    files_box: gr.Accordion
    upload: gr.UploadButton
    files: gr.File
    # Walkthrough tab (teach/tab.py).
    wt_tab: gr.Tab
    bundled: gr.State
    wt_step: gr.State
    wt_shown: gr.State
    wt_source: gr.Radio
    wt_round: gr.Dropdown
    wt_back: gr.Button
    wt_counter: gr.Markdown
    wt_next: gr.Button
    wt_text: gr.Markdown
    wt_strip: gr.HTML
    wt_chart: gr.Plot
    # Cost of a pass & exactness lab tab (teach/tab.py).
    cost_run: gr.Button
    cost_summary: gr.Markdown
    cost_curve: gr.State
    lab_result: gr.State
    cost_plot: gr.Plot
    lab_prompt: gr.Textbox
    lab_chat: gr.Checkbox
    lab_draft: gr.Dropdown
    lab_n: gr.Number
    lab_seed: gr.Number
    lab_run: gr.Button
    lab_stop: gr.Button
    lab_summary: gr.Markdown
    lab_plot: gr.Plot
    lab_broken: gr.Plot
    # Debugger tab (debug/tab.py).
    dbg_tab: gr.Tab
    dbg_refresh: gr.Button
    dbg_heatmap: gr.Plot
    dbg_vocab: gr.Markdown       # the draft's vocabulary against what the target wrote
    dbg_disliked: gr.Dataframe
    dbg_missed: gr.Dataframe
    dbg_by_position: gr.Plot
    dbg_category: gr.Plot
    dbg_greedy: gr.Markdown
    dbg_positions: gr.Dataframe
    dbg_trees: gr.Plot
    dbg_export: gr.Button
    dbg_files: gr.File
    cmp_a: gr.Textbox
    cmp_b: gr.Textbox
    cmp_repeats: gr.Number
    cmp_run: gr.Button
    cmp_plot: gr.Plot
    cmp_table: gr.Dataframe
    cmp_align: gr.HTML
    sweep_repeats: gr.Number
    sweep_run: gr.Button
    sweep_stop: gr.Button
    sweep_plot: gr.Plot
    sweep_table: gr.Dataframe
    sweep_text: gr.Markdown
    dbg_basis: gr.Markdown       # which of this run's numbers hold still (timing-free) and which are timings
    # Debugger: the A/B over a prompt set (debug/ab_tab.py).
    ab_a_draft: gr.Textbox
    ab_a_shape: gr.Dropdown
    ab_a_temperature: gr.Number
    ab_b_draft: gr.Textbox
    ab_b_shape: gr.Dropdown
    ab_b_temperature: gr.Number
    ab_sets: gr.CheckboxGroup
    ab_b_sets: gr.Dropdown
    ab_own: gr.Textbox
    ab_seeds: gr.Number
    ab_tokens: gr.Number
    ab_run: gr.Button
    ab_stop: gr.Button
    ab_text: gr.Markdown
    ab_table: gr.Dataframe
    ab_plot: gr.Plot
    ab_vocab: gr.Markdown
    ab_prompts: gr.Dataframe

    def __setattr__(self, name: str, value) -> None:
        if name not in Page.__annotations__:
            raise AttributeError(f"the page declares no component {name!r} (app/components.py)")
        object.__setattr__(self, name, value)

    def __getitem__(self, name: str):
        """The component a view name names (the view protocol: handlers return values by name)."""
        if name not in Page.__annotations__:
            raise KeyError(name)
        return getattr(self, name)

    def __setitem__(self, name: str, value) -> None:
        setattr(self, name, value)

    def __contains__(self, name: str) -> bool:
        return name in self.__dict__
