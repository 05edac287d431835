"""The library as a package: a wheel built from this checkout, installed into a fresh virtualenv and
imported from another folder, carries its data (trace schema, shipped draft and block drafter, prompt sets, example
traces), loads the offline default pair and decodes."""
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow

CHECK = textwrap.dedent('''
    import json, sys
    import specdec_core
    from specdec_core import data, load_pair, speculative_generate
    from specdec_core.trace import json_schema
    assert "fresh-venv" in specdec_core.__file__, specdec_core.__file__      # not the checkout
    assert json_schema()["$id"] == "specdec.trace/2"
    assert json.loads(data.file("bench_prompts.json").read_text())
    assert data.file("examples", "example_speculative.trace.json").is_file()
    pair = load_pair("smollm2-135m", device="cpu")
    trace = speculative_generate(pair, pair.encode_prompt("Name three rivers."), k=3, max_new_tokens=12)
    assert trace.config.draft == "lookup+distilled-feature-head" and trace.stats["new_tokens"] == 12
    block = speculative_generate(load_pair("smollm2-135m", draft="block", device="cpu"),
                                 pair.encode_prompt("Name three rivers."), k=4, temperature=0.0, max_new_tokens=12)
    assert block.config.draft == "block-drafter" and block.config.draft_slots == 8
    assert block.output_ids == speculative_generate(pair, pair.encode_prompt("Name three rivers."), k=3,
                                                    temperature=0.0, max_new_tokens=12).output_ids
    print("OK", trace.stats["drafted"], specdec_core.__file__)
''')


def test_wheel_works_outside_the_checkout(tmp_path):
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(wheels), str(ROOT)], check=True, cwd=tmp_path)
    wheel = next(wheels.glob("specdec_explainer-*.whl"))
    venv = tmp_path / "fresh-venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, cwd=tmp_path)
    # Dependencies (torch, transformers, the embedded model's wheel) come from this environment as
    # a plain path: its .pth files (the editable install of the checkout) are not processed.
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    run = subprocess.run([str(venv / "bin" / "python"), "-c", CHECK], cwd=tmp_path, capture_output=True,
                         text=True, timeout=600, env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                                                      "HOME": str(Path.home())})
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.startswith("OK")
