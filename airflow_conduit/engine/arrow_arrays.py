"""Arrow arrays built from their buffers, for code that runs in Spark's Python workers.

``pa.array`` and ``pa.scalar`` import pandas on first use (pyarrow checks whether the values are pandas
objects): about 30-36 MiB in every worker that calls them, where nothing else needs pandas. Spark reuses
a worker for the tasks of every stage, so one such call in any of them (a destination's record format,
a source's read) brings pandas into all of them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

_INT_TYPES = {np.int32: pa.int32(), np.int64: pa.int64()}
_MAX_INT32 = 2**31 - 1


def int_array(values: np.ndarray, dtype: type[np.int32] | type[np.int64]) -> pa.Array:
    """``values`` as an Arrow integer array of ``dtype``."""
    data = np.ascontiguousarray(values, dtype=dtype)
    return pa.Array.from_buffers(_INT_TYPES[dtype], len(data), [None, pa.py_buffer(data)])


def string_array(texts: list[str]) -> pa.Array:
    """``texts`` as an Arrow ``string`` array (32-bit offsets)."""
    encoded = [text.encode() for text in texts]
    offsets = np.cumsum([0, *map(len, encoded)], dtype=np.int64)
    if offsets[-1] > _MAX_INT32:  # past what 32-bit offsets hold: pyarrow's own error
        return pa.array(texts, pa.string())
    return pa.Array.from_buffers(
        pa.string(),
        len(encoded),
        [None, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))],
    )
