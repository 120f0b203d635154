"""The key table is the one declaration of every config key: it fills the dataclasses field by field,
Pulumi.yaml and docs/configuration.md are generated from it, and core reads config without pulumi."""

from __future__ import annotations

import ast
import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import vke_gpu_dra_core
from vke_gpu_dra_core import config
from vke_gpu_dra_core.config import __main__ as generate
from vke_gpu_dra_core.config import keys, reader, render, stack_config

from tests.program import harness


def test_pulumi_yaml_and_the_configuration_doc_are_as_generated_from_the_table() -> None:
    assert (harness.ROOT / "Pulumi.yaml").read_text() == render.render_pulumi_yaml()
    doc = (harness.ROOT / "docs" / "configuration.md").read_text()
    assert doc == render.render_configuration_doc(doc)
    assert render.GENERATE_COMMAND in doc  # the page says how to regenerate it
    assert generate.main(["--check", "--root", str(harness.ROOT)]) == 0


def test_pulumi_yaml_declares_only_keys_the_cli_does_not_read_as_paths() -> None:
    """The Pulumi CLI merges a declared key's default at the path its dots spell (`driver.image` is `image`
    in `driver`), and `driver.image` beside `driver.image.build` fails every preview with
    "driver.image: expected a map": only the keys without a dot are declared, each with its default."""
    block = config.load_pulumi_yaml((harness.ROOT / "Pulumi.yaml").read_text())["config"]
    undotted = {k.name for k in keys.KEYS if "." not in k.name}
    assert set(block) == undotted
    assert {"target", "production", "namePrefix", "kubeconfig"} <= undotted
    assert all(block[k.name]["default"] == k.default_value() for k in keys.KEYS if k.name in block)


def test_the_doc_has_one_row_per_key_with_type_default_and_constraints() -> None:
    doc = (harness.ROOT / "docs" / "configuration.md").read_text()
    for key in keys.ALL_KEYS:
        rows = [line for line in doc.splitlines() if line.startswith(f"| `{key.full}` |")]
        assert len(rows) == 1, key.name
        cells = [c.strip() for c in rows[0].strip("|").split(" | ")]
        assert cells[1] == key.type, key.name
        assert cells[2] == render.default_cell(key), key.name
    by_key = {line.split(" | ")[0]: line for line in doc.splitlines() if line.startswith("| `")}
    assert "target=vke: an integer from 20 to 2048" in by_key["| `vke-gpu-dra:nodePool.systemVolumeSize`"]
    assert "one of python, nvidia" in by_key["| `vke-gpu-dra:driver.implementation`"]
    assert "`NVIDIA A30`" in by_key["| `vke-gpu-dra:driver.simulatedProduct`"]


def test_check_reports_a_stale_file_and_write_regenerates_both(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(harness.ROOT / "docs" / "configuration.md", tmp_path / "docs" / "configuration.md")
    (tmp_path / "Pulumi.yaml").write_text("name: vke-gpu-dra\n")
    assert generate.main(["--check", "--root", str(tmp_path)]) == 1
    assert "Pulumi.yaml: not as generated" in capsys.readouterr().err
    assert generate.main(["--write", "--root", str(tmp_path)]) == 0
    assert (tmp_path / "Pulumi.yaml").read_text() == render.render_pulumi_yaml()
    assert generate.main(["--check", "--root", str(tmp_path)]) == 0


def test_a_doc_without_the_markers_is_one_error_naming_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "configuration.md").write_text("# Configuration\n")
    assert generate.main(["--write", "--root", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: docs/configuration.md: the marker comments") and "Traceback" not in err
    assert not (tmp_path / "Pulumi.yaml").exists()  # nothing half-written


def test_outside_the_repository_root_is_one_error_saying_where_to_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for mode in ("--write", "--check"):
        assert generate.main([mode, "--root", str(tmp_path)]) == 2
        err = capsys.readouterr().err
        assert err == (
            f"error: {tmp_path / 'docs' / 'configuration.md'} not found: run from the repository root "
            "or pass --root\n"
        )
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_every_dataclass_field_is_filled_by_exactly_one_row() -> None:
    filled: dict[tuple[str, str], list[str]] = {}
    for key in keys.ALL_KEYS:
        filled.setdefault(key.target, []).append(key.name)
    for target, names in filled.items():
        assert len(names) == 1, (target, names)
    for section, cls in stack_config.SECTIONS.items():
        for f in dataclasses.fields(cls):
            if section == "" and f.name in reader.SECTION_FIELDS:
                continue
            assert (section, f.name) in filled or (section, f.name) in reader.DERIVED, (section, f.name)
    for section, name in filled:
        assert name in {f.name for f in dataclasses.fields(stack_config.SECTIONS[section])}, (section, name)


def test_field_names_are_derived_from_key_names() -> None:
    assert config.KEYS_BY_NAME["nodePool.minReplicas"].target == ("node_pool", "min_replicas")
    assert config.KEYS_BY_NAME["cluster.apiServerPublicAccess"].target == (
        "cluster",
        "api_server_public_access",
    )
    assert config.KEYS_BY_NAME["driver.registry.name"].target == ("driver_image", "registry_name")
    assert config.KEYS_BY_NAME["namePrefix"].target == ("", "name_prefix")
    assert keys.PROVIDER_KEYS[1].target == ("volcengine", "access_key")


def test_the_catalog_key_is_read_into_the_config() -> None:
    raw = config.raw_from_stack_file(
        {"gpuInstanceTypes": '{"ecs.a.b": {"gpus": 1}}', "target": "existing-cluster"}
    )
    cfg, _ = config.read(raw)
    assert cfg.gpu_instance_types == '{"ecs.a.b": {"gpus": 1}}'


def test_project_defaults_are_the_full_keys_of_a_pulumi_yaml() -> None:
    project = {
        "name": "p",
        "config": {"a": {"type": "string", "default": "x"}, "b": {"type": "string"}, "q:c": 1},
    }
    assert config.project_defaults(project) == {"p:a": "x", "q:c": 1}
    assert config.project_defaults({"config": []}) == {}


def _third_party_imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module.split(".")[0])
    return {n for n in names if n not in sys.stdlib_module_names and n != "__future__"}


def test_core_imports_only_the_standard_library_yaml_and_itself() -> None:
    package = Path(vke_gpu_dra_core.__file__).parent
    sources = sorted(package.rglob("*.py"))
    assert package / "config" / "reader.py" in sources
    for source in sources:
        assert _third_party_imports(source) <= {"yaml", "vke_gpu_dra_core"}, source


def test_loading_a_stack_file_through_core_imports_no_pulumi() -> None:
    code = (
        "import sys\n"
        "from vke_gpu_dra_core import config\n"
        "config.read(config.raw_from_stack_file({'target': 'existing-cluster'}))\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in ('pulumi', 'components')]\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
