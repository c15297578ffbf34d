"""airflow-conduit against streaming peers, each job a whole process with its own recovery switched on.

The job is the same for every system: N JSON lines of ``{"id", "kind", "amount", "sku"}`` in 8 files in
one directory -> decode -> add ``env = "prod"`` -> JSON lines out. Each system runs as a process of its
own, timed from spawn to exit (the JVM or runtime start, the plan, the run and the shutdown are all on
the clock), rounds alternating between the systems (the order rotates each round):

- **pathway**: Pathway 0.33.0, ``pw.io.jsonlines.read(mode="static")`` -> ``pw.io.jsonlines.write``,
  persistence on (filesystem backend), 2 worker threads;
- **flink**: Apache Flink 2.3.0's Python Table API in streaming mode, filesystem source and sink (json
  format), exactly-once checkpoints every 5 s, parallelism 2 (the source is bounded: the job ends when
  the files are read, with a final checkpoint that publishes the sink's last files);
- **bare**: the bare Spark batch job of ``whole_process.py`` (read with a schema, add a column, write
  JSON), no guarantees, for reference;
- **conduit**: ``airflow-conduit run --until-idle`` of file -> json.decode -> field.set -> builtin:file
  with the default OpenCDC output;
- **conduit-payload**: the same with payload-only lines (``sdk.record.format: template`` and
  ``{{ toJson .Payload.After }}``).

The peers' jobs are in ``benchmarks/peers/`` and run under ``.venv-peers/bin/python`` (``make
bench-peers`` creates that venv, so ``make test`` never installs the peers); this script runs under
``.venv/bin/python``. Every output's line count must equal N and its first line must hold the record with
``env = "prod"``, or the script stops with an error. It prints, per system, the median seconds, records/s,
the peak memory of the whole process tree (the process and all its children, each one's proportional
set size summed, so shared pages count once; sampled every 100 ms) and airflow-conduit's rate divided by the system's (> 1: ahead).

    .venv/bin/python benchmarks/peers.py [--records N] [--repeat K] [--systems pathway,flink,...]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml
from throughput import DATA_SCHEMA, PIPELINE, make_data
from whole_process import BARE_JOB

from airflow_conduit.engine.connectors.file import count_lines, is_visible

HERE = Path(__file__).resolve().parent
VENV_BIN = Path(sys.executable).parent
PEERS_PYTHON = HERE.parent / ".venv-peers" / "bin" / "python"
PEER_JOBS = HERE / "peers"
FILES = 8
PAYLOAD_TEMPLATE = "{{ toJson .Payload.After }}"
"""``printf "%s"`` of a structured payload prints Go's ``map[amount:... env:prod ...]``, not JSON."""
SAMPLE_SECONDS = 0.1


@dataclass(frozen=True)
class Run:
    """One system's job: its command line and the environment it adds."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class System:
    key: str
    label: str
    prepare: Callable[[Path, Path, Path, Path], Run]
    """(work dir, source dir, target dir, state dir) -> the run."""
    record: Callable[[dict[str, Any]], dict[str, Any]]
    """One parsed output line -> the record's fields."""


@dataclass
class Result:
    seconds: list[float] = field(default_factory=list)
    peak_pss: list[int] = field(default_factory=list)


def pathway(work: Path, source: Path, target: Path, state: Path) -> Run:
    target.mkdir(parents=True)
    script = PEER_JOBS / "pathway_job.py"
    argv = [str(PEERS_PYTHON), str(script), str(source), str(target / "out.jsonl"), str(state)]
    return Run(argv, {"PATHWAY_THREADS": "2"})


def flink(work: Path, source: Path, target: Path, state: Path) -> Run:
    return Run([str(PEERS_PYTHON), str(PEER_JOBS / "flink_job.py"), str(source), str(target), str(state)])


def bare(work: Path, source: Path, target: Path, state: Path) -> Run:
    script = work / "bare_job.py"
    script.write_text(BARE_JOB.format(schema=DATA_SCHEMA))
    return Run([sys.executable, str(script), str(source), str(target), "plain"])


def pipeline_text(source: Path, target: Path, payload_only: bool) -> str:
    """throughput.py's pipeline, reading the directory; payload-only output through a template."""
    document = yaml.safe_load(PIPELINE.format(id="peers", source=source, target=target, extra=""))
    if payload_only:
        destination = document["pipelines"][0]["connectors"][1]
        destination["settings"]["sdk.record.format"] = "template"
        destination["settings"]["sdk.record.format.options"] = PAYLOAD_TEMPLATE
    return yaml.safe_dump(document, sort_keys=False)


def conduit_run(work: Path, source: Path, target: Path, state: Path, payload_only: bool) -> Run:
    pipeline = work / f"pipeline{'-payload' if payload_only else ''}.yaml"
    pipeline.write_text(pipeline_text(source, target, payload_only))
    cli = str(VENV_BIN / "airflow-conduit")
    return Run([cli, "run", str(pipeline), "--until-idle", "--state-dir", str(state)])


def conduit(work: Path, source: Path, target: Path, state: Path) -> Run:
    return conduit_run(work, source, target, state, payload_only=False)


def conduit_payload(work: Path, source: Path, target: Path, state: Path) -> Run:
    return conduit_run(work, source, target, state, payload_only=True)


def as_is(line: dict[str, Any]) -> dict[str, Any]:
    return line


def opencdc_after(line: dict[str, Any]) -> dict[str, Any]:
    return line["payload"]["after"]


def pathway_record(line: dict[str, Any]) -> dict[str, Any]:
    """Pathway reserves the column name ``id``: the job reads it into ``order_id``."""
    return {**line, "id": line["order_id"]}


SYSTEMS = {
    system.key: system
    for system in (
        System("conduit", "airflow-conduit, OpenCDC lines", conduit, opencdc_after),
        System("conduit-payload", "airflow-conduit, payload-only lines", conduit_payload, as_is),
        System("pathway", "Pathway 0.33.0, persistence", pathway, pathway_record),
        System("flink", "Flink 2.3.0, exactly-once checkpoints", flink, as_is),
        System("bare", "bare Spark batch job, no guarantees", bare, as_is),
    )
}


def write_data(source: Path, records: int) -> int:
    """throughput.make_data's lines, split in order into FILES files of about equal line counts."""
    whole = source.parent / "all.jsonl"
    size = make_data(whole, records)
    source.mkdir()
    outputs = [(source / f"part-{i}.jsonl").open("w") for i in range(FILES)]
    with whole.open() as lines:
        for number, line in enumerate(lines):
            outputs[number * FILES // records].write(line)
    for output in outputs:
        output.close()
    whole.unlink()
    return size


def tree_pss(process: psutil.Process) -> int:
    """The memory of a process and all its descendants (those that exit meanwhile count 0): each one's
    proportional set size, so pages shared between processes (Spark's forked Python workers, a JVM's
    shared libraries) count once in all, as they take memory once."""
    total = 0
    try:
        family = [process, *process.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            total += member.memory_full_info().pss
    return total


class PeakPss:
    """The highest tree PSS of a process, sampled every SAMPLE_SECONDS on a thread until stopped."""

    def __init__(self, process: psutil.Process) -> None:
        self.process = process
        self.peak = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while True:
            self.peak = max(self.peak, tree_pss(self.process))
            if self._done.wait(SAMPLE_SECONDS):
                return

    def stop(self) -> int:
        self._done.set()
        self._thread.join()
        return self.peak


def timed(run: Run, log: Path) -> tuple[float, int, int]:
    """Spawn the run, wait for its exit: (seconds, peak tree PSS in bytes, exit code)."""
    env = {**os.environ, **run.env}
    with log.open("w") as out:
        started = time.perf_counter()
        process = psutil.Popen(run.argv, stdout=out, stderr=subprocess.STDOUT, env=env)
        peak = PeakPss(process)
        code = process.wait()
        elapsed = time.perf_counter() - started
    return elapsed, peak.stop(), code


def visible_files(target: Path) -> list[Path]:
    """The output files a reader would take: none under a name starting with ``_`` or ``.`` (in-progress
    files, markers, checksums, Spark's ``_SUCCESS``)."""
    return sorted(
        path
        for path in target.rglob("*")
        if path.is_file() and all(is_visible(part) for part in path.relative_to(target).parts)
    )


def check_output(system: System, target: Path, records: int) -> None:
    """Exit with an error unless the output holds exactly ``records`` lines and its first line is the
    decoded record with ``env = "prod"``."""
    files = visible_files(target)
    lines = sum(count_lines(str(path), 0, path.stat().st_size) for path in files)
    if lines != records:
        sys.exit(f"{system.key}: {lines:,} lines in {target}, expected {records:,}")
    first = next(path for path in files if path.stat().st_size)
    with first.open() as fh:
        line = fh.readline()
    record = system.record(json.loads(line))
    if record.get("env") != "prod" or not {"id", "kind", "amount", "sku"} <= record.keys():
        sys.exit(f"{system.key}: unexpected output line {line.strip()!r}")


def run_once(system: System, work: Path, source: Path, records: int) -> tuple[float, int]:
    target, state = work / f"out-{system.key}", work / f"state-{system.key}"
    for path in (target, state):
        shutil.rmtree(path, ignore_errors=True)
    log = work / f"{system.key}.log"
    elapsed, peak, code = timed(system.prepare(work, source, target, state), log)
    if code != 0:
        tail = log.read_text(errors="replace")[-4000:]
        sys.exit(f"{system.key} failed (exit {code}):\n{tail}")
    check_output(system, target, records)
    for path in (target, state):  # 10M records leave GBs of output and state behind
        shutil.rmtree(path, ignore_errors=True)
    return elapsed, peak


def report(results: dict[str, Result], records: int) -> None:
    rate = {key: records / statistics.median(result.seconds) for key, result in results.items()}
    ours = [key for key in ("conduit", "conduit-payload") if key in rate]
    header = f"{'system':<44} {'median s':>8} {'records/s':>10} {'peak tree PSS':>13}"
    header += "".join(f"  {'ours (' + key + ') / it':>26}" for key in ours)
    print(header)
    for key, result in results.items():
        row = f"{SYSTEMS[key].label:<44} {statistics.median(result.seconds):8.1f} {rate[key]:>10,.0f} "
        row += f"{max(result.peak_pss) / 2**20:>9,.0f} MiB"
        row += "".join(f"  {rate[mine] / rate[key]:>25.2f}x" for mine in ours)
        print(row)
    print("rounds, seconds:", {key: [round(s, 1) for s in r.seconds] for key, r in results.items()})
    print("rounds, peak MiB:", {key: [round(p / 2**20) for p in r.peak_pss] for key, r in results.items()})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="comma-separated, of: %(default)s")
    args = parser.parse_args()
    chosen = [SYSTEMS[key] for key in args.systems.split(",")]
    if any(s.key in ("pathway", "flink") for s in chosen) and not PEERS_PYTHON.exists():
        sys.exit(f"{PEERS_PYTHON} is missing: run make bench-peers (it creates .venv-peers)")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    work = Path(tempfile.mkdtemp(prefix="conduit-peers-"))
    source = work / "in"
    size = write_data(source, args.records)
    print(
        f"{args.records:,} JSON lines, {size / 1e6:.0f} MB in {FILES} files; {args.repeat} alternating "
        f"rounds, whole processes; load average {os.getloadavg()[0]:.1f}",
        flush=True,
    )
    results = {system.key: Result() for system in chosen}
    for round_ in range(args.repeat):
        for system in chosen[round_ % len(chosen) :] + chosen[: round_ % len(chosen)]:
            elapsed, peak = run_once(system, work, source, args.records)
            results[system.key].seconds.append(elapsed)
            results[system.key].peak_pss.append(peak)
            print(
                f"  round {round_ + 1} {system.key:<16} {elapsed:6.1f} s  {peak / 2**20:6,.0f} MiB",
                flush=True,
            )
    print(f"load average at the end {os.getloadavg()[0]:.1f}")
    report(results, args.records)
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
