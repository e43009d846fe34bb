"""Does the history name the commit that slowed one kernel, and no other? A small repository of
GPU kernels is built commit by commit; at every commit its suite runs once with
``--cudaperf-history``, as a nightly job would. One commit makes one kernel work on 5% more data
(``--slow-at``, ``--slowdown``); every other commit changes nothing that runs on the GPU (a
docstring, a comment, the README, an unused helper). Then ``cudaperf history regressions`` lists
what the history found and ``cudaperf dashboard`` builds the site.

    python benchmarks/bench_history_commits.py --out out/history-commits

Writes, under ``--out``: ``repo/`` (the repository, its git history), ``history.db``,
``runs.jsonl`` (one line per commit: commit, seconds, exit status), ``regressions.txt`` (the
command's output and exit status) and ``site/`` (the dashboard). ``--resume`` goes on from the
last commit run; ``--max-seconds`` stops cleanly before a limit, so a resumed call finishes.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: the suite's kernels: name -> (setup, call), sized for a data-centre GPU (a few to a few hundred
#: µs each); ``SIZES`` holds the element counts the slowing commit changes
OPS = textwrap.dedent(
    '''\
    """Kernels of a small model library (the suite's code under test)."""

    from __future__ import annotations

    import torch
    import torch.nn.functional as F

    SIZES = {
        "copy": 1 << 25,
        "add": 1 << 24,
        "mul": 1 << 24,
        "gelu": 1 << 23,
        "exp": 1 << 23,
        "where": 1 << 22,
        "sum": 1 << 24,
        "amax": 1 << 24,
        "cumsum": 1 << 22,
        "cast": 1 << 24,
    }


    def vector(name: str, device: torch.device) -> torch.Tensor:
        return torch.randn(SIZES[name], device=device)


    def copy(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        return out.copy_(x)


    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.add(x, y)


    def mul(x: torch.Tensor) -> torch.Tensor:
        return torch.mul(x, 1.5)


    def gelu(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


    def exp(x: torch.Tensor) -> torch.Tensor:
        return torch.exp(x)


    def where(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x > 0, x, x * 0.1)


    def total(x: torch.Tensor) -> torch.Tensor:
        return x.sum()


    def amax(x: torch.Tensor) -> torch.Tensor:
        return x.amax()


    def cumsum(x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, 0)


    def cast(x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.bfloat16)


    def softmax(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


    def layer_norm(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, x.shape[-1:])


    def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ b


    def linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.linear(x, w)


    def bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.bmm(a, b)


    def conv(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return F.conv2d(x, w, padding=1)


    def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


    def transpose(x: torch.Tensor) -> torch.Tensor:
        return x.t().contiguous()


    def gather(table: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
        return table.index_select(0, index)


    def sort(x: torch.Tensor) -> torch.Tensor:
        return torch.sort(x).values


    def embedding(index: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        return F.embedding(index, table)
    '''
)

TESTS = textwrap.dedent(
    """\
    from __future__ import annotations

    import torch

    from kernels import ops


    def test_copy(cuda_timer, cuda_device):
        x = ops.vector("copy", cuda_device)
        cuda_timer(ops.copy, x, torch.empty_like(x))


    def test_add(cuda_timer, cuda_device):
        x = ops.vector("add", cuda_device)
        cuda_timer(ops.add, x, x)


    def test_mul(cuda_timer, cuda_device):
        cuda_timer(ops.mul, ops.vector("mul", cuda_device))


    def test_gelu(cuda_timer, cuda_device):
        cuda_timer(ops.gelu, ops.vector("gelu", cuda_device))


    def test_exp(cuda_timer, cuda_device):
        cuda_timer(ops.exp, ops.vector("exp", cuda_device))


    def test_where(cuda_timer, cuda_device):
        cuda_timer(ops.where, ops.vector("where", cuda_device))


    def test_sum(cuda_timer, cuda_device):
        cuda_timer(ops.total, ops.vector("sum", cuda_device))


    def test_amax(cuda_timer, cuda_device):
        cuda_timer(ops.amax, ops.vector("amax", cuda_device))


    def test_cumsum(cuda_timer, cuda_device):
        cuda_timer(ops.cumsum, ops.vector("cumsum", cuda_device))


    def test_cast(cuda_timer, cuda_device):
        cuda_timer(ops.cast, ops.vector("cast", cuda_device))


    def test_softmax(cuda_timer, cuda_device):
        cuda_timer(ops.softmax, torch.randn(4096, 1024, device=cuda_device))


    def test_layer_norm(cuda_timer, cuda_device):
        cuda_timer(ops.layer_norm, torch.randn(4096, 1024, device=cuda_device))


    def test_matmul_fp32(cuda_timer, cuda_device):
        a = torch.randn(2048, 2048, device=cuda_device)
        cuda_timer(ops.matmul, a, a)


    def test_matmul_bf16(cuda_timer, cuda_device):
        a = torch.randn(4096, 4096, device=cuda_device, dtype=torch.bfloat16)
        cuda_timer(ops.matmul, a, a)


    def test_linear(cuda_timer, cuda_device):
        x = torch.randn(8192, 1024, device=cuda_device, dtype=torch.float16)
        w = torch.randn(4096, 1024, device=cuda_device, dtype=torch.float16)
        cuda_timer(ops.linear, x, w)


    def test_bmm(cuda_timer, cuda_device):
        a = torch.randn(64, 256, 256, device=cuda_device)
        cuda_timer(ops.bmm, a, a)


    def test_conv(cuda_timer, cuda_device):
        x = torch.randn(32, 64, 56, 56, device=cuda_device)
        w = torch.randn(64, 64, 3, 3, device=cuda_device)
        cuda_timer(ops.conv, x, w)


    def test_attention(cuda_timer, cuda_device):
        q = torch.randn(8, 16, 1024, 64, device=cuda_device, dtype=torch.float16)
        cuda_timer(ops.attention, q, q, q)


    def test_transpose(cuda_timer, cuda_device):
        cuda_timer(ops.transpose, torch.randn(4096, 4096, device=cuda_device))


    def test_gather(cuda_timer, cuda_device):
        table = torch.randn(100_000, 256, device=cuda_device)
        index = torch.randint(0, 100_000, (65_536,), device=cuda_device)
        cuda_timer(ops.gather, table, index)


    def test_sort(cuda_timer, cuda_device):
        cuda_timer(ops.sort, torch.randn(1 << 20, device=cuda_device))


    def test_embedding(cuda_timer, cuda_device):
        table = torch.randn(50_000, 512, device=cuda_device)
        index = torch.randint(0, 50_000, (32, 512), device=cuda_device)
        cuda_timer(ops.embedding, index, table)
    """
)


def neutral_change(repo: Path, step: int) -> str:
    """A commit that runs nothing new on the GPU: the README, a comment, an unused helper."""
    kind = step % 3
    if kind == 0:
        with (repo / "README.md").open("a") as f:
            f.write(f"\nRelease note {step}: documentation only.\n")
        return f"README: release note {step}"
    if kind == 1:
        path = repo / "kernels" / "ops.py"
        path.write_text(path.read_text() + f"\n# reviewed in step {step}\n")
        return f"ops: a reviewer's comment ({step})"
    path = repo / "kernels" / "util.py"
    path.write_text(
        (path.read_text() if path.exists() else '"""Helpers."""\n')
        + f"\n\ndef helper_{step}(x: int) -> int:\n    return x + {step}\n"
    )
    return f"util: helper_{step}, unused by the kernels"


def slowing_change(repo: Path, kernel: str, slowdown: float) -> str:
    """The commit under test: ``kernel`` works on ``slowdown`` more elements."""
    path = repo / "kernels" / "ops.py"
    text = path.read_text()
    for line in text.splitlines():
        if line.strip().startswith(f'"{kernel}":'):
            size = eval(line.split(":", 1)[1].strip().rstrip(","))
            # a whole number of 1,024-element blocks: an odd length would also lose the
            # vectorised loads and slow the kernel by more than its data
            grown = round(size * (1 + slowdown) / 1024) * 1024
            new = f'    "{kernel}": {grown},'
            path.write_text(text.replace(line, new))
            return f"ops: {kernel} pads its input by {slowdown:.0%}"
    raise SystemExit(f"bench_history_commits: no size for kernel {kernel!r} in SIZES")


def git(repo: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bench",
        "GIT_AUTHOR_EMAIL": "bench@example.org",
        "GIT_COMMITTER_NAME": "bench",
        "GIT_COMMITTER_EMAIL": "bench@example.org",
    }
    done = subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def create(repo: Path, smoke: bool = False) -> None:
    """The repository's first commit (``smoke``: the vectors 4,096 times shorter)."""
    (repo / "kernels").mkdir(parents=True)
    (repo / "kernels" / "__init__.py").write_text("")
    shift = (lambda m: f"1 << {int(m[1]) - 12}") if smoke else (lambda m: m[0])
    (repo / "kernels" / "ops.py").write_text(re.sub(r"1 << (\d+)", shift, OPS))
    (repo / "tests").mkdir()
    (repo / "tests" / "test_kernels.py").write_text(TESTS)
    (repo / "README.md").write_text("# kernels\n\nA small kernel library.\n")
    (repo / "pytest.ini").write_text("[pytest]\naddopts = -p no:cacheprovider\npythonpath = .\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "kernels: first version")


def plugin_env() -> dict[str, str]:
    """Load the plugin from this checkout where it is not installed."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if "PYTHONPATH" in env else "")
    installed = any(e.name == "cudaperf" for e in metadata.entry_points(group="pytest11"))
    if not installed:
        env["PYTEST_PLUGINS"] = "pytest_cudaperf.plugin"
    return env


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument("--commits", type=int, default=22, help="commits run, the first included")
    parser.add_argument("--slow-at", type=int, default=13, help="the slowing commit (1-based)")
    parser.add_argument("--kernel", default="copy", help="the kernel it slows (a SIZES key)")
    parser.add_argument("--slowdown", type=float, default=0.05)
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=None)
    parser.add_argument("--require-gpu", action="store_true")
    parser.add_argument("--pytest-args", default="", help="more pytest arguments, one string")
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a smoke run: on the CPU, 2 commits (the second slows copy), the copy and add "
        "tests only, vectors 4,096 times shorter, --cudaperf-max-time=0.05",
    )
    args = parser.parse_args()
    if args.smoke:
        args.commits, args.slow_at, args.kernel, args.require_gpu = 2, 2, "copy", False
        args.pytest_args += " -k 'test_copy or test_add' --cudaperf-max-time=0.05"
    return args


def main() -> None:
    args = arguments()
    began = time.monotonic()
    out: Path = args.out.resolve()
    repo, db, log = out / "repo", out / "history.db", out / "runs.jsonl"
    if not args.resume:
        shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").exists():
        create(repo, args.smoke)
    done = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    extra = ["--cudaperf-require-gpu"] if args.require_gpu else []
    for index in range(len(done) + 1, args.commits + 1):
        # the longest run so far (a first run's guess: 30 s) must fit in what is left
        step_s = max((r["seconds"] for r in done), default=30.0)
        if args.max_seconds and time.monotonic() - began + 1.5 * step_s > args.max_seconds:
            print(f"bench_history_commits: stopped before commit {index} (--max-seconds)")
            return
        if index > 1 and int(git(repo, "rev-list", "--count", "HEAD")) < index:
            if index == args.slow_at:
                message = slowing_change(repo, args.kernel, args.slowdown)
            else:
                message = neutral_change(repo, index)
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "-m", message)
        sha = git(repo, "rev-parse", "HEAD")
        start = time.monotonic()
        cmd = [
            sys.executable,
            "-m",
            "pytest",
            "tests",
            "-q",
            f"--cudaperf-history={db}",
            *extra,
            *shlex.split(args.pytest_args),
        ]
        with (out / f"run-{index:02d}.log").open("w") as f:
            rc = subprocess.call(
                cmd, cwd=repo, env=plugin_env(), stdout=f, stderr=subprocess.STDOUT
            )
        seconds = round(time.monotonic() - start, 1)
        row = {
            "index": index,
            "commit": sha,
            "rc": rc,
            "seconds": seconds,
            "slowing": index == args.slow_at,
        }
        done.append(row)
        with log.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(
            f"commit {index}/{args.commits} {sha[:10]}: pytest exited {rc} in {seconds} s",
            flush=True,
        )
    cli = [sys.executable, "-m", "pytest_cudaperf.cli"]
    found = subprocess.run(
        [*cli, "history", "regressions", str(db)],
        check=False,
        env=plugin_env(),
        capture_output=True,
        text=True,
    )
    (out / "regressions.txt").write_text(found.stdout + found.stderr + f"exit {found.returncode}\n")
    print(found.stdout + found.stderr + f"exit {found.returncode}")
    site = subprocess.run(
        [*cli, "dashboard", str(db), str(out / "site")],
        check=False,
        env=plugin_env(),
        capture_output=True,
        text=True,
    )
    print(site.stdout[-2000:] + site.stderr[-2000:])


if __name__ == "__main__":
    main()
