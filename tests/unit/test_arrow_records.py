"""Per-record Python code reads Arrow batches as column lists (``ArrowRecords``): the fast reads must give
what pyarrow's own conversion gives, and a batch that goes through a function unchanged comes out equal."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa

from airflow_conduit.engine.arrow_arrays import map_pairs
from airflow_conduit.engine.processors.custom_python import make_mapper

METADATA = pa.map_(pa.string(), pa.string())


def random_maps(rng: random.Random, count: int) -> list[list[tuple[str, str]] | None]:
    words = ["a", "b", "é", "opencdc.readAt", "", "k\u2028"]
    return [
        None
        if rng.random() < 0.2
        else [(rng.choice(words), rng.choice(words)) for _ in range(rng.randint(0, 4))]
        for _ in range(count)
    ]


def test_map_pairs_gives_what_to_pylist_gives() -> None:
    rng = random.Random(7)
    for _ in range(50):
        column = pa.array(random_maps(rng, rng.randint(0, 40)), type=METADATA)
        assert map_pairs(column) == column.to_pylist()
        # A slice's offsets point into the whole array's keys and values.
        start = rng.randint(0, len(column))
        piece = column.slice(start, rng.randint(0, len(column) - start))
        assert map_pairs(piece) == piece.to_pylist()


def test_a_batch_through_an_identity_function_comes_out_equal(tmp_path: Path) -> None:
    """Every column, the carried ``_piece`` included."""
    rng = random.Random(3)
    count = 200
    columns = {
        "position": pa.array([f"p{i}".encode() for i in range(count)], pa.binary()),
        "operation": pa.array(["create", "update"] * (count // 2), pa.string()),
        # Spark's maps have unique keys, and a record always has its metadata.
        "metadata": pa.array([dict(pairs or []) for pairs in random_maps(rng, count)], METADATA),
        "key_json": pa.array([None] * count, pa.string()),
        "key_raw": pa.array([f"k{i}".encode() if i % 3 else None for i in range(count)], pa.binary()),
        "before_json": pa.array([None] * count, pa.string()),
        "before_raw": pa.array([None] * count, pa.binary()),
        "after_json": pa.array([f'{{"a":{i},"s":"x<{i}>"}}' for i in range(count)], pa.string()),
        "after_raw": pa.array([None] * count, pa.binary()),
        "_src": pa.array([0] * count, pa.int32()),
        "_seq": pa.array(range(count), pa.int64()),
        "_state": pa.array(["open"] * count, pa.string()),
        "_error": pa.array([None] * count, pa.string()),
        "_node": pa.array([None] * count, pa.string()),
        "_piece": pa.array([[] if i % 4 else [0, i] for i in range(count)], pa.list_(pa.int32())),
        "_active": pa.array([i % 5 != 0 for i in range(count)], pa.bool_()),
    }
    batch = pa.RecordBatch.from_pydict(columns)
    (tmp_path / "arrow_records_identity.py").write_text("def identity(record):\n    return record\n")
    (out,) = make_mapper("arrow_records_identity:identity", str(tmp_path), "py")(iter([batch]))
    assert out.schema == batch.schema
    assert out.to_pydict() == batch.to_pydict()
