"""``cudaperf merge OUT A.json B.json ...``: shard reports into one report, or baseline files of
one device class into one file."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pytest_cudaperf.cli.sources import Baseline, CliError, loaded, write_text
from pytest_cudaperf.report.document import Report, dumps, merge_reports
from pytest_cudaperf.store.format import Entries, dumps_baseline, to_document


def cmd_merge(out: Path, inputs: Sequence[Path]) -> int:
    """Merge ``inputs`` into ``out``. One input merged into another file that exists is
    refused before anything is read: it reads as ``cudaperf merge SHARD1 SHARD2``, which would
    overwrite the first shard with the second."""
    if len(inputs) == 1 and out.exists() and out.resolve() != inputs[0].resolve():
        raise CliError(
            f"merge: {out} exists and would be overwritten by {inputs[0]} alone: the first file "
            "named is the one written (cudaperf merge MERGED INPUT...)"
        )
    sources = loaded(inputs)
    baselines = [s for s in sources if isinstance(s, Baseline)]
    reports = [s for s in sources if isinstance(s, Report)]
    if baselines and reports:
        raise CliError("merge: give only reports or only baseline files, not both")
    if baselines:
        classes = {b.device_class for b in baselines}
        if len(classes) != 1:
            raise CliError(f"merge: baseline files of different device classes: {sorted(classes)}")
        merged: Entries = {}
        for baseline in baselines:
            for key, by_series in baseline.entries.items():
                merged.setdefault(key, {}).update(by_series)
        device_class = classes.pop()
        write_text(out, dumps_baseline(to_document(device_class, merged)))
        print(
            f"cudaperf: merged {len(baselines)} baseline files into {out} "
            f"({len({k.nodeid for k in merged})} tests)"
        )
        return 0
    report = merge_reports(reports)
    write_text(out, dumps(report))
    print(f"cudaperf: merged {len(reports)} reports into {out} ({len(report.tests)} tests)")
    return 0
