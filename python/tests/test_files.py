"""mx.nd.save / mx.nd.load: MXNet's NDArray file format, read from a file MXNet 1.9.1 wrote and
round-tripped; a damaged file raises MXNetError and a failed save leaves no partial file."""

from __future__ import annotations

from pathlib import Path

import mxrs as mx
import numpy as np
import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "ndarray_ops" / "tests" / "data" / "mxnet"


def test_reads_the_file_mxnet_wrote() -> None:
    loaded = mx.nd.load(str(FIXTURES / "dtypes.nd"))
    assert isinstance(loaded, dict)
    want = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64, "u8": np.uint8}
    for name, dtype in want.items():
        a = loaded[name]
        assert a.dtype == dtype, name
    np.testing.assert_array_equal(loaded["u8"].asnumpy(), np.arange(7, dtype=np.uint8) * 37)
    f32 = (np.arange(24) * 0.5 - 3).astype(np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(loaded["f32"].asnumpy(), f32)


def test_round_trip_with_and_without_names(tmp_path: Path) -> None:
    a = mx.nd.array(np.random.uniform(-1, 1, (3, 4)))
    b = mx.nd.arange(5, dtype="int64")
    mx.nd.save(str(tmp_path / "d.params"), {"arg:w": a, "aux:b": b})
    d = mx.nd.load(str(tmp_path / "d.params"))
    assert sorted(d) == ["arg:w", "aux:b"]
    np.testing.assert_array_equal(d["arg:w"].asnumpy(), a.asnumpy())
    np.testing.assert_array_equal(d["aux:b"].asnumpy(), b.asnumpy())
    mx.nd.save(str(tmp_path / "l.nd"), [a, b])
    lst = mx.nd.load(str(tmp_path / "l.nd"))
    assert isinstance(lst, list) and len(lst) == 2
    np.testing.assert_array_equal(lst[1].asnumpy(), b.asnumpy())


def test_bad_files_raise_and_nothing_partial_is_left(tmp_path: Path) -> None:
    bad = tmp_path / "bad.params"
    bad.write_bytes(b"\x12\x01\x00\x00\x00\x00\x00\x00garbage")
    with pytest.raises(mx.MXNetError):
        mx.nd.load(str(bad))
    with pytest.raises(mx.MXNetError):
        mx.nd.load(str(tmp_path / "missing.params"))
    target = tmp_path / "no-such-dir" / "x.params"
    with pytest.raises(mx.MXNetError):
        mx.nd.save(str(target), {"a": mx.nd.ones(2)})
    assert not target.exists()
