"""``builtin:s3``: objects of a bucket as records (:mod:`.source`), micro-batches as objects
(:mod:`.destination`); what both share — the client, error classification, hiding the credentials —
is :mod:`._client`. Uses boto3 from Python (no Hadoop s3a jar is needed)."""
