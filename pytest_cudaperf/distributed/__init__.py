"""``@pytest.mark.distributed``: a test body run in ``world_size`` processes with an initialised
``torch.distributed`` process group.

The pytest process that collected the test (the *launcher*: a plain run or an xdist worker) does
not run the body. It plans the run (:mod:`.plan`: backend, GPUs, skip reasons), starts the ranks
(:mod:`.launcher`: ``torch.multiprocessing`` spawn, the GPUs' locks held, timeouts with stack
dumps) and merges what they left (:mod:`.merge`). Each rank (:mod:`.rank`) initialises the process
group (a ``FileStore`` in a private folder: no port to collide) and runs the one test item through
``pytest.main``, so every fixture works per rank; its measurements go through an aligned sampler
(:mod:`.sampler`), its collectives through ``dist_rank`` (:mod:`.collectives`).

The two sides of the process boundary share the typed :class:`.result.RankResult` a rank writes
once and its launcher reads, and the bandwidth arithmetic (:mod:`.bandwidth`). The launcher's
modules (plan, launcher, merge) import of the rank's side only :func:`.rank.rank_main`, the
function it spawns; the rank's modules (rank, sampler, collectives) import nothing of the
launcher's. Two contracts in ``pyproject.toml`` keep it so.
"""
