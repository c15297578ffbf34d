"""The records a source admits per micro-batch when the pipeline file leaves it to the engine: larger
when nothing of a batch is stored and every destination writes in bulk, else the settings' default;
what the file sets is kept."""

from __future__ import annotations

import pytest

from airflow_conduit.config import load_pipeline_text
from airflow_conduit.config.settings import DEFAULT_MAX_RECORDS_PER_BATCH, UNSTORED_MAX_RECORDS_PER_BATCH
from airflow_conduit.engine.intake import admitted_sources

PIPELINE = """
version: "2.2"
pipelines:
  - id: p
    connectors:
      - {{id: files, type: source, plugin: builtin:file, settings: {{path: /tmp/in{source_extra}}}}}
      - {{id: gen, type: source, plugin: builtin:generator, settings: {{recordCount: 5}}}}
      - {{id: out, type: destination, plugin: {destination}, settings: {{{destination_settings}}}}}
"""


def limits(destination: str = "builtin:file", source_extra: str = "", *, nothing_stored: bool) -> list[int]:
    destination_settings = "path: /tmp/out" if destination == "builtin:file" else ""
    text = PIPELINE.format(
        destination=destination, destination_settings=destination_settings, source_extra=source_extra
    )
    [pipeline] = load_pipeline_text(text, "p.yaml").pipelines
    sources = admitted_sources(pipeline, nothing_stored=nothing_stored)
    return [s.settings.max_records_per_batch for s in sources]


def test_nothing_stored_and_bulk_destinations_admit_the_larger_default():
    assert limits(nothing_stored=True) == [UNSTORED_MAX_RECORDS_PER_BATCH] * 2
    assert UNSTORED_MAX_RECORDS_PER_BATCH > DEFAULT_MAX_RECORDS_PER_BATCH


def test_stored_batches_keep_the_default():
    assert limits(nothing_stored=False) == [DEFAULT_MAX_RECORDS_PER_BATCH] * 2


def test_a_destination_that_writes_record_by_record_keeps_the_default():
    assert limits("builtin:log", nothing_stored=True) == [DEFAULT_MAX_RECORDS_PER_BATCH] * 2


@pytest.mark.parametrize("given", ["maxRecordsPerBatch: 1000", "sdk.batch.size: 1000"])
def test_what_the_file_sets_is_kept(given):
    assert limits(source_extra=f", {given}", nothing_stored=True) == [1000, UNSTORED_MAX_RECORDS_PER_BATCH]
