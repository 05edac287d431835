"""The Debugger tab: why a draft/target pair accepts badly (tables and heatmaps of a run's traces),
which k is best on this machine (a k sweep), and which of two drafts to use (side by side).
Pure functions of traces; the sweep's and the second draft's decoding go through specdec_core
(runs.py)."""
