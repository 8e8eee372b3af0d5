"""MXNet 1.9.1's public names, and the public members of its classes, are all in mxrs.

``fixtures/mxnet_api.json`` lists them, made from the real package by
``tools/mxnet_api_names.py``. Every name must be found under the same path with ``mxnet``
read as ``mxrs``, unless ``fixtures/api_exclusions.json`` lists it:

- ``excluded``: what cannot work on this runtime at all, each with its reason;
- ``missing``: what is not built yet, grouped by the module or class it belongs to.

Both lists are kept exact: a listed name that mxrs now has fails the test too, so that the
lists only shrink.

    python python/tests/test_api_surface.py   # rewrites the ``missing`` list from the package
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

HERE = Path(__file__).parent / "fixtures"


def load() -> tuple[dict, dict[str, str], dict[str, str]]:
    api = json.loads((HERE / "mxnet_api.json").read_text())
    lists = json.loads((HERE / "api_exclusions.json").read_text())
    missing = {name: why for why, names in lists["missing"].items() for name in names}
    return api, lists["excluded"], missing


def ours(module: str) -> object | None:
    """mxrs's module for MXNet's ``module``, or None."""
    try:
        return importlib.import_module("mxrs" + module[len("mxnet") :])
    except ImportError:
        return None


def absent_names(api: dict) -> list[str]:
    """Every name of the fixture that mxrs lacks: ``module:name`` for a module's names,
    ``class:member`` (MXNet's class path) for a class's members."""
    absent: list[str] = []
    seen: set[str] = set()
    for module, names in sorted(api["modules"].items()):
        mod = ours(module)
        for name, entry in sorted(names.items()):
            obj = getattr(mod, name, None) if mod is not None else None
            if obj is None:
                absent.append(f"{module}:{name}")
                continue
            qual = entry.get("class")
            if qual is None or qual in seen:
                continue
            seen.add(qual)
            for member in sorted(api["classes"].get(qual, {})):
                if not hasattr(obj, member):
                    absent.append(f"{qual}:{member}")
    # A class found in no module of ours: its members are absent with it.
    return absent


def test_the_fixture_lists_mxnet_s_surface() -> None:
    api, _, _ = load()
    assert api["mxnet"] == "1.9.1"
    names = sum(len(v) for v in api["modules"].values())
    members = sum(len(v) for v in api["classes"].values())
    # The fixture as tools/mxnet_api_names.py writes it: every covered module, its classes.
    assert len(api["modules"]) >= 40 and names > 2000 and members > 1400
    assert api["modules"]["mxnet.ndarray"]["take"]["kind"] == "function"
    assert "wait_to_read" in api["classes"]["mxnet.ndarray.ndarray.NDArray"]


def test_every_mxnet_name_is_here_or_listed_with_a_reason() -> None:
    api, excluded, missing = load()
    absent = set(absent_names(api))
    unlisted = sorted(absent - set(excluded) - set(missing))
    assert not unlisted, (
        f"{len(unlisted)} of MXNet's public names are missing from mxrs and from "
        f"fixtures/api_exclusions.json: {unlisted[:40]}"
    )


def test_the_lists_hold_only_what_is_absent() -> None:
    api, excluded, missing = load()
    absent = set(absent_names(api))
    present = sorted((set(excluded) | set(missing)) - absent)
    assert not present, (
        f"{len(present)} names are listed as missing or excluded but mxrs has them "
        f"(take them off fixtures/api_exclusions.json): {present[:40]}"
    )


@pytest.mark.parametrize("field", ["excluded"])
def test_every_exclusion_says_why(field: str) -> None:
    _, excluded, _ = load()
    for name, why in excluded.items():
        assert len(why.split()) >= 4, f"{name}: the reason {why!r} says too little"


def write_missing() -> None:
    """Rewrites the ``missing`` list: what mxrs lacks now, less the exclusions."""
    api, excluded, _ = load()
    lists = json.loads((HERE / "api_exclusions.json").read_text())
    groups: dict[str, list[str]] = {}
    for name in absent_names(api):
        if name not in excluded:
            groups.setdefault(name.split(":", 1)[0], []).append(name)
    lists["missing"] = groups
    (HERE / "api_exclusions.json").write_text(json.dumps(lists, indent=1, sort_keys=True) + "\n")
    print(f"{sum(len(v) for v in groups.values())} names missing, {len(excluded)} excluded")


if __name__ == "__main__":
    write_missing()
