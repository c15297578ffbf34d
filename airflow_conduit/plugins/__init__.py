"""The Airflow UI side of airflow-conduit: a plugin (entry point ``airflow.plugins``) with the Conduit
pages (:mod:`.app`), their navigation entry and the operator's "Conduit pipeline" link (:mod:`.links`).

Never imports pyspark: the pages read the state dir only.
"""
