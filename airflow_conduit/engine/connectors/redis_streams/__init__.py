"""``standalone:redis`` over a Redis stream: :mod:`.source` (a consumer group, acked after commit),
:mod:`.destination` (``XADD`` with a delivery marker in one ``MULTI``/``EXEC``), :mod:`._common`."""
