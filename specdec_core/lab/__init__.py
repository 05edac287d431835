"""The distillation lab: teacher-force the target (data.py), train the feature-head draft with
several losses (losses.py, train.py), ablate, write held-out prompts. `python -m specdec_core.lab`."""
