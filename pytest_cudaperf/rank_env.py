"""What a rank process of a ``@distributed`` test knows of itself: the environment its launcher
sets (:mod:`pytest_cudaperf.distributed`), read by the run context of the pytest run in the rank."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

RANK_ENV = "PYTEST_CUDAPERF_DIST_RANK"
WORLD_ENV = "PYTEST_CUDAPERF_DIST_WORLD_SIZE"
GPU_ENV = "PYTEST_CUDAPERF_DIST_GPU"
LOCK_ENV = "PYTEST_CUDAPERF_DIST_LOCK_DIR"
DIR_ENV = "PYTEST_CUDAPERF_DIST_DIR"
BACKEND_ENV = "PYTEST_CUDAPERF_DIST_BACKEND"


def in_rank(environ: Mapping[str, str]) -> bool:
    """Is this process a rank of a distributed test?"""
    return RANK_ENV in environ


@dataclass(frozen=True)
class RankEnv:
    """What the plugin in a rank process needs to know about itself."""

    rank: int
    world_size: int
    gpu: int | None
    lock_dir: str | None
    workdir: str | None
    backend: str

    @classmethod
    def read(cls, environ: Mapping[str, str]) -> RankEnv | None:
        if RANK_ENV not in environ:
            return None
        gpu = environ.get(GPU_ENV, "")
        return cls(
            rank=int(environ[RANK_ENV]),
            world_size=int(environ.get(WORLD_ENV, "1")),
            gpu=int(gpu) if gpu else None,
            lock_dir=environ.get(LOCK_ENV) or None,
            workdir=environ.get(DIR_ENV) or None,
            backend=environ.get(BACKEND_ENV, "gloo"),
        )
