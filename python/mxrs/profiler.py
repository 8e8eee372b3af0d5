"""``mx.profiler``: records the time of every op the engine runs. ``set_state("run")`` starts
recording, ``"stop"`` stops; ``dumps()`` gives a table of time per op name (or, with
``format="json"``, MXNet's aggregate statistics), ``dump()`` writes a Chrome trace
(chrome://tracing, Perfetto) to the file ``set_config`` named.

A program marks its own work in the same trace: a ``Domain`` groups ``Task``, ``Frame`` and
``Event`` spans (``start()`` ... ``stop()``), ``Counter`` values and ``Marker`` instants."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from . import _native

if TYPE_CHECKING:
    from typing_extensions import Self

__all__ = [
    "Counter",
    "Domain",
    "Event",
    "Frame",
    "Marker",
    "Task",
    "dump",
    "dump_profile",
    "dumps",
    "pause",
    "profiler_set_config",
    "profiler_set_state",
    "resume",
    "set_config",
    "set_state",
]

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


def dumps(
    reset: bool = False, format: str = "table", sort_by: str = "total", ascending: bool = False
) -> str:
    """The recorded time per op name: a table, or with ``format="json"`` MXNet's aggregate
    statistics (``{"Time": {domain: {name: {"Count", "Total", "Min", "Max", "Avg"}}},
    "Memory": {}, "Unit": {...}}``, times in ms, ops under the domain ``operator``, marked spans
    under their own), sorted by ``sort_by`` (``total``, ``avg``, ``min``, ``max``, ``count``).
    ``reset`` forgets what was recorded afterwards."""
    if format not in ("table", "json"):
        raise ValueError(f"dumps: format {format!r} is not table or json")
    keys = {"total": "Total", "avg": "Avg", "min": "Min", "max": "Max", "count": "Count"}
    if sort_by not in keys:
        raise ValueError(f"dumps: sort_by {sort_by!r} is not one of {sorted(keys)}")
    if format == "table":
        out = _native.profiler_summary()
    else:
        time: dict[str, dict[str, dict[str, float]]] = {}
        for domain, name, count, total, low, high in _native.profiler_stats():
            time.setdefault(domain, {})[name] = {
                "Count": count,
                "Total": total / 1e6,
                "Min": low / 1e6,
                "Max": high / 1e6,
                "Avg": total / 1e6 / max(count, 1),
            }
        for domain, items in time.items():
            order = sorted(
                items.items(), key=lambda kv: kv[1][keys[sort_by]], reverse=not ascending
            )
            time[domain] = dict(order)
        unit = {"Time": "ms", "Memory": "kB"}
        out = json.dumps({"Time": time, "Memory": {}, "Unit": unit})
    if reset:
        _native.profiler_reset()
    return out


# MXNet's older names of the same calls.
profiler_set_config = set_config
profiler_set_state = set_state
dump_profile = dump


class Domain:
    """A group of marks (a process of its own in the trace)."""

    def __init__(self, name: str) -> None:
        self.name = str(name)

    def __str__(self) -> str:
        return self.name

    def new_task(self, name: str) -> Task:
        """A task of this domain."""
        return Task(self, name)

    def new_frame(self, name: str) -> Frame:
        """A frame of this domain."""
        return Frame(self, name)

    def new_counter(self, name: str, value: int | None = None) -> Counter:
        """A counter of this domain, set to ``value`` when given."""
        return Counter(self, name, value)

    def new_marker(self, name: str) -> Marker:
        """A marker of this domain."""
        return Marker(self, name)


class _Span:
    """A span of time in the trace, from ``start()`` to ``stop()``."""

    def __init__(self, domain: Domain, name: str) -> None:
        self.domain, self.name = domain, str(name)
        self._start: int | None = None

    def start(self) -> None:
        """Starts the span."""
        self._start = _native.profiler_now()

    def stop(self) -> None:
        """Ends the span and marks it in the trace (while the profiler runs)."""
        if self._start is None:
            raise RuntimeError(f"{type(self).__name__} {self.name!r}: stop() without start()")
        _native.profiler_mark("span", self.domain.name, self.name, start=self._start)
        self._start = None

    def __str__(self) -> str:
        return self.name


class Task(_Span):
    """A piece of work of a domain."""


class Frame(_Span):
    """A frame (an iteration, a batch) of a domain."""


class Event(_Span):
    """A span of its own, outside any domain (in the domain ``event``)."""

    def __init__(self, name: str) -> None:
        super().__init__(Domain("event"), name)


class Counter:
    """A value of a domain that changes over time; each change is marked in the trace."""

    def __init__(self, domain: Domain, name: str, value: int | None = None) -> None:
        self.domain, self.name = domain, str(name)
        self._value = 0
        if value is not None:
            self.set_value(value)

    def set_value(self, value: int) -> None:
        """Sets the value."""
        self._value = value
        _native.profiler_mark("counter", self.domain.name, self.name, value=float(value))

    def increment(self, delta: int = 1) -> None:
        """Adds ``delta``."""
        self.set_value(self._value + delta)

    def decrement(self, delta: int = 1) -> None:
        """Takes ``delta`` away."""
        self.set_value(self._value - delta)

    def __iadd__(self, delta: int) -> Self:
        self.increment(delta)
        return self

    def __isub__(self, delta: int) -> Self:
        self.decrement(delta)
        return self

    def __str__(self) -> str:
        return self.name


class Marker:
    """A moment of a domain, marked by ``mark(scope)``."""

    def __init__(self, domain: Domain, name: str) -> None:
        self.domain, self.name = domain, str(name)

    def mark(self, scope: str = "process") -> None:
        """Marks now, for the ``process``, ``global``ly or for the ``thread``."""
        if scope not in ("process", "global", "thread", "task", "marker"):
            raise ValueError(f"Marker.mark: scope {scope!r} is not process, global or thread")
        _native.profiler_mark("instant", self.domain.name, self.name, scope=scope)
