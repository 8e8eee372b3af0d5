"""``mx.viz``: a graph as a table of its layers (``print_summary``) or as a Graphviz drawing
(``plot_network``, where the ``graphviz`` package is installed)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from .symbol.symbol import Symbol

__all__ = ["plot_network", "print_summary"]


def _shapes(symbol: Symbol, shape: dict[str, Any] | None) -> dict[str, tuple]:
    """Every output and argument of the graph by name, with the shapes ``shape`` determines."""
    if shape is None:
        return {}
    internals = symbol.get_internals()
    args, outs, aux = internals.infer_shape(**shape)
    if outs is None:
        raise ValueError(f"print_summary: the shapes {shape} do not determine every shape")
    found = dict(zip(internals.list_outputs(), outs))
    found.update(zip(internals.list_arguments(), args))
    found.update(zip(internals.list_auxiliary_states(), aux))
    return found


def _size(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def print_summary(
    symbol: Symbol,
    shape: dict[str, Any] | None = None,
    line_length: int = 120,
    positions: Sequence[float] = (0.44, 0.64, 0.74, 1.0),
) -> None:
    """Prints one row per op (its name and type, output shape, parameters and the layers it
    reads) and the total of parameters. A layer's parameters are its learned arguments: the
    inputs that are variables other than the data named in ``shape`` (its auxiliary states, such
    as BatchNorm's moving statistics, are not counted), sized from the shapes ``shape`` gives."""
    if not isinstance(symbol, Symbol):
        raise TypeError("symbol must be a Symbol")
    shapes = _shapes(symbol, shape)
    graph = json.loads(symbol.tojson())
    nodes, heads = graph["nodes"], {h[0] for h in graph["heads"]}
    aux = set(symbol.list_auxiliary_states())
    data = set(shape or {})
    cols = [int(line_length * p) if positions[-1] <= 1 else int(p) for p in positions]

    def row(fields: Sequence[Any]) -> None:
        line = ""
        for field, end in zip(fields, cols):
            line = (line + str(field))[:end]
            line += " " * (end - len(line))
        print(line)

    print("_" * line_length)
    row(["Layer (type)", "Output Shape", "Param #", "Previous Layer"])
    print("=" * line_length)
    total = 0
    shown = [i for i, n in enumerate(nodes) if n["op"] != "null" or i in heads or i == 0]
    for k, i in enumerate(shown):
        node = nodes[i]
        name, op = node["name"], node["op"]
        key = name if op == "null" else f"{name}_output"
        out = shapes.get(key, ())[1:]
        params, previous = 0, []
        for src, _, *_ in node.get("inputs", []):
            inp = nodes[src]
            # The first node (the data, in a graph made from its input up) is a layer of the
            # table, as in MXNet's, and so a previous layer of the ops that read it.
            if inp["op"] != "null" or src in heads or src == 0:
                previous.append(inp["name"])
            elif inp["name"] not in data and inp["name"] not in aux and inp["name"] in shapes:
                params += _size(shapes[inp["name"]])
        total += params
        row(
            [
                f"{name}({op})",
                "x".join(str(d) for d in out),
                params,
                previous[0] if previous else "",
            ]
        )
        for more in previous[1:]:
            row(["", "", "", more])
        print(("=" if k == len(shown) - 1 else "_") * line_length)
    print(f"Total params: {total}")
    print("_" * line_length)


def plot_network(
    symbol: Symbol,
    title: str = "plot",
    save_format: str = "pdf",
    shape: dict[str, Any] | None = None,
    dtype: dict[str, Any] | None = None,
    node_attrs: dict[str, str] | None = None,
    hide_weights: bool = True,
) -> Any:
    """A ``graphviz.Digraph`` of the graph: a node per op and input (weights and biases hidden
    unless ``hide_weights`` is False), edges labelled with shapes when ``shape`` is given.
    Needs the ``graphviz`` Python package."""
    try:
        import graphviz
    except ImportError as e:
        raise ImportError("plot_network needs the graphviz package (pip install graphviz)") from e
    if not isinstance(symbol, Symbol):
        raise TypeError("symbol must be a Symbol")
    shapes = _shapes(symbol, shape)
    graph = json.loads(symbol.tojson())
    nodes = graph["nodes"]
    style = {"shape": "box", "fixedsize": "false", "style": "filled", "fillcolor": "#8dd3c7"}
    style.update(node_attrs or {})
    dot = graphviz.Digraph(name=title, format=save_format)

    def hidden(node: dict) -> bool:
        name = node["name"]
        weight = name.endswith(
            ("_weight", "_bias", "_gamma", "_beta", "_moving_mean", "_moving_var")
        )
        return node["op"] == "null" and hide_weights and weight

    for i, node in enumerate(nodes):
        if hidden(node):
            continue
        label = node["name"] if node["op"] == "null" else f"{node['op']}\n{node['name']}"
        dot.node(name=str(i), label=label, **style)
    for i, node in enumerate(nodes):
        for src, *_ in node.get("inputs", []):
            if hidden(nodes[src]):
                continue
            key = nodes[src]["name"] + ("" if nodes[src]["op"] == "null" else "_output")
            label = "x".join(str(d) for d in shapes.get(key, ())[1:])
            if dtype is not None and nodes[src]["name"] in dtype:
                label += f" {dtype[nodes[src]['name']]}"
            dot.edge(tail_name=str(src), head_name=str(i), label=label, dir="back")
    return dot
