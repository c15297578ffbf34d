# Each target sets up .venv on its own when it is missing or pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(VENV)/bin/python)

.PHONY: venv demo demo-cli test test-e2e brokers cluster ui chaos deploy lint docs bench bench-postgres bench-latency bench-brokers bench-peers clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[spark,airflow,dev]"
	# Spark's classes, archived for the JVM: each run's driver starts faster (engine/class_archive.py).
	$(VENV)/bin/python -m airflow_conduit.engine.class_archive > /dev/null 2>&1 \
		|| echo "no JVM class archive (no java yet?): runs start without it"
	touch $(STAMP)

# The demo runs the hourly example DAG once through Airflow (dag.test on SQLite) on local Spark.
AIRFLOW_DEMO := AIRFLOW_HOME=$(CURDIR)/.airflow-demo AIRFLOW__CORE__DAGS_FOLDER=$(CURDIR)/dags \
	AIRFLOW__CORE__LOAD_EXAMPLES=False AIRFLOW_CONN_SPARK_DEFAULT='{"conn_type":"spark","host":"local[*]"}'

demo: $(STAMP)
	rm -rf demo-output .conduit/orders
	$(AIRFLOW_DEMO) $(VENV)/bin/airflow db migrate > /dev/null
	$(AIRFLOW_DEMO) $(VENV)/bin/airflow dags test conduit_orders_hourly
	@echo
	@echo "pipeline output: demo-output/orders    DLQ: .conduit/orders/dlq"
	@echo "status:          $(VENV)/bin/airflow-conduit status"
	@echo "DLQ records:     $(VENV)/bin/airflow-conduit dlq orders"

# The same engine without Airflow: examples/demo.yaml from the command line.
demo-cli: $(STAMP)
	rm -rf demo-output/cli
	$(VENV)/bin/airflow-conduit run examples/demo.yaml --until-idle --state-dir demo-output/cli/state

# make test: everything but the slow end-to-end Airflow runs of the real engine, which have their own
# target (CI runs both).
test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m "not engine and not brokers and not cluster and not ui and not chaos and not deploy"

# The scale-out test: a Spark standalone master and worker on loopback, the same pipeline there and on
# local[2] (tests/cluster is outside testpaths and marked cluster, so make test never starts it).
cluster: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m cluster tests/cluster

# The Conduit pages of the Airflow UI in headless chromium (Debian's /usr/bin/chromium, driven by
# Playwright): an Airflow API server on loopback with a state dir of example pipelines.
ui: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m ui tests/ui

# Exactly once under SIGKILL at random moments and a PostgreSQL outage (tests/chaos, outside testpaths).
chaos: $(STAMP)
	$(VENV)/bin/python -m pytest -q -s -m chaos tests/chaos

# The docker-compose topology on loopback without Docker (tests/deploy, outside testpaths): PostgreSQL as
# the metadata DB, api-server, scheduler (LocalExecutor), dag-processor and triggerer as their own
# processes, a Spark standalone master and worker; DAG runs triggered and followed through the REST API.
deploy: $(STAMP)
	$(VENV)/bin/python -m pytest -q -s -m deploy tests/deploy

# The broker and object-store connectors end to end, each against its throwaway server on loopback (moto's
# S3, nats-server, redis-server, a RabbitMQ node): minutes of server and query starts, so not in make test.
brokers: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m brokers tests/integration

test-e2e: $(STAMP)
	$(VENV)/bin/python -m pytest -q -m engine tests/airflow tests/integration/test_class_archive.py tests/integration/test_spark_python_processes.py

# Style, layering (import-linter contracts in pyproject.toml), types, and the docs site.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet --site-dir .site

# The reference docs (docs/, MkDocs Material) served on http://127.0.0.1:8000 while you edit them.
docs: $(STAMP)
	$(VENV)/bin/mkdocs serve

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/throughput.py
	$(VENV)/bin/python benchmarks/whole_process.py

# PostgreSQL, each on its own throwaway cluster: the destination against Spark JDBC, then the CDC source's
# throughput and end-to-end latency (about 2-3 minutes here).
# The broker and object-store connectors (S3 on moto, NATS JetStream, Redis Streams, RabbitMQ), each on a
# throwaway loopback server, beside the broker's own client (about 3-5 minutes here).
bench-brokers: $(STAMP)
	$(VENV)/bin/python benchmarks/brokers.py

bench-postgres: $(STAMP)
	$(VENV)/bin/python benchmarks/postgres.py
	$(VENV)/bin/python benchmarks/postgres_cdc.py

# End-to-end latency at a steady 1,000 records/s of two continuous pipelines (file -> file and Postgres CDC
# -> file, a throwaway cluster as for bench-postgres), with the engine's default trigger and a 100 ms one
# (about 4 minutes here).
bench-latency: $(STAMP)
	$(VENV)/bin/python benchmarks/latency.py --trigger "500 milliseconds,100 milliseconds" $(ARGS)

# airflow-conduit against Pathway, Flink (PyFlink, needs Java) and a bare Spark job, each a whole process
# with its own recovery on. The peers live in their own venv, .venv-peers, so make test never installs
# them. 1M records, 3 rounds: about 7 minutes here; 10M: ARGS="--records 10000000 --repeat 1", about 11.
bench-peers: $(STAMP)
	test -x .venv-peers/bin/python || $(PYTHON) -m venv .venv-peers
	.venv-peers/bin/pip install --quiet pathway==0.33.0 apache-flink==2.3.0 psutil
	$(VENV)/bin/python benchmarks/peers.py $(ARGS)

clean:
	rm -rf $(VENV) .conduit demo-output .airflow-demo .site .mypy_cache .import_linter_cache
