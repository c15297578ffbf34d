"""``standalone:rabbitmq``: the source (:mod:`.source`) and the destination (:mod:`.destination`)."""
