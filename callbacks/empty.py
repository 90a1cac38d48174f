"""A callback that drops everything."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from online_trainer.callbacks.base import CallBack
from online_trainer.callbacks.rewind import held_by


class EmptyCallBack(CallBack):
    """Logs nothing. The trainer hands agents ``call_back=None`` when this is the callback,
    so an agent can skip computing metrics nobody reads."""

    def __call__(self, data: Mapping[str, Any], tag: str, step: int, force: bool = False) -> None:
        return None

    def check_position(self, position: Any) -> None:
        """Refuse the position of sinks: a run that logged to them, resumed without them, would leave their files
        as they stood when it was cut off, neither cut back to its checkpoint nor continued."""
        if position is not None:
            raise ValueError(
                f"the run's checkpoint holds {held_by(position)}, but EmptyCallBack logs nothing: resume with the "
                "callbacks the experiment ran with (their files are cut back to the checkpoint)."
            )

    def __repr__(self) -> str:
        return "EmptyCallBack()"
