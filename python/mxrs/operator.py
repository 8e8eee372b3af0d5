"""``mx.operator``: what the op registry holds: every op's name and its arguments."""

from __future__ import annotations

from . import _native

__all__ = ["OperatorArguments", "get_all_registered_operators", "get_operator_arguments"]


def get_all_registered_operators() -> list[str]:
    """Every registered op name, aliases included."""
    names: list[str] = []
    for sig in _native.signatures():
        names.append(sig["name"])
        names.extend(sig["aliases"])
    return names


class OperatorArguments:
    """An op's arguments: ``narg`` of them, their ``names`` and ``types`` (inputs as
    ``NDArray-or-Symbol``, attributes by MXNet's type names)."""

    def __init__(self, names: list[str], types: list[str]) -> None:
        self.narg, self.names, self.types = len(names), names, types

    def __repr__(self) -> str:
        return f"OperatorArguments(narg={self.narg}, names={self.names}, types={self.types})"


def get_operator_arguments(op_name: str) -> OperatorArguments:
    """The arguments of op ``op_name`` (an unknown name raises ``KeyError``)."""
    for sig in _native.signatures():
        if op_name == sig["name"] or op_name in sig["aliases"]:
            kind = "NDArray-or-Symbol[]" if sig["variadic"] else "NDArray-or-Symbol"
            names = list(sig["inputs"]) + [a[0] for a in sig["attrs"]]
            types = [kind] * len(sig["inputs"])
            for _, ty, or_none, default, _ in sig["attrs"]:
                # MXNet's spelling: choices quoted, ``bool`` as ``boolean``.
                if ty.startswith("{"):
                    ty = "{" + ", ".join(f"'{c.strip()}'" for c in ty.strip("{}").split(",")) + "}"
                elif ty == "bool":
                    ty = "boolean"
                t = f"{ty} or None" if or_none else ty
                types.append(
                    f"{t}, required" if default is None else f"{t}, optional, default={default}"
                )
            return OperatorArguments(names, types)
    raise KeyError(f"no op is registered as {op_name!r}")
