"""Conduit-style streaming pipelines on Apache Spark, orchestrated by Apache Airflow."""

from __future__ import annotations

__version__ = "0.1.0"
