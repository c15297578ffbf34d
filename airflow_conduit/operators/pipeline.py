"""Run a Conduit pipeline on Spark from Airflow, with Conduit's recovery and the DLQ as an asset."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from datetime import timedelta
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import Asset, BaseOperator

from airflow_conduit import dlq_batches, dlq_tools
from airflow_conduit.assets import dlq_asset
from airflow_conduit.errors import EXIT_CONFIG
from airflow_conduit.hooks.exceptions import (
    ConduitPipelineError,
    PipelineConfigError,
    PipelineDegradedError,
    PipelineFatalError,
    PipelineTransientError,
)
from airflow_conduit.operators.one_engine import OneEnginePerPipeline, refused
from airflow_conduit.operators.retry_policy import ConduitRetryPolicy
from airflow_conduit.plugins.links import ConduitPipelineLink
from airflow_conduit.recovery.history import PipelineRecovery, cancel_recovery
from airflow_conduit.recovery.policy import RecoveryPolicy, format_duration, parse_duration
from airflow_conduit.recovery.runner import wait_until
from airflow_conduit.state import ExitPayload, PipelineState, Status
from airflow_conduit.triggers.hand_over import not_before
from airflow_conduit.triggers.recovery import PipelineRecoveryTrigger

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_conduit.hooks.conduit import ConduitHook, PipelineRun

__all__ = [
    "RECOVERY_FROM_CONFIG",
    "ConduitPipelineError",
    "ConduitPipelineOperator",
    "PipelineConfigError",
    "PipelineDegradedError",
    "PipelineFatalError",
    "PipelineTransientError",
]

DLQ_PUBLISHED_FILE = dlq_batches.PUBLISHED_FILE

RETRIES_WITH_RETRY_POLICY = 1000
"""``retries`` given to a task that uses :class:`ConduitRetryPolicy` and sets none: the policy decides."""


class _RecoveryFromConfig:
    """The default of ``recovery=``: the ``[conduit]`` section of Airflow's configuration."""

    _instance: _RecoveryFromConfig | None = None

    def __new__(cls) -> _RecoveryFromConfig:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __copy__(self) -> _RecoveryFromConfig:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _RecoveryFromConfig:
        return self

    def __reduce__(self) -> str:
        return "RECOVERY_FROM_CONFIG"

    def __repr__(self) -> str:
        return "RECOVERY_FROM_CONFIG"


RECOVERY_FROM_CONFIG = _RecoveryFromConfig()


class ConduitPipelineOperator(OneEnginePerPipeline, BaseOperator):
    """Runs a Conduit pipeline file on Spark (through ``spark-submit``) and recovers it as Conduit would.

    A graceful stop pushes the run's counters to XCom (the return value is the exit payload plus
    ``runs``, ``restarts`` and ``dlq``). A fatal failure raises :class:`PipelineDegradedError`
    (an ``AirflowFailException``: no retry). A transient failure is restarted inside the same task
    instance after the policy's backoff - deferred to :class:`PipelineRecoveryTrigger` when
    ``deferrable``, so no worker slot is held while waiting - until ``max_retries`` restarts happened
    within ``max_retries_window``; then the pipeline is degraded. With ``recovery=None``, or with a
    :class:`~airflow_conduit.operators.retry_policy.ConduitRetryPolicy` as ``retry_policy``, a transient
    failure raises :class:`PipelineTransientError` instead and Airflow's retries take over.

    The pipeline's DLQ is an outlet (``conduit://PIPELINE_ID/dlq``); a task run that put records into
    the DLQ emits an asset event whose extra holds ``records``, ``path``, ``files``, ``first_position``,
    ``last_position`` and ``error_codes``. A run that put none emits no event.

    :param pipeline_file: the pipeline file (Conduit's YAML); a relative path is taken relative to the
        DAG file's folder, then to the working directory (templated)
    :param pipeline_id: the pipeline to run (not templated: it names the DLQ asset)
    :param state_dir: the state dir: checkpoints, status, audit log, exit payload, DLQ (templated)
    :param mode: ``until_idle`` (process what the sources hold, then stop) or ``continuous`` (templated)
    :param recovery: a :class:`RecoveryPolicy`; by default the ``[conduit]`` configuration section;
        ``None`` leaves transient failures to Airflow's retries
    :param spark_conn_id: the Spark connection; its host is the master (templated)
    :param deferrable: wait out restart backoffs of at least ``deferral_threshold`` in the triggerer
        rather than in the worker
    :param deferral_threshold: the shortest backoff worth deferring (default: ``[conduit]
        deferral_threshold``, 30 s); shorter ones are waited out in the worker, since a deferring worker
        must have exited before its trigger may fire
    :param conf: Spark configuration properties (templated)
    :param env_vars: environment of the job, e.g. for ``${VAR}`` in the pipeline file (templated)
    :param python: the Python of the Spark driver and executors (default: the worker's interpreter)
    :param spark_submit_kwargs: further ``SparkSubmitHook`` arguments (``driver_memory``, ``jars``, ...)
    :param stop_after: in ``continuous`` mode, request a graceful stop after this long
    :param stop_timeout: seconds a killed task waits for the graceful stop before killing the job
    :param emit_dlq_asset: declare the DLQ asset as an outlet and emit its events
    :param application: the engine's spark-submit entry point (default: ``airflow_conduit/cli/spark_submit.py``
        of this installation; set it when the cluster sees the package elsewhere)
    """

    template_fields: Sequence[str] = (
        "pipeline_file",
        "state_dir",
        "mode",
        "spark_conn_id",
        "conf",
        "env_vars",
    )
    template_fields_renderers = {"conf": "json", "env_vars": "json"}
    ui_color = "#c6e6ff"
    operator_extra_links = (ConduitPipelineLink(),)

    def __init__(
        self,
        *,
        pipeline_file: str,
        pipeline_id: str,
        state_dir: str,
        mode: str = "until_idle",
        recovery: RecoveryPolicy | _RecoveryFromConfig | None = RECOVERY_FROM_CONFIG,
        spark_conn_id: str = "spark_default",
        deferrable: bool = True,
        deferral_threshold: timedelta | float | None = None,
        conf: Mapping[str, Any] | None = None,
        env_vars: Mapping[str, Any] | None = None,
        python: str | None = None,
        spark_submit_kwargs: Mapping[str, Any] | None = None,
        stop_after: timedelta | float | None = None,
        stop_timeout: float = 30.0,
        emit_dlq_asset: bool = True,
        application: str | None = None,
        **kwargs: Any,
    ) -> None:
        retry_policy = kwargs.get("retry_policy")
        if isinstance(retry_policy, ConduitRetryPolicy) and kwargs.get("retries") is None:
            kwargs["retries"] = RETRIES_WITH_RETRY_POLICY
        super().__init__(**kwargs)
        if recovery is not None and not isinstance(recovery, RecoveryPolicy | _RecoveryFromConfig):
            raise TypeError(f"recovery must be a RecoveryPolicy or None, got {type(recovery).__name__}")
        self.pipeline_file = pipeline_file
        self.pipeline_id = pipeline_id
        self.state_dir = state_dir
        self.mode = mode
        self.recovery = recovery
        self.spark_conn_id = spark_conn_id
        self.deferrable = deferrable
        self.deferral_threshold = deferral_threshold
        self.conf = dict(conf or {})
        self.env_vars = dict(env_vars or {})
        self.python = python
        self.spark_submit_kwargs = dict(spark_submit_kwargs or {})
        self.stop_after = stop_after
        self.stop_timeout = stop_timeout
        self.emit_dlq_asset = emit_dlq_asset
        self.application = application
        self._reattached = False
        if emit_dlq_asset:
            asset = dlq_asset(pipeline_id)
            # By URI: a watched DLQ asset (dlq_asset(..., watch=True)) is this one with a watcher.
            if not any(_is_asset(o, asset) for o in self.outlets):
                self.outlets = [*self.outlets, asset]

    # ---------------------------------------------------------------------------------------------
    @cached_property
    def hook(self) -> ConduitHook:
        from airflow_conduit.hooks.conduit import ConduitHook

        return ConduitHook(
            spark_conn_id=self.spark_conn_id,
            conf=self.conf,
            env_vars=self.env_vars,
            python=self.python,
            spark_submit_kwargs=self.spark_submit_kwargs,
            stop_timeout=self.stop_timeout,
            application=self.application,
        )

    @property
    def airflow_retries(self) -> bool:
        """Transient failures are left to Airflow's retries (no in-task recovery)."""
        return self.recovery is None or isinstance(self.retry_policy, ConduitRetryPolicy)

    def resolve_recovery(self) -> RecoveryPolicy:
        """The policy in force: ``recovery=``, else the ``[conduit]`` configuration."""
        if isinstance(self.recovery, RecoveryPolicy):
            return self.recovery
        from airflow_conduit.hooks.config import policy_from_airflow_config

        return policy_from_airflow_config()

    def resolve_deferral_threshold(self) -> timedelta:
        """The shortest backoff that is deferred: ``deferral_threshold=``, else ``[conduit]``."""
        if self.deferral_threshold is not None:
            return parse_duration(self.deferral_threshold, name="deferral_threshold")
        from airflow_conduit.hooks.config import deferral_threshold_from_airflow_config

        return deferral_threshold_from_airflow_config()

    @property
    def _state(self) -> PipelineState:
        return PipelineState.of(self._abs_state_dir, self.pipeline_id)

    @property
    def _abs_state_dir(self) -> str:
        return os.path.abspath(self.state_dir)

    def _resolve_pipeline_file(self) -> str:
        path = Path(self.pipeline_file)
        if path.is_absolute():
            return str(path)
        fileloc = getattr(getattr(self, "dag", None), "fileloc", None)
        if fileloc:
            candidate = Path(fileloc).parent / path
            if candidate.exists():
                return str(candidate.resolve())
        return str(path.resolve())

    def _recovery(self) -> PipelineRecovery:
        return PipelineRecovery(self._state, self.resolve_recovery(), log=self.log)

    # execute -------------------------------------------------------------------------------------
    def execute(self, context: Context) -> dict[str, Any]:
        if self.mode not in ("until_idle", "continuous"):
            raise PipelineConfigError(
                f"mode must be 'until_idle' or 'continuous', got {self.mode!r}",
                pipeline_id=self.pipeline_id,
                state_dir=self._abs_state_dir,
            )
        self._name_the_engine(context)
        recovery = self._recovery()
        how = (
            "Airflow retries"
            if self.airflow_retries
            else ("deferred" if self.deferrable else "in the worker")
        )
        self.log.info(
            "Pipeline %s: file %s, state dir %s, mode %s; recovery %s (%s)",
            self.pipeline_id,
            self._resolve_pipeline_file(),
            self._abs_state_dir,
            self.mode,
            recovery.policy.describe(),
            how,
        )
        return self._run(context, recovery, runs=[])

    def execute_complete(
        self, context: Context, event: dict[str, Any], runs: list[dict[str, Any]] | None = None
    ) -> dict[str, Any]:
        """Resumes after :class:`PipelineRecoveryTrigger`: restarts the pipeline, or stops it."""
        self._name_the_engine(context)
        recovery = self._recovery()
        carry = event.get("carry") or {}
        runs = list(runs or carry.get("runs") or [])
        refusals = int(carry.get("refusals") or 0)  # a wait for another engine, not a restart
        if event.get("status") == "stop_requested":
            if not refusals:
                cancel_recovery(recovery)
            return self._finish(context, None, runs, outcome="cancelled")
        self.log.info(
            "Backoff of %s over (attempt %s, started at %s)",
            format_duration(timedelta(seconds=float(event.get("delay", 0)))),
            event.get("attempt"),
            event.get("start_at"),
        )
        return self._run(context, recovery, runs=runs, refusals=refusals)

    def _run(
        self,
        context: Context,
        recovery: PipelineRecovery,
        runs: list[dict[str, Any]],
        refusals: int = 0,
    ) -> dict[str, Any]:
        state = recovery.state
        while True:
            recovery.mark_restarted()
            run = self._reattach(context) or self.hook.run_pipeline(
                pipeline_file=self._resolve_pipeline_file(),
                pipeline_id=self.pipeline_id,
                state_dir=self._abs_state_dir,
                mode="continuous" if self.mode == "continuous" else "until_idle",  # checked in execute
                stop_after=self._stop_after_seconds(),
            )
            if refused(run):
                refusals += 1
                self._wait_for_the_other_engine(recovery.policy, refusals, runs)
                continue
            runs.append(_run_summary(run))
            self._log_run(run)
            outcome = run.outcome
            if outcome == "stopped":
                recovery.on_success(run.payload)
                return self._finish(context, run.exit_payload, runs, outcome="stopped")
            described = _describe(run.exit_payload)
            if outcome == "fatal":
                recovery.on_fatal(run.payload)
                cls = PipelineConfigError if run.exit_code == EXIT_CONFIG else PipelineDegradedError
                raise self._failure(
                    cls, f"pipeline {self.pipeline_id} is degraded: {described}", run, recovery
                )
            if self.airflow_retries:
                raise self._failure(
                    PipelineTransientError,
                    f"pipeline {self.pipeline_id} failed with a transient error: {described}",
                    run,
                    recovery,
                )
            decision = recovery.on_failure(run.payload)
            if not decision.restart:
                raise self._failure(
                    PipelineDegradedError,
                    f"pipeline {self.pipeline_id} is degraded: {decision.reason}; last error: {described}",
                    run,
                    recovery,
                )
            threshold = self.resolve_deferral_threshold()
            if self.deferrable and decision.delay >= threshold:
                self.log.info(
                    "Restart attempt %d in %s: deferring to the triggerer",
                    decision.attempt,
                    format_duration(decision.delay),
                )
                self.defer(
                    trigger=PipelineRecoveryTrigger(
                        pipeline_id=self.pipeline_id,
                        state_dir=self._abs_state_dir,
                        start_at=decision.start_at,
                        attempt=decision.attempt,
                        delay=decision.delay.total_seconds(),
                        carry={"runs": runs},
                        not_before=not_before(threshold),
                    ),
                    method_name="execute_complete",
                )
            self.log.info(
                "Restart attempt %d in %s: waiting in the worker%s",
                decision.attempt,
                format_duration(decision.delay),
                f" (deferring pays from {format_duration(threshold)})" if self.deferrable else "",
            )
            if not wait_until(
                decision.start_at, clock=recovery.clock, stop_requested=lambda: state.stop_requested
            ):
                cancel_recovery(recovery)
                return self._finish(context, None, runs, outcome="cancelled")

    def _failure(
        self,
        cls: type[ConduitPipelineError],
        message: str,
        run: PipelineRun,
        recovery: PipelineRecovery,
    ) -> ConduitPipelineError:
        """The exception that ends the task after ``run`` (raised by the caller)."""
        return cls(
            message,
            pipeline_id=self.pipeline_id,
            state_dir=self._abs_state_dir,
            payload=run.exit_payload,
            recovery=recovery.policy,
        )

    def on_kill(self) -> None:
        if self._reattached:
            # Not our child process: ask the engine we reattached to for a graceful stop.
            self._state.request_stop()
        if "hook" in self.__dict__:
            self.hook.on_kill()

    def _stop_after_seconds(self) -> float | None:
        if self.mode != "continuous" or self.stop_after is None:
            return None
        return parse_duration(self.stop_after, name="stop_after").total_seconds()

    # results -------------------------------------------------------------------------------------
    def _log_run(self, run: PipelineRun) -> None:
        payload = run.exit_payload
        records = payload.records
        counts: tuple[object, ...] = (
            (
                records.read,
                records.acked,
                records.filtered,
                records.nacked,
                records.dlq,
                dict(records.written),
            )
            if records is not None
            else ("?", "?", "?", "?", "?", {})  # the run left no counters
        )
        self.log.info(
            "Pipeline %s run ended: %s (exit code %s, payload from %s) after %.1f s, %s batch(es); records "
            "read %s, acked %s, filtered %s, nacked %s, dlq %s, written %s",
            self.pipeline_id,
            payload.status,
            run.exit_code,
            run.payload_source,
            run.duration.total_seconds(),
            "?" if payload.batches is None else payload.batches,
            *counts,
        )
        if payload.error is not None:
            self.log.warning("Pipeline %s error: %s", self.pipeline_id, _describe(payload))

    def _finish(
        self,
        context: Context,
        payload: ExitPayload | None,
        runs: list[dict[str, Any]],
        *,
        outcome: str,
    ) -> dict[str, Any]:
        dlq = self._publish_dlq(context)
        restarts = max(0, len(runs) - 1)
        result: dict[str, Any]
        if payload is not None:
            result = payload.to_dict()
            records = result["records"]
        else:  # stopped while waiting to restart: no run to speak of
            result, records = {"pipeline": self.pipeline_id, "status": Status.STOPPED.value}, {}
        result.update({"outcome": outcome, "runs": runs, "restarts": restarts, "dlq": dlq})
        ti = context.get("ti")
        if ti is not None and self.do_xcom_push:
            ti.xcom_push(key="records", value=records)
            ti.xcom_push(key="restarts", value=restarts)
            ti.xcom_push(key="dlq", value=dlq)
        if outcome == "cancelled":
            self.log.info("Pipeline %s stopped while recovering (a stop was requested)", self.pipeline_id)
        else:
            self.log.info(
                "Pipeline %s stopped gracefully after %d run(s), %d restart(s)",
                self.pipeline_id,
                len(runs),
                restarts,
            )
        return result

    def _dlq_watched(self) -> bool:
        """Whether a live watcher announces this DLQ: the outlet carries one (``dlq_asset(..., watch=True)``),
        or a watcher declared elsewhere looked at the state dir within the last minute."""
        asset = dlq_asset(self.pipeline_id)
        in_outlets = any(getattr(o, "watchers", None) for o in self.outlets if _is_asset(o, asset))
        return in_outlets or dlq_batches.watched(self._state)

    def _publish_dlq(self, context: Context) -> dict[str, Any]:
        """The DLQ records not yet announced: set the asset event's extra, or drop the outlet if none.

        The ledger (``dlq_published.json``) is shared with the live watcher; when one follows this DLQ
        it announces every write, and this end-of-task event is left out so no record is announced twice.
        """
        state = self._state
        asset = dlq_asset(self.pipeline_id)
        watched = self.emit_dlq_asset and self._dlq_watched()
        with dlq_batches.announcing(state) as ledger:
            ranges = dlq_tools.added_ranges(state.dlq_dir, ledger)
            entries = dlq_tools.read_dlq(state.dlq_dir, ranges=ranges)
            summary = dlq_tools.summarize(entries)
            extra: dict[str, Any] = {
                "pipeline_id": self.pipeline_id,
                "path": str(state.dlq_dir),
                "files": ranges,
                **summary,
            }
            if not self.emit_dlq_asset:
                return extra
            if summary["records"] == 0 or watched:
                # No event for a run that put nothing into the DLQ (a DAG scheduled on it would run for
                # nothing), nor for one whose writes the watcher announces.
                self.outlets = [o for o in self.outlets if not _is_asset(o, asset)]
                if watched:
                    extra["announced_by"] = "watcher"
                return extra
            dag_run = context.get("dag_run")
            if dag_run is not None:
                extra["dag_run_id"] = getattr(dag_run, "run_id", None)
            outlet = next((o for o in self.outlets if _is_asset(o, asset)), asset)
            context["outlet_events"][outlet].extra = extra
            ledger.update({name: end for name, (_, end) in ranges.items()})
        self.log.warning(
            "Pipeline %s put %d record(s) into its DLQ (%s): error codes %s; asset event on %s",
            self.pipeline_id,
            summary["records"],
            state.dlq_dir,
            summary["error_codes"],
            asset.uri,
        )
        return extra


def _is_asset(outlet: Any, asset: Asset) -> bool:
    return isinstance(outlet, Asset) and outlet.uri == asset.uri


def _run_summary(run: PipelineRun) -> dict[str, Any]:
    payload = run.payload
    return {
        "exit_code": run.exit_code,
        "status": payload["status"],
        "error": payload["error"],
        "records": payload["records"],
        "submitted_at": run.submitted_at.isoformat(),
        "seconds": round(run.duration.total_seconds(), 3),
    }


def _describe(payload: ExitPayload) -> str:
    error = payload.error
    if error is None:
        return f"exit code {payload.exit_code}"
    where = f" at {error.node}" if error.node else ""
    return f"{error.kind} {error.code}{where}: {error.message}"


# The operator carries the link itself (Airflow 3 resolves it in the worker); naming the operator on the
# link lets the plugin listing show which operator it belongs to (set here: the plugin never imports the
# operators, which import the link).
ConduitPipelineLink.operators = [ConduitPipelineOperator]
