"""``cudaperf ab``: two revisions (or two Python environments) of a project measured in alternating
fresh pytest processes on one machine, judged pair by pair, with no stored baseline."""
