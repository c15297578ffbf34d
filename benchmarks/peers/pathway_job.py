"""The peers benchmark's Pathway job: JSON lines from a directory -> add env="prod" -> JSON lines, with
persistence on (filesystem backend). Run by ``benchmarks/peers.py`` under ``.venv-peers/bin/python``.

Pathway reserves the column name ``id``, so the output names the record's id ``order_id``, and its
writer adds ``time`` and ``diff`` to each line.

    pathway_job.py SOURCE_DIR TARGET_FILE PERSISTENCE_DIR
"""

from __future__ import annotations

import sys

import pathway as pw


class Order(pw.Schema):
    order_id: int  # Pathway reserves the column name ``id`` (its row key): the line's "id" lands here
    kind: str
    amount: float
    sku: str


def main() -> None:
    source, target, storage = sys.argv[1:4]
    orders = pw.io.jsonlines.read(
        source, schema=Order, mode="static", json_field_paths={"order_id": "/id"}, name="orders"
    )
    pw.io.jsonlines.write(orders.with_columns(env="prod"), target, name="out")
    persistence = pw.persistence.Config(pw.persistence.Backend.filesystem(storage))
    pw.run(persistence_config=persistence, monitoring_level=pw.MonitoringLevel.NONE)


if __name__ == "__main__":
    main()
