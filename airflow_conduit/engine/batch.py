"""One micro-batch: processors, acks and nacks, destinations and the DLQ (``foreachBatch``).

In the common case the batch is computed once: destinations stage their writes (invisible) while the
records are counted by state in the same pass (:mod:`.tally`). Only then does the driver decide: a
processor that asked to stop, or a nack past the DLQ window, discards the staged writes and stops the
pipeline; otherwise the DLQ is written and every staged write published. Spark commits the batch only
after this function returns, i.e. after every destination and the DLQ hold it: that is the in-order ack.
"""

from __future__ import annotations

import logging
import shutil
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from pyspark.sql import Column, DataFrame, Observation, Row, SparkSession, Window
from pyspark.sql import functions as F

from airflow_conduit.config.model import ConnectorConfig, PipelineConfig, ProcessorConfig
from airflow_conduit.config.settings import DestinationSettings
from airflow_conduit.engine import decisions, dlq
from airflow_conduit.engine.connectors import Delivery, Staged, jsonl_files, nacks_of, plugins
from airflow_conduit.engine.counters import RunCounters
from airflow_conduit.engine.delivery import BatchContext, logged_batch
from airflow_conduit.engine.frames import in_state, select_sql
from airflow_conduit.engine.intake import batch_records, read_sources
from airflow_conduit.engine.once import computed_once, release
from airflow_conduit.engine.processors import _memo, apply_all, is_pure, repeats_in_attempt
from airflow_conduit.engine.tally import FILTERED_RECORDS, TOTAL, StateTally
from airflow_conduit.errors import Code, ConduitError, PipelineError, PipelineStopped
from airflow_conduit.record import (
    HEAD_PIECE_SQL,
    META_COLLECTION,
    META_DLQ_ERROR,
    META_DLQ_NODE,
    ORDER_COLUMNS,
    RECORD_COLUMNS,
    RECORD_SCHEMA,
    STATE_FATAL,
    STATE_FILTERED,
    STATE_NACKED,
    STATE_OPEN,
    STATE_TRANSIENT,
    opencdc_struct_sql,
    position_text,
)
from airflow_conduit.state import PipelineState

logger = logging.getLogger("airflow_conduit.engine")

ROW_BITS = 33  # monotonically_increasing_id: partition index above bit 33, row number below
STATES = (STATE_OPEN, STATE_FILTERED, STATE_NACKED, STATE_TRANSIENT, STATE_FATAL)


def state_counts() -> list[Column]:
    """``total`` and ``filtered_records``: source records (a record split in pieces counts once, by its
    first piece); by state: the rows (a stop or nack of any piece counts)."""
    head = F.expr(HEAD_PIECE_SQL)
    counts = [
        F.count(F.when(head, 1)).alias(TOTAL),
        F.count(F.when(head & (F.col("_state") == STATE_FILTERED), 1)).alias(FILTERED_RECORDS),
    ]
    return counts + [F.count(F.when(F.col("_state") == s, 1)).alias(s) for s in STATES]


def first_piece(records: DataFrame) -> DataFrame:
    """One row per source record (``_seq``): its first piece among ``records``."""
    rank = F.row_number().over(Window.partitionBy("_seq").orderBy("_piece"))
    return records.withColumn("_rank", rank).filter("_rank = 1").drop("_rank")


def counts_of(observation: Observation) -> Counter[str]:
    return Counter({name: int(value or 0) for name, value in observation.get.items()})


@dataclass(frozen=True)
class BatchResult:
    batch_id: int
    read: int
    acked: int
    filtered: int
    nacked: int
    written: dict[str, int]


@dataclass
class _DestinationWrite:
    destination: ConnectorConfig
    frame: DataFrame
    """The destination's records after its own processors, all states."""
    written: Observation | None
    """Counts the rows it is given; ``None``: it is given every open row of the batch, which the batch's
    own state counts hold. (An observation splits Spark's generated code, about 0.5 s of a 1M-record
    batch: see :mod:`.tally`.)"""
    states: Observation | None = None
    """Set when the destination has processors, which may nack or stop records."""
    staged: Staged | None = None
    skipped: bool = False
    """The destination already holds this delivery (a replay after a crash): acked without writing."""
    decided: DataFrame | None = None
    """The records after the destination's own processors, unobserved (for the decision log)."""
    seconds: float = 0.0


def _size_of(published: Any) -> int:
    """Bytes a destination's publish made visible, when it published files (or appended bytes)."""
    if isinstance(published, int):
        return published
    if isinstance(published, list):
        return sum(p.stat().st_size for p in published if isinstance(p, Path) and p.exists())
    return 0


@contextmanager
def _timed(write: _DestinationWrite) -> Iterator[None]:
    """Adds the time spent in the block to the destination's time for this batch."""
    started = time.monotonic()
    try:
        yield
    finally:
        write.seconds += time.monotonic() - started


@dataclass(frozen=True)
class _Purity:
    """Which processor chains give the same result when evaluated again (see :func:`is_pure`)."""

    pipeline: bool
    """The sources' and the pipeline's processors."""
    repeatable: bool
    """The same, or a second evaluation in the batch attempt repeats the first because the Python
    mappers keep their output (:mod:`.processors._memo`): in local mode, when a nack stops the
    pipeline. (A DLQ that takes nacks reads the records again twice, for the nacked ones and for the
    decision log, which stored records serve faster than a second pass through the Python workers.)"""
    destinations: dict[str, bool]
    """Per destination node: its own processors."""
    replayable: bool
    """Every source gives a batch's rows again the same (its spec's ``replays_identically``)."""
    single_reader: bool
    """One destination, without processors of its own, reads the batch."""

    @property
    def everywhere(self) -> bool:
        return self.pipeline and all(self.destinations.values())

    @property
    def unstored(self) -> bool:
        """Nothing need be stored: a second evaluation happens only for nacks and stops, and decides
        the same."""
        return self.repeatable and self.replayable and self.single_reader

    @property
    def keeps_mapper_output(self) -> bool:
        """The batch stores nothing because its Python mappers keep their output."""
        return self.unstored and not self.pipeline

    @classmethod
    def of(cls, spark: SparkSession, pipeline: PipelineConfig) -> _Purity:
        empty = spark.createDataFrame([], RECORD_SCHEMA)

        def pure(processors: tuple[ProcessorConfig, ...]) -> bool:
            return all(is_pure(p, empty) for p in processors)

        processors = tuple(p for s in pipeline.sources for p in s.processors) + pipeline.processors
        each_pure = [is_pure(p, empty) for p in processors]
        # Python workers on the driver's machine: they can read what another task of theirs wrote.
        local = (spark.sparkContext.master or "").startswith("local")
        dlq = pipeline.dlq
        keeps = local and dlq.window_size > 0 and dlq.window_nack_threshold == 0
        return cls(
            pipeline=all(each_pure),
            repeatable=all(
                pure or (keeps and repeats_in_attempt(p, empty))
                for p, pure in zip(processors, each_pure, strict=True)
            ),
            destinations={d.node_id: pure(d.processors) for d in pipeline.destinations},
            replayable=all(s.spec.replays_identically for s in pipeline.sources),
            single_reader=len(pipeline.destinations) == 1 and not pipeline.destinations[0].processors,
        )


@dataclass
class _Held:
    """The frames of one batch computed once (:mod:`.once`), released when the batch is done."""

    frames: list[DataFrame]
    mapper_output: Path | None = None
    """Where the batch attempt's Python mappers keep what they yielded (:mod:`.processors._memo`)."""

    def add(self, frame: DataFrame) -> DataFrame:
        self.frames.append(frame)
        return frame

    def seal(self) -> None:
        """Every partition has been evaluated once: from now on each reads its mappers' kept output."""
        if self.mapper_output is not None:  # made by BatchProcessor._open
            (self.mapper_output / _memo.SEALED).touch()

    def release(self) -> None:
        for frame in self.frames:
            release(frame)
        self.frames.clear()
        if self.mapper_output is not None:
            shutil.rmtree(self.mapper_output, ignore_errors=True)


@dataclass
class _Batch:
    """One micro-batch between the steps of :class:`BatchProcessor`: what it reads, where it writes."""

    batch_id: int
    records: DataFrame
    observed: DataFrame
    """``records`` counted by ``tally``: the write that runs the batch reads this one."""
    tally: StateTally
    observer: int | None
    """The destination whose write carries ``observed``; ``None``: a ``noop`` write runs it."""
    writes: list[_DestinationWrite]
    held: _Held
    decision: decisions.Decision | None
    """A former attempt's logged decision: this attempt publishes the same rows."""
    decision_hash: str
    states: Counter[str] = field(default_factory=Counter)
    """The records counted by state, once staged."""

    def abandon(self) -> None:
        """The batch failed before it published: drop the staged writes and the stored rows."""
        for write in self.writes:
            if write.staged is not None:
                write.staged.discard()
        self.held.release()


@dataclass(frozen=True)
class _Verdict:
    """What :meth:`BatchProcessor.decide` decided: the batch goes ahead with these nacks."""

    nack_count: int
    dlq_staged: list[Staged]
    window: tuple[dlq.NackWindow, dlq.NackWindow] | None
    """The DLQ window before and after this batch, saved once it is published (``None``: no window)."""
    logged_decision: bool
    """The decision is in the decision log (now or by a former attempt): removed once all published."""


class BatchProcessor:
    """Processes the micro-batches of one pipeline; called by Spark's ``foreachBatch``."""

    def __init__(self, pipeline: PipelineConfig, state: PipelineState, generation: str) -> None:
        self.pipeline = pipeline
        self.state = state
        self.generation = generation
        self.windows = dlq.WindowStore(state.window_file)
        self.decisions = decisions.DecisionLog(state.decisions_dir)
        shutil.rmtree(state.memo_dir, ignore_errors=True)  # a former run's attempts: never read again
        self._purity: _Purity | None = None
        self.counters = RunCounters()
        self.context = BatchContext(pipeline.id, -1, ())
        # A processor that makes several records of one (split, clone): rows of a record may repeat.
        self.fans_out = any(p.spec.fans_out for p in pipeline.all_processors())

    def delivery(self, destination_id: str, batch_id: int, *, nacks_allowed: bool = False) -> Delivery:
        """``nacks_allowed``: the write may nack records (a destination, not the DLQ), so tell it when
        the DLQ window takes none."""
        dlq = self.pipeline.dlq
        first_nack_fatal = nacks_allowed and dlq.window_size > 0 and dlq.window_nack_threshold == 0
        return Delivery(
            self.pipeline.id,
            destination_id,
            batch_id,
            self.generation,
            self.context.hash_for(destination_id),
            nack_limit=0 if first_nack_fatal else None,
        )

    def __call__(self, batch: DataFrame, batch_id: int) -> BatchResult:
        """Stage every write, decide the batch, then publish: nothing is visible before the decision."""
        current = self._open(batch, batch_id)
        try:
            self.stage(current)
            current.held.seal()
            verdict = self.decide(current)
        except BaseException:
            current.abandon()
            raise
        return self.publish(current, verdict)

    def _open(self, batch: DataFrame, batch_id: int) -> _Batch:
        """The batch's records (or its former attempt's decision) and each destination's frame; nothing
        runs yet."""
        logged = logged_batch(self.state.checkpoint_dir, batch_id)
        self.context = BatchContext(self.pipeline.id, batch_id, tuple(logged.offsets))
        destinations = self.pipeline.destinations
        self.analyse(batch.sparkSession)
        self.decisions.prune(batch_id)
        decision_hash = self.context.hash_for(f"{self.generation}:decision")
        decision = self.decisions.load(batch.sparkSession, batch_id, decision_hash)
        held = _Held([])
        if decision is not None:
            # A former attempt decided this batch and published part of it: the rest gets the same rows.
            logger.info("%s: batch %d replays the decision of its former attempt", self.pipeline.id, batch_id)
            records = decision.records
        else:
            # Every action below reads stored rows, which the first one computes (engine/once.py): the
            # records after the processors if one of them is not pure, else the source's rows (smaller,
            # so cheaper to store; pure processors give the same result on each action), or none at all
            # when even the source gives the same rows again (see _Purity.unstored).
            read_at_ns = logged.timestamp_ms * 1_000_000
            batch, read_directly = read_sources(
                batch, self.pipeline.sources, self.state, batch_id, read_at_ns
            )
            self.counters.source_rows.update(read_directly)
            if self.purity.unstored:
                if self.purity.keeps_mapper_output:
                    held.mapper_output = self.state.memo_dir / f"{batch_id}-{uuid.uuid4().hex}"
                    held.mapper_output.mkdir(parents=True)
                with _memo.keeping_output(held.mapper_output):
                    records = batch_records(batch, self.pipeline, self.context, read_at_ns)
            elif self.purity.pipeline:
                records = batch_records(
                    held.add(computed_once(batch)), self.pipeline, self.context, read_at_ns
                )
            else:
                records = held.add(
                    computed_once(batch_records(batch, self.pipeline, self.context, read_at_ns))
                )
        tally = StateTally(batch.sparkSession, STATES)
        observed = tally.tallied(records)
        # The counts ride on a write that runs the batch (once, while it stages), not on one under the
        # destination's own processors.
        observer = next(
            (i for i, d in enumerate(destinations) if d.spec.writes_on_stage and not d.processors),
            None,
        )
        writes = [
            self._destination_frame(observed if i == observer else records, d, held, decision)
            for i, d in enumerate(destinations)
        ]
        return _Batch(batch_id, records, observed, tally, observer, writes, held, decision, decision_hash)

    def stage(self, current: _Batch) -> None:
        """Run the batch: every destination stages its write (invisible), and the records are counted
        by state in the same pass."""
        writes = current.writes
        for write in writes:
            self._stage(write, current.batch_id)
        if current.observer is None or writes[current.observer].skipped:
            current.observed.write.format("noop").mode("overwrite").save()
        counted = current.tally.counts()
        if counted is None:
            logger.warning(
                "%s: batch %d had a partition computed twice while it staged; its records are counted again",
                self.pipeline.id,
                current.batch_id,
            )
            counted = Counter(current.records.agg(*self.state_counts).collect()[0].asDict())
        current.states = counted

    def decide(self, current: _Batch) -> _Verdict:
        """Stop if a processor asked to, gather the nacks, check the DLQ window and stage the DLQ; log
        the decision when a replay could decide otherwise."""
        batch_id, records, states, writes = current.batch_id, current.records, current.states, current.writes
        decision = current.decision
        # An empty batch has nothing to decide. (Over an empty local checkpoint, an observe under a
        # repartition, as in the custom.python and log destinations, never reports.)
        if not states["total"]:
            nacked, nack_count = records, 0
        elif decision is not None:
            nacked = decision.nacked if decision.nacked is not None else records.limit(0)
            nack_count = nacked.count()
        else:
            self._stop_if_asked(records, states, writes)
            nacked, nack_count = self._nacked(records, states, writes, current.held)
        nack_rows = nacked.select("_seq", "_error", "_node", "position").collect() if nack_count else []
        window = self._check_window(batch_id, records, states["total"], nack_rows)
        dlq_staged = self._stage_dlq(nacked, nack_rows, batch_id) if nack_count else []
        logged_decision = decision is not None
        if decision is None and states["total"] and self._replay_could_differ(writes, dlq_staged):
            self._log_decision(
                batch_id, current.decision_hash, records, writes, nacked if nack_count else None
            )
            logged_decision = True
        return _Verdict(nack_count, dlq_staged, window, logged_decision)

    def publish(self, current: _Batch, verdict: _Verdict) -> BatchResult:
        """Make every staged write visible, then the DLQ's, and account for the batch. Spark commits the
        batch only after this returns: the in-order ack."""
        batch_id, states, writes, dlq_staged = (
            current.batch_id,
            current.states,
            current.writes,
            verdict.dlq_staged,
        )
        pending = [w.staged for w in writes if w.staged is not None] + dlq_staged
        try:
            for write in writes:
                if write.staged is not None:
                    with self._as_destination(write.destination.node_id), _timed(write):
                        published = write.staged.publish()
                    pending.remove(write.staged)
                    self.counters.destination_bytes[write.destination.node_id] += _size_of(published)
            for staged in dlq_staged:
                with self._as_destination(f"{self.pipeline.id}:dlq", Code.DLQ_WRITE_FAILED):
                    published = staged.publish()
                pending.remove(staged)
                if isinstance(published, list):
                    self.counters.dlq_files += [str(p) for p in published if self.state.dlq_dir in p.parents]
            if verdict.window is not None:
                self.windows.save(batch_id, *verdict.window)
            if verdict.logged_decision:
                self.decisions.remove(batch_id)  # every output holds the batch now
            written = {w.destination.id: self._written(w, states) if states["total"] else 0 for w in writes}
        except BaseException:
            # A publish failed: the batch will not commit. Release what the others still hold (an open
            # Postgres transaction keeps its delivery-marker lock, which a restart in this process would
            # wait on); the ones that published keep their marker and skip the replay.
            for staged in pending:
                staged.discard()
            raise
        finally:
            current.held.release()
        self.counters.last_destination_seconds = {w.destination.node_id: w.seconds for w in writes}
        skipped = [w.destination.id for w in writes if w.skipped]
        if skipped:
            self.state.audit("delivery_skipped", batch=batch_id, destinations=skipped)
        return self._account(batch_id, states, verdict.nack_count, written)

    @cached_property
    def state_counts(self) -> list[Column]:
        """:func:`state_counts`, built once: some 60 calls into the JVM, about 10 ms a batch."""
        return state_counts()

    def analyse(self, spark: SparkSession) -> _Purity:
        """Which processor chains are pure: Spark analyses them, once (before the stream starts, or at
        the first batch)."""
        if self._purity is None:
            self._purity = _Purity.of(spark, self.pipeline)
        return self._purity

    @property
    def nothing_stored(self) -> bool:
        """No batch's rows are stored to be decided once (see ``_Purity.unstored``)."""
        return self.purity.unstored

    @property
    def purity(self) -> _Purity:
        assert self._purity is not None, "set by analyse"
        return self._purity

    def _replay_could_differ(self, writes: list[_DestinationWrite], dlq_staged: list[Staged]) -> bool:
        """Whether a replay after a crash between two publishes could decide this batch differently:
        there is more than one output to publish, and a processor that is not a pure function, a
        source that may read the batch's offsets differently (a Postgres snapshot page whose rows
        changed), or records refused by a destination (which is not asked again once it holds the
        batch)."""
        staged = [w.staged for w in writes if w.staged is not None]
        if len(staged) + len(dlq_staged) < 2:
            return False
        purity = self.purity
        return not (purity.everywhere and purity.replayable) or any(nacks_of(s) for s in staged)

    def _log_decision(
        self,
        batch_id: int,
        decision_hash: str,
        records: DataFrame,
        writes: list[_DestinationWrite],
        nacked: DataFrame | None,
    ) -> None:
        frames = {decisions.RECORDS: records}
        for write in writes:
            if write.staged is not None and write.decided is not None:
                frames[decisions.destination_part(write.destination.node_id)] = write.decided
        if nacked is not None:
            frames[decisions.NACKED] = nacked
        started = time.monotonic()
        self.decisions.save(batch_id, decision_hash, frames)
        logger.info(
            "%s: batch %d decision logged in %.2f s (it publishes to several outputs)",
            self.pipeline.id,
            batch_id,
            time.monotonic() - started,
        )

    def _stage(self, write: _DestinationWrite, batch_id: int) -> None:
        """Stage a destination's records, unless it already holds this delivery (a replayed batch)."""
        destination = write.destination
        delivery = self.delivery(destination.id, batch_id, nacks_allowed=True)
        with self._as_destination(destination.node_id), _timed(write):
            if plugins.delivered(destination.plugin, destination.settings, delivery):
                write.skipped = True
                logger.info(
                    "%s: batch %d already delivered, not written again", destination.node_id, batch_id
                )
                return
            rows = write.frame.filter(in_state(STATE_OPEN))
            if write.written is not None:
                rows = rows.observe(write.written, F.count(F.lit(1)).alias("n"))
            write.staged = plugins.stage(
                destination.plugin,
                select_sql(rows, [*RECORD_COLUMNS, *ORDER_COLUMNS]),
                destination.settings,
                delivery,
            )

    @staticmethod
    def _written(write: _DestinationWrite, states: Counter[str]) -> int:
        if write.staged is None:
            return 0
        given = states[STATE_OPEN] if write.written is None else int(write.written.get["n"] or 0)
        return given - len(nacks_of(write.staged))

    @staticmethod
    @contextmanager
    def _as_destination(node_id: str, code: str = Code.DESTINATION_FAILED) -> Iterator[None]:
        """A destination's own TransientError/FatalError stops the pipeline as it says, named after it."""
        try:
            yield
        except ConduitError as error:
            raise PipelineStopped(
                PipelineError(kind=error.kind, code=error.code or code, message=str(error), node=node_id)
            ) from error

    def _destination_frame(
        self,
        records: DataFrame,
        destination: ConnectorConfig,
        held: _Held,
        decision: decisions.Decision | None = None,
    ) -> _DestinationWrite:
        """The records a destination gets: open ones whose collection matches its ``namespace`` regex,
        after the destination's own processors."""
        frame = records.filter(in_state(STATE_OPEN))
        settings = destination.settings
        # Every destination's settings take a namespace (registry test); the DLQ is not asked.
        namespace = settings.namespace if isinstance(settings, DestinationSettings) else ".*"
        if namespace != ".*":
            collection = F.coalesce(F.col("metadata")[META_COLLECTION], F.lit(""))
            frame = frame.filter(collection.rlike(namespace))
        if not destination.processors:
            every_open_row = namespace == ".*"
            written = None if every_open_row else Observation(f"conduit-{destination.node_id}-written")
            return _DestinationWrite(destination, frame, written)
        written = Observation(f"conduit-{destination.node_id}-written")
        logged = decision.destination(destination.node_id) if decision is not None else None
        if logged is not None:
            frame = logged
        else:
            frame = apply_all(frame, destination.processors)
            if not self.purity.destinations[destination.node_id]:
                # Its processors decide once too: its write, stop check and nacks read these rows.
                frame = held.add(computed_once(frame))
        states = Observation(f"conduit-{destination.node_id}-states")
        observed = frame.observe(states, *self.state_counts)
        return _DestinationWrite(destination, observed, written, states, decided=frame)

    def _stop_if_asked(
        self, records: DataFrame, states: Counter[str], writes: list[_DestinationWrite]
    ) -> None:
        """A processor raised TransientError/FatalError: stop at the first such record in source order."""
        frames = [records] if states[STATE_TRANSIENT] or states[STATE_FATAL] else []
        for write in writes:
            if write.states is not None:
                dest_states = counts_of(write.states)
                if dest_states[STATE_TRANSIENT] or dest_states[STATE_FATAL]:
                    frames.append(write.frame)
        for frame in frames:
            first = (
                frame.filter(F.col("_state").isin(STATE_TRANSIENT, STATE_FATAL))
                .orderBy(*ORDER_COLUMNS)
                .select("_state", "_error", "_node")
                .first()
            )
            assert first is not None, "the states counted hold such a record"
            code = Code.PROCESSOR_FATAL if first._state == STATE_FATAL else Code.PROCESSOR_TRANSIENT
            raise PipelineStopped(
                PipelineError(kind=first._state, code=code, message=first._error or "", node=first._node)
            )

    def _nacked(
        self, records: DataFrame, states: Counter[str], writes: list[_DestinationWrite], held: _Held
    ) -> tuple[DataFrame, int]:
        """Records nacked by a pipeline processor, any destination's processors, or refused by a
        destination while it wrote (once each)."""
        nacked = records.filter(in_state(STATE_NACKED))
        count = states[STATE_NACKED]
        late = [w for w in writes if w.states is not None and counts_of(w.states)[STATE_NACKED]]
        for write in late:
            nacked = nacked.unionByName(write.frame.filter(in_state(STATE_NACKED)))
        refused = [
            (seq, error, w.destination.node_id)
            for w in writes
            if w.staged is not None
            for seq, error in nacks_of(w.staged)
        ]
        if refused:
            errors = records.sparkSession.createDataFrame(refused, "_seq bigint, _err string, _nd string")
            nacked = nacked.unionByName(
                records.join(F.broadcast(errors), "_seq")
                .withColumn("_state", F.lit(STATE_NACKED))
                .withColumn("_error", F.col("_err"))
                .withColumn("_node", F.col("_nd"))
                .select(*records.columns)
            )
        if late or refused or self.fans_out:
            # Read three times (count, rows, DLQ write): computed once, from rows already decided. A
            # source record is nacked once, as Conduit nacks a split record's run once: by its first
            # nacked piece.
            nacked = held.add(computed_once(first_piece(nacked)))
            count = nacked.count()
        return nacked, count

    def _check_window(
        self, batch_id: int, records: DataFrame, total: int, nack_rows: list[Row]
    ) -> tuple[dlq.NackWindow, dlq.NackWindow] | None:
        config = self.pipeline.dlq
        if config.window_size <= 0:
            return None  # window-size 0: the DLQ takes every nack
        before = self.windows.load(batch_id, config.window_size, config.window_nack_threshold)
        after = dlq.NackWindow(before.size, before.threshold, before.outcomes.copy())
        nacks = self._ranked_nacks(records, nack_rows) if nack_rows else []
        verdict = dlq.feed(after, total, nacks)
        if verdict.rejected is not None:
            rejected = verdict.rejected
            raise PipelineStopped(
                PipelineError(
                    kind="fatal",
                    code=Code.DLQ_THRESHOLD_EXCEEDED,
                    message=(
                        f"DLQ nack threshold exceeded ({verdict.nacks_in_window}/"
                        f"{config.window_nack_threshold} nacks in the last {config.window_size} records) "
                        "at record position "
                        f"{position_text(rejected.position) or ''}, original error: {rejected.error}"
                    ),
                    node=rejected.node,
                )
            )
        return before, after

    @staticmethod
    def _ranked_nacks(records: DataFrame, nack_rows: list[Row]) -> list[dlq.Nack]:
        """Each nack's place among all records of the batch, from the partition sizes and ``_seq``."""
        heads = records.filter(HEAD_PIECE_SQL)  # a source record's place, whatever it became
        sizes = heads.groupBy(F.shiftright("_seq", ROW_BITS).alias("part")).count().collect()
        offsets, running = {}, 0
        for row in sorted(sizes, key=lambda r: r.part):
            offsets[row.part] = running
            running += row["count"]
        row_mask = (1 << ROW_BITS) - 1
        return [
            dlq.Nack(
                offsets[r._seq >> ROW_BITS] + (r._seq & row_mask), r._error or "", r._node or "", r.position
            )
            for r in nack_rows
        ]

    def _stage_dlq(self, nacked: DataFrame, nack_rows: list[Row], batch_id: int) -> list[Staged]:
        """Each nacked record, wrapped as Conduit does: a ``create`` whose ``.Payload.After`` is the
        failed record, with the nack error and node in its metadata. Kept in the state dir (the
        queryable DLQ) and sent to the DLQ plugin, in source order."""
        self._note_dlq(nack_rows)
        wrapped = (
            nacked.selectExpr(
                "position",
                "'create' AS operation",
                "map_concat(coalesce(metadata, cast(map() as map<string,string>)), "
                f"map('{META_DLQ_ERROR}', coalesce(_error, ''), '{META_DLQ_NODE}', coalesce(_node, ''))) AS metadata",
                "key",
                "key_raw",
                "CAST(NULL AS VARIANT) AS before",
                "CAST(NULL AS BINARY) AS before_raw",
                f"to_variant_object({opencdc_struct_sql()}) AS after",
                "CAST(NULL AS BINARY) AS after_raw",
                "_seq",
            )
            .coalesce(1)  # nacks are few: one ordered file, and no sampling job for a global sort
            .sortWithinPartitions("_seq")
            .select(*RECORD_COLUMNS, "_seq")
        )
        delivery = self.delivery("dlq", batch_id)
        staged: list[Staged] = []
        if not jsonl_files.delivered(self.state.dlq_dir, delivery):
            staged.append(jsonl_files.stage_jsonl(wrapped.drop("_seq"), self.state.dlq_dir, delivery))
        plugin, settings = self.pipeline.dlq.plugin, self.pipeline.dlq.settings
        with self._as_destination(f"{self.pipeline.id}:dlq", Code.DLQ_WRITE_FAILED):
            if not plugins.delivered(plugin, settings, delivery):
                staged.append(plugins.stage(plugin, wrapped, settings, delivery))
        return staged

    def _note_dlq(self, nack_rows: list[Row]) -> None:
        counters = self.counters
        ordered = sorted(nack_rows, key=lambda r: r._seq)
        if counters.dlq_first_position is None:
            counters.dlq_first_position = position_text(ordered[0].position) or ""
        counters.dlq_last_position = position_text(ordered[-1].position) or ""
        counters.dlq_errors.update(r._error or "" for r in ordered)

    def _account(
        self, batch_id: int, states: Counter[str], nack_count: int, written: dict[str, int]
    ) -> BatchResult:
        counters = self.counters
        total = states["total"]
        counters.batches += 1
        counters.read += total
        counters.acked += total - nack_count
        counters.filtered += states["filtered_records"]
        counters.nacked += nack_count
        counters.dlq += nack_count
        for name, count in written.items():
            key = f"{self.pipeline.id}:{name}"
            counters.written[key] = counters.written.get(key, 0) + count
        filtered = states["filtered_records"]
        return BatchResult(batch_id, total, total - nack_count, filtered, nack_count, written)
