"""One engine per pipeline, seen from the operator: name the engine, reattach to it, wait for another's.

The engine holds the pipeline's run lock (:mod:`airflow_conduit.run_lock`); this mixin of
:class:`~airflow_conduit.operators.pipeline.ConduitPipelineOperator` puts the task instance into it,
reattaches a retry to the engine its earlier try left running, and backs off when someone else's engine
refused the run.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow_conduit.errors import Code, PipelineError
from airflow_conduit.recovery.policy import RecoveryPolicy, format_duration
from airflow_conduit.run_lock import OWNER_ENV, TRY_ENV, LockHolder, current_holder
from airflow_conduit.run_origin import airflow_env
from airflow_conduit.state import ExitPayload, PipelineState, parse_time
from airflow_conduit.triggers.hand_over import not_before

if TYPE_CHECKING:
    from typing import NoReturn

    from airflow.sdk import Context
    from airflow.triggers.base import BaseTrigger

    from airflow_conduit.hooks.conduit import ConduitHook, PipelineRun


class OneEnginePerPipeline:
    """What :class:`~airflow_conduit.operators.pipeline.ConduitPipelineOperator` does about the run lock."""

    if TYPE_CHECKING:
        pipeline_id: str
        log: Any
        _reattached: bool

        @property
        def hook(self) -> ConduitHook: ...

        @property
        def _state(self) -> PipelineState: ...

        @property
        def _abs_state_dir(self) -> str: ...

        def _stop_after_seconds(self) -> float | None: ...

        deferrable: bool

        def resolve_deferral_threshold(self) -> timedelta: ...

        def defer(
            self,
            *,
            trigger: BaseTrigger,
            method_name: str,
            kwargs: dict[str, Any] | None = None,
            timeout: timedelta | int | float | None = None,
        ) -> NoReturn: ...

    @staticmethod
    def _owner(context: Context) -> str | None:
        """Who the engine works for: this task instance across its tries (DAG, task, run, map index)."""
        ti = context.get("ti")
        if ti is None:
            return None
        return f"{ti.dag_id}/{ti.task_id}/{ti.run_id}/{getattr(ti, 'map_index', -1)}"

    def _name_the_engine(self, context: Context) -> None:
        """Put this task instance into the engine's lock (``run.lock``), so a retry recognises it, and
        into its ``started`` event (``AIRFLOW_CTX_*``, see :mod:`airflow_conduit.run_origin`): passed
        with the job's own environment, which reaches the driver wherever Spark starts it, unlike the
        worker's environment that spark-submit inherits."""
        owner = self._owner(context)
        if owner is not None:
            ti = context["ti"]
            try_number = getattr(ti, "try_number", None)
            self.hook.env_vars[OWNER_ENV] = owner
            self.hook.env_vars[TRY_ENV] = str(try_number or "")
            map_index = getattr(ti, "map_index", None)
            self.hook.env_vars.update(
                airflow_env(
                    dag_id=ti.dag_id,
                    run_id=ti.run_id,
                    task_id=ti.task_id,
                    try_number=int(try_number) if try_number is not None else None,
                    map_index=int(map_index) if map_index is not None else -1,
                )
            )

    def _wait_for_the_other_engine(
        self, policy: RecoveryPolicy, refusals: int, runs: list[dict[str, Any]]
    ) -> None:
        """Back off after the pipeline's lock refused this run, leaving the pipeline's state alone.

        The pipeline is not failing: another engine runs it. Its status, restart history and window
        belong to that engine's task, so neither recovery nor a retry policy hears of the refusal; the
        wait grows as the policy's backoff does, without a limit. As a restart's backoff, it is
        deferred from ``deferral_threshold`` on (the refusal count rides in the trigger's ``carry``).
        """
        delay = policy.delay_for(refusals)
        threshold = self.resolve_deferral_threshold()
        deferred = self.deferrable and delay >= threshold
        self.log.warning(
            "Pipeline %s is run by another engine, which refused this run (%d time(s)); trying again in %s%s",
            self.pipeline_id,
            refusals,
            format_duration(delay),
            " (deferred)" if deferred else "",
        )
        if deferred:
            from airflow_conduit.triggers.recovery import PipelineRecoveryTrigger

            self.defer(
                trigger=PipelineRecoveryTrigger(
                    pipeline_id=self.pipeline_id,
                    state_dir=self._abs_state_dir,
                    start_at=datetime.now(UTC) + delay,
                    attempt=refusals,
                    delay=delay.total_seconds(),
                    carry={"runs": runs, "refusals": refusals},
                    not_before=not_before(threshold),
                ),
                method_name="execute_complete",
            )
        time.sleep(delay.total_seconds())

    def _reattach(self, context: Context) -> PipelineRun | None:
        """Watch an engine an earlier try of this task left running, instead of submitting a second.

        The earlier try's worker died (killed, lost its node) but its engine runs on in its own session
        and holds the pipeline's run lock. As with Airflow's ``ResumableJobMixin``, the retry reattaches:
        it waits for that engine to end and takes its exit payload as this run's. An engine of anyone
        else is not reattached to: it refuses the new run (exit 75), and
        :meth:`_wait_for_the_other_engine` backs off before the next submission.
        """
        state = self._state
        holder = current_holder(state.root)
        owner = self._owner(context)
        if holder is None:
            return None
        if owner is None or holder.owner != owner:
            self.log.warning(
                "Pipeline %s is being run by another engine (%s); the new run will be refused while it runs",
                self.pipeline_id,
                holder.describe(),
            )
            return None
        self.log.warning(
            "Reattaching to pipeline %s's engine left running by an earlier try (%s) instead of "
            "submitting a second one",
            self.pipeline_id,
            holder.describe(),
        )
        ti = context.get("ti")
        state.audit("reattached", holder=holder.to_dict(), try_number=getattr(ti, "try_number", None))
        self._reattached = True
        try:
            return self._watch(state, holder)
        finally:
            self._reattached = False

    def _watch(self, state: PipelineState, holder: LockHolder) -> PipelineRun:
        from airflow_conduit.hooks.conduit import PipelineRun

        started = parse_time(holder.started_at)
        stop_after = self._stop_after_seconds()
        while current_holder(state.root) is not None:
            running_for = (datetime.now(UTC) - started).total_seconds()
            if stop_after is not None and running_for >= stop_after and not state.stop_requested:
                self.log.info("Requesting a graceful stop of pipeline %s (stop_after)", self.pipeline_id)
                state.request_stop()
            time.sleep(1.0)
        payload = state.read_exit()
        if payload is None or parse_time(payload.started_at or "1970-01-01T00:00:00Z") < started:
            # Killed, so transient.
            message = f"the engine ({holder.describe()}) ended without an exit payload (killed?)"
            error = PipelineError("transient", Code.SPARK_FAILED, message)
            payload = ExitPayload.failure(self.pipeline_id, error, started_at=holder.started_at)
        return PipelineRun(
            pipeline_id=self.pipeline_id,
            state_dir=self._abs_state_dir,
            exit_payload=payload,
            payload_source="state_dir",
            returncode=None,
            submitted_at=started,
            ended_at=datetime.now(UTC),
        )


def refused(run: PipelineRun) -> bool:
    """Whether the pipeline's run lock refused the run: another engine runs the pipeline."""
    error = run.exit_payload.error
    return error is not None and error.code == Code.PIPELINE_LOCKED
