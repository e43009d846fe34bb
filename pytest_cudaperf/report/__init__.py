"""The report: its typed, versioned document (:mod:`~pytest_cudaperf.report.model`) and its
renderers (terminal, JUnit, GitHub, HTML)."""
