# Each target sets up .venv on its own when it is missing or pyproject.toml changed.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed
export PYSPARK_PYTHON := $(abspath $(VENV)/bin/python)

.PHONY: venv demo test lint bench clean

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e ".[spark,airflow,dev]"
	touch $(STAMP)

demo: $(STAMP)
	rm -rf demo-output
	$(VENV)/bin/airflow-conduit run examples/demo.yaml --until-idle --state-dir demo-output/state
	@echo "output: demo-output/orders demo-output/refunds; DLQ: demo-output/dlq"
	@echo "inspect: $(VENV)/bin/airflow-conduit status --state-dir demo-output/state"
	@echo "         $(VENV)/bin/airflow-conduit dlq demo-orders --state-dir demo-output/state"

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(VENV)/bin/python benchmarks/throughput.py

clean:
	rm -rf $(VENV) .conduit demo-output
