"""The Python side of ``custom.python`` without Spark: an Arrow batch to record dicts and back, where
only the columns a function changed are rebuilt."""

from __future__ import annotations

import gc
import itertools
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from airflow_conduit.engine.arrow_arrays import string_dicts, string_map_array
from airflow_conduit.engine.processors.custom_python import KEPT_BITS, make_mapper
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


def given(rows: list[dict[str, Any]] = ROWS) -> list[dict[str, Any]]:
    return arrow_batches.full_rows([{"operation": "create", "_piece": []} | row for row in rows])


def mapped(tmp_path: Path, body: str, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` through ``custom.python`` with ``def process(record): <body>``, as the engine reads
    them back."""
    module = f"arrow_records_fn_{next(_names)}"
    (tmp_path / f"{module}.py").write_text(f"def process(record):\n    {body}\n")
    (out,) = make_mapper(f"{module}:process", str(tmp_path), "p:py")(iter([arrow_batches.arrow_batch(rows)]))
    return arrow_batches.resolved(out, rows)


def comparable(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in row.items() if k != "_active"} for row in rows]


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
    rows = given()
    for part in (rows, rows[1:3]):
        assert mapped(tmp_path, "return record", part) == comparable(part)


def test_what_the_function_left_as_it_came_goes_back_as_a_kept_bit_not_as_text(tmp_path: Path) -> None:
    """The engine keeps a kept field as the record had it (Spark holds the row beside the mapper), so
    the mapper sends no text for it; a changed field goes back as text, its bit clear."""
    body = "if record['position'] == b'f:12': record['payload']['after']['n'] = 30\n    return record"
    _, out = _through(tmp_path, body, given())
    rows = out.to_pylist()
    bits = KEPT_BITS
    place = bits["position"] | bits["operation"] | bits["metadata"]
    assert [row["_kept"] for row in rows] == [
        place | bits["after"],  # the place, metadata and structured data as they came
        place,  # raw data goes back as bytes; a null field needs no bit
        place,  # after changed
        sum(bits.values()),  # not active: all of it as it came
    ]
    assert [row["position"] for row in rows] == [None] * 4
    assert [row["after_json"] for row in rows] == [None, None, '{"n":30,"big":12345678901234567891}', None]
    assert [row["metadata"] for row in rows] == [None] * 4
    assert [row["after_raw"] for row in rows] == [None, b"raw", None, None]


def _through(tmp_path: Path, body: str, rows: list[dict[str, Any]]) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    module = f"arrow_records_fn_{next(_names)}"
    (tmp_path / f"{module}.py").write_text(f"def process(record):\n    {body}\n")
    batch = arrow_batches.arrow_batch(rows)
    (out,) = make_mapper(f"{module}:process", str(tmp_path), "p:py")(iter([batch]))
    return batch, out


def _same_buffers(one: pa.Array, other: pa.Array) -> bool:
    return [b and b.address for b in one.buffers()] == [b and b.address for b in other.buffers()]


def test_columns_no_record_changed_go_back_as_they_came(tmp_path: Path) -> None:
    """Raw data the function gave back as the very objects it got leave their columns as they came (no
    array rebuilt); a column of kept text, positions or operations is all nulls."""
    batch, out = _through(tmp_path, "return record", given())
    for name in ("key_raw", "after_raw"):
        assert _same_buffers(out.column(name), batch.column(name)), name
    for name in ("position", "operation", "after_json", "metadata"):
        assert out.column(name).null_count == len(out), name


def test_one_changed_position_or_raw_value_rebuilds_its_column(tmp_path: Path) -> None:
    body = (
        "if record['position'] == b'f:8': record['position'] = 'f:9'; record['key'] = bytes(bytearray(record['key']))\n"
        "    if record['position'] == b'f:12': record['payload']['after'] = b'now raw'\n"
        "    return record"
    )
    batch, out = _through(tmp_path, body, given())
    assert out.column("position").to_pylist() == [None, b"f:9", None, None]  # the others kept
    assert [kept & KEPT_BITS["position"] for kept in out.column("_kept").to_pylist()] == [16, 0, 16, 16]
    assert out.column("key_raw").to_pylist() == [None, b"2", None, None]  # equal bytes, a new object
    assert out.column("after_raw").to_pylist() == [None, b"raw", b"now raw", None]
    assert out.column("operation").null_count == len(out)


def test_the_function_sees_each_field_and_its_changes_are_written(tmp_path: Path) -> None:
    body = (
        "record['metadata']['seen'] = 1; record['operation'] = 'update'; "
        "record['payload']['after'] = [type(record['payload']['after']).__name__, sorted(record['metadata'])]; "
        "return record"
    )
    out = mapped(tmp_path, body, given())
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
    rows = given()
    out = mapped(tmp_path, body, rows)
    assert [row["_state"] for row in out] == ["open", "filtered", "nacked", "open"]
    assert [row["_error"] for row in out] == [None, None, "ValueError: no", None]
    assert [row["_node"] for row in out] == [None, "p:py", "p:py", None]
    assert metadata_pairs(out[0]["metadata"]) == [("file.path", "f"), ("a", "changed")]
    assert out[0]["operation"] == "delete"
    for row, came in list(zip(out, rows, strict=True))[1:]:
        assert {k: v for k, v in row.items() if not k.startswith("_")} == {
            k: v for k, v in came.items() if not k.startswith("_")
        }


def test_records_with_the_same_metadata_each_get_their_own_copy(tmp_path: Path) -> None:
    """Rows whose metadata text is the row before's are parsed once and share that dict; a function
    that changes one record's metadata must not change the next record's."""
    from airflow_conduit.engine.processors.custom_python import _metadata_dicts

    shared = [("file.path", "f"), ("a", "1")]
    rows = given([{"position": f"f:{i}".encode(), "metadata": shared, "after_json": "{}"} for i in range(3)])
    texts = [row["metadata"] for row in rows]
    dicts = _metadata_dicts([*texts, None, texts[0], '{"b":"2"}'])
    assert dicts[0] is dicts[1] is dicts[2] and dicts[4] == dicts[0]
    assert dicts[3:] == [None, dict(shared), {"b": "2"}]

    body = "if record['position'] == b'f:0': record['metadata']['a'] = 'changed'\n    return record"
    out = mapped(tmp_path, body, rows)
    assert [metadata_pairs(row["metadata"]) for row in out] == [
        [("file.path", "f"), ("a", "changed")],
        shared,
        shared,
    ]


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


def test_the_cyclic_collector_is_off_while_a_batch_is_mapped_and_on_after(tmp_path: Path) -> None:
    """The mapper pauses Python's cyclic collector for a batch (its dicts hold no cycles) and turns it
    back on after, also when the function stops the pipeline by raising past the mapper."""
    body = "seen.append(__import__('gc').isenabled())\n    if record['position'] == b'f:12': raise SystemExit(3)\n    return record"
    module = f"arrow_records_fn_{next(_names)}"
    (tmp_path / f"{module}.py").write_text(f"seen = []\ndef process(record):\n    {body}\n")
    mapper = make_mapper(f"{module}:process", str(tmp_path), "p:py")
    assert gc.isenabled()
    with pytest.raises(SystemExit):
        list(mapper(iter([arrow_batches.arrow_batch(given())])))
    assert gc.isenabled()
    assert sys.modules[module].seen == [False, False, False]  # the fourth record is not active


def test_a_mapper_outside_a_spark_task_freezes_nothing(tmp_path: Path) -> None:
    """Only a Spark worker's objects are frozen (see the integration test): a mapper called in this
    process, as tests and the engine's planning do, leaves the collector's reach as it was."""
    frozen = gc.get_freeze_count()
    mapped(tmp_path, "return record", given())
    assert gc.get_freeze_count() == frozen


def test_values_orjson_refuses_are_written_as_the_json_module_writes_them(tmp_path: Path) -> None:
    """Keys that are not strings, dates, and integers past 64 bits: the text json.dumps(default=str)
    gives, whether in the after field (written inline) or in the key (written by a call)."""
    body = (
        "import datetime; when = datetime.date(2026, 12, 7); "
        "record['payload']['after'] = {1: 'one', 'at': when, 'big': 2**70, 'n': {2.5: True}}; "
        "record['key'] = {3: when}; return record"
    )
    out = mapped(tmp_path, body, given(ROWS[:1]))
    assert (
        out[0]["after_json"]
        == '{"1": "one", "at": "2026-12-07", "big": 1180591620717411303424, "n": {"2.5": true}}'
    )
    assert out[0]["key_json"] == '{"3":"2026-12-07"}'
