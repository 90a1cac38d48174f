"""Logging sinks for the trainer, behind one interface: ``cb(data, tag, step, force=False)``.

``reset()`` drops what is averaged but unwritten, ``close()`` writes everything. Writers open
lazily, so a callback can be pickled to a worker process until its first write.
"""

from online_trainer.callbacks.base import CallBack
from online_trainer.callbacks.empty import EmptyCallBack
from online_trainer.callbacks.jsonl import JsonlCallback
from online_trainer.callbacks.tensorboard import BasicCallBack, TBCallBack

__all__ = ["BasicCallBack", "CallBack", "EmptyCallBack", "JsonlCallback", "TBCallBack"]
