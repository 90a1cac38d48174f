"""Logging sinks for the trainer, behind one interface: ``cb(data, tag, step, force=False)``.

``reset()`` drops what is averaged but unwritten, ``close()`` writes everything. Writers open
lazily, so a callback can be pickled to a worker process until its first write. Sinks that keep
a record per run implement the optional ``setup``, ``start_run`` and ``end_run``. MLflow and W&B
are imported only when their sinks are used (``pip install -e ".[mlflow]"`` / ``".[wandb]"``).
"""

from online_trainer.callbacks.base import CallBack
from online_trainer.callbacks.csv_file import CSVCallback
from online_trainer.callbacks.empty import EmptyCallBack
from online_trainer.callbacks.jsonl import JsonlCallback
from online_trainer.callbacks.mlflow_sink import MLflowCallback
from online_trainer.callbacks.multi import MultiCallback
from online_trainer.callbacks.tensorboard import BasicCallBack, TBCallBack
from online_trainer.callbacks.wandb_history import load_wandb_history
from online_trainer.callbacks.wandb_sink import WandbCallback

__all__ = [
    "BasicCallBack",
    "CSVCallback",
    "CallBack",
    "EmptyCallBack",
    "JsonlCallback",
    "MLflowCallback",
    "MultiCallback",
    "TBCallBack",
    "WandbCallback",
    "load_wandb_history",
]
