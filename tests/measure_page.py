"""Printed measurements of the race as a local user runs it: the page in a browser on the same cores,
against the CLI, alternating per prompt (not a test).

    .venv/bin/python -m tests.measure_page [--prompts FILE] [--max-new N] [--temperature T] [--out DIR]

The app runs as its own process (`python app.py`), Debian's Chromium opens the page (Playwright), and
for each prompt the page races it (Run, wait for the verdict) and the CLI races it
(`python -m specdec_core PROMPT --compare-plain`), in alternating order. Both use the default pair and
shape, the same temperature and token budget. During the page's race (from the "Racing" banner to the
final views) the CPU time of each process is sampled from /proc: the app server (and its busiest
threads), Chromium (all its processes) and Playwright's driver; "cores" = CPU seconds ÷ wall seconds.
The page's figures are read from its verdict ("speculative X tok/s ÷ plain Y tok/s", "N× speedup")
and its stats (c), the CLI's from its printed comparison (c from its "Why" line). Writes runs.json and report.md into --out.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
TICK = os.sysconf("SC_CLK_TCK")
# Four prompts written for this measurement (not the bundled examples or bench sets): two that
# answer from a passage, two everyday questions.
PROMPTS = [
    "Here is a paragraph from a bike shop's returns policy: 'Bikes can be returned within 30 days of "
    "purchase if they have not been ridden more than 50 miles. Returned bikes must include the receipt "
    "and all original accessories. Custom builds cannot be returned.' Rewrite it as three short rules.",
    "What are three good habits for keeping a houseplant alive?",
    "Fix the bug in this function and show the whole function again:\n\ndef average(numbers):\n"
    "    total = 0\n    for n in numbers:\n        total += n\n    return total / len(number)",
    "Explain in two sentences why the sky looks blue.",
]


def cpu_s(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of a process (all its threads) or of one thread."""
    path = f"/proc/{pid}/task/{tid}/stat" if tid else f"/proc/{pid}/stat"
    try:
        fields = Path(path).read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError):
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def children(pid: int) -> list[int]:
    """Every descendant process of pid."""
    kids: dict[int, list[int]] = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                ppid = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, ProcessLookupError, IndexError):
                continue
            kids.setdefault(ppid, []).append(int(d.name))
    out, todo = [], [pid]
    while todo:
        for c in kids.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except FileNotFoundError:
        return ""


def threads(pid: int) -> dict[int, float]:
    return {int(t.name): cpu_s(pid, int(t.name)) for t in Path(f"/proc/{pid}/task").iterdir()}


class CpuWindow:
    """CPU seconds of the server, Chromium and the driver between start() and stop(); the server's
    threads are sampled every 0.2 s meanwhile (a race's thread may end before stop())."""

    def __init__(self, server_pid: int):
        self.server = server_pid
        self._seen: dict[int, float] = {}
        self._sampling = False
        import threading
        threading.Thread(target=self._sample, daemon=True).start()

    def _procs(self) -> list[int]:
        """The server and its children (the race's worker process, where it has one)."""
        return [self.server, *children(self.server)]

    def _threads(self) -> dict:
        out = {}
        for pid in self._procs():
            try:
                out.update({(pid, t): c for t, c in threads(pid).items()})
            except FileNotFoundError:
                pass
        return out

    def _sample(self):
        while True:
            if self._sampling:
                self._seen.update(self._threads())
            time.sleep(0.2)

    def _read(self) -> dict:
        mine = children(os.getpid())
        chrome = [p for p in mine if "chromium" in cmdline(p) or "chrome" in cmdline(p)]
        driver = [p for p in mine if p not in chrome and p != self.server and p not in children(self.server)]
        return {"t": time.monotonic(), "server": cpu_s(self.server), "threads": self._threads(),
                "worker": sum(cpu_s(p) for p in children(self.server)),
                "chromium": sum(cpu_s(p) for p in chrome), "driver": sum(cpu_s(p) for p in driver)}

    def start(self):
        self.a = self._read()
        self._seen = dict(self.a["threads"])
        self._sampling = True

    def stop(self) -> dict:
        b = self._read()
        self._sampling = False
        seen = {**self._seen, **b["threads"]}
        wall = b["t"] - self.a["t"]
        per_thread = sorted(((seen[t] - self.a["threads"].get(t, 0.0)) / wall for t in seen), reverse=True)
        return {"wall_s": round(wall, 2), **{k: round((b[k] - self.a[k]) / wall, 2) for k in ("server", "worker", "chromium", "driver")},
                "server_threads": [round(x, 2) for x in per_thread[:4]]}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(port: int) -> subprocess.Popen:
    env = dict(os.environ, **({"OMP_NUM_THREADS": os.environ["APP_THREADS"]} if os.environ.get("APP_THREADS") else {}), GRADIO_SERVER_PORT=str(port), GRADIO_SERVER_NAME="127.0.0.1", GRADIO_ANALYTICS_ENABLED="False")
    proc = subprocess.Popen([sys.executable, "app.py"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(240):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not start")


def page_race(page, prompt: str, max_new: int, temperature: float, window: CpuWindow) -> dict:
    page.locator("#sd-prompt textarea").fill(prompt)
    for sel, value in (("#sd-max-new", max_new), ("#sd-temperature", temperature)):
        if sel != "#sd-max-new" and not page.locator(sel).is_visible():
            page.locator("#sd-advanced").get_by_text("Advanced", exact=False).first.click()
            page.wait_for_selector(sel, state="visible")
        box = page.locator(f"{sel} input[type=number]")
        box.fill(str(value))
        box.press("Enter")
        box.blur()
    page.locator("#sd-run").click()
    page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Racing')", timeout=600_000)
    window.start()
    page.wait_for_function("document.querySelector('#sd-banner').innerText.includes('Your run')", timeout=600_000)
    cpu = window.stop()
    verdict = page.locator("#sd-verdict").text_content()
    rates = re.search(r"speculative ([\d.]+) tok/s ÷ plain ([\d.]+) tok/s", verdict)
    speedup = re.search(r"([\d.]+)× speedup", verdict)
    c = re.search(r"c \(draft level ÷ target step\)\s*\|?\s*([\d.]+)", page.locator("#sd-stats").text_content())
    return {"speedup": float(speedup.group(1)) if speedup else None,
            "spec_tok_s": float(rates.group(1)), "plain_tok_s": float(rates.group(2)),
            "c": float(c.group(1)) if c else None, "cpu": cpu}


def cli_race(prompt: str, max_new: int, temperature: float) -> dict:
    cmd = [sys.executable, "-m", "specdec_core", prompt, "--compare-plain", "--no-color",
           "--max-new-tokens", str(max_new), "--temperature", str(temperature)]
    if temperature > 0:
        cmd += ["--top-p", "0.9", "--seed", "0"]
    out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600).stdout
    plain = re.search(r"plain decoding\s+([\d.]+) tok/s", out)
    spec = re.search(r"speculative decoding\s+([\d.]+) tok/s", out)
    speedup = re.search(r"speedup\s+([\d.]+)×", out)
    c = re.search(r"c = ([\d.]+)", out)
    return {"speedup": float(speedup.group(1)), "spec_tok_s": float(spec.group(1)), "plain_tok_s": float(plain.group(1)),
            "c": float(c.group(1)) if c else None}


def report(runs: list, args) -> str:
    med = lambda xs: statistics.median(xs) if xs else float("nan")
    lines = [f"# The page's race against the CLI's ({time.strftime('%Y-%m-%d')})", "",
             f"`python -m tests.measure_page --max-new {args.max_new} --temperature {args.temperature}` "
             f"(code {args.commit}); {os.cpu_count()} cores; the browser (headless Chromium) on the same machine.",
             "Cores = CPU seconds ÷ wall seconds during the page's race (from the Racing banner to the final views); "
             "children = processes the server started (none today); busiest threads of the server and its children.", "",
             "| prompt | page plain tok/s | CLI plain tok/s | page ÷ CLI (plain) | page speedup | CLI speedup | "
             "page ÷ CLI (speedup) | cores: server | children | (busiest threads) | chromium | driver |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"]
    for r in runs:
        p, c, cpu = r["page"], r["cli"], r["page"]["cpu"]
        lines.append(f"| {r['prompt'][:40]!r} | {p['plain_tok_s']:.1f} | {c['plain_tok_s']:.1f} | "
                     f"{p['plain_tok_s'] / c['plain_tok_s']:.2f} | {p['speedup']:.2f} | {c['speedup']:.2f} | "
                     f"{p['speedup'] / c['speedup']:.2f} | {cpu['server']:.2f} | {cpu.get('worker', 0):.2f} | {cpu['server_threads']} | "
                     f"{cpu['chromium']:.2f} | {cpu['driver']:.2f} |")
    lines += ["", f"Medians: page ÷ CLI plain tok/s **{med([r['page']['plain_tok_s'] / r['cli']['plain_tok_s'] for r in runs]):.2f}**, "
              f"page ÷ CLI speedup **{med([r['page']['speedup'] / r['cli']['speedup'] for r in runs]):.2f}**; "
              f"page speedup {med([r['page']['speedup'] for r in runs]):.2f}×, CLI {med([r['cli']['speedup'] for r in runs]):.2f}×; "
              f"c (a draft level ÷ a target step, from each run's own clocks) page "
              f"{med([r['page']['c'] for r in runs if r['page'].get('c') is not None]):.3f}, "
              f"CLI {med([r['cli']['c'] for r in runs if r['cli'].get('c') is not None]):.3f}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.measure_page")
    ap.add_argument("--prompts", help="JSON list of prompt strings (default: four written for this script)")
    ap.add_argument("--max-new", type=int, default=48)
    ap.add_argument("--temperature", type=float, default=0.0)
    ap.add_argument("--out", default="test-artifacts/measure-page")
    args = ap.parse_args(argv)
    args.commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    prompts = json.loads(Path(args.prompts).read_text()) if args.prompts else PROMPTS
    from playwright.sync_api import sync_playwright
    port = free_port()
    server = start_server(port)
    runs = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS)
            page = browser.new_page(viewport={"width": 1366, "height": 768})
            page.set_default_timeout(600_000)
            page.goto(f"http://127.0.0.1:{port}")
            page.wait_for_selector("#sd-timeline .sd-tok")
            window = CpuWindow(server.pid)
            page_race(page, prompts[0], 8, args.temperature, window)      # loads the pair: not counted
            for i, prompt in enumerate(prompts):
                order = ("page", "cli") if i % 2 == 0 else ("cli", "page")
                r = {"prompt": prompt}
                for who in order:
                    r[who] = page_race(page, prompt, args.max_new, args.temperature, window) if who == "page" \
                        else cli_race(prompt, args.max_new, args.temperature)
                runs.append(r)
                print(json.dumps({k: v for k, v in r.items() if k != "prompt"}), flush=True)
            browser.close()
    finally:
        server.kill()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "runs.json").write_text(json.dumps({"args": vars(args), "runs": runs}, indent=1))
    text = report(runs, args)
    (out / "report.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
