"""The ``builtin:file`` source's records as Conduit's file source makes them: the line as raw
``.Payload.After``, its line number (from 1) as raw ``.Key``, ``file.path`` metadata. The stream reader
runs here in plain Python, as Spark drives it (latestOffset, partitions, read), without Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from airflow_conduit.config.settings import FileSourceSettings
from airflow_conduit.engine.connectors import file as file_source
from airflow_conduit.engine.connectors._stream import SourceContext
from airflow_conduit.engine.connectors.file import FileStreamReader, stream_reader


def reader(path: Path, tmp_path: Path, max_records: int = 1_000_000) -> FileStreamReader:
    settings = FileSourceSettings.model_validate({"path": str(path), "maxRecordsPerBatch": max_records})
    return stream_reader(settings, reader_context(tmp_path))


def batch(source: FileStreamReader, start: dict) -> tuple[list[dict[str, Any]], dict]:
    """One micro-batch from ``start``, its offset passed through JSON as Spark's offset log does."""
    end = json.loads(json.dumps(source.latestOffset(start, source.getDefaultReadLimit())))
    rows = [
        row
        for part in source.partitions(start, end)
        for chunk in source.read(part)
        for row in chunk.to_pylist()
    ]
    return rows, end


def test_keys_are_line_numbers_and_file_path_is_the_configured_path(tmp_path):
    events = tmp_path / "events.txt"
    events.write_text("first\nsecond\nthird\npart")
    source = reader(events, tmp_path, max_records=2)
    rows, end = batch(source, source.initialOffset())
    assert [(r["key_raw"], r["after_raw"]) for r in rows] == [(b"1", b"first"), (b"2", b"second")]
    assert {tuple(r["metadata"]) for r in rows} == {(("file.path", str(events)),)}
    rows, end = batch(source, end)  # the next batch goes on counting
    assert [(r["key_raw"], r["after_raw"]) for r in rows] == [(b"3", b"third")]
    with open(events, "a") as fh:
        fh.write("ial\n")
    rows, _ = batch(source, end)
    assert [(r["key_raw"], r["after_raw"]) for r in rows] == [(b"4", b"partial")]


def test_a_directory_numbers_each_file_from_one_and_names_it(tmp_path):
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.log").write_text("a1\na2\n")
    (tmp_path / "in" / "b.log").write_text("b1\n")
    source = reader(tmp_path / "in", tmp_path)
    rows, _ = batch(source, source.initialOffset())
    assert [(r["key_raw"], dict(r["metadata"])["file.path"], r["after_raw"]) for r in rows] == [
        (b"1", str(tmp_path / "in" / "a.log"), b"a1"),
        (b"2", str(tmp_path / "in" / "a.log"), b"a2"),
        (b"1", str(tmp_path / "in" / "b.log"), b"b1"),
    ]


def test_line_numbers_run_on_across_the_pieces_of_a_large_batch(tmp_path, monkeypatch):
    monkeypatch.setattr(file_source, "MIN_PARTITION_BYTES", 1000)  # small pieces, a small file
    lines = [f"line {i:05d} " + "x" * (i % 37) for i in range(3000)]
    events = tmp_path / "events.txt"
    events.write_text("".join(line + "\n" for line in lines))
    source = reader(events, tmp_path)
    start = source.initialOffset()
    end = source.latestOffset(start, source.getDefaultReadLimit())
    assert len(source.partitions(start, end)) > 2
    rows, _ = batch(source, start)
    assert [r["after_raw"].decode() for r in rows] == lines
    assert [int(r["key_raw"]) for r in rows] == list(range(1, len(lines) + 1))


def test_an_offset_logged_without_line_counts_counts_them_from_the_file(tmp_path):
    events = tmp_path / "events.txt"
    events.write_text("one\ntwo\nthree\n")
    source = reader(events, tmp_path)
    # What a checkpoint written before keys were line numbers holds: byte offsets only.
    rows, _ = batch(source, {"files": {"events.txt": len("one\ntwo\n")}})
    assert [(r["key_raw"], r["after_raw"]) for r in rows] == [(b"3", b"three")]


def test_a_range_read_in_blocks_gives_the_records_of_one_read(tmp_path, monkeypatch):
    """A worker reads its range in blocks (its memory stays the same whatever the batch's size): lines
    that cross a block, lines longer than a block and CRLF endings give the same positions, keys and
    payloads as one read of the whole range."""
    lines = [f"r{i}" + "y" * (i * 7 % 23) + ("\r" if i % 3 == 0 else "") for i in range(400)]
    events = tmp_path / "events.txt"
    events.write_text("".join(line + "\n" for line in lines))
    source = reader(events, tmp_path)
    whole, _ = batch(source, source.initialOffset())
    monkeypatch.setattr(file_source, "READ_BYTES", 5)  # shorter than most lines
    blocks, _ = batch(source, source.initialOffset())
    assert blocks == whole
    assert [r["after_raw"].decode() for r in blocks] == [line.removesuffix("\r") for line in lines]
    offsets = [int(r["position"].rsplit(b":", 1)[1]) for r in blocks]
    assert offsets == [sum(len(x) + 1 for x in lines[:i]) for i in range(len(lines))]


def test_a_range_is_cut_into_even_pieces_at_line_boundaries(tmp_path):
    """No piece of a few lines beside full ones: each costs a Spark task's fixed time."""
    events = tmp_path / "events.txt"
    events.write_text("".join(f"line {i:06d} " + "x" * (i % 53) + "\n" for i in range(40_000)))
    size = events.stat().st_size
    data = events.read_bytes()
    piece = size // 8

    def cut(start: int, end: int, by: int) -> list[tuple[int, int]]:
        ranges = file_source.split_range(str(events), start, end, by)
        assert ranges[0][0] == start and ranges[-1][1] == end
        assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))  # contiguous
        assert all(data[b - 1 : b] == b"\n" for _, b in ranges)  # each ends a line
        return ranges

    assert len(cut(0, size, size - size // 20)) == 1  # a little over a piece: one range, not two
    ranges = cut(0, size, piece)
    assert len(ranges) == 8
    lengths = [b - a for a, b in ranges]
    assert max(lengths) - min(lengths) < 200  # even, to a line or so
    assert len(cut(1000, size, size // 3)) == 3


def test_a_batch_is_cut_into_whole_waves_of_pieces_one_per_core(tmp_path, monkeypatch):
    """8,500 bytes under pieces of at most 1,000 on 2 cores: 10 pieces (5 waves), not 9 (the last
    one's task alone on a core), each at most 1,000 bytes."""
    monkeypatch.setattr(file_source, "MIN_PARTITION_BYTES", 100)
    monkeypatch.setattr(file_source, "MAX_PARTITION_BYTES", 1000)
    events = tmp_path / "events.txt"
    events.write_text("".join(f"{i:09d}\n" for i in range(850)))
    source = reader(events, tmp_path)
    start = source.initialOffset()
    pieces = source.partitions(start, source.latestOffset(start, source.getDefaultReadLimit()))
    sizes = [piece.end - piece.start for piece in pieces]
    assert len(sizes) == 10
    assert max(sizes) <= 1000
    assert sum(sizes) == 8500


def test_line_counts_and_batch_ends_match_the_lines_whatever_the_chunk(tmp_path, monkeypatch):
    """``count_lines`` and ``scan_lines`` count newlines a chunk at a time (numpy): with chunks smaller
    than a line, a line end on a chunk's edge, a carriage return and a last line without its end, the
    counts and offsets are those of the lines themselves."""
    lines = [b"a\r\n", b"", b"bb\n", b"x" * 37 + b"\n", b"\n", b"tail"]
    data = b"".join(line if line.endswith(b"\n") else line + b"\n" for line in lines[:-1]) + lines[-1]
    events = tmp_path / "events.txt"
    events.write_bytes(data)
    ends = [i + 1 for i, byte in enumerate(data) if byte == 10]
    for chunk in (1, 3, 7, 1 << 20):
        monkeypatch.setattr(file_source, "SCAN_CHUNK", chunk)
        for start in (0, 4, ends[2]):
            for stop in (start, ends[3], len(data)):
                assert file_source.count_lines(str(events), start, stop) == data[start:stop].count(b"\n")
            for budget in (1, 2, 100):
                within = [end for end in ends if start < end <= len(data)]
                expected = (
                    (within[budget - 1], budget) if budget <= len(within) else (within[-1], len(within))
                )
                assert file_source.scan_lines(str(events), start, len(data), budget) == expected


def test_the_reader_spark_runs_gives_offsets_and_no_rows(tmp_path):
    """The stream reader Spark gets from the file data source plans one partition and reads nothing:
    the engine reads the batch from the offsets (``read_batch``), the stream's rows of the file source
    are never taken (a pipeline whose other source Spark streams filters them out)."""
    events = tmp_path / "events.txt"
    events.write_text("".join(f"{i}\n" for i in range(100)))
    options = file_source.source_options(file_source.FileSource(str(events), 10), reader_context(tmp_path))
    spark_reader = file_source.FileDataSource(options).streamReader(file_source.SCHEMA)
    start = spark_reader.initialOffset()
    end = spark_reader.latestOffset(start, spark_reader.getDefaultReadLimit())
    assert end["lines"] == {"events.txt": 10}
    (only,) = spark_reader.partitions(start, end)
    assert list(spark_reader.read(only)) == []
    rows, _ = batch(reader(events, tmp_path, max_records=10), start)
    assert [row["key_raw"] for row in rows] == [str(i).encode() for i in range(1, 11)]


def reader_context(tmp_path: Path) -> SourceContext:
    return SourceContext("src", "p:src", str(tmp_path / "stop"), 2)
