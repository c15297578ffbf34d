"""``standalone:nats``: NATS JetStream as a source (:mod:`.source`) and a destination (:mod:`.destination`)."""
