"""Plugin overhead on 2,000 trivial tests: wall time of `pytest` with the plugin and without it
(`-p no:cudaperf`, or without PYTEST_PLUGINS when run from a checkout), best of --repeat runs
each (default 5).
Two suites: one whose test module imports torch (as a PyTorch project's tests do), one that
does not (the plugin's header then pays for importing torch).

    python benchmarks/bench_overhead.py --out out/
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SUITES = {
    "imports torch": "import torch\nimport pytest\n\n@pytest.mark.parametrize('i', range(2000))\n"
    "def test_trivial(i):\n    assert torch.__version__\n",
    "pure Python": "import pytest\n\n@pytest.mark.parametrize('i', range(2000))\n"
    "def test_trivial(i):\n    assert i >= 0\n",
}


def run(folder: Path, plugin: bool) -> float:
    env = dict(os.environ)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(folder)]
    if not plugin:
        if "pytest_cudaperf" in env.get("PYTEST_PLUGINS", ""):
            env.pop("PYTEST_PLUGINS")
        else:
            args += ["-p", "no:cudaperf"]
    began = time.perf_counter()
    proc = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - began
    if "2000 passed" not in proc.stdout:
        raise SystemExit(proc.stdout[-2000:] + proc.stderr[-2000:])
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="out")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    lines = [
        f"| suite (2,000 trivial tests) | without plugin (best of {args.repeat}) | with plugin "
        "| overhead |",
        "|---|---|---|---|",
    ]
    for name, source in SUITES.items():
        with tempfile.TemporaryDirectory() as tmp:
            folder = Path(tmp)
            (folder / "test_trivial.py").write_text(source)
            run(folder, True)  # warm the file system caches
            without = min(run(folder, False) for _ in range(args.repeat))
            with_plugin = min(run(folder, True) for _ in range(args.repeat))
        lines.append(
            f"| {name} | {without:.2f} s | {with_plugin:.2f} s | {with_plugin / without - 1:+.1%} |"
        )
    table = "\n".join(lines) + "\n"
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "RESULTS-overhead.md").write_text(table)
    print(table)


if __name__ == "__main__":
    main()
