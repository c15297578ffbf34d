"""The Python side of ``custom.python`` without Spark: an Arrow batch to record dicts and back, where
only the columns a function changed are rebuilt."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_conduit.engine.arrow_arrays import string_dicts, string_map_array
from airflow_conduit.engine.processors.custom_python import make_mapper
from tests import arrow_batches
from tests.arrow_batches import metadata_pairs

_names = itertools.count()


ROWS: list[dict[str, Any]] = [
    {"position": b"f:0", "metadata": [("file.path", "f"), ("a", "1")], "after_json": '{"n":1}'},
    {"position": b"f:8", "metadata": None, "key_raw": b"2", "after_raw": b"raw"},
    {
        "position": b"f:12",
        "metadata": [],
        "after_json": '{"n":3,"big":12345678901234567891}',
        "_piece": [0, 1],
    },
    {"position": b"f:40", "metadata": [("b", "2")], "after_json": '{"n":4}', "_active": False},
]


def arrow_batch(rows: list[dict[str, Any]] = ROWS) -> Any:
    return arrow_batches.arrow_batch([{"operation": "create", "_piece": []} | row for row in rows])


def mapped(tmp_path: Path, body: str, batch: Any) -> Any:
    """``batch`` through ``custom.python`` with ``def process(record): <body>``."""
    module = f"arrow_records_fn_{next(_names)}"
    (tmp_path / f"{module}.py").write_text(f"def process(record):\n    {body}\n")
    (out,) = make_mapper(f"{module}:process", str(tmp_path), "p:py")(iter([batch]))
    return out


MAPS = pa.array([row["metadata"] for row in ROWS], pa.map_(pa.string(), pa.string()))
"""The rows' metadata as a map column, as a destination's batches hold it."""


@pytest.mark.parametrize("rows", [slice(0, 4), slice(1, 3), slice(2, 4)])
def test_maps_go_to_dicts_and_back_whole_or_sliced(rows: slice) -> None:
    maps = MAPS.slice(rows.start, rows.stop - rows.start)
    dicts = string_dicts(maps)
    assert dicts == [None if m is None else dict(m) for m in maps.to_pylist()]
    rebuilt = string_map_array(dicts)
    assert rebuilt.type == maps.type and rebuilt.to_pylist() == maps.to_pylist()


def test_a_pass_through_gives_back_the_batch_it_got(tmp_path: Path) -> None:
    batch = arrow_batch()
    for given in (batch, batch.slice(1, 2)):
        assert mapped(tmp_path, "return record", given).to_pylist() == given.to_pylist()


def test_the_function_sees_each_field_and_its_changes_are_written(tmp_path: Path) -> None:
    body = (
        "record['metadata']['seen'] = 1; record['operation'] = 'update'; "
        "record['payload']['after'] = [type(record['payload']['after']).__name__, sorted(record['metadata'])]; "
        "return record"
    )
    out = mapped(tmp_path, body, arrow_batch()).to_pylist()
    assert [metadata_pairs(row["metadata"]) for row in out] == [
        [("file.path", "f"), ("a", "1"), ("seen", "1")],  # values through str, as Conduit's are strings
        [("seen", "1")],
        [("seen", "1")],
        [("b", "2")],  # not active: as it came
    ]
    assert [row["after_json"] for row in out] == [
        '["dict",["a","file.path","seen"]]',
        '["bytes",["seen"]]',
        '["dict",["seen"]]',
        '{"n":4}',
    ]
    assert [row["operation"] for row in out] == ["update", "update", "update", "create"]
    assert [row["after_raw"] for row in out] == [None, None, None, None]
    assert [row["_piece"] for row in out] == [[], [], [0, 1], []]


def test_a_failed_or_filtered_record_keeps_the_fields_it_came_with(tmp_path: Path) -> None:
    """The DLQ gets a nacked record as it came, even when the function changed its dict before it
    failed and another record's changes rebuild the columns."""
    body = (
        "record['metadata']['a'] = 'changed'; record['operation'] = 'delete'\n"
        "    if record['position'] == b'f:0': return record\n"
        "    if record['position'] == b'f:8': return None\n"
        "    raise ValueError('no')"
    )
    batch = arrow_batch()
    out = mapped(tmp_path, body, batch).to_pylist()
    assert [row["_state"] for row in out] == ["open", "filtered", "nacked", "open"]
    assert [row["_error"] for row in out] == [None, None, "ValueError: no", None]
    assert [row["_node"] for row in out] == [None, "p:py", "p:py", None]
    assert metadata_pairs(out[0]["metadata"]) == [("file.path", "f"), ("a", "changed")]
    assert out[0]["operation"] == "delete"
    for row, given in list(zip(out, batch.to_pylist(), strict=True))[1:]:
        assert {k: v for k, v in row.items() if not k.startswith("_")} == {
            k: v for k, v in given.items() if not k.startswith("_")
        }


def test_maps_convert_without_importing_pandas() -> None:
    """Workers that only read or write maps (a record format, a template) stay without pandas' 30-36
    MiB (see ``arrow_arrays``)."""
    script = (
        "import sys\n"
        "from airflow_conduit.engine.arrow_arrays import string_dicts, string_map_array\n"
        "maps = string_map_array([{'k': 'v'}, {'a': 'b', 'c': 'd'}, None])\n"
        "assert 'pandas' not in sys.modules\n"
        "string_dicts(string_map_array([*string_dicts(maps.slice(1)), None]))\n"
        "print('pandas' in sys.modules)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert run.stdout.strip() == "False"
