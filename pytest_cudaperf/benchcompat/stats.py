"""``benchmark.stats``: a measurement's samples as pytest-benchmark states them, in seconds per
call, with the same definitions (quartiles, Tukey fences, outlier counts, ops), so that a suite
reading ``benchmark.stats["mean"]``, ``benchmark.stats.stats.mean`` or ``benchmark.stats.mean``
and the ``--benchmark-json`` file read the numbers they always did."""

from __future__ import annotations

import functools
import statistics
from bisect import bisect_left, bisect_right
from collections.abc import Mapping, Sequence
from typing import Any

#: the statistics pytest-benchmark reports, in its order (its JSON's ``stats``)
FIELDS = (
    "min",
    "max",
    "mean",
    "stddev",
    "rounds",
    "median",
    "iqr",
    "q1",
    "q3",
    "iqr_outliers",
    "stddev_outliers",
    "outliers",
    "ld15iqr",
    "hd15iqr",
    "ops",
    "total",
)


class Stats:
    """Statistics of per-call times in seconds (pytest-benchmark's ``Stats``)."""

    fields = FIELDS

    def __init__(self, data: Sequence[float]) -> None:
        if not data:
            raise ValueError("Stats: no samples")
        self.data = list(data)

    def __getitem__(self, key: str) -> Any:
        if key not in FIELDS:
            raise KeyError(key)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in FIELDS}

    @functools.cached_property
    def sorted_data(self) -> list[float]:
        return sorted(self.data)

    @property
    def rounds(self) -> int:
        return len(self.data)

    @functools.cached_property
    def total(self) -> float:
        return float(sum(self.data))

    @property
    def min(self) -> float:
        return self.sorted_data[0]

    @property
    def max(self) -> float:
        return self.sorted_data[-1]

    @functools.cached_property
    def mean(self) -> float:
        return float(statistics.mean(self.data))

    @functools.cached_property
    def stddev(self) -> float:
        return float(statistics.stdev(self.data)) if len(self.data) > 1 else 0.0

    @functools.cached_property
    def median(self) -> float:
        return float(statistics.median(self.data))

    @functools.cached_property
    def q1(self) -> float:
        data, rounds = self.sorted_data, self.rounds
        if rounds == 1:
            return data[0]
        if rounds % 2:  # method 3 of Wikipedia's "Quartile", as pytest-benchmark
            n, q = rounds // 4, rounds % 4
            if q == 1:
                return 0.25 * data[n - 1] + 0.75 * data[n]
            return 0.75 * data[n] + 0.25 * data[n + 1]
        return float(statistics.median(data[: rounds // 2]))

    @functools.cached_property
    def q3(self) -> float:
        data, rounds = self.sorted_data, self.rounds
        if rounds == 1:
            return data[0]
        if rounds % 2:
            n, q = rounds // 4, rounds % 4
            if q == 1:
                return 0.75 * data[3 * n] + 0.25 * data[3 * n + 1]
            return 0.25 * data[3 * n + 1] + 0.75 * data[3 * n + 2]
        return float(statistics.median(data[rounds // 2 :]))

    @property
    def iqr(self) -> float:
        return self.q3 - self.q1

    @property
    def ld15iqr(self) -> float:
        """The lowest datum within 1.5 IQR below Q1 (Tukey)."""
        if self.rounds == 1:
            return self.data[0]
        return self.sorted_data[bisect_left(self.sorted_data, self.q1 - 1.5 * self.iqr)]

    @property
    def hd15iqr(self) -> float:
        """The highest datum within 1.5 IQR above Q3 (Tukey)."""
        if self.rounds == 1:
            return self.data[0]
        return self.sorted_data[bisect_right(self.sorted_data, self.q3 + 1.5 * self.iqr) - 1]

    @property
    def iqr_outliers(self) -> int:
        low, high = self.q1 - 1.5 * self.iqr, self.q3 + 1.5 * self.iqr
        return sum(1 for x in self.data if x < low or x > high)

    @property
    def stddev_outliers(self) -> int:
        low, high = self.mean - self.stddev, self.mean + self.stddev
        return sum(1 for x in self.data if x < low or x > high)

    @property
    def outliers(self) -> str:
        return f"{self.stddev_outliers};{self.iqr_outliers}"

    @property
    def ops(self) -> float:
        return self.rounds / self.total if self.total else 0.0


class BenchmarkStats:
    """What ``benchmark.stats`` is after a measurement (pytest-benchmark's ``Metadata``): the
    benchmark's names, group, params, extra_info, options and iterations, and :attr:`stats`.
    ``benchmark.stats["mean"]``, ``.get("mean")`` and ``.mean`` read the statistics."""

    def __init__(  # noqa: PLR0913 - pytest-benchmark's Metadata fields
        self,
        stats: Stats,
        *,
        name: str,
        fullname: str,
        group: str | None,
        param: str | None,
        params: Mapping[str, Any] | None,
        extra_info: dict[str, Any],
        options: Mapping[str, Any],
        iterations: int = 1,
    ) -> None:
        self.stats = stats
        self.name = name
        self.fullname = fullname
        self.group = group
        self.param = param
        self.params = params
        self.extra_info = extra_info
        self.options = dict(options)
        self.iterations = iterations

    def __getitem__(self, key: str) -> Any:
        if key in FIELDS:
            return self.stats[key]
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        try:
            return self[key]
        except KeyError:
            return default

    def __getattr__(self, key: str) -> Any:  # only for names not set on the instance
        if key in FIELDS:
            return getattr(self.stats, key)
        raise AttributeError(key)

    def __bool__(self) -> bool:
        return True

    def as_dict(self, include_data: bool = True) -> dict[str, Any]:
        """One benchmark of pytest-benchmark's JSON (``benchmarks[]``)."""
        stats = self.stats.as_dict()
        if include_data:
            stats["data"] = list(self.stats.data)
        stats["iterations"] = self.iterations
        return {
            "group": self.group,
            "name": self.name,
            "fullname": self.fullname,
            "params": self.params,
            "param": self.param,
            "extra_info": self.extra_info,
            "options": dict(self.options),
            "stats": stats,
        }
