"""Throughput of the exactly-once ``builtin:postgres`` destination against a plain Spark JDBC append.

Both write the same cached rows (structured records with five fields) from the same SparkSession into
same-shaped tables of a throwaway PostgreSQL cluster (tests/pgcluster.py):

(a) the destination's own code path, per micro-batch of ``--batch`` records: ``stage`` (Spark computes the
    staging rows, the driver COPYs them as they arrive in one transaction with the delivery marker:
    straight into the table for inserts and upserts of new keys, through a temporary staging table for
    upserts that meet existing keys) then ``publish``; without ``key`` (inserts), with ``key`` into an
    empty table (upserts of new keys), and with ``key`` over a table that holds every key already;
(b) ``df.write.jdbc(mode="append")`` with Debian's PostgreSQL JDBC driver, the job a user would write
    without any delivery guarantee (a replayed batch duplicates its rows): from the plain columns, and
    from the same VARIANT records (``variant_get`` per column first).

One line times step 1 of the destination alone: Spark computing the typed staging rows and handing them
to the driver as Arrow.

    .venv/bin/python benchmarks/postgres.py [--records N] [--batch B] [--repeat K]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

from pgcluster import APP_PASSWORD, APP_USER, start_cluster  # noqa: E402

from airflow_conduit.config.settings.postgres import PostgresDestinationSettings  # noqa: E402
from airflow_conduit.engine.connectors._stream import Delivery  # noqa: E402
from airflow_conduit.engine.connectors.postgres import destination, staging  # noqa: E402
from airflow_conduit.engine.session import driver_java_options, ensure_python_workers  # noqa: E402
from airflow_conduit.engine.sql_functions import register_functions  # noqa: E402

JDBC_JAR = "/usr/share/java/postgresql.jar"
TABLE_DDL = "CREATE TABLE {name} (id bigint PRIMARY KEY, name text, amount int, city text, paid boolean, score double precision)"


def session():
    from pyspark.sql import SparkSession

    ensure_python_workers()
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("bench-postgres")
        .config("spark.driver.extraJavaOptions", driver_java_options())  # the JVM the engine runs in
        .config("spark.jars", JDBC_JAR)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    register_functions(spark)  # the staging's SQL calls the engine's own functions
    return spark


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--batch", type=int, default=250_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--verbose", action="store_true", help="log the destination's phases")
    args = parser.parse_args()
    if args.verbose:
        logging.getLogger("airflow_conduit.destination.postgres").setLevel(logging.INFO)

    cluster = start_cluster()
    spark = session()
    spark.sparkContext.setLogLevel("ERROR")
    try:
        url = cluster.create_database("bench")
        for name in ("t_conduit", "t_conduit_key", "t_conduit_upd", "t_jdbc", "t_jdbc2"):
            # Autovacuum off: it would clean up after one job while the next is timed.
            cluster.execute(TABLE_DDL.format(name=name) + " WITH (autovacuum_enabled = false)", "bench")
            cluster.execute(f"ALTER TABLE {name} OWNER TO {APP_USER}", "bench")
        # The same rows for both, cached: plain columns for JDBC, the engine's record form (VARIANT) for
        # the destination. Each micro-batch is a frame of its own with 4 partitions, as the engine hands
        # a destination its batch (the file source cuts one into 4 pieces on 2 cores).
        plain_batches, record_batches = [], []
        for start in range(0, args.records, args.batch):
            end = min(start + args.batch, args.records)
            plain = (
                spark.range(start, end, numPartitions=4)
                .selectExpr(
                    "id",
                    "concat('name-', id % 1000) AS name",
                    "cast(id % 977 AS int) AS amount",
                    "element_at(array('berlin', 'lisbon', 'oslo', 'rome'), cast(id % 4 AS int) + 1) AS city",
                    "id % 2 = 0 AS paid",
                    "id / 7.0d AS score",
                )
                .persist()
            )
            records = plain.selectExpr(
                "cast(cast(id AS string) AS binary) AS position",
                "'create' AS operation",
                "map('opencdc.collection', 'orders') AS metadata",
                "CAST(NULL AS VARIANT) AS key",
                "cast(cast(id AS string) AS binary) AS key_raw",
                "CAST(NULL AS VARIANT) AS before",
                "CAST(NULL AS BINARY) AS before_raw",
                "to_variant_object(named_struct('id', id, 'name', name, 'amount', amount, 'city', city, "
                "'paid', paid, 'score', score)) AS after",
                "CAST(NULL AS BINARY) AS after_raw",
                "id AS _seq",
            ).persist()
            plain.count(), records.count()
            plain_batches.append(plain)
            record_batches.append(records)
        jdbc_props = {"user": APP_USER, "password": APP_PASSWORD, "driver": "org.postgresql.Driver"}

        def conduit(table: str, key: str) -> None:
            settings = PostgresDestinationSettings.model_validate({"url": url, "table": table, "key": key})
            for batch, rows in enumerate(record_batches):
                delivery = Delivery("bench", table, batch, "g", f"{table}-{time.monotonic_ns()}-{batch}")
                staged = destination.stage(rows, settings, delivery)
                assert not staged.nacks, staged.nacks[:3]
                staged.publish()

        def jdbc() -> None:
            for rows in plain_batches:
                rows.write.jdbc(cluster.jdbc_url("bench"), "t_jdbc", mode="append", properties=jdbc_props)

        typed = [
            f"variant_get(after, '$.{name}', '{type_}') AS {name}"
            for name, type_ in [
                ("id", "bigint"),
                ("name", "string"),
                ("amount", "int"),
                ("city", "string"),
                ("paid", "boolean"),
                ("score", "double"),
            ]
        ]

        def jdbc_from_records() -> None:
            """What a user holding the same VARIANT records would write: typed columns, then JDBC."""
            for records in record_batches:
                rows = records.selectExpr(*typed)
                rows.write.jdbc(cluster.jdbc_url("bench"), "t_jdbc2", mode="append", properties=jdbc_props)

        def step1_rows() -> None:
            """Step 1 alone as the destination does it: the typed staging rows, on the driver."""
            layout = staging.Layout(("id", "name", "amount", "city", "paid", "score"))
            for records in record_batches:
                frame = staging.staging_frame(
                    records,
                    PostgresDestinationSettings.model_validate({"url": url, "table": "t_conduit"}),
                    layout,
                )
                sum(batch.num_rows for batch in staging.stream(frame, "benchmark"))

        def conduit_over_existing() -> None:
            """Every key already in the table, as CDC updates find them: the first batch's COPY is refused
            by the primary key, and the run upserts through the staging table from then on."""
            destination._UPSERTS_NOT_COPIED.clear()  # each run starts as a new process would
            conduit("t_conduit_upd", "id")

        runs = {
            "step 1 only: staging rows to the driver": (None, step1_rows),
            "conduit postgres, insert (no key)": ("t_conduit", lambda: conduit("t_conduit", "")),
            "conduit postgres, upsert of new keys": ("t_conduit_key", lambda: conduit("t_conduit_key", "id")),
            "conduit postgres, upsert of existing keys": ("t_conduit_upd", conduit_over_existing),
            "spark jdbc append, from VARIANT records": ("t_jdbc2", jdbc_from_records),
            "spark jdbc append": ("t_jdbc", jdbc),
        }
        times: dict[str, list[float]] = {name: [] for name in runs}
        for round_ in range(args.repeat + 1):  # round 0 warms every job up (JIT, connections) unmeasured
            for name, (table, run) in runs.items():
                if table:
                    cluster.execute(f"TRUNCATE {table}", "bench")
                if table == "t_conduit_upd":
                    cluster.execute(
                        f"INSERT INTO {table} SELECT g, 'old', 0, 'old', false, 0 "
                        f"FROM generate_series(0, {args.records - 1}) g",
                        "bench",
                    )
                cluster.execute("CHECKPOINT")  # the previous job's pages written out before this one starts
                started = time.perf_counter()
                run()
                if round_:
                    times[name].append(time.perf_counter() - started)
                if table:
                    count = cluster.execute(f"SELECT count(*) FROM {table}", "bench")[0][0]
                    assert count == args.records, (name, count)
        best = {name: min(values) for name, values in times.items()}
        baseline = args.records / best["spark jdbc append"]
        from_records = args.records / best["spark jdbc append, from VARIANT records"]
        print(
            f"{args.records} records, batches of {args.batch}, best of {args.repeat} after a warm-up round:"
        )
        for name, seconds in best.items():
            rate = args.records / seconds
            print(
                f"  {name:40s} {seconds:6.2f} s  {rate:9.0f} records/s  {rate / baseline:4.2f}x JDBC, {rate / from_records:4.2f}x JDBC from records"
                f"  (runs: {', '.join(f'{t:.2f}' for t in times[name])}; median {statistics.median(times[name]):.2f} s)"
            )
    finally:
        spark.stop()
        cluster.destroy()


if __name__ == "__main__":
    main()
