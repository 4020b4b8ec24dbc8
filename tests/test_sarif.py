"""``--format sarif``: structure, fingerprints, rule metadata — and Microsoft's SARIF validator
(``@microsoft/sarif-multitool``, installed with npm into ``.cache/npm``) reports no errors, with the
SARIF and the GitHub Advanced Security rule sets (``--rule-kind Sarif;Ghas``)."""

from __future__ import annotations

import importlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import pytest

import mbmem_lint
from mbmem_lint.diagnostics import Diagnostic, Edit, Fix, Location
from mbmem_lint.report import render
from mbmem_lint.report.sarif import FINGERPRINT_KEY, artifact_uri, build_sarif, fingerprint

ROOT = Path(__file__).resolve().parent.parent
NPM_CACHE = ROOT / ".cache" / "npm"
MULTITOOL_VERSION = "5.7.0"


@dataclass(frozen=True)
class FakeRule:
    code: str
    name: str
    severity: str
    summary: str
    rationale: str = ""
    family: str = "Recompute and offload"


RULES = [
    FakeRule(
        "MBM201",
        "cpu-offloading-with-pp",
        "error",
        "CPU offloading cannot be combined with pipeline parallelism",
        "Megatron Core raises ValueError in TransformerConfig.__post_init__ when cpu_offloading is set with PP>1.",
    ),
    FakeRule(
        "MBM301", "allocator-conf-lowercase-true", "warning", "Allocator flag spelled `true`", "", "Env"
    ),
    FakeRule("MBM999", "never-fires", "info", "A rule without findings is still listed"),
]


def sample() -> list[Diagnostic]:
    return [
        Diagnostic(
            "MBM201",
            "cpu-offloading-with-pp",
            "error",
            "CPU offloading with PP=2: raises ValueError",
            Location("recipes/bad.py", 4, 5, 4, 36),
            function="bad_config",
            fields=["model.cpu_offloading", "model.pipeline_model_parallel_size"],
            fix=Fix(
                "set cfg.model.cpu_offloading = False", "unsafe", [Edit("recipes/bad.py", 120, 124, "False")]
            ),
            notes=["see MCore transformer_config.py:1714"],
        ),
        Diagnostic(
            "MBM301",
            "allocator-conf-lowercase-true",
            "warning",
            "lowercase `true` is ignored",
            Location("recipes/sub dir/ünï.py", 10, 9, 12, 3),
            function="other_config",
            fields=["env_vars.PYTORCH_CUDA_ALLOC_CONF"],
        ),
        Diagnostic("MBM001", "parse-error", "error", "cannot parse YAML", Location("conf/o.yaml", 3, 1)),
        Diagnostic(
            "MBM701",
            "memory-capacity",
            "info",
            "stage 1 has 3% headroom",
            Location("recipes/bad.py", 2, 5, 2, 30),
            function="bad_config",
            fields=["memory"],
            fix=Fix("lower MBS", "display-only", [], saving_bytes=1024**3),
        ),
    ]


def sarif(diags: list[Diagnostic] | None = None, rules: Any = RULES) -> dict[str, Any]:
    out = io.StringIO()
    render(sample() if diags is None else diags, "sarif", sources={}, stream=out, rules=rules, env={})
    data: dict[str, Any] = json.loads(out.getvalue())
    return data


def test_log_structure() -> None:
    log = sarif()
    assert log["version"] == "2.1.0" and log["$schema"].endswith("sarif-2.1.0.json")
    run = log["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "mbmem-lint" and driver["version"] == mbmem_lint.__version__
    assert driver["informationUri"].startswith("https://")
    ids = [r["id"] for r in driver["rules"]]
    assert ids == sorted(ids) and {"MBM201", "MBM301", "MBM999", "MBM001", "MBM701"} == set(ids)
    rule = driver["rules"][ids.index("MBM201")]
    assert rule["name"] == "cpu-offloading-with-pp"
    assert rule["shortDescription"]["text"] == RULES[0].summary
    assert rule["fullDescription"]["text"] == RULES[0].rationale
    assert rule["help"]["text"] and rule["help"]["markdown"]
    assert rule["defaultConfiguration"]["level"] == "error"
    assert driver["rules"][ids.index("MBM999")]["defaultConfiguration"]["level"] == "note"
    for result in run["results"]:
        assert driver["rules"][result["ruleIndex"]]["id"] == result["ruleId"]
    levels = {r["ruleId"]: r["level"] for r in run["results"]}
    assert levels == {"MBM001": "error", "MBM201": "error", "MBM301": "warning", "MBM701": "note"}


def test_locations_and_fixes() -> None:
    results = {r["ruleId"]: r for r in sarif()["runs"][0]["results"]}
    loc = results["MBM201"]["locations"][0]["physicalLocation"]
    assert loc["artifactLocation"]["uri"] == "recipes/bad.py"
    assert loc["region"] == {"startLine": 4, "startColumn": 5, "endLine": 4, "endColumn": 36}
    other = results["MBM301"]["locations"][0]["physicalLocation"]
    assert other["artifactLocation"]["uri"] == "recipes/sub%20dir/%C3%BCn%C3%AF.py"
    assert other["region"] == {"startLine": 10, "startColumn": 9, "endLine": 12, "endColumn": 3}
    fix = results["MBM201"]["fixes"][0]["artifactChanges"][0]
    assert fix["replacements"] == [
        {"deletedRegion": {"charOffset": 120, "charLength": 4}, "insertedContent": {"text": "False"}}
    ]
    assert "fixes" not in results["MBM701"]  # display-only suggestions are not offered as fixes


def test_uris_are_relative_with_forward_slashes(tmp_path: Path) -> None:
    assert artifact_uri("recipes\\sub\\a.py") == "recipes/sub/a.py"
    assert artifact_uri("./recipes/a.py") == "recipes/a.py"
    assert artifact_uri(str(tmp_path / "recipes" / "a.py"), root=tmp_path) == "recipes/a.py"
    assert artifact_uri("/elsewhere/a.py", root=tmp_path) == "file:///elsewhere/a.py"


def test_fingerprint_is_stable_across_line_moves() -> None:
    d = sample()[0]
    moved = Diagnostic(
        d.code, d.name, d.severity, "message reworded", Location(d.location.path, 40, 1, 40, 9)
    )
    moved.function, moved.fields = d.function, list(reversed(d.fields))
    assert fingerprint(moved) == fingerprint(d)
    other_field = Diagnostic(d.code, d.name, d.severity, d.message, d.location, d.function, ["model.x"])
    other_recipe = Diagnostic(d.code, d.name, d.severity, d.message, d.location, "another_config", d.fields)
    assert len({fingerprint(d), fingerprint(other_field), fingerprint(other_recipe)}) == 3
    # Same rule + recipe + fields twice in one run: told apart, still line-independent.
    twice = [
        d,
        Diagnostic(
            d.code, d.name, d.severity, d.message, Location(d.location.path, 9, 1), d.function, d.fields
        ),
    ]
    prints = [r["partialFingerprints"][FINGERPRINT_KEY] for r in sarif(twice)["runs"][0]["results"]]
    assert prints[1] == prints[0] + ":1"


def test_registry_rules_are_used_by_default() -> None:
    if importlib.util.find_spec("mbmem_lint.check.registry") is None:
        pytest.skip("rule registry (mbmem_lint/check/registry.py) has not landed yet")
    registry = importlib.import_module("mbmem_lint.check.registry")
    codes = {r.code for r in registry.all_rules()}
    driver = build_sarif([])["runs"][0]["tool"]["driver"]
    assert codes <= {r["id"] for r in driver["rules"]}
    for rule in driver["rules"]:
        assert (
            rule["shortDescription"]["text"] and rule["fullDescription"]["text"] and rule["help"]["markdown"]
        )


# -- Microsoft SARIF validator -----------------------------------------------------------------------


def _multitool_binary() -> Path | None:
    base = NPM_CACHE / "node_modules" / "@microsoft"
    for plat in ("linux", "darwin", "win32"):
        for name in ("Sarif.Multitool", "Sarif.Multitool.exe"):
            p = base / f"sarif-multitool-{plat}" / name
            if p.is_file():
                return p
    return None


@pytest.fixture(scope="session")
def multitool() -> list[str]:
    npm, npx = shutil.which("npm"), shutil.which("npx")
    if npm is None or npx is None:
        pytest.skip("npm/npx not found: the SARIF validator test needs Node.js (CI has it)")
    if not (NPM_CACHE / "node_modules" / "@microsoft" / "sarif-multitool").is_dir():
        NPM_CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(NPM_CACHE),
                "--no-audit",
                "--no-fund",
                f"@microsoft/sarif-multitool@{MULTITOOL_VERSION}",
            ],
            check=True,
            timeout=600,
        )
    binary = _multitool_binary()
    assert binary is not None, "npm installed @microsoft/sarif-multitool without its platform binary"
    if not os.access(binary, os.X_OK):  # its postinstall (chmod u+x) may not have run
        binary.chmod(binary.stat().st_mode | stat.S_IXUSR)
    return [npx, "--no-install", "sarif-multitool"]


def validate_with_multitool(cmd: list[str], path: Path) -> list[dict[str, Any]]:
    """Problems (error and warning results) the validator reports for ``path``."""
    out = path.with_suffix(".validation.sarif")
    out.unlink(missing_ok=True)
    # bin.js runs the binary through a shell: quote the arguments (';' separates rule kinds).
    args = [
        "validate",
        "--rule-kind",
        shlex.quote("Sarif;Ghas"),
        "-o",
        shlex.quote(str(out)),
        shlex.quote(str(path)),
    ]
    proc = subprocess.run([*cmd, *args], cwd=NPM_CACHE, capture_output=True, text=True, timeout=300)
    assert out.is_file(), f"validator wrote no log (exit {proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    log = json.loads(out.read_text(encoding="utf-8-sig"))
    results: list[dict[str, Any]] = log["runs"][0].get("results", [])
    problems = [r for r in results if r.get("level", "warning") in ("error", "warning")]
    for r in problems:
        r["_text"] = f"{r.get('level', 'warning')} {r['ruleId']}: {r['message'].get('text', r['message'])}"
    return problems


def schema_errors(log: dict[str, Any]) -> list[str]:
    schema_path = NPM_CACHE / "node_modules" / "@microsoft" / "sarif-multitool-linux" / "sarif-2.1.0.json"
    if not schema_path.is_file():
        return []
    schema = json.loads(schema_path.read_text(encoding="utf-8-sig"))
    validator = jsonschema.validators.validator_for(schema)(schema)
    return [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(log)]


@pytest.mark.slow
def test_validator_catches_a_broken_log(multitool: list[str], tmp_path: Path) -> None:
    """The validator works here: a region with startLine 0 and a bare rule are reported."""
    log = sarif()
    log["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"]["startLine"] = 0
    log["runs"][0]["tool"]["driver"]["rules"][0] = {"id": log["runs"][0]["tool"]["driver"]["rules"][0]["id"]}
    path = tmp_path / "broken.sarif"
    path.write_text(json.dumps(log), encoding="utf-8")
    problems = validate_with_multitool(multitool, path)
    assert any(p.get("level") == "error" for p in problems), [p["_text"] for p in problems]
    assert schema_errors(log)


@pytest.mark.slow
def test_sample_log_passes_validator(multitool: list[str], tmp_path: Path) -> None:
    log = sarif()
    path = tmp_path / "sample.sarif"
    path.write_text(json.dumps(log, indent=2), encoding="utf-8")
    assert schema_errors(log) == []
    problems = validate_with_multitool(multitool, path)
    assert [p["_text"] for p in problems] == []  # neither errors nor warnings


@pytest.mark.slow
def test_real_catalog_and_cli_output_pass_validator(multitool: list[str], tmp_path: Path) -> None:
    """With the real rule catalog (every rule's doc as help) and, when the CLI exists, its output."""
    if importlib.util.find_spec("mbmem_lint.check.registry") is None:
        pytest.skip("rule registry (mbmem_lint/check/registry.py) has not landed yet")
    log = build_sarif(sample())
    if importlib.util.find_spec("mbmem_lint.cli") is not None:
        bad = tmp_path / "recipes" / "bad_recipe.py"
        bad.parent.mkdir()
        bad.write_text(
            "from megatron.bridge.recipes.llama import llama3_8b_pretrain_config\n"
            "from megatron.bridge.training.config import ConfigContainer\n\n\n"
            "def bad_config() -> ConfigContainer:\n"
            "    cfg = llama3_8b_pretrain_config()\n"
            "    cfg.model.pipeline_model_parallel_size = 2\n"
            "    cfg.model.cpu_offloading = True\n"
            "    return cfg\n",
            encoding="utf-8",
        )
        proc = subprocess.run(
            [sys.executable, "-m", "mbmem_lint", "check", "--format", "sarif", "recipes"],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 1, proc.stderr
        log = json.loads(proc.stdout)
        uris = {
            r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"]
            for r in log["runs"][0]["results"]
        }
        assert "recipes/bad_recipe.py" in uris
    path = tmp_path / "catalog.sarif"
    path.write_text(json.dumps(log, indent=2), encoding="utf-8")
    assert schema_errors(log) == []
    errors = [p["_text"] for p in validate_with_multitool(multitool, path) if p.get("level") == "error"]
    assert errors == []


def test_uris_resolve_against_srcroot_from_any_folder(tmp_path: Path) -> None:
    """``%SRCROOT%`` is where the relative URIs start (the working folder), so code scanning finds the
    files when the check ran in a subfolder of the checkout; a file outside it has an absolute URI and
    no base (SARIF 2.1.0 §3.4.4)."""
    from urllib.parse import urljoin

    from cli_run import run_cli

    recipe = (ROOT / "fixtures" / "recipes" / "bad" / "llama3_70b_offload.py").read_text(encoding="utf-8")
    sub = tmp_path / "repo" / "training"
    (sub / "recipes").mkdir(parents=True)
    (sub / "recipes" / "bad recipe.py").write_text(recipe, encoding="utf-8")
    outside = tmp_path / "elsewhere.py"
    outside.write_text(recipe, encoding="utf-8")
    result = run_cli(["check", "--format", "sarif", "recipes", str(outside)], cwd=sub)
    assert result.exit_code == 1, result.stderr
    run = json.loads(result.stdout)["runs"][0]
    base = run["originalUriBaseIds"]["%SRCROOT%"]["uri"]
    assert base == sub.resolve().as_uri() + "/"
    seen = set()
    for r in run["results"]:
        location = r["locations"][0]["physicalLocation"]["artifactLocation"]
        if "uriBaseId" in location:
            assert location["uriBaseId"] == "%SRCROOT%"
            seen.add(urljoin(base, location["uri"]))
        else:
            seen.add(location["uri"])
    assert seen == {(sub / "recipes" / "bad recipe.py").resolve().as_uri(), outside.resolve().as_uri()}
    assert schema_errors(json.loads(result.stdout)) == []
