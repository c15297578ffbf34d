"""The peers benchmark's Flink job (PyFlink Table API, streaming mode): a filesystem source of JSON lines
(bounded: it ends when the files are read) -> add env='prod' -> a filesystem sink in json format, with
exactly-once checkpoints every 5 s and parallelism 2. The sink publishes its files on checkpoints (the
last one when the input ends). Run by ``benchmarks/peers.py`` under ``.venv-peers/bin/python``.

    flink_job.py SOURCE_DIR TARGET_DIR CHECKPOINT_DIR
"""

from __future__ import annotations

import sys
from pathlib import Path

from pyflink.table import EnvironmentSettings, TableEnvironment

COLUMNS = "id BIGINT, kind STRING, amount DOUBLE, sku STRING"


def main() -> None:
    source, target, checkpoints = sys.argv[1:4]
    env = TableEnvironment.create(EnvironmentSettings.in_streaming_mode())
    config = env.get_config()
    config.set("parallelism.default", "2")
    config.set("execution.checkpointing.interval", "5 s")
    config.set("execution.checkpointing.mode", "EXACTLY_ONCE")
    config.set("execution.checkpointing.dir", Path(checkpoints).resolve().as_uri())
    env.execute_sql(
        f"CREATE TABLE orders ({COLUMNS}) WITH "
        f"('connector' = 'filesystem', 'path' = '{source}', 'format' = 'json')"
    )
    env.execute_sql(
        f"CREATE TABLE out_orders ({COLUMNS}, env STRING) WITH "
        f"('connector' = 'filesystem', 'path' = '{target}', 'format' = 'json')"
    )
    env.execute_sql("INSERT INTO out_orders SELECT id, kind, amount, sku, 'prod' AS env FROM orders").wait()


if __name__ == "__main__":
    main()
