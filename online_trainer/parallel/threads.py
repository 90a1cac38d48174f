"""Thread limits: a process running runs gives every thread pool (torch, BLAS, OpenMP) ``torch_threads`` threads.

torch, OpenBLAS or MKL (numpy's and scipy's matrix products) and OpenMP each start one thread
per core by default, so N worker processes with an agent doing matrix products would run N
times as many threads as there are cores, and slow each other down instead of scaling. A
pool is limited in two ways:

- **environment variables** (:data:`THREAD_VARIABLES`), which each library reads once, when it
  is loaded: a worker process starts with them set (the parent sets them around the start),
  so they hold for everything the worker imports, numpy included;
- **at run time**, for libraries already loaded (a forked worker, a forkserver's preloaded
  modules, this process): ``torch.set_num_threads`` and threadpoolctl's ``threadpool_limits``.

The limit replaces the values of these variables a worker would inherit from this process: an
``OMP_NUM_THREADS`` exported for the whole job (one thread per core of the parent) would
oversubscribe the cores N times. ``torch_threads`` is the one setting; ``torch_threads=None``
leaves every pool as the environment and the libraries set it.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Mapping

import threadpoolctl

THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)
"""The variables that size the thread pools of OpenMP, OpenBLAS, MKL, BLIS, Accelerate and numexpr."""


def thread_variables(num_threads: int | None) -> dict[str, str]:
    """The environment that makes libraries loaded later use ``num_threads`` threads (None: no variable)."""
    if num_threads is None:
        return {}
    return dict.fromkeys(THREAD_VARIABLES, str(num_threads))


@contextlib.contextmanager
def environment(variables: Mapping[str, str]) -> Iterator[None]:
    """Set ``variables`` in ``os.environ`` while the block runs (processes started meanwhile inherit them)."""
    previous = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in previous.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def limit_threads(num_threads: int | None) -> None:
    """In a process that runs runs (a worker, a Ray task): every thread pool, loaded now or later, to ``num_threads``.

    None leaves them as they are.
    """
    if num_threads is None:
        return
    os.environ.update(thread_variables(num_threads))  # libraries loaded from now on
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(num_threads)
    threadpoolctl.threadpool_limits(limits=num_threads)  # BLAS and OpenMP libraries already loaded


@contextlib.contextmanager
def limited_threads(num_threads: int | None) -> Iterator[None]:
    """In this process, while the block runs: every thread pool to ``num_threads``; the caller's settings after.

    torch's thread count, the BLAS and OpenMP libraries' and the variables of
    :data:`THREAD_VARIABLES` are given back as they were. A library first loaded inside the
    block reads the limit from the variables and keeps it (it had no setting before). None
    changes nothing.
    """
    if num_threads is None:
        yield
        return
    torch = sys.modules.get("torch")
    torch_threads = torch.get_num_threads() if torch is not None else None
    with environment(thread_variables(num_threads)), threadpoolctl.threadpool_limits(limits=num_threads):
        if torch is not None:
            torch.set_num_threads(num_threads)
        try:
            yield
        finally:
            if torch is not None:
                torch.set_num_threads(torch_threads)
