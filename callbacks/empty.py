"""A callback that drops everything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from online_trainer.callbacks.base import CallBack


class EmptyCallBack(CallBack):
    """Logs nothing. The trainer hands agents ``call_back=None`` when this is the callback,
    so an agent can skip computing metrics nobody reads."""

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        return None

    def __repr__(self) -> str:
        return "EmptyCallBack()"
