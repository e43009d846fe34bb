"""One run of the plugin in one process: its context, the measure-judge loop of a test, the
call report it decorates, and (on the controller) the run's results and outputs."""
