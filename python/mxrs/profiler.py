"""``mx.profiler``: records the time of every op the engine runs. ``set_state("run")`` starts
recording, ``"stop"`` stops; ``dumps()`` gives a table of time per op name, ``dump()`` writes a
Chrome trace (chrome://tracing, Perfetto) to the file ``set_config`` named."""

from __future__ import annotations

from typing import Any

from . import _native

__all__ = ["dump", "dumps", "pause", "resume", "set_config", "set_state"]

_CONFIG: dict[str, Any] = {"filename": "profile.json"}


def set_config(filename: str = "profile.json", **kwargs: Any) -> None:
    """Sets the trace file ``dump`` writes. MXNet's other options (``profile_all``,
    ``aggregate_stats``, ...) are accepted; every op is recorded."""
    _CONFIG["filename"] = str(filename)
    _CONFIG.update(kwargs)


def set_state(state: str = "stop", profile_process: str = "worker") -> None:
    """``"run"`` starts recording, ``"stop"`` stops."""
    if state not in ("run", "stop"):
        raise ValueError(f"profiler state {state!r} is not run or stop")
    _native.profiler_set_running(state == "run")


def pause(profile_process: str = "worker") -> None:
    """Stops recording (``resume`` starts again)."""
    _native.profiler_set_running(False)


def resume(profile_process: str = "worker") -> None:
    """Records again after ``pause``."""
    _native.profiler_set_running(True)


def dump(finished: bool = True, profile_process: str = "worker") -> None:
    """Writes the Chrome trace of what was recorded to the configured file (after waiting for
    every pushed op)."""
    _native.profiler_dump(_CONFIG["filename"])


def dumps(reset: bool = False, format: str = "table") -> str:
    """A table of the recorded time per op name; ``reset`` forgets it afterwards."""
    out = _native.profiler_summary()
    if reset:
        _native.profiler_reset()
    return out
