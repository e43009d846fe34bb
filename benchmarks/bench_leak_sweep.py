"""Does ``--cudaperf-leak-sweep`` find leaks in a public project's own GPU unit tests, without
false alarms, at what cost?

    python benchmarks/bench_leak_sweep.py --tree out/public/kornia --runs 3 \
        --plant tests/filters/test_blur.py::TestBoxBlur::test_smoke ... (five) \
        --out out/sweep-kornia -- tests/filters --device cuda --dtype float32 -k "not dynamo"

1. ``--warmup`` uncounted runs (imports, compile caches), then ``--runs`` runs of the selection
   unchanged without the sweep and ``--runs`` with it, alternating, each its own pytest process
   in the project's tree (``--cudaperf-json`` each);
2. one run with the sweep over a copy of the tree in which five tests (``--plant``, as
   ``FILE::FUNCTION`` or ``FILE::CLASS::FUNCTION``) each got one line first in their body that
   appends a new CUDA tensor to a module-level list: a leak of 1 KiB a call. The project's files
   are never edited; the copy is made under ``--out``.

Reports, per run: wall time, the tests that passed and failed, and the sweep's summary (checked,
leaking with sites, unchecked and why, the seconds it spent); for the planted run, each planted
test and whether every instance of it was failed as a leak naming the planted line. Writes
``OUT/summary.json`` and ``OUT/table.md``. Extra wheels go on ``--site`` (PYTHONPATH first).

    python benchmarks/bench_leak_sweep.py --smoke --out out/sweep-smoke

``--smoke`` runs the planted step only (each run imports torch: seconds of CPU), on the CPU
over a toy tree it writes under ``--out`` (two tests on CPU tensors), the leak planted on the CPU
in one test; it exits 1 (one line) unless that test failed as a leak naming the planted line and
the sweep found the other one clean.
"""

from __future__ import annotations

import argparse
import ast
import importlib.metadata
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))

from _table import publish  # noqa: E402

from pytest_cudaperf.atomic import write_text as write_atomic  # noqa: E402

#: the line planted first in each planted test's body: a module-level list keeps one new CUDA
#: tensor (1 KiB) per call
PLANT = (
    '__import__("sys").modules[__name__].__dict__.setdefault("_CUDAPERF_PLANTED", [])'
    '.append(__import__("torch").ones(256, device="{device}"))  # planted leak'
)


#: ``--smoke``'s toy tree: two tests on CPU tensors, neither leaking
TOY_TESTS = """\
import torch


def test_sums_a_vector():
    x = torch.ones(1 << 10)
    assert float(x.sum()) == 1 << 10


def test_scales_a_matrix():
    m = torch.eye(16) * 2
    assert float(m.trace()) == 32
"""
TOY_PLANT = "tests/test_toy.py::test_scales_a_matrix"


def toy_tree(out: Path) -> Path:
    """``--smoke``'s project tree under ``out``: its own rootdir, the two tests."""
    tree = out / "toy-tree"
    shutil.rmtree(tree, ignore_errors=True)
    (tree / "tests").mkdir(parents=True)
    (tree / "pytest.ini").write_text("[pytest]\n")
    (tree / "tests" / "test_toy.py").write_text(TOY_TESTS)
    return tree


def smoke_setup(args: argparse.Namespace, out: Path) -> None:
    """``--smoke``'s arguments: the toy tree, no unchanged runs nor warm-up, one CPU plant."""
    args.tree = toy_tree(out)
    args.runs, args.warmup, args.plant, args.plant_device = 0, 0, [TOY_PLANT], "cpu"
    args.pytest_args = ["-p", "no:randomly", "tests", *args.pytest_args]


def smoke_wrong(summary: dict[str, Any], planted_run: dict[str, Any]) -> str:
    """What a smoke run got wrong: empty when the planted test failed as a leak naming its line
    in every instance and the planted run's sweep found every other test clean."""
    others = {k: v for k, v in planted_run["tests"].items() if k not in summary["planted"]}
    unclean = [k for k, v in others.items() if (v["sweep"] or {}).get("status") != "clean"]
    if not others or unclean:
        return f"the unplanted tests were not all swept clean: {unclean or 'none ran'}"
    for target, found in summary["planted"].items():
        if not found["instances"] or found["caught_with_site"] != found["instances"]:
            return f"planted {target}: {found['caught_with_site']} / {found['instances']} caught"
    return ""


def plugin_env(env: dict[str, str]) -> dict[str, str]:
    """The checkout's plugin loaded through ``PYTEST_PLUGINS`` where it is not installed (as
    ``scripts/gpu-suite.sh`` does)."""
    names = {ep.value for ep in importlib.metadata.entry_points(group="pytest11")}
    plugins = env.get("PYTEST_PLUGINS", "")
    if "pytest_cudaperf.plugin" not in names and "pytest_cudaperf.plugin" not in plugins:
        env["PYTEST_PLUGINS"] = ",".join(p for p in (plugins, "pytest_cudaperf.plugin") if p)
    return env


def run_pytest(
    tree: Path, args: list[str], out: Path, name: str, site: str | None
) -> dict[str, Any]:
    """One pytest process in ``tree``: its wall time, exit code, outcome counts and JSON report."""
    env = plugin_env(dict(os.environ))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (site, str(ROOT), env.get("PYTHONPATH")) if p)
    report = out / f"{name}.json"
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]
    command += [f"--cudaperf-json={report}", f"--junitxml={out / f'{name}.xml'}"]
    start = time.perf_counter()
    done = subprocess.run(command, cwd=tree, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    (out / f"{name}.log").write_text(done.stdout + done.stderr)
    document = json.loads(report.read_text()) if report.exists() else {}
    tail = [line for line in done.stdout.splitlines() if line.startswith("=") and " in " in line]
    print(f"{name}: {wall:.1f} s, exit {done.returncode}: {tail[-1] if tail else '?'}", flush=True)
    return {
        "name": name,
        "wall_s": round(wall, 2),
        "exit": done.returncode,
        "summary_line": tail[-1] if tail else "",
        "sweep": document.get("leak_sweep"),
        "tests": {
            t["nodeid"]: {"sweep": t.get("sweep"), "leak": t.get("leak")}
            for t in document.get("tests", [])
        },
        "command": command,
    }


def _function_node(tree: ast.Module, parts: list[str]) -> ast.FunctionDef:
    body: list[ast.stmt] = tree.body
    for index, name in enumerate(parts):
        last = index == len(parts) - 1
        kinds = (ast.FunctionDef, ast.AsyncFunctionDef) if last else (ast.ClassDef,)
        found = [n for n in body if isinstance(n, kinds) and n.name == name]
        if not found:
            raise SystemExit(f"--plant: no {'function' if last else 'class'} {name!r}")
        if last:
            node = found[0]
            assert isinstance(node, ast.FunctionDef)
            return node
        body = found[0].body  # type: ignore[union-attr]
    raise SystemExit("--plant: expected FILE::FUNCTION or FILE::CLASS::FUNCTION")


def plant(tree: Path, target: str, device: str = "cuda") -> tuple[str, int]:
    """Insert PLANT first in the body of ``target`` (in ``tree``); (file, planted line)."""
    path, *parts = target.split("::")
    file = tree / path
    source = file.read_text()
    node = _function_node(ast.parse(source), parts)
    first = node.body[0]
    lines = source.splitlines(keepends=True)
    indent = lines[first.lineno - 1][: first.col_offset]
    lines.insert(first.lineno - 1, f"{indent}{PLANT.format(device=device)}\n")
    file.write_text("".join(lines))
    return path, first.lineno


def planted_caught(run: dict[str, Any], planted: dict[str, tuple[str, int]]) -> dict[str, Any]:
    """For each planted test: its instances, and how many were failed as leaks naming the
    planted line."""
    found = {}
    for target, (path, line) in planted.items():
        instances = {k: v for k, v in run["tests"].items() if k.split("[")[0] == target}
        site = f"{path}:{line} in "
        named = [
            k
            for k, v in instances.items()
            if (v["sweep"] or {}).get("status") == "leak"
            and any(site in s for s in (v["leak"] or {}).get("sites", []))
        ]
        found[target] = {"instances": len(instances), "caught_with_site": len(named)}
        if not instances:
            print(f"planted {target}: no instance of it ran (a wrong name?)", flush=True)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tree", type=Path, help="the project's source tree")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1, help="uncounted runs first")
    parser.add_argument("--plant", nargs="*", default=[], help="five FILE::[CLASS::]FUNCTION")
    parser.add_argument("--plant-device", default="cuda", help="where planted tensors go")
    parser.add_argument("--site", help="a folder of extra packages, first on PYTHONPATH")
    parser.add_argument("--out", type=Path, default=Path("out/sweep"))
    parser.add_argument(
        "--smoke", action="store_true", help="a toy tree on the CPU, the planted run only"
    )
    parser.add_argument("pytest_args", nargs="*", help="the selection (after --)")
    args = parser.parse_args()
    if args.tree is None and not args.smoke:
        parser.error("--tree is required (or --smoke)")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        smoke_setup(args, out)
    tree = args.tree.resolve()
    runs: list[dict[str, Any]] = []
    for index in range(args.warmup):  # imports, compile caches, the page cache: not counted
        run_pytest(tree, args.pytest_args, out, f"warmup-{index}", args.site)
    for index in range(args.runs):  # alternating, so a slow spell of the host hits both
        runs.append(run_pytest(tree, args.pytest_args, out, f"plain-{index}", args.site))
        sweep = [*args.pytest_args, "--cudaperf-leak-sweep"]
        runs.append(run_pytest(tree, sweep, out, f"sweep-{index}", args.site))
    planted: dict[str, tuple[str, int]] = {}
    caught: dict[str, Any] = {}
    planted_run: dict[str, Any] = {"tests": {}}
    if args.plant:
        copy = out / "planted-tree"
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(tree, copy, symlinks=True)
        planted = {target: plant(copy, target, args.plant_device) for target in args.plant}
        sweep = [*args.pytest_args, "--cudaperf-leak-sweep"]
        planted_run = run_pytest(copy, sweep, out, "planted", args.site)
        runs.append(planted_run)
        caught = planted_caught(planted_run, planted)
    plain = [r["wall_s"] for r in runs if r["name"].startswith("plain")]
    swept = [r["wall_s"] for r in runs if r["name"].startswith("sweep")]
    added = statistics.median(swept) / statistics.median(plain) - 1 if plain and swept else None
    summary = {
        "tree": str(tree),
        "pytest_args": args.pytest_args,
        "runs": [{k: v for k, v in r.items() if k != "tests"} for r in runs],
        "wall_added": added,
        "false_leaks": sorted(
            {
                n
                for r in runs
                if r["name"].startswith("sweep")
                for n in (r["sweep"] or {}).get("leaking", [])
            }
        ),
        "planted": {k: {"file": v[0], "line": v[1], **caught[k]} for k, v in planted.items()},
    }
    write_atomic(out / "summary.json", json.dumps(summary, indent=2, sort_keys=True) + "\n")
    lines = [
        "| run | wall (s) | exit | checked | re-run | leaking | unchecked | sweep's own (s) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in runs:
        s = r["sweep"] or {}
        lines.append(
            f"| {r['name']} | {r['wall_s']} | {r['exit']} | {s.get('checked', '—')} | "
            f"{s.get('rechecked', '—')} | {len(s.get('leaking', [])) if s else '—'} | "
            f"{len(s.get('unchecked', {})) if s else '—'} | {s.get('seconds', '—')} |"
        )
    if added is not None:
        lines.append(f"\nwall time added by the sweep (median over median): {added:+.1%}")
    lines.append(f"false leaks in unchanged runs: {summary['false_leaks'] or 'none'}")
    for target, found in summary["planted"].items():
        lines.append(
            f"planted {target} at {found['file']}:{found['line']}: "
            f"{found['caught_with_site']} / {found['instances']} instances failed naming it"
        )
    publish(lines, out, "table.md")
    if args.smoke and (wrong := smoke_wrong(summary, planted_run)):
        raise SystemExit(f"bench_leak_sweep --smoke: {wrong}")


if __name__ == "__main__":
    main()
