"""What travels to a worker, a Ray task or a Slurm job: a run's spec, cloudpickled with its code's file names kept.

cloudpickle pickles by value what cannot be imported where the spec goes (an agent class or a factory
written in the script run as ``__main__``, or in a notebook cell), and since its 3.1 release it names the
file of every such code object ``<dynamic-code>``, so that a payload does not depend on where the code
was written. A run that failed in a worker then showed ``File "<dynamic-code>", line 10, in update`` with
no line of source, and its warnings ``<dynamic-code>:15: UserWarning``. The specs pickled here keep each
code object's own file name: a worker's traceback and warnings name the user's file and line, with the
line's text where that file can be read.
"""

from __future__ import annotations

import io
import pickle
import types
from collections import ChainMap
from typing import Any

import cloudpickle

_PLACEHOLDER = "<dynamic-code>"
_cloudpickle_code_reduce = getattr(cloudpickle.cloudpickle, "_code_reduce", None)


def _code_reduce(code: types.CodeType) -> Any:
    """cloudpickle's reduction of ``code``, with ``co_filename`` put back in place of its placeholder."""
    assert _cloudpickle_code_reduce is not None  # registered only when cloudpickle has it
    rebuild, args = _cloudpickle_code_reduce(code)
    return rebuild, tuple(code.co_filename if isinstance(arg, str) and arg == _PLACEHOLDER else arg for arg in args)


class _Pickler(cloudpickle.Pickler):
    if _cloudpickle_code_reduce is not None:  # a cloudpickle without it names files as it does
        dispatch_table = ChainMap({types.CodeType: _code_reduce}, cloudpickle.Pickler.dispatch_table)


def dumps(obj: Any) -> bytes:
    """``obj`` cloudpickled (highest protocol), every code object pickled by value keeping its file name."""
    with io.BytesIO() as file:
        _Pickler(file, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
        return file.getvalue()
