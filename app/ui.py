"""build_demo(): layout() creates the page's components, wiring.listeners() wires their events to app.handlers."""
from __future__ import annotations

import gradio as gr

from specdec_core import PRESETS, RecycleTable

from . import deploy, explain, form_fields, handlers, player, views
from .wiring import MODEL_QUEUE, listeners
from .debug import tab as debug_tab
from .teach import classroom, tab as teach_tab
from .teach.worked import WORKED_CSS
from .limit import LIMIT_CSS
from .scale import scalable_css, scale_figure
from .legend import legend_html
from .timeline import TIMELINE_CLICK_JS, timeline_css
from .components import Page

# The page's default sampler: the bench's sampling mode, so the first race shows the whole rule
# (draws u against p/q, rejections, residual resamples, bonus tokens); the greedy button sets
# temperature 0 (wiring.GREEDY_SAMPLER).
DEFAULT_SAMPLER = {"temperature": 0.7, "top_p": 0.9, "top_k": 0, "seed": 0}
ADVANCED = "Advanced: model pair, drafter, drafting shape, k, sampler, device"

# Gradio pulses the border of every output a running event streams to, forever: on a page drawn by
# the CPU each frame of that animation is CPU the race's decoder, on the same cores, lacks
# (docs/bench/page-race). The border stays, still.
GENERATING_STILL = ".generating{animation:none!important}\n"

CSS = scalable_css(timeline_css() + player.player_css() + WORKED_CSS + LIMIT_CSS + """
#sd-run-row button{min-height:48px}
.sd-plot{min-height:330px}
.sd-wt{font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:16px;line-height:1.4;padding:8px;
  border-radius:8px;background:var(--block-background-fill)}
.sd-wt-ctx{color:var(--body-text-color-subdued);white-space:pre-wrap;margin-right:6px}
.sd-wt-cell{display:inline-flex;flex-direction:column;align-items:center;margin:0 3px;vertical-align:top}
.sd-wt-cell small{font-size:12px;color:var(--body-text-color-subdued);white-space:nowrap}
.sd-wt-focus .sd-tok{outline:3px solid #000;outline-offset:1px}
.sd-wt-q{margin:3px 0}
.sd-align{overflow-x:auto;font-family:ui-monospace,SFMono-Regular,Menlo,monospace;font-size:13px}
.sd-align table{border-collapse:separate;border-spacing:2px 4px}
.sd-align th{text-align:right;padding-right:8px;white-space:nowrap}
.sd-align td.sd-tok{display:table-cell;white-space:pre}
.sd-align td.sd-align-start{border-left:3px solid #444}
.sd-wt-a{color:#0072B2;margin-left:8px}
abbr.sd-gloss{text-decoration:underline dotted;text-underline-offset:2px;cursor:help}
#sd-intro h1{margin:0 0 2px 0;font-size:26px}
#sd-intro p{margin:0;font-size:15px}
.sd-lesson{display:grid;grid-template-columns:repeat(auto-fit,minmax(260px,1fr));gap:10px;margin:2px 0}
.sd-fact{border:1px solid var(--border-color-primary);border-radius:10px;padding:6px 10px;font-size:13px;
  line-height:1.4}
.sd-fact h4{margin:0 0 2px 0;font-size:14px}
.sd-fact p{margin:0}
#sd-first .sd-lane{min-height:110px}
#sd-first .sd-why{font-size:14px;line-height:1.35}
#sd-first .sd-lane-text{max-height:140px}
""") + GENERATING_STILL + classroom.CLASSROOM_CSS


def launch_kwargs() -> dict:
    """Theme and CSS go to launch() in Gradio 6; Gradio itself refuses uploads above the cap."""
    cap_mb = deploy.Policy.from_env().max_upload_bytes / 2**20
    return {"theme": gr.themes.Soft(primary_hue="blue", neutral_hue="slate"), "css": CSS,
            "max_file_size": f"{max(cap_mb, 1):.0f}mb"}


def layout(init: dict, init_files, default: dict, spec0, plain0, bundled: dict, recorded: dict) -> Page:
    """Create the page's components (inside a gr.Blocks context); returns them by name. The first
    screen is the lesson: prompt, Run, the two lanes and the verdict; the settings fold into the
    Advanced accordion, the three facts of explain.LESSON follow. One function per region."""
    C = Page()
    C.traces = gr.State({"spec": spec0, "plain": plain0, "banner": init["banner"]})
    C.run_number = gr.State(0)
    C.views_due = gr.State(None)
    C.in_two_steps, C.in_one_step = gr.State(True), gr.State(False)
    C.scale = gr.State(1.0)          # classroom mode's chart scale (the page's CSS scales the rest)
    # Recalled guesses (token recycling) come from a table per page session: Gradio gives every
    # session its own copy of this empty one, so no visitor's run recalls another's text; a new page
    # (a share link) starts empty. Deleted with the session.
    C.recalled = gr.State(RecycleTable())
    gr.Markdown(explain.INTRO, elem_id="sd-intro")
    teach_tab.layout_controls(C)
    _layout_banner(C, init, recorded)
    with gr.Tabs(selected="race") as C.tabs:
        with gr.Tab("Race", id="race") as C.race_tab:
            _layout_first_screen(C, init)
            gr.HTML(explain.lesson_html())
            C.worked = gr.HTML(init["worked"], elem_id="sd-worked-box")
            _layout_player(C, init)
            _layout_advanced(C, default)
            _layout_timeline_and_stats(C, init)
            _layout_inspector(C, init)
            _layout_charts(C, init)
            _layout_files(C, init_files)
        with gr.Tab("Walkthrough", id="walkthrough") as C.wt_tab:
            teach_tab.layout_walkthrough(C, bundled, {"spec": spec0, "plain": plain0})
        with gr.Tab("Cost of a pass & exactness lab", id="teach"):
            teach_tab.layout_teach(C)
        with gr.Tab("Debugger", id="debug") as C.dbg_tab:
            debug_tab.layout(C)
    return C


def _layout_banner(C: Page, init: dict, recorded: dict) -> None:
    """The banner and, beside it, the switch between the recorded races the page opens on."""
    with gr.Row(equal_height=False, elem_id="sd-banner-row"):
        # The recorded races the page opens on (explain.FIRST_PAINT): one is shown, the other a click
        # away, each labelled with its speedup, and a sentence under the banner on why they differ.
        with gr.Column(scale=3, min_width=320):
            C.banner = gr.Markdown(init["banner"], elem_id="sd-banner", elem_classes="sd-banner")
            C.recorded_why = gr.Markdown(views.recorded_why(), elem_id="sd-recorded-why",
                                            visible=bool(recorded))
        with gr.Column(scale=2, min_width=300, visible=bool(recorded), elem_id="sd-recorded-box"):
            C.recorded = gr.Radio(views.recorded_choices(recorded), value=next(iter(recorded), None),
                                     label=explain.RECORDED_LABEL, elem_id="sd-recorded")


def _layout_first_screen(C: Page, init: dict) -> None:
    """The first screen of the Race tab: prompt, Run / Stop, max tokens, the greedy button and the
    examples; the two lanes and the verdict beside them."""
    with gr.Row(equal_height=False, elem_id="sd-first"):
        with gr.Column(scale=2, min_width=300):
            # At most 4 lines tall: a long prompt (the default is notes to summarise) scrolls
            # inside the box, so Run stays on a projector's first screen.
            C.prompt = gr.Textbox(explain.EXAMPLES[0][1], label="Prompt", lines=3, max_lines=4,
                                     elem_id="sd-prompt")
            with gr.Row(elem_id="sd-run-row"):
                C.run = gr.Button("▶ Run", variant="primary", elem_id="sd-run", min_width=90)
                C.stop = gr.Button("■ Stop", variant="stop", elem_id="sd-stop", min_width=90)
                # The API's /run: the same Run in one step, every view in its last update.
                C.run_api = gr.Button("Run (API)", visible=False)
            with gr.Row(equal_height=False):
                # Number fields, not sliders: whatever is typed reaches the settings check, which
                # refuses it with the field's range (RANGES) instead of a widget clamping silently.
                C.max_new_tokens = gr.Number(48, label="Max new tokens", elem_id="sd-max-new",
                                                info=form_fields.field_hint("max_new_tokens"), min_width=120)
                C.greedy = gr.Button("Greedy (T = 0): identical text", size="sm", elem_id="sd-greedy",
                                        min_width=120)
            gr.Examples([[p] for _, p in explain.EXAMPLES], inputs=[C.prompt],
                        example_labels=[label for label, _ in explain.EXAMPLES], label="Example prompts")

        with gr.Column(scale=3, min_width=420):
            with gr.Row(equal_height=True):
                C.plain_lane = gr.HTML(init["plain_lane"], elem_id="sd-plain")
                C.spec_lane = gr.HTML(init["spec_lane"], elem_id="sd-spec")
            C.verdict = gr.HTML(explain.gloss_verdict(init["verdict"]), elem_id="sd-verdict-box")


def _layout_player(C: Page, init: dict) -> None:
    # The round player: the race again, one round at a time (app/player.py, played in the browser).
    gr.Markdown("### The race again, one round at a time", elem_id="sd-player-title")
    C.player = gr.HTML(init["player"], elem_id="sd-player-box", js_on_load=player.PLAYER_JS)
    C.player_round = gr.State(None)     # the round it rests on (the share link carries it)


def _layout_advanced(C: Page, default: dict) -> None:
    """The settings, folded: model pair, drafter, drafting shape, k, sampler, device."""
    with gr.Accordion(ADVANCED, open=False, elem_id="sd-advanced") as C.advanced:
        with gr.Row():
            C.preset = gr.Dropdown(list(PRESETS), value="smollm2-135m", label="Model pair (preset)",
                                      info=PRESETS["smollm2-135m"].description)
            C.target = gr.Textbox(default["target"], label="Target (preset, HF id or local folder)",
                                     elem_id="sd-target")
            # A choice of the built-in drafts, and any other draft typed in (HF id, folder).
            C.draft = gr.Dropdown(explain.DRAFT_CHOICES, value=default["draft"], allow_custom_value=True,
                                     info=explain.DRAFT_HINT, elem_id="sd-draft",
                                     label="Draft model (pick one, or type an HF id, folder, or target-layers:N)")
        with gr.Row():
            C.drafter = gr.Radio(form_fields.DRAFTERS, value=default["drafter"], label="Drafter",
                                    elem_id="sd-drafter")
            C.chat = gr.Checkbox(True, label="Apply the chat template")
        with gr.Row():
            C.tree = gr.Dropdown(form_fields.TREE_CHOICES, value="auto", label="Drafting shape (token tree)",
                                    elem_id="sd-tree", allow_custom_value=True, info=form_fields.field_hint("tree"))
            C.k = gr.Dropdown(form_fields.K_CHOICES, value="auto", label="k (chain length)", elem_id="sd-k",
                                 allow_custom_value=True, info=form_fields.field_hint("k"))
            C.device = gr.Dropdown(["auto", "cpu", "cuda"], value="auto", label="Device",
                                      elem_id="sd-device")
        with gr.Row():
            C.temperature = gr.Number(DEFAULT_SAMPLER["temperature"], step=0.05, label="Temperature",
                                         elem_id="sd-temperature", info=form_fields.field_hint("temperature"))
            C.top_p = gr.Number(DEFAULT_SAMPLER["top_p"], step=0.05, label="Top-p", elem_id="sd-top-p",
                                   info=form_fields.field_hint("top_p"))
            C.top_k = gr.Number(DEFAULT_SAMPLER["top_k"], label="Top-k", elem_id="sd-top-k",
                                   info=form_fields.field_hint("top_k"))
            C.seed = gr.Number(DEFAULT_SAMPLER["seed"], label="Seed", elem_id="sd-seed",
                                  info=form_fields.field_hint("seed"))
        gr.Markdown(explain.FIRST_LOAD_NOTE)


def _layout_timeline_and_stats(C: Page, init: dict) -> None:
    gr.Markdown("### Token timeline (speculative lane)")
    gr.HTML(legend_html())
    C.timeline = gr.HTML(init["timeline"], elem_id="sd-timeline-box", js_on_load=TIMELINE_CLICK_JS)
    with gr.Accordion("How to read the timeline", open=True, elem_id="sd-timeline-help") as C.timeline_help:
        gr.Markdown(explain.gloss(explain.TIMELINE_HELP) + "\n\n" + explain.RACE_HELP)
    # The numbers one click away in classroom mode (teach/tab.py folds them there): open otherwise.
    with gr.Accordion("The numbers: stats of both lanes", open=True, elem_id="sd-stats-box") as C.stats_box:
        C.stats = gr.Markdown(explain.gloss_stats(init["stats"]), elem_id="sd-stats")
        with gr.Accordion("What do these numbers mean? (and the glossary)", open=False, elem_id="sd-metrics"):
            gr.Markdown(explain.metrics_markdown())


def _layout_inspector(C: Page, init: dict) -> None:
    gr.Markdown("## Round inspector", elem_id="sd-inspector")
    # Folded in classroom mode (the round player shows the round at a readable size; teach/tab.py).
    with gr.Accordion("One round in detail: its tree, p, q and u of each guess", open=True,
                      elem_id="sd-inspector-box") as C.inspector_box:
        with gr.Row():
            C.round = gr.Slider(0, max(init["round_max"], 1), value=init["round"], step=1,
                                   label="Round", elem_id="sd-round")
            C.position = gr.Dropdown(init["position_choices"], value=init["position"],
                                        label="Draft position in this round", elem_id="sd-position")
        C.round_plot = gr.Plot(scale_figure(init["round_plot"]), show_label=False, elem_classes="sd-plot", elem_id="sd-round-plot")
        C.position_plot = gr.Plot(scale_figure(init["position_plot"]), show_label=False, elem_classes="sd-plot",
                                     elem_id="sd-position-plot")
        gr.Markdown(explain.gloss(explain.INSPECTOR_HELP))


def _layout_charts(C: Page, init: dict) -> None:
    gr.Markdown("## Charts")
    with gr.Row():
        for name in views.CHART_NAMES[:3]:
            C[name] = gr.Plot(scale_figure(init[name]), show_label=False, elem_classes="sd-plot", min_width=300,
                              elem_id="sd-" + name.replace("_", "-"))
    with gr.Row():
        for name in views.CHART_NAMES[3:]:
            C[name] = gr.Plot(scale_figure(init[name]), show_label=False, elem_classes="sd-plot", min_width=300,
                              elem_id="sd-" + name.replace("_", "-"))


def _layout_files(C: Page, init_files) -> None:
    with gr.Accordion("Trace files: download this race, or load one", open=True,
                      elem_id="sd-files-box") as C.files_box:
        with gr.Row():
            with gr.Column(scale=3):
                gr.Markdown(explain.FILES_HELP)
                C.upload = gr.UploadButton("⤒ Load trace file(s)", file_count="multiple",
                                              file_types=[".json"], elem_id="sd-upload")
            with gr.Column(scale=2):
                C.files = gr.File(init_files, file_count="multiple", label=explain.FILES_LABEL,
                                     interactive=False, elem_id="sd-files")



def build_demo() -> gr.Blocks:
    """The page: layout, then listeners; first paint from the recorded example traces."""
    recorded = views.recorded_races()
    spec0, plain0 = next(iter(recorded.values()), (None, None))
    init = views.views(spec0, plain0, "example")
    init_files = views.write_files(spec0, plain0) if spec0 or plain0 else None
    default = form_fields.preset_fields("smollm2-135m")
    # Gradio copies returned files into its own cache: delete them hourly once a day old at most.
    with gr.Blocks(title=explain.TITLE, delete_cache=(3600, 24 * 3600)) as demo:
        C = layout(init, init_files, default, spec0, plain0, teach_tab.load_bundled(), recorded)
        C.demo = demo
        C.sessions = handlers.RunSessions()
        listeners(C)
        teach_tab.listeners(C, MODEL_QUEUE)
        debug_tab.listeners(C, MODEL_QUEUE)
    return demo
