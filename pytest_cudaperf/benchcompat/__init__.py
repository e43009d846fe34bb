"""pytest-benchmark's surface served by pytest-cudaperf: which plugin serves the ``benchmark``
fixture (:mod:`.serving`), the ``--benchmark-*`` options (:mod:`.options`), the
``@pytest.mark.benchmark`` marker (:mod:`.marker`), the ``benchmark.stats`` object
(:mod:`.stats`) and the ``--benchmark-json`` file (:mod:`.jsonfile`). The fixture itself is
:mod:`pytest_cudaperf.fixtures.benchmark`; nothing here imports torch."""
