"""The engine: runs inside the Spark driver and never imports airflow."""
