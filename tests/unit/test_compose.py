"""The docker-compose deployment, checked by its structure: no Docker engine runs here to start it.

``docker compose config`` is not used: the docker client here has no compose plugin. The file is parsed
with PyYAML (anchors and ``<<`` merges resolved as Compose does), the Dockerfile by its instructions,
and versions are compared with the pins in pyproject.toml rather than with literals.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml
from packaging.requirements import Requirement

REPO = Path(__file__).resolve().parents[2]
COMPOSE = REPO / "docker-compose.yaml"
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")
SPARK_SERVICES = ("spark-master", "spark-worker")
STATE_DIR = "/opt/conduit/state"
OUTPUT_DIR = "/opt/conduit/output"


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    return yaml.safe_load(COMPOSE.read_text())


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return compose["services"]


def pins() -> dict[str, str]:
    """``name -> version`` of every ``==`` pin in pyproject.toml's dependencies and extras."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    found = {}
    for requirement in [*project["dependencies"], *sum(project["optional-dependencies"].values(), [])]:
        parsed = Requirement(requirement)
        for spec in parsed.specifier:
            if spec.operator == "==":
                found[parsed.name] = spec.version
    return found


def dockerfile_instructions(path: Path) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        pending += " " + stripped.removesuffix("\\").strip()
        if stripped.endswith("\\"):
            continue
        keyword, _, arguments = pending.strip().partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
        pending = ""
    return instructions


def expand(text: str, args: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], text)


def build_of(service: dict[str, Any]) -> dict[str, Any]:
    build = service.get("build")
    assert isinstance(build, dict), f"no build section: {service}"
    return build


def env_of(service: dict[str, Any]) -> dict[str, str]:
    environment = service.get("environment") or {}
    assert isinstance(environment, dict), "environment as a mapping"
    return {key: str(value) for key, value in environment.items()}


def mounts(service: dict[str, Any]) -> dict[str, str]:
    """``target -> source`` of the service's short-syntax volumes."""
    found = {}
    for volume in service.get("volumes", []):
        source, target, *_ = volume.split(":")
        found[target] = source
    return found


def dockerfile(services: dict[str, dict[str, Any]]) -> Path:
    build = build_of(services["airflow-scheduler"])
    return (REPO / build["context"] / build["dockerfile"]).resolve()


def test_required_services(services: dict[str, dict[str, Any]]) -> None:
    for name in ("postgres", "airflow-init", *AIRFLOW_SERVICES, *SPARK_SERVICES):
        assert name in services, f"service {name} missing"
    commands = {name: services[name]["command"] for name in AIRFLOW_SERVICES}
    assert commands == {
        "airflow-apiserver": "api-server",
        "airflow-scheduler": "scheduler",
        "airflow-dag-processor": "dag-processor",
        "airflow-triggerer": "triggerer",
    }


def test_init_migrates_and_creates_a_user(services: dict[str, dict[str, Any]]) -> None:
    init = services["airflow-init"]
    script = "\n".join(init["command"]) if isinstance(init["command"], list) else init["command"]
    assert "airflow db migrate" in script
    assert "airflow users create" in script
    assert "--role Admin" in script
    assert init["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in AIRFLOW_SERVICES:
        depends = services[name]["depends_on"]
        assert depends["airflow-init"]["condition"] == "service_completed_successfully", name
        assert depends["postgres"]["condition"] == "service_healthy", name


def test_metadata_db_is_postgres_and_executor_local(services: dict[str, dict[str, Any]]) -> None:
    image = services["postgres"]["image"]
    assert re.fullmatch(r"postgres:1[56](\.\d+)*(-\w+)?", image), image
    assert "healthcheck" in services["postgres"]
    for name in (*AIRFLOW_SERVICES, "airflow-init"):
        env = env_of(services[name])
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor", name
        url = env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"]
        assert re.match(r"postgresql(\+\w+)?://[^@]+@postgres(:5432)?/\w+$", url), url
    # Tasks authenticate to the API server with tokens the scheduler signs: one secret for all.
    secrets = {env_of(services[name]).get("AIRFLOW__API_AUTH__JWT_SECRET") for name in AIRFLOW_SERVICES}
    assert len(secrets) == 1 and None not in secrets


def test_one_built_image_for_airflow_and_spark(services: dict[str, dict[str, Any]]) -> None:
    names = ("airflow-init", *AIRFLOW_SERVICES, *SPARK_SERVICES)
    images = {services[name]["image"] for name in names}
    assert len(images) == 1, images
    builds = {json.dumps(build_of(services[name]), sort_keys=True) for name in names}
    assert len(builds) == 1, builds
    assert dockerfile(services) == REPO / "docker" / "Dockerfile"
    assert dockerfile(services).is_file()
    assert (REPO / build_of(services["airflow-scheduler"])["context"]).resolve() == REPO


def test_dockerfile_installs_this_package_and_java(services: dict[str, dict[str, Any]]) -> None:
    instructions = dockerfile_instructions(dockerfile(services))
    build_args = build_of(services["airflow-scheduler"])["args"]
    # ARG defaults, overridden by the compose file's build args.
    args = {}
    for keyword, arguments in instructions:
        if keyword == "ARG" and "=" in arguments:
            name, _, default = arguments.partition("=")
            args[name] = default
    args.update({key: str(value) for key, value in build_args.items()})

    froms = [expand(arguments, args) for keyword, arguments in instructions if keyword == "FROM"]
    assert froms == [f"apache/airflow:{pins()['apache-airflow']}-python3.11"]
    runs = " ".join(arguments for keyword, arguments in instructions if keyword == "RUN")
    assert re.search(r"apt-get install [^&]*openjdk-17-jre-headless", runs)
    env = " ".join(arguments for keyword, arguments in instructions if keyword == "ENV")
    assert "JAVA_HOME=/usr/lib/jvm/java-17" in env
    copies = [arguments.split()[-2:] for keyword, arguments in instructions if keyword == "COPY"]
    assert [".", "/opt/airflow-conduit"] in copies
    install = re.search(r"pip install (.*?)(&&|$)", runs)
    assert install, runs
    assert '"/opt/airflow-conduit[spark,airflow]"' in install.group(1)
    # The image's Airflow is pinned in the same command, so pip cannot swap it.
    assert expand(install.group(1), args).count(f'"apache-airflow=={pins()["apache-airflow"]}"') == 1
    # The build fails when pyspark, pyspark-client or the jars are not SPARK_VERSION.
    assert 'docker/check_versions.py "${AIRFLOW_VERSION}" "${SPARK_VERSION}"' in runs
    # What the Dockerfile copies is in the build context, and the context leaves out the venv.
    for source, _ in copies:
        assert (REPO / source).exists(), source
    ignored = (REPO / ".dockerignore").read_text().split()
    assert ".venv" in ignored and ".git" in ignored


def test_spark_version_matches_the_pyspark_pins(services: dict[str, dict[str, Any]]) -> None:
    pinned = pins()
    assert pinned["pyspark"] == pinned["pyspark-client"]
    build_args = build_of(services["spark-master"])["args"]
    assert str(build_args["SPARK_VERSION"]) == pinned["pyspark"]
    assert str(build_args["AIRFLOW_VERSION"]) == pinned["apache-airflow"]
    defaults = dict(
        arguments.partition("=")[::2]
        for keyword, arguments in dockerfile_instructions(dockerfile(services))
        if keyword == "ARG" and "=" in arguments
    )
    assert defaults["SPARK_VERSION"] == pinned["pyspark"]
    for name in SPARK_SERVICES:
        image = services[name]["image"]
        if image.startswith("apache/spark:"):  # a stock Spark image would have to carry the same version
            assert image.split(":")[1].startswith(pinned["pyspark"]), image
        else:
            assert build_of(services[name])["args"]["SPARK_VERSION"] == build_args["SPARK_VERSION"]


@pytest.mark.parametrize(("spark", "status"), [(None, 0), ("0.0.1", 1)])
def test_the_image_version_check(spark: str | None, status: int) -> None:
    """docker/check_versions.py, as the image build runs it, against this venv's real installation."""
    pinned = pins()
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "docker" / "check_versions.py"),
            pinned["apache-airflow"],
            spark or pinned["pyspark"],
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == status, result.stderr
    if status:
        assert "pyspark is" in result.stderr and "no spark-core jar of 0.0.1" in result.stderr


def test_spark_cluster_wiring(services: dict[str, dict[str, Any]]) -> None:
    master = services["spark-master"]["command"]
    worker = services["spark-worker"]["command"]
    assert master[:2] == ["spark-class", "org.apache.spark.deploy.master.Master"]
    assert worker[:2] == ["spark-class", "org.apache.spark.deploy.worker.Worker"]
    host, port = master[master.index("--host") + 1], master[master.index("--port") + 1]
    url = f"spark://{host}:{port}"
    assert worker[2] == url
    assert services["spark-master"]["hostname"] == host
    assert services["spark-worker"]["depends_on"]["spark-master"]["condition"] == "service_healthy"
    # The Airflow side submits to that master through the Spark provider's default connection.
    for name in AIRFLOW_SERVICES:
        connection = json.loads(env_of(services[name])["AIRFLOW_CONN_SPARK_DEFAULT"])
        assert connection == {"conn_type": "spark", "host": url}, name


def test_driver_reachable_from_the_executors(services: dict[str, dict[str, Any]]) -> None:
    """Tasks (LocalExecutor) and so the client-mode driver run in the scheduler: its Spark conf makes
    the driver advertise the scheduler's host name instead of loopback."""
    scheduler = services["airflow-scheduler"]
    conf_dir = env_of(scheduler)["SPARK_CONF_DIR"]
    copies = [
        arguments.split()[-2:]
        for keyword, arguments in dockerfile_instructions(dockerfile(services))
        if keyword == "COPY"
    ]
    sources = {target: source for source, target in copies}
    conf_file = REPO / sources[f"{conf_dir}/spark-defaults.conf"]
    settings = dict(
        line.split(None, 1)
        for line in conf_file.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    )
    assert settings["spark.driver.host"].strip() == scheduler["hostname"]
    assert settings["spark.driver.bindAddress"].strip() == "0.0.0.0"


def test_state_and_output_volumes_shared(
    compose: dict[str, Any], services: dict[str, dict[str, Any]]
) -> None:
    declared = compose["volumes"]
    sharing = (*AIRFLOW_SERVICES, "spark-worker")
    for target in (STATE_DIR, OUTPUT_DIR):
        sources = {mounts(services[name]).get(target) for name in sharing}
        assert len(sources) == 1 and None not in sources, (target, sources)
        (source,) = sources
        assert source in declared, f"{source} is not a named volume"
    for name in AIRFLOW_SERVICES:
        env = env_of(services[name])
        # The example DAGs read these; they must point into the shared volumes.
        assert env["CONDUIT_STATE_DIR"] == STATE_DIR, name
        assert env["CONDUIT_OUTPUT_DIR"] == OUTPUT_DIR, name


def test_dags_mounted(services: dict[str, dict[str, Any]]) -> None:
    dags = REPO / "dags"
    assert sorted(p.name for p in dags.glob("conduit_*.py")), "no example DAGs"
    for name in AIRFLOW_SERVICES:
        folder = env_of(services[name])["AIRFLOW__CORE__DAGS_FOLDER"]
        assert (REPO / mounts(services[name])[folder]).resolve() == dags, name
    # The worker's executors import custom.python modules from paths under the DAGs folder.
    assert (REPO / mounts(services["spark-worker"])["/opt/airflow/dags"]).resolve() == dags


def test_conduit_config_options_exist(services: dict[str, dict[str, Any]]) -> None:
    from airflow_conduit.get_provider_info import get_provider_info

    options = get_provider_info()["config"]["conduit"]["options"]
    for name in AIRFLOW_SERVICES:
        set_here = {
            key.removeprefix("AIRFLOW__CONDUIT__").lower()
            for key in env_of(services[name])
            if key.startswith("AIRFLOW__CONDUIT__")
        }
        assert set_here, name
        assert set_here <= options.keys(), set_here - options.keys()
