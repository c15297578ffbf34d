"""Loading and validating pipeline files: the model, defaults, and one test per kind of issue."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from airflow_conduit.config import (
    PLUGINS,
    ConfigError,
    ConfigIssue,
    DLQConfig,
    load_pipeline_file,
    load_pipeline_text,
)
from airflow_conduit.config.settings import DEFAULT_MAX_RECORDS_PER_BATCH, LogDestinationSettings
from airflow_conduit.config.spec import PluginSettings


def conduit(settings: PluginSettings) -> dict[str, Any]:
    """Validated settings as Conduit spells them (the config keeps the typed model), without the SDK's
    ``sdk.*`` settings every connector takes (their defaults are tested in test_sdk_settings.py)."""
    return {k: v for k, v in settings.model_dump(by_alias=True).items() if not k.startswith("sdk.")}


VALID = """\
version: "2.2"
pipelines:
  - id: orders
    description: orders to the lake
    connectors:
      - id: gen
        type: source
        plugin: builtin:generator
        settings:
          recordCount: "10"
          format.options.id: int
          format.options.kind: string
      - id: out
        type: destination
        plugin: builtin:file
        settings:
          path: /tmp/out
        processors:
          - id: drop-x
            plugin: field.exclude
            settings: {fields: .Metadata.x}
    processors:
      - id: tag
        plugin: field.set
        condition: .Payload.After.kind = 'refund'
        workers: 4
        settings: {field: .Metadata.env, value: prod}
  - id: audit
    status: stopped
    name: Audit trail
    connectors:
      - {id: gen, type: source, plugin: builtin:generator}
      - {id: log, type: destination, plugin: builtin:log, settings: {level: debug}}
    dead-letter-queue:
      plugin: builtin:file
      settings: {path: /tmp/dlq}
      window-size: 5
      window-nack-threshold: 2
"""


def load(text: str, env: dict[str, str] | None = None, label: str = "p.yaml"):
    return load_pipeline_text(textwrap.dedent(text), label, env or {})


def issues(text: str, env: dict[str, str] | None = None) -> list[ConfigIssue]:
    with pytest.raises(ConfigError) as caught:
        load(text, env)
    return caught.value.issues


def warnings_of(text: str, env: dict[str, str] | None = None) -> list[ConfigIssue]:
    """The file loads (as Conduit's would) and says what Conduit would warn about."""
    return list(load(text, env).warnings)


def issue_at(found: list[ConfigIssue], path: str) -> ConfigIssue:
    matches = [i for i in found if i.field_path == path]
    assert matches, f"no issue at {path}; got:\n" + "\n".join(map(str, found))
    return matches[0]


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """1-based line of the nth line containing ``needle``: keeps expected line numbers honest."""
    hits = [n for n, line in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in line]
    return hits[nth - 1]


def pipeline(connectors: str = "", processors: str = "", extra: str = "") -> str:
    """A valid one-pipeline file; ``connectors`` replaces the default source+destination."""
    connectors = connectors or (
        "      - {id: src, type: source, plugin: builtin:generator}\n"
        "      - {id: dst, type: destination, plugin: builtin:log}\n"
    )
    text = 'version: "2.2"\npipelines:\n  - id: p\n    connectors:\n' + connectors
    if processors:
        text += "    processors:\n" + processors
    return text + extra


# --- valid files ---------------------------------------------------------------------------------------


def test_valid_file_loads_with_ids_node_ids_and_defaults() -> None:
    result = load(VALID)
    assert result.version == "2.2"
    assert result.path == "p.yaml"
    assert [p.id for p in result.pipelines] == ["orders", "audit"]

    orders = result.get("orders")
    assert (orders.status, orders.name, orders.description) == ("running", "orders", "orders to the lake")
    assert orders.field_path == "pipelines[0]" and orders.line == 3
    gen, out = orders.connectors
    assert (gen.node_id, out.node_id) == ("orders:gen", "orders:out")
    assert gen.name == "gen" and gen.line == line_of(VALID, "id: gen")
    assert orders.sources == (gen,) and orders.destinations == (out,)
    assert conduit(gen.settings) == {
        "recordCount": 10,
        "rate": 0.0,
        "collections": {},
        "burst.sleepTime": 0.0,
        "burst.generateTime": 1.0,
        "operations": "create",
        "format.type": "structured",
        "format.options": {"id": "int", "kind": "string"},
        "seed": 0,
        "maxRecordsPerBatch": DEFAULT_MAX_RECORDS_PER_BATCH,
    }
    assert conduit(out.settings) == {"path": "/tmp/out", "namespace": ".*"}
    (drop,) = out.processors
    assert drop.node_id == "orders:out:drop-x" and drop.workers == 1
    assert drop.field_path == "pipelines[0].connectors[1].processors[0]"
    (tag,) = orders.processors
    assert tag.node_id == "orders:tag" and tag.workers == 4
    assert tag.condition == "try_variant_get(after, '$.kind', 'string') = 'refund'"
    assert tag.condition_source == ".Payload.After.kind = 'refund'"
    assert orders.dlq == DLQConfig(
        plugin="builtin:log",
        settings=LogDestinationSettings.model_validate(
            {"level": "warn", "message": "record delivery failed", "namespace": ".*"}
        ),
        window_size=1,
        window_nack_threshold=0,
        field_path="pipelines[0].dead-letter-queue",
        line=None,
    )

    audit = result.get("audit")
    assert (audit.status, audit.name) == ("stopped", "Audit trail")
    assert conduit(audit.connectors[0].settings)["recordCount"] == -1
    assert conduit(audit.connectors[0].settings)["format.options"] == {"id": "int", "name": "string"}
    assert conduit(audit.connectors[1].settings) == {
        "level": "debug",
        "message": "",
        "namespace": ".*",
    }
    assert audit.dlq.plugin == "builtin:file"
    assert (audit.dlq.window_size, audit.dlq.window_nack_threshold) == (5, 2)
    assert conduit(audit.dlq.settings) == {"path": "/tmp/dlq", "namespace": ".*"}


def test_load_pipeline_file_reads_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(VALID)
    assert [p.id for p in load_pipeline_file(path, env={}).pipelines] == ["orders", "audit"]


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_pipeline_file(tmp_path / "nope.yaml")


V1 = """\
version: 1.0
pipelines:
  pipeline1:
    status: running
    connectors:
      con1:
        type: source
        plugin: builtin:generator
        settings:
          recordCount: 5
      con2:
        type: destination
        plugin: builtin:log
        processors:
          proc2:
            type: filter
    processors:
      proc1:
        type: field.set
        settings:
          field: .Metadata.a
          value: b
"""


def test_v1_mapping_form_loads() -> None:
    result = load(V1)
    assert result.version == "1.0"
    (p,) = result.pipelines
    assert p.id == "pipeline1" and p.field_path == "pipelines.pipeline1"
    assert [c.id for c in p.connectors] == ["con1", "con2"]
    assert p.connectors[1].field_path == "pipelines.pipeline1.connectors.con2"
    assert p.connectors[1].processors[0].node_id == "pipeline1:con2:proc2"
    assert p.connectors[1].processors[0].plugin == "filter"
    assert p.processors[0].plugin == "field.set" and p.processors[0].node_id == "pipeline1:proc1"


def test_v1_mapping_form_paths_use_keys() -> None:
    text = V1.replace("plugin: builtin:log", "plugin: builtin:nope")
    found = issue_at(issues(text), "pipelines.pipeline1.connectors.con2.plugin")
    assert found.line == line_of(text, "builtin:nope")


def test_mapping_form_is_rejected_in_v2() -> None:
    text = V1.replace("version: 1.0", 'version: "2.2"')
    assert "only accepted in version 1.x" in issue_at(issues(text), "pipelines").message


def test_processor_plugin_wins_over_deprecated_type() -> None:
    text = pipeline(processors="      - {id: f, type: error, plugin: filter}\n")
    assert load(text).pipelines[0].processors[0].plugin == "filter"


# --- environment ---------------------------------------------------------------------------------------


def test_env_substitution_and_default() -> None:
    text = pipeline(
        connectors=(
            "      - id: src\n        type: source\n        plugin: builtin:generator\n"
            "        settings: {recordCount: '${COUNT}', collections: '${COLL:-orders}'}\n"
            "      - {id: dst, type: destination, plugin: builtin:file, settings: {path: '${OUT}/x'}}\n"
        )
    )
    result = load(text, env={"COUNT": "7", "OUT": "/data"})
    src, dst = result.pipelines[0].connectors
    assert conduit(src.settings)["recordCount"] == 7 and src.settings.collection_list == "orders"
    assert conduit(dst.settings)["path"] == "/data/x"


def test_unset_env_variable_expands_to_empty_with_a_warning() -> None:
    # Conduit expands with Go's os.ExpandEnv: an unset variable is the empty string, without a word.
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - id: dst\n        type: destination\n        plugin: builtin:file\n"
            "        settings:\n          path: /data${OUT_DIR}/x\n"
        )
    )
    result = load(text)
    assert conduit(result.pipelines[0].connectors[1].settings)["path"] == "/data/x"
    [found] = result.warnings
    assert (found.field_path, found.line) == (
        "pipelines[0].connectors[1].settings.path",
        line_of(text, "OUT_DIR"),
    )
    assert found.message.startswith("environment variable OUT_DIR is not set, so it expands to the empty")


def test_env_expansion_follows_go_os_expandenv() -> None:
    text = pipeline(
        connectors=(
            "      - id: src\n        type: source\n        plugin: builtin:generator\n"
            "        settings: {recordCount: $COUNT, collections: 'a$$b'}\n"
            "      - {id: dst, type: destination, plugin: builtin:log, settings: {namespace: '^refunds$'}}\n"
        )
    )
    result = load(text, env={"COUNT": "3"})
    src, dst = result.pipelines[0].connectors
    # $NAME without braces expands; $$ is the shell's pid variable to Go (unset: empty); a trailing $ stays.
    assert conduit(src.settings)["recordCount"] == 3 and src.settings.collection_list == "ab"
    assert conduit(dst.settings)["namespace"] == "^refunds$"
    assert [w.message.split(",")[0] for w in result.warnings] == ["environment variable $ is not set"]


# --- issues --------------------------------------------------------------------------------------------


def test_unknown_plugin_lists_known_plugins() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - id: dst\n        type: destination\n        plugin: builtin:x\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].connectors[1].plugin")
    assert found.line == line_of(text, "builtin:x")
    assert (
        found.message
        == "unknown plugin 'builtin:x' (known: builtin:file, builtin:generator, builtin:log, builtin:postgres, builtin:s3, custom.python, standalone:nats, standalone:rabbitmq, standalone:redis)"
    )


def test_unknown_processor_plugin() -> None:
    text = pipeline(processors="      - id: js\n        plugin: custom.lua\n")
    found = issue_at(issues(text), "pipelines[0].processors[0].plugin")
    assert found.line == line_of(text, "custom.lua")
    assert "unknown plugin 'custom.lua'" in found.message and "field.set" in found.message


def test_bad_connector_type() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - id: dst\n        type: sink\n        plugin: builtin:log\n"
        )
    )
    found = issues(text)
    bad = issue_at(found, "pipelines[0].connectors[1].type")
    assert bad.line == line_of(text, "type: sink")
    assert "source or destination" in bad.message and "'sink'" in bad.message
    # The missing destination follows from the typo: not reported twice.
    assert len(found) == 1


def test_source_plugin_used_as_destination() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - id: dst\n        type: destination\n        plugin: builtin:generator\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].connectors[1].plugin")
    assert found.line == line_of(text, "plugin: builtin:generator", 2)
    assert "is a source connector" in found.message


def test_duplicate_ids_reported_at_the_second() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - {id: dst, type: destination, plugin: builtin:log}\n"
        ),
        processors="      - id: dst\n        plugin: filter\n",
    )
    found = issue_at(issues(text), "pipelines[0].processors[0].id")
    assert found.line == line_of(text, "      - id: dst")
    assert "duplicate processor id 'dst'" in found.message
    assert "pipelines[0].connectors[1].id" in found.message


def test_duplicate_pipeline_ids() -> None:
    text = VALID.replace("  - id: audit", "  - id: orders")
    found = issue_at(issues(text), "pipelines[1].id")
    assert found.line == line_of(text, "- id: orders", 2)
    assert "duplicate pipeline id 'orders'" in found.message


@pytest.mark.parametrize(
    ("connector", "missing"),
    [
        ("{id: dst, type: destination, plugin: builtin:log}", "source"),
        ("{id: src, type: source, plugin: builtin:generator}", "destination"),
    ],
)
def test_a_pipeline_without_a_source_or_destination_loads_with_a_warning_but_cannot_run(
    connector: str, missing: str
) -> None:
    # Conduit provisions such a pipeline and fails when it starts it.
    text = pipeline(connectors=f"      - {connector}\n")
    [warning] = warnings_of(text)
    assert warning.field_path == "pipelines[0].connectors"
    assert warning.line == line_of(text, "connectors:")
    assert warning.message == f"pipeline 'p' has no {missing} connector: it cannot run"
    assert (
        load(text).pipelines[0].cannot_run() == f"pipeline 'p' has no {missing} connector; add one to run it"
    )


def test_dlq_window_size_must_exceed_threshold() -> None:
    text = pipeline(extra="    dead-letter-queue:\n      window-size: 2\n      window-nack-threshold: 2\n")
    found = issue_at(issues(text), "pipelines[0].dead-letter-queue.window-nack-threshold")
    assert found.line == line_of(text, "window-nack-threshold")
    assert "less than window-size (2)" in found.message


def test_dlq_window_size_zero_takes_every_nack() -> None:
    text = pipeline(extra="    dead-letter-queue:\n      window-size: 0\n      window-nack-threshold: 9\n")
    assert load(text).pipelines[0].dlq.window_size == 0


def test_dlq_plugin_must_be_a_destination() -> None:
    text = pipeline(extra="    dead-letter-queue:\n      plugin: builtin:generator\n")
    found = issue_at(issues(text), "pipelines[0].dead-letter-queue.plugin")
    assert found.line == line_of(text, "plugin: builtin:generator", 2)
    assert (
        "(known: builtin:file, builtin:log, builtin:postgres, builtin:s3, custom.python, standalone:nats, standalone:rabbitmq, standalone:redis)"
        in found.message
    )


def test_condition_that_does_not_parse() -> None:
    text = pipeline(
        processors="      - id: f\n        plugin: filter\n        condition: .Payload.After.x = = 1\n"
    )
    found = issue_at(issues(text), "pipelines[0].processors[0].condition")
    assert found.line == line_of(text, "condition:")
    assert "not a valid Spark SQL expression" in found.message


def test_go_template_conditions_as_in_conduit() -> None:
    def condition(template: str) -> str:
        return pipeline(
            processors=f"      - id: f\n        plugin: filter\n        condition: '{template}'\n"
        )

    translated = load(condition('{{ eq .Metadata.foo "bar" }}')).pipelines[0].processors[0]
    assert translated.condition == "(coalesce(metadata['foo'], '') = 'bar')"
    assert translated.condition_template is None
    assert translated.condition_source == '{{ eq .Metadata.foo "bar" }}'
    per_record = load(condition('{{ eq .Payload.After.kind "refund" }}')).pipelines[0].processors[0]
    assert per_record.condition is None
    assert per_record.condition_template == '{{ eq .Payload.After.kind "refund" }}'
    text = condition('{{ eq .Metadata.foo "bar" }')
    found = issue_at(issues(text), "pipelines[0].processors[0].condition")
    assert found.line == line_of(text, "condition:")
    assert found.message == "not a valid Go template: template: line 1: unclosed action"


def test_templated_settings_are_parsed_at_validate() -> None:
    text = pipeline(
        processors=(
            "      - id: s\n        plugin: field.set\n"
            "        settings: {field: .Operation, value: '{{ .Metadata.op }}'}\n"
            "      - id: e\n        plugin: error\n        settings: {message: '{{ nosuch .Key }}'}\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].processors[1].settings.message")
    assert found.message == 'not a valid Go template: template: function "nosuch" not defined'
    assert all(i.field_path != "pipelines[0].processors[0].settings.value" for i in issues(text))


def test_custom_python_that_cannot_be_imported() -> None:
    text = pipeline(
        processors=(
            "      - id: py\n        plugin: custom.python\n        settings:\n"
            "          function: no_such_module_xyz:fn\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].processors[0].settings.function")
    assert found.line == line_of(text, "function:")
    assert found.message.startswith("cannot import 'no_such_module_xyz:fn': ModuleNotFoundError")


def test_custom_python_missing_callable(tmp_path: Path) -> None:
    (tmp_path / "tf_missing_attr.py").write_text("x = 1\n")
    text = pipeline(
        processors=(
            "      - id: py\n        plugin: custom.python\n        settings:\n"
            f"          function: tf_missing_attr:nope\n          path: {tmp_path}\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].processors[0].settings.function")
    assert "AttributeError" in found.message


def test_custom_python_relative_path_imports(tmp_path: Path) -> None:
    (tmp_path / "udfs").mkdir()
    (tmp_path / "udfs" / "tf_conf_ok.py").write_text("def mask(record):\n    return record\n")
    text = pipeline(
        processors=(
            "      - id: py\n        plugin: custom.python\n        settings:\n"
            "          function: tf_conf_ok:mask\n          path: udfs\n"
        )
    )
    path = tmp_path / "p.yaml"
    path.write_text(text)
    before = list(sys.path)
    (proc,) = load_pipeline_file(path, env={}).pipelines[0].processors
    assert conduit(proc.settings) == {"function": "tf_conf_ok:mask", "path": str(tmp_path / "udfs")}
    assert sys.path == before


def test_custom_python_same_module_from_two_paths(tmp_path: Path) -> None:
    """One process imports a module once: the second path's module would never run."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "tf_twice.py").write_text(f"def fn(record):\n    return {name!r}\n")
    step = "      - id: {id}\n        plugin: custom.python\n        settings:\n"
    step += "          function: tf_twice:fn\n          path: {path}\n"
    text = pipeline(
        processors=step.format(id="one", path=tmp_path / "a")
        + step.format(id="same", path=tmp_path / "a")
        + step.format(id="other", path=tmp_path / "b")
    )
    [found] = issues(text)
    assert found.field_path == "pipelines[0].processors[2].settings.function"
    assert found.line == line_of(text, "function:", 3)
    assert f"module 'tf_twice' comes from {tmp_path / 'b'} here but from {tmp_path / 'a'}" in found.message
    assert "at pipelines[0].processors[0].settings.function" in found.message


def test_missing_required_setting() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - id: dst\n        type: destination\n        plugin: builtin:file\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].connectors[1].settings.path")
    assert found.line == line_of(text, "      - id: dst")
    assert found.message == "required setting 'path' is missing"


def test_mistyped_setting() -> None:
    text = pipeline(
        connectors=(
            "      - id: src\n        type: source\n        plugin: builtin:generator\n"
            "        settings:\n          recordCount: lots\n"
            "      - {id: dst, type: destination, plugin: builtin:log}\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].connectors[0].settings.recordCount")
    assert found.line == line_of(text, "recordCount")
    assert "valid integer" in found.message and "'lots'" in found.message


def test_unknown_setting_key() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - id: dst\n        type: destination\n        plugin: builtin:log\n"
            "        settings:\n          colour: red\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].connectors[1].settings.colour")
    assert found.line == line_of(text, "colour")
    assert (
        found.message == "unknown setting 'colour' for builtin:log (known: level, message, namespace, sdk.*)"
    )


def test_unknown_top_level_field_is_a_warning() -> None:
    text = pipeline() + "foo: 1\n"
    found = issue_at(warnings_of(text), "foo")
    assert found.line == line_of(text, "foo: 1")
    assert (
        found.message == "unknown field 'foo' is ignored, as Conduit ignores it (known: version, pipelines)"
    )


def test_unknown_pipeline_connector_processor_and_dlq_fields_are_warnings() -> None:
    text = (
        pipeline(processors="      - {id: f, plugin: filter, condtion: x}\n")
        .replace("    connectors:", "    conectors: []\n    connectors:")
        .replace("plugin: builtin:log}", "plugin: builtin:log, colour: red}")
        + "    dead-letter-queue: {window: 3}\n"
    )
    found = warnings_of(text)
    assert [(w.field_path, w.line) for w in found] == [
        ("pipelines[0].conectors", line_of(text, "conectors")),
        ("pipelines[0].connectors[1].colour", line_of(text, "colour")),
        ("pipelines[0].processors[0].condtion", line_of(text, "condtion")),
        ("pipelines[0].dead-letter-queue.window", line_of(text, "window: 3")),
    ]


def test_bad_namespace_regex() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: builtin:generator}\n"
            "      - id: dst\n        type: destination\n        plugin: builtin:log\n"
            "        settings:\n          namespace: 'orders(['\n"
        )
    )
    found = issue_at(issues(text), "pipelines[0].connectors[1].settings.namespace")
    assert found.line == line_of(text, "namespace")
    assert "not a valid regular expression" in found.message


def test_missing_and_unknown_versions_fall_back_as_in_conduit() -> None:
    missing = load(pipeline().replace('version: "2.2"\n', ""))
    assert missing.version == "2.2"
    assert [w.message for w in missing.warnings] == [
        "no version given; the file is read as version 2.2, as Conduit does"
    ]
    newer_minor = load(pipeline().replace('"2.2"', '"2.9"'))
    assert newer_minor.version == "2.2"
    assert [(w.line, w.message) for w in newer_minor.warnings] == [
        (1, "unknown version '2.9'; the file is read as version 2.2, as Conduit does")
    ]
    assert load(V1.replace("version: 1.0", "version: 1.7")).version == "1.1"
    unknown = issue_at(issues(pipeline().replace('"2.2"', '"3.0"')), "version")
    assert unknown.line == 1
    assert unknown.message == "unknown version '3.0' (known: 1.0, 1.1, 2.0, 2.1, 2.2)"


def test_several_documents_in_one_file() -> None:
    second = pipeline().replace("id: p\n", "id: q\n").replace('version: "2.2"', 'version: "2.1"')
    result = load(pipeline() + "---\n" + second + "---\n")
    assert [p.id for p in result.pipelines] == ["p", "q"]
    assert result.warnings == ()
    text = pipeline() + "---\n" + pipeline()
    found = issue_at(issues(text), "pipelines[0].id")
    assert found.line == line_of(text, "id: p", nth=2)
    assert found.message.startswith("duplicate pipeline id 'p'")


def test_plugin_references_with_prefix_and_version() -> None:
    text = pipeline(
        connectors=(
            "      - {id: src, type: source, plugin: 'builtin:generator@v0.10.4'}\n"
            "      - {id: dst, type: destination, plugin: 'log@latest'}\n"
        ),
        processors="      - {id: f, plugin: 'builtin:filter'}\n      - {id: g, plugin: 'filter@v0.1.0'}\n",
    )
    result = load(text)
    pipeline_config = result.pipelines[0]
    assert [c.plugin for c in pipeline_config.connectors] == ["builtin:generator", "builtin:log"]
    assert [p.plugin for p in pipeline_config.processors] == ["filter", "filter"]
    # @latest is what Conduit picks anyway; another version is read without it, and the user hears so.
    assert [(w.line, w.message.split(" is not chosen")[0]) for w in result.warnings] == [
        (line_of(text, "@v0.10.4"), "version 'v0.10.4' of 'builtin:generator'"),
        (line_of(text, "@v0.1.0"), "version 'v0.1.0' of 'filter'"),
    ]


def test_zero_workers_is_one_worker_as_in_conduit() -> None:
    text = pipeline(processors="      - {id: f, plugin: filter, workers: 0}\n")
    assert load(text).pipelines[0].processors[0].workers == 1


def test_bad_workers_and_field_set_operation() -> None:
    text = pipeline(
        processors=(
            "      - id: s\n        plugin: field.set\n        workers: -1\n"
            "        settings: {field: .Operation, value: upsert}\n"
        )
    )
    found = issues(text)
    assert issue_at(found, "pipelines[0].processors[0].workers").line == line_of(text, "workers")
    assert "upsert" in issue_at(found, "pipelines[0].processors[0].settings.value").message


def test_invalid_yaml_names_the_line() -> None:
    found = issues('version: "2.2"\npipelines:\n  - id: [unclosed\n')
    assert len(found) == 1 and found[0].field_path == "" and "invalid YAML" in found[0].message
    assert found[0].line is not None


def test_multiple_issues_collected_at_once() -> None:
    text = (
        pipeline(
            connectors=(
                "      - id: src\n        type: source\n        plugin: builtin:generator\n"
                "        settings: {recordCount: lots, bogus: 1}\n"
                "      - {id: dst, type: destination, plugin: builtin:x}\n"
            ),
            processors="      - {id: f, plugin: filter, condition: 'AND AND'}\n",
        )
        + "extra: true\n"  # a warning, not an issue
    )
    with pytest.raises(ConfigError) as caught:
        load(text)
    paths = [i.field_path for i in caught.value.issues]
    assert paths == [
        "pipelines[0].connectors[0].settings.recordCount",
        "pipelines[0].connectors[0].settings.bogus",
        "pipelines[0].connectors[1].plugin",
        "pipelines[0].processors[0].condition",
    ]
    lines = str(caught.value).splitlines()
    assert len(lines) == 4 and all(line.startswith("p.yaml:") for line in lines)


def test_issue_and_error_formatting() -> None:
    with_line = ConfigIssue("f.yaml", 3, "pipelines[0].id", "bad")
    without = ConfigIssue("f.yaml", None, "version", "missing")
    assert str(with_line) == "f.yaml:3: pipelines[0].id: bad"
    assert str(without) == "f.yaml: version: missing"
    assert (
        str(ConfigError([with_line, without])) == "f.yaml:3: pipelines[0].id: bad\nf.yaml: version: missing"
    )


def test_registry_shape() -> None:
    assert set(PLUGINS["builtin:file"]) == {"source", "destination"}
    assert PLUGINS["custom.python"]["processor"].name == "custom.python"


def test_empty_pipeline_list_is_an_issue() -> None:
    found = issue_at(issues('version: "2.2"\npipelines: []\n'), "pipelines")
    assert found.message == "the file defines no pipelines"


def test_generator_settings_as_conduit_reads_them() -> None:
    from airflow_conduit.config.settings import GeneratorSettings

    assert GeneratorSettings.model_validate({"recordCount": "0"}).record_count == -1  # 0: unbounded
    assert GeneratorSettings.model_validate({"recordCount": 5}).record_count == 5
    assert GeneratorSettings.model_validate({"readTime": "100ms"}).rate == pytest.approx(10.0)
    with pytest.raises(ValueError, match='cannot specify both "readTime" and "rate"'):
        GeneratorSettings.model_validate({"readTime": "1s", "rate": 5})
    with pytest.raises(ValueError, match="not a Go duration"):
        GeneratorSettings.model_validate({"readTime": "soon"})


# --- processors that make several records, and Conduit builtins not served ------------------------------


@pytest.mark.parametrize(
    ("processor", "message"),
    [
        ("{id: c, plugin: clone, settings: {count: 0}}", "greater than 0"),
        ("{id: c, plugin: clone}", "required setting 'count' is missing"),
        ("{id: s, plugin: split, settings: {field: .Metadata.tags}}", "must be under .Key or .Payload"),
        ("{id: s, plugin: builtin:split, settings: {field: .Position}}", "must be under .Key or .Payload"),
    ],
)
def test_clone_and_split_settings_are_checked(processor: str, message: str) -> None:
    text = pipeline(processors=f"      - {processor}\n")
    found = issues(text)
    assert any(message in i.message for i in found), found
    assert found[0].line == line_of(text, "plugin: ", 3)


@pytest.mark.parametrize(
    ("plugin", "why"),
    [
        ("builtin:openai.textgen", "model server"),
        ("ollama.request", "model server"),
        ("avro.decode", "schema registry"),
    ],
)
def test_conduit_builtins_not_served_say_why(plugin: str, why: str) -> None:
    [issue] = issues(pipeline(processors=f"      - {{id: x, plugin: {plugin}}}\n"))
    assert issue.field_path == "pipelines[0].processors[0].plugin"
    assert "is a Conduit plugin not served here" in issue.message and why in issue.message


@pytest.mark.parametrize("plugin", ["builtin:kafka", "kafka", "kafka@v0.12.5"])
def test_kafka_is_refused_saying_why(plugin: str) -> None:
    text = pipeline().replace("plugin: builtin:generator", f"plugin: {plugin}", 1)
    found = issues(text)
    assert any("not served here" in i.message and "Kafka" in i.message for i in found), found
