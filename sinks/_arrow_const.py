"""Arrow scalars built from their bytes, for the write paths of Spark's Python workers.

Every conversion from Python values in pyarrow (``pa.scalar(1)``, ``pa.array([...])``, a
plain ``1`` passed to a compute function) asks pyarrow's pandas shim whether the value is a
pandas object, and that first question imports pandas: about 0.4 s of CPU in a fresh Spark
Python worker. The workers that plan and commit a write import no pandas otherwise (a write
task's worker does at its end, for Spark's own commit message). A scalar built from a buffer
(:func:`const`) asks nothing, so code that makes its scalars with it and computes over arrays
never imports pandas.
"""

from __future__ import annotations

import struct

import pyarrow as pa

__all__ = ["const"]

_INT_FORMATS = {8: "b", 16: "h", 32: "i", 64: "q"}


def const(value: int | bytes, type_: pa.DataType) -> pa.Scalar:
    """The scalar *value* of *type_* (a signed integer, ``binary`` or ``large_binary``).

    Raises:
        TypeError: another type, or a value that is not of it.
    """
    if isinstance(value, bytes) and (pa.types.is_binary(type_) or pa.types.is_large_binary(type_)):
        offsets = struct.pack("=2q" if pa.types.is_large_binary(type_) else "=2i", 0, len(value))
        return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(offsets), pa.py_buffer(value)])[0]
    if isinstance(value, int) and pa.types.is_signed_integer(type_):
        data = struct.pack("=" + _INT_FORMATS[type_.bit_width], value)
        return pa.Array.from_buffers(type_, 1, [None, pa.py_buffer(data)])[0]
    raise TypeError(f"const: no {type_} scalar of {value!r}")
