"""Everything shown or written about results: the failing report of a test, the end-of-run
``cudaperf`` table, the JSON artefact, JUnit properties, GitHub step summary and annotations, and
the self-contained HTML report.
"""

from __future__ import annotations

import html
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_cudaperf.session import ItemState, Judge, Results, failure_text
from pytest_cudaperf.units import format_ms, format_pct, format_size
from pytest_cudaperf.verdict import ci_text

JSON_SCHEMA = 1


# --- per test ----------------------------------------------------------------------------------


def finish_call_report(
    item: pytest.Item,
    rep: pytest.TestReport,
    call: pytest.CallInfo[None],
    side: Judge,
    state: ItemState,
    nodeid: str,
) -> None:
    """Attach the test's payload, turn a passed body with failures into a one-line failure,
    and summarise and clean up after a CUDA OOM."""
    body_passed = rep.passed
    if call.excinfo is not None:
        side.note_error(nodeid, call.excinfo.value)
        from pytest_cudaperf import memory

        if memory.is_oom(call.excinfo.value):
            rep.sections.append(("cudaperf memory at OOM", memory.oom_summary()))
            memory.release_frames(call.excinfo.tb)
            memory.recover_after_oom()
    payload = side.report_payload(state, nodeid, body_passed)
    if payload is None:
        return
    payload["location"] = [rep.location[0], (rep.location[1] or 0) + 1]
    # xdist sends reports through execnet, which takes JSON-like builtins only
    payload = json.loads(json.dumps(payload, default=str))
    rep.cudaperf = payload  # type: ignore[attr-defined]
    for record in payload["records"]:
        suffix = record["key"][len(nodeid) :] if record["key"].startswith(nodeid) else ""
        prop = (
            f"cudaperf{suffix} {record['series']}",
            f"{record['value']:.6g} {record['unit']} ({record['verdict']['kind']})",
        )
        rep.user_properties.append(prop)
        # junitxml writes the properties of the teardown report, which copies the item's
        item.user_properties.append(prop)
    if body_passed and state.failures:
        rep.outcome = "failed"
        rep.longrepr = failure_text(state)
        rep.cudaperf_failure = state.failures[0][0]  # type: ignore[attr-defined]


# --- the end-of-run table ----------------------------------------------------------------------


def _short(nodeid: str, width: int = 60) -> str:
    return nodeid if len(nodeid) <= width else "…" + nodeid[-(width - 1) :]


def table_rows(results: Results) -> list[list[str]]:
    peaks = {r["key"]: r for r in results.records() if r["series"] == "memory:peak"}
    rows = []
    for record in sorted(results.records(), key=lambda r: r["key"]):
        if record["unit"] != "ms":
            continue
        verdict = record["verdict"]
        base = "—"
        change = ci = ""
        if verdict.get("ratio") is not None:
            base_value = record["value"] / verdict["ratio"]
            base = format_ms(base_value)
            change = format_pct(verdict["ratio"] - 1)
            ci = ci_text(verdict["ci"])
        elif record.get("others"):
            other = record["others"][0]
            base = f"({other['device_class']}: {format_ms(other['value'])})"
        peak = peaks.get(record["key"])
        peak_text = format_size(peak["value"]) if peak else ""
        if peak and peak["verdict"]["kind"] not in ("pass", "new"):
            peak_text += f" {peak['verdict']['kind'].upper()}"  # e.g. "14.0 MiB REGRESSION"
        word = verdict["kind"].upper()
        threshold, tolerance = verdict.get("threshold"), verdict.get("tolerance")
        if threshold is not None and tolerance is not None and threshold > tolerance:
            word += f" (t={threshold:.0%})"  # the baseline's noise raised the threshold
        rows.append(
            [_short(record["key"]), format_ms(record["value"]), base, change, ci, word, peak_text]
        )
    return rows


HEADER = ["test", "median", "baseline", "change", "95% CI", "verdict", "peak mem"]


def render_table(rows: Sequence[Sequence[str]], header: Sequence[str] = HEADER) -> list[str]:
    table = [header, *rows]
    widths = [max(len(str(r[i])) for r in table) for i in range(len(header))]
    return [
        "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip()
        for row in table
    ]


def terminal_summary(tr: Any, results: Results, settings: Any) -> None:
    if not results.payloads and not results.updates:
        return
    tr.write_sep("=", "cudaperf")
    rows = table_rows(results)
    if rows:
        for line in render_table(rows):
            tr.write_line(line)
    for nodeid in sorted(results.payloads):
        payload = results.payloads[nodeid]
        if not payload.get("body_passed"):
            continue
        for kind, line in payload.get("failures", []):
            if kind != "regression":  # regressions show in the table (time and peak columns)
                tr.write_line(f"{_short(nodeid)}: {line}")
    new = [r["key"] for r in results.records() if r["verdict"]["kind"] == "new"]
    if new and not settings.update:
        tr.write_line(
            f"NEW (no baseline for this device class): {len(new)}; record them with "
            "pytest --cudaperf-update"
        )
    for device_class, keys in results.obsolete.items():
        tr.write_line(
            f"OBSOLETE in {device_class} ({len(keys)}; remove with --cudaperf-update "
            "--cudaperf-prune):"
        )
        for key in keys:
            tr.write_line(f"  {key}")
    for update in results.updates:
        tr.write_line(update.line())
    if results.pruned_refused:
        tr.write_line(
            "cudaperf: --cudaperf-prune skipped: this run was partial (deselection, "
            "a crashed worker or an interruption)"
        )
    counts = results.counts()
    bad = counts["regression"] or counts["leak"] or counts["over budget"]
    tr.write_line(results.summary_line(), red=bool(bad), green=not bad, bold=True)


# --- artefacts ---------------------------------------------------------------------------------


def json_document(results: Results, environment: Mapping[str, Any], run_id: str) -> dict[str, Any]:
    return {
        "schema": JSON_SCHEMA,
        "run_id": run_id,
        "environment": dict(environment),
        "summary": results.counts(),
        "tests": [results.payloads[k] for k in sorted(results.payloads)],
        "updates": [
            {"path": str(u.path), "added": u.added, "changed": u.changed, "pruned": u.pruned}
            for u in results.updates
        ],
        "obsolete": results.obsolete,
        "complete_run": results.complete,
    }


def write_json(path: Path, document: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(document, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def github_summary(results: Results) -> str:
    lines = ["### cudaperf", "", "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines.extend(
        "| " + " | ".join(c.replace("|", "\\|") or " " for c in row) + " |"
        for row in table_rows(results)
    )
    lines.extend(["", results.summary_line(), ""])
    return "\n".join(lines)


def github_annotations(results: Results) -> list[str]:
    lines = []
    for payload in results.payloads.values():
        if not payload.get("body_passed"):
            continue
        file, line = payload.get("location", ["", 0])
        for _, message in payload.get("failures", []):
            text = message.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")
            lines.append(f"::error file={file},line={line}::{text}")
    return lines


def write_github(results: Results, environ: Mapping[str, str]) -> list[str]:
    """Append the Markdown table to $GITHUB_STEP_SUMMARY; return the annotation lines."""
    if environ.get("GITHUB_ACTIONS") != "true":
        return []
    summary = environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as handle:
            handle.write(github_summary(results))
    return github_annotations(results)


# --- HTML ----------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;color:#222;max-width:1100px}
h1{font-size:1.4em}table{border-collapse:collapse}td,th{padding:.2em .6em;text-align:left}
.card{border:1px solid #ddd;border-radius:6px;padding:.8em;margin:.8em 0}
.pass,.improved{color:#137333}.regression{color:#c5221f}.new{color:#1a73e8}
.inconclusive{color:#b06000}.kind{font-weight:bold;text-transform:uppercase}
.meta{color:#666;font-size:.85em}svg{background:#fafafa;border:1px solid #eee}
"""


def _strip(
    samples: Sequence[float],
    baseline: float | None,
    ci: Sequence[float] | None,
    band: float | None,
    width: int = 640,
    height: int = 90,
) -> str:
    """An SVG histogram of the samples with the baseline and its tolerance band."""
    if not samples:
        return ""
    values = list(samples)
    lo, hi = min(values), max(values)
    if baseline is not None:
        spread = baseline * (band or 0)
        lo, hi = min(lo, baseline - spread), max(hi, baseline + spread)
    if hi <= lo:
        hi = lo + abs(lo) * 0.01 + 1e-9
    pad = (hi - lo) * 0.05
    lo, hi = lo - pad, hi + pad
    bins = 40
    counts = [0] * bins
    for v in values:
        counts[min(bins - 1, int((v - lo) / (hi - lo) * bins))] += 1
    top = max(counts)

    def x(v: float) -> float:
        return (v - lo) / (hi - lo) * width

    parts = [f'<svg width="{width}" height="{height + 18}" role="img">']
    if baseline is not None:
        spread = baseline * (band or 0)
        parts.append(
            f'<rect x="{x(baseline - spread):.1f}" y="0" '
            f'width="{max(1.0, x(baseline + spread) - x(baseline - spread)):.1f}" '
            f'height="{height}" fill="#e6f4ea"/>'
        )
        parts.append(
            f'<line x1="{x(baseline):.1f}" x2="{x(baseline):.1f}" y1="0" '
            f'y2="{height}" stroke="#137333" stroke-width="2"/>'
        )
    step = width / bins
    for i, c in enumerate(counts):
        if c:
            h = c / top * (height - 4)
            parts.append(
                f'<rect x="{i * step:.1f}" y="{height - h:.1f}" '
                f'width="{step - 1:.1f}" height="{h:.1f}" fill="#5b8def"/>'
            )
    if ci:
        parts.append(
            f'<rect x="{x(ci[0]):.1f}" y="{height - 3}" '
            f'width="{max(1.0, x(ci[1]) - x(ci[0])):.1f}" height="3" fill="#c5221f"/>'
        )
    parts.append(
        f'<text x="2" y="{height + 14}" font-size="11">{html.escape(format_ms(lo))}'
        f'</text><text x="{width - 2}" y="{height + 14}" font-size="11" '
        f'text-anchor="end">{html.escape(format_ms(hi))}</text></svg>'
    )
    return "".join(parts)


def render_html(document: Mapping[str, Any]) -> str:
    esc = html.escape
    summary = document["summary"]
    env = document["environment"]
    cards = []
    for test in document["tests"]:
        for record in test.get("records", []):
            verdict = record["verdict"]
            m = record.get("measurement", {})
            body = ""
            if record["unit"] == "ms":
                baseline = record["value"] / verdict["ratio"] if verdict.get("ratio") else None
                body = _strip(
                    m.get("samples_ms", []), baseline, m.get("ci_ms"), verdict.get("threshold")
                )
                value = format_ms(record["value"])
            else:
                value = format_size(record["value"])
            warnings = "".join(f"<li>{esc(w)}</li>" for w in m.get("warnings", []))
            cards.append(
                f'<div class="card"><div><b>{esc(record["key"])}</b> '
                f'<span class="meta">{esc(record["series"])}</span></div>'
                f'<div><span class="kind {esc(verdict["kind"])}">{esc(verdict["kind"])}</span>'
                f" — {esc(value)}; {esc(verdict.get('message') or '')}</div>{body}"
                f'<div class="meta">{esc(record["device_class"])}; n={record["n"]}; '
                f"{esc(json.dumps(record.get('env', {}), sort_keys=True))}</div>"
                f"<ul>{warnings}</ul></div>"
            )
        leak = test.get("leak")
        if leak and leak.get("leaks"):
            sites = "".join(f"<li>{esc(s)}</li>" for s in leak.get("sites", []))
            cards.append(
                f'<div class="card"><b>{esc(test["nodeid"])}</b> '
                f'<span class="kind regression">leak</span> '
                f"{esc(json.dumps(leak['series']))}<ul>{sites}</ul></div>"
            )
    rows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in summary.items())
    envrows = "".join(f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in env.items())
    legend = (
        "Bars: the samples' distribution; green line and band: the baseline and its "
        "tolerance; red bar: the 95% CI of the median."
    )
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>cudaperf report</title>"
        f"<style>{_CSS}</style></head><body><h1>cudaperf report</h1>"
        f"<table>{rows}</table><h2>Environment</h2><table>{envrows}</table>"
        f"<p class='meta'>{legend}</p>{''.join(cards)}</body></html>\n"
    )


def environment_of(side: Judge) -> dict[str, Any]:
    probe = side.probe
    return {
        "torch": probe.torch_version,
        "cuda": probe.cuda_version,
        "driver": probe.driver,
        "gpus": [f"{g.name} ({g.sm})" for g in probe.gpus],
        "cpu": probe.cpu,
        "python": ".".join(map(str, sys.version_info[:3])),
    }


def finish_run(run: Any, environ: Mapping[str, str]) -> list[str]:
    """Controller, end of session: baseline writes, obsolete entries, JSON, HTML, GitHub.
    Returns the GitHub annotation lines to print."""
    results: Results = run.results
    settings = run.settings
    if settings.update and not settings.disable:
        results.update_store(run.store, settings.prune, run.root)
    results.find_obsolete(run.store, run.root)
    if settings.json or settings.html:
        document = json_document(results, environment_of(run.side), run.run_id)
        if settings.json:
            write_json(run.output_dir / settings.json, document)
        if settings.html:
            target = run.output_dir / settings.html
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(render_html(document), encoding="utf-8")
    return write_github(results, environ)
