"""A person reviews DLQ records in the Airflow UI and decides: replay, acknowledge or leave them."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.providers.standard.operators.hitl import HITLOperator
from airflow.sdk import Asset, Param
from airflow.sdk.exceptions import AirflowException

from airflow_conduit import dlq_tools
from airflow_conduit.assets import dlq_asset
from airflow_conduit.dlq_review import (
    ReviewAction,
    ReviewKind,
    ReviewOutcome,
    ReviewRecord,
    acknowledge,
    audit_review,
    degraded_payload,
    event_entries,
    inspect_command,
    inspected_records,
    replay_command,
    replay_outcome,
    resolved_entries,
    review_body,
    run_replay,
    stopped_batch,
    threshold_record,
    with_inspected_record,
)
from airflow_conduit.state import USER_ENV, PipelineState

if TYPE_CHECKING:
    from airflow.sdk import Context

REASON_PARAM = "reason"
POSITIONS_PARAM = "positions"
OUTPUT_TAIL = 4000
"""Characters of a replay's output copied to the task log."""
SHOWN_XCOM_KEY = "conduit_review_shown"
"""XCom of what the form showed: ``{"events": [DLQ asset event extras], "ids": [record ids]}``; the answer
acts on exactly those records."""


@dataclass
class _Review:
    """The records a form shows, and where they came from."""

    records: list[ReviewRecord]
    intro: str = ""
    events: list[dict[str, Any]] = field(default_factory=list)
    """DLQ review: the extras of the asset events the records were read from."""
    resolved: int = 0
    """DLQ review: records of those events left out as acknowledged or replayed already."""


def _task_instance(context: Context) -> Any:
    """The running task instance, or ``None`` (a bare context, as in tests that call the operator)."""
    return context.get("ti") or context.get("task_instance")


class ConduitDLQReviewOperator(HITLOperator):
    """Shows DLQ records in the Airflow UI's review form and carries out the answer.

    ``review="dlq"`` (default): the records of the DLQ asset events that triggered the run (any event of
    ``conduit://PIPELINE_ID/dlq``: the operator's end-of-task events or live ones; a manual run takes the
    asset's latest event). Each record is shown once, however many events name it (a DLQ write can be
    announced twice), and records acknowledged or replayed successfully already are left out.
    ``review="poison"``: the records a degraded pipeline stopped on (DLQ threshold exceeded, or a fatal
    error: the records of the micro-batch it stopped on, as ``airflow-conduit inspect`` shows them). With
    nothing to review (the pipeline is not degraded, or every record is resolved) the task ends at once.

    The answer applies to the records the form showed (kept in the XCom ``conduit_review_shown``), not
    to whatever the asset's latest event or ``inspect`` gives when the answer comes.

    The form shows the count, the errors by failing node and a sample, and offers:

    - ``replay``: DLQ records are sent through the pipeline's processors and destinations as its file
      defines them now, one record per micro-batch (``airflow-conduit replay --entry ...``, only these
      entries); poison records: the pipeline is to be resumed as it is.
    - ``acknowledge``: the records are skipped for good (``acked.jsonl``, an ``acked`` audit event each
      with the responder and the ``reason`` field); poison records: then the pipeline is to be resumed
      past them (only the positions in the ``positions`` field).
    - ``leave``: nothing changes.

    Every answer, the timeout's default included, is written to the task log and as a ``dlq_reviewed``
    audit event (shown on the Conduit UI page) with the outcome: replayed, failed again, skipped, left.
    The return value (XCom) is that outcome; its ``resume`` says whether a degraded pipeline is to run
    again (a downstream :class:`~airflow_conduit.operators.pipeline.ConduitPipelineOperator` does it).

    :param pipeline_file: the pipeline file, for a replay and for ``inspect``; a relative path is taken
        relative to the DAG file's folder, then to the working directory (templated)
    :param pipeline_id: the pipeline whose records are reviewed
    :param state_dir: the pipeline's state dir (templated)
    :param review: ``dlq`` or ``poison``
    :param spark_conn_id: the Spark connection whose master a replay runs on (templated)
    :param env_vars: environment of the replay and ``inspect`` (``${VAR}`` of the pipeline file) (templated)
    :param sample_size: records shown in the form's sample table
    :param default_action: the option taken when nobody answers within ``response_timeout``
    :param response_timeout: how long to wait for an answer (default 24 hours; ``None``: forever)
    :param asset: the DLQ asset whose events are reviewed (default ``dlq_asset(pipeline_id)``)
    :param subject: the form's headline (default: says what and how many) (templated)
    """

    template_fields: Sequence[str] = (
        *HITLOperator.template_fields,
        "pipeline_file",
        "state_dir",
        "spark_conn_id",
        "env_vars",
    )
    ui_color = "#ffe8c6"

    def __init__(
        self,
        *,
        pipeline_file: str,
        pipeline_id: str,
        state_dir: str,
        review: str = ReviewKind.DLQ,
        spark_conn_id: str = "spark_default",
        env_vars: Mapping[str, Any] | None = None,
        sample_size: int = 10,
        default_action: str = ReviewAction.LEAVE,
        response_timeout: timedelta | None = timedelta(hours=24),
        asset: Asset | None = None,
        subject: str = "",
        **kwargs: Any,
    ) -> None:
        kind = ReviewKind(review)
        params: dict[str, Param] = {
            # Nullable: the form then does not require it (leave and replay need no reason).
            REASON_PARAM: Param(
                None,
                type=["null", "string"],
                title="Reason",
                description="Why (kept in the audit log with your name, e.g. why records are acknowledged)",
            )
        }
        if kind is ReviewKind.POISON:
            params[POSITIONS_PARAM] = Param(
                None,
                type=["null", "string"],
                title="Positions to acknowledge",
                description="Comma-separated; acknowledge skips only these records",
            )
        super().__init__(
            subject=subject,
            options=[str(action) for action in ReviewAction],
            defaults=str(ReviewAction(default_action)),
            params=params,
            response_timeout=response_timeout,
            **kwargs,
        )
        self.pipeline_file = pipeline_file
        self.pipeline_id = pipeline_id
        self.state_dir = state_dir
        self.review = kind
        self.spark_conn_id = spark_conn_id
        self.env_vars = dict(env_vars or {})
        self.sample_size = sample_size
        self.asset = asset or dlq_asset(pipeline_id)
        if kind is ReviewKind.DLQ and self.asset not in self.inlets:
            self.inlets = [*self.inlets, self.asset]

    # where things are ---------------------------------------------------------------------------------
    @property
    def _state(self) -> PipelineState:
        return PipelineState.of(os.path.abspath(self.state_dir), self.pipeline_id)

    def _resolve_pipeline_file(self) -> str:
        path = Path(self.pipeline_file)
        if path.is_absolute():
            return str(path)
        fileloc = getattr(getattr(self, "dag", None), "fileloc", None)
        if fileloc and (Path(fileloc).parent / path).exists():
            return str((Path(fileloc).parent / path).resolve())
        return str(path.resolve())

    def _run_cwd(self) -> str | None:
        """The working directory the pipeline's latest run had: relative paths in its file mean that."""
        started = [e for e in self._state.read_audit() if e.get("event") == "started" and e.get("cwd")]
        cwd = started[-1]["cwd"] if started else None
        return cwd if cwd and Path(cwd).is_dir() else None

    def _env(self, user: str = "") -> dict[str, str]:
        from airflow_conduit.hooks.conduit import ConduitHook

        env = {**os.environ, **ConduitHook(env_vars=self.env_vars).job_env()}
        if user:
            env[USER_ENV] = user
        return env

    # the records under review --------------------------------------------------------------------------
    def _dlq_review(self, context: Context, *, drop_resolved: bool = True) -> _Review:
        events = list((context.get("triggering_asset_events") or {}).get(self.asset, []))
        if not events:  # a manual run: the asset's latest event
            events = list(context["inlet_events"][self.asset])[-1:]
        extras = [dict(event.extra or {}) for event in events]
        entries = event_entries(extras)
        resolved = resolved_entries(self._state, entries) if drop_resolved else set()
        records = [
            ReviewRecord.of_entry(e, self.pipeline_id)
            for e in entries
            if dlq_tools.entry_id(e) not in resolved
        ]
        return _Review(records, events=extras, resolved=len(resolved))

    def _poison_records(self) -> tuple[list[ReviewRecord], str]:
        state = self._state
        payload = degraded_payload(state)
        if payload is None or payload.error is None:
            return [], ""
        error = payload.error
        intro = f"It stopped on a {error.kind} error `{error.code}` at `{error.node}`: {error.message}"
        found = threshold_record(payload)
        batch = stopped_batch(state)
        if found is not None:
            # The engine's message names only the position: the stopped batch holds the record itself.
            inspected = self._inspect(batch) if batch is not None else {}
            return [with_inspected_record(found, inspected_records(inspected, None))], intro
        if batch is None:
            return [], intro
        intro += f" The records of micro-batch {batch}, which it stopped on, follow."
        return inspected_records(self._inspect(batch), error.to_dict()), intro

    def _inspect(self, batch: int) -> dict[str, Any]:
        """``airflow-conduit inspect --json`` of the micro-batch the pipeline stopped on."""
        state = self._state
        code, output, inspected = run_replay(
            inspect_command(self._resolve_pipeline_file(), state, batch),
            env=self._env(),
            cwd=self._run_cwd(),
        )
        if code != 0 or not inspected:
            raise AirflowException(
                f"airflow-conduit inspect of batch {batch} of {self.pipeline_id} failed (exit {code}): "
                f"{output[-OUTPUT_TAIL:]}"
            )
        return dict(inspected)

    def _review(self, context: Context) -> _Review:
        if self.review is ReviewKind.DLQ:
            return self._dlq_review(context)
        return _Review(*self._poison_records())

    # ask ----------------------------------------------------------------------------------------------
    def prepare(self, context: Context) -> list[ReviewRecord]:
        """Find the records under review and write the form's subject and body (and, for poison
        records, the ``positions`` field's default) from them; returns the records. With a task
        instance in ``context``, what the form shows is kept (XCom) for the answer."""
        return self._prepare(context).records

    def _prepare(self, context: Context) -> _Review:
        review = self._review(context)
        records = review.records
        what = "DLQ" if self.review is ReviewKind.DLQ else "poison"
        self.subject = (
            self.subject or f"Review {len(records)} {what} record(s) of pipeline {self.pipeline_id}"
        )
        self.body = review_body(
            self.pipeline_id, records, kind=self.review, sample_size=self.sample_size, intro=review.intro
        )
        if self.review is ReviewKind.POISON:
            self.params[POSITIONS_PARAM] = ",".join(r.position for r in records)
        ti = _task_instance(context)
        if records and ti is not None:
            # The answer may come hours later: by then the asset's latest event, or inspect's batch,
            # may be other records than the person saw.
            ti.xcom_push(key=SHOWN_XCOM_KEY, value={"events": review.events, "ids": [r.id for r in records]})
        return review

    def execute(self, context: Context) -> Any:
        review = self._prepare(context)
        if not review.records:
            if review.resolved:
                self.log.info(
                    "The %d DLQ record(s) of %s in the triggering event(s) were already resolved "
                    "(acknowledged or replayed; a DLQ write announced twice names the same records): "
                    "nothing to ask",
                    review.resolved,
                    self.pipeline_id,
                )
            else:
                self.log.info("No %s records of %s to review: nothing to ask", self.review, self.pipeline_id)
            return ReviewOutcome(self.review, ReviewAction.LEAVE, 0).to_dict()
        self.log.info("%s\n%s", self.subject, self.body)
        return super().execute(context)

    # act ----------------------------------------------------------------------------------------------
    def _shown_records(self, context: Context) -> list[ReviewRecord]:
        """The records the form showed, read again from where they came from; without the XCom (a run
        parked before it was kept), the records found now."""
        ti = _task_instance(context)
        shown = (
            ti.xcom_pull(task_ids=ti.task_id, key=SHOWN_XCOM_KEY, map_indexes=ti.map_index)
            if ti is not None
            else None
        )
        if not isinstance(shown, Mapping):
            if self.review is ReviewKind.DLQ:
                # As before: resolved records stay in, so the outcome counts them as what they are.
                return self._dlq_review(context, drop_resolved=False).records
            return self._poison_records()[0]
        ids = [str(i) for i in shown.get("ids") or []]
        if self.review is ReviewKind.DLQ:
            entries = {dlq_tools.entry_id(e): e for e in event_entries(shown.get("events") or [])}
            return [ReviewRecord.of_entry(entries[i], self.pipeline_id) for i in ids if i in entries]
        found = {r.id: r for r in self._poison_records()[0]}
        return [found[i] for i in ids if i in found]

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        answer = super().execute_complete(context, event)
        action = ReviewAction(answer["chosen_options"][0])
        params_input = answer["params_input"] or {}
        user = str((answer.get("responded_by_user") or {}).get("name") or "")
        records = self._shown_records(context)
        outcome = ReviewOutcome(
            self.review,
            action,
            len(records),
            user=user,
            reason=str(params_input.get(REASON_PARAM) or ""),
            timed_out=bool(event.get("timedout")),
            ids=[r.id for r in records],
        )
        if action is ReviewAction.LEAVE:
            outcome.left = len(records)
        elif action is ReviewAction.ACKNOWLEDGE:
            chosen = self._chosen(records, params_input)
            outcome.skipped = acknowledge(
                self._state, chosen, kind=self.review, reason=outcome.reason, user=user or "timeout"
            )
            outcome.left = len(records) - len(chosen)
            outcome.resume = self.review is ReviewKind.POISON
        elif self.review is ReviewKind.POISON:
            outcome.resume = True  # replay of poison records: the pipeline reads them again
        else:
            self._replay(outcome, user)
        self.log.info("Review of %s: %s", self.pipeline_id, outcome.summary())
        audit_review(self._state, outcome, **self._where(context))
        return outcome.to_dict()

    def _chosen(self, records: list[ReviewRecord], params_input: Mapping[str, Any]) -> list[ReviewRecord]:
        """DLQ records: all. Poison records: those whose positions the ``positions`` field lists (a
        position the form added is taken as text, for any source)."""
        if self.review is ReviewKind.DLQ:
            return records
        listed = [p.strip() for p in str(params_input.get(POSITIONS_PARAM) or "").split(",") if p.strip()]
        known = {r.position: r for r in records}
        return [
            known.get(p)
            or ReviewRecord(id=p, position=p, node=None, error=None, record=None, position_bytes=p.encode())
            for p in listed
        ]

    def _replay(self, outcome: ReviewOutcome, user: str) -> None:
        from airflow_conduit.hooks.conduit import ConduitHook

        state = self._state
        master = ConduitHook(spark_conn_id=self.spark_conn_id).master
        argv = replay_command(self._resolve_pipeline_file(), state, outcome.ids, master=master)
        self.log.info("Replaying %d DLQ record(s): %s", len(outcome.ids), " ".join(argv))
        code, output, summary = run_replay(argv, env=self._env(user), cwd=self._run_cwd())
        self.log.info("Replay output (tail):\n%s", output[-OUTPUT_TAIL:])
        outcome.replayed, outcome.failed_again, pending = replay_outcome(state, outcome.ids)
        outcome.left = pending
        outcome.error = summary.get("error") if summary else {"message": f"replay exited {code}"}
        if not summary:
            audit_review(state, outcome)
            raise AirflowException(
                f"the replay of {self.pipeline_id} did not run (exit {code}): {output[-OUTPUT_TAIL:]}"
            )

    @staticmethod
    def _where(context: Context) -> dict[str, Any]:
        ti = _task_instance(context)
        if ti is None:
            return {}
        return {"airflow": {"dag_id": ti.dag_id, "task_id": ti.task_id, "run_id": ti.run_id}}
