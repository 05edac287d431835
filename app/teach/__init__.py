"""Teaching views: the walkthrough of one real round (steps as data), the measured cost of a
target pass, the exactness lab, and classroom mode with shareable links. Pure functions of traces
and measured numbers; the model work they need goes through specdec_core (lab.py)."""
