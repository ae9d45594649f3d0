"""The architecture, checked: the contracts of pyproject.toml's [tool.importlinter] (memoryui's
layers, from the entry points down to the models; ``generation`` without Django; the client
alone; no tests in product code) hold, and each fails on an import that breaks it; what
import-linter cannot say is checked here (private names, module size, ``generation``
importable with Django missing). Every import counts, at a module's top or inside a function."""

import ast
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("memoryui", "generation", "memoryui_client")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


def resolve(package: str, node: ast.ImportFrom) -> str:
    """The module a ``from ... import`` reads, relative imports resolved."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def planted(tmp_path: Path, plants: dict[str, str]) -> Path:
    """A copy of the product's packages and contracts, with a line added to some modules."""
    for package in (*PRODUCT, "tests"):
        shutil.copytree(
            ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__")
        )
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for module, line in plants.items():
        path = tmp_path / (module.replace(".", "/") + ".py")
        if not path.exists():
            path = tmp_path / module.replace(".", "/") / "__init__.py"
        path.write_text(path.read_text() + f"\n{line}\n")
    return tmp_path


def lint_imports(cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [str(Path(sys.executable).parent / "lint-imports"), "--no-logo", "--no-cache"]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120)


CONTRACTS = len(
    tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
)


def test_the_architecture_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"{CONTRACTS} kept, 0 broken" in result.stdout


# One planted import per contract (each inside a function, where Python would not notice
# a cycle until it runs), and what lint-imports must say about it.
PLANTS = {
    "memoryui-layers": (
        "memoryui.webhooks",
        "from memoryui import tasks",
        "memoryui.webhooks is not allowed to import memoryui.tasks",
    ),
    "importer-parts": (
        "memoryui.importer.bulk",
        "from memoryui.importer import imports",
        "memoryui.importer.bulk is not allowed to import memoryui.importer.imports",
    ),
    "curation-parts": (
        "memoryui.curation.versions",
        "from memoryui.curation import approval",
        "memoryui.curation.versions is not allowed to import memoryui.curation.approval",
    ),
    "transcript-parts": (
        "memoryui.transcript.display",
        "from memoryui.transcript import pages",
        "memoryui.transcript.display is not allowed to import memoryui.transcript.pages",
    ),
    "writeback-parts": (
        "memoryui.writeback.files",
        "from memoryui.writeback import publishing",
        "memoryui.writeback.files is not allowed to import memoryui.writeback.publishing",
    ),
    "pipeline-parts": (
        "memoryui.pipeline.model_calls",
        "from memoryui.pipeline import steps",
        "memoryui.pipeline.model_calls is not allowed to import memoryui.pipeline.steps",
    ),
    "tree-parts": (
        "generation.tree.text",
        "from generation.tree import directory",
        "generation.tree.text is not allowed to import generation.tree.directory",
    ),
    "review-parts": (
        "generation.review.document",
        "from generation.review import comparison",
        "generation.review.document is not allowed to import generation.review.comparison",
    ),
    "generation-without-django": (
        "generation.lint",
        "from django.db import models",
        "generation.lint -> django",
    ),
    "client-alone": ("memoryui_client", "import memoryui.models", "memoryui_client -> memoryui"),
    "no-tests-in-product": (
        "memoryui.rendering",
        "import tests.conftest",
        "memoryui.rendering -> tests.conftest",
    ),
}


def test_each_contract_fails_on_an_import_that_breaks_it(tmp_path):
    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    assert {c["id"] for c in contracts["contracts"]} == set(PLANTS)  # a plant per contract
    tree = planted(
        tmp_path,
        {module: f"def _planted():\n    {line}" for module, line, _ in PLANTS.values()},
    )
    result = lint_imports(tree)
    assert result.returncode != 0
    said = " ".join(result.stdout.split())
    assert f"0 kept, {len(PLANTS)} broken" in said, result.stdout
    for contract, (_, _, message) in PLANTS.items():
        assert message in said, contract


def test_a_new_module_must_be_given_a_layer(tmp_path):
    tree = planted(tmp_path, {})
    (tree / "memoryui" / "unplaced.py").write_text("from memoryui import models\n")
    result = lint_imports(tree)
    assert result.returncode != 0
    assert "memoryui.unplaced" in result.stdout


def test_no_module_takes_another_modules_private_names():
    """A name that begins with one underscore is its module's own: what two modules
    share is public in the lower one (``from .x import _y`` and ``x._y`` are refused)."""
    modules = {name for package in PRODUCT for name in modules_of(package)}
    offenders = []
    for package in PRODUCT:
        for name, path in modules_of(package).items():
            tree = ast.parse(path.read_text(), str(path))
            package_name = name if path.name == "__init__.py" else name.rpartition(".")[0]
            bound: set[str] = set()  # local names of imported product modules
            for node in ast.walk(tree):
                if isinstance(node, ast.ImportFrom):
                    source = resolve(package_name, node)
                    for alias in node.names:
                        if f"{source}.{alias.name}" in modules:
                            bound.add(alias.asname or alias.name)
                        elif private(alias.name) and source in modules and source != name:
                            offenders.append(f"{name}: from {source} import {alias.name}")
                elif isinstance(node, ast.Import):
                    bound.update(a.asname for a in node.names if a.asname and a.name in modules)
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Attribute)
                    and isinstance(node.value, ast.Name)
                    and node.value.id in bound
                    and private(node.attr)
                ):
                    offenders.append(f"{name}: {node.value.id}.{node.attr}")
    assert not offenders, "\n".join(offenders)


def test_no_product_module_is_past_800_lines():
    long = {
        name: lines
        for package in PRODUCT
        for name, path in modules_of(package).items()
        if (lines := len(path.read_text().splitlines())) > 800
    }
    assert long == {}


def test_every_generation_module_imports_with_django_missing():
    names = sorted(modules_of("generation"))
    script = (
        "import importlib, sys\n"
        "sys.modules['django'] = None\n"  # any import of django now raises ImportError
        "sys.modules['memoryui'] = None\n"
        f"for name in {names!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = sorted(\n"
        "    m for m, module in sys.modules.items()\n"
        "    if module is not None and m.split('.')[0] in ('django', 'celery', 'memoryui')\n"
        ")\n"
        "print(loaded)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


def test_every_function_local_import_in_product_code_says_why():
    """ruff's PLC0415 (pyproject.toml) refuses an import inside a function; the few that
    defer a heavy module or break a cycle are allowed with ``# noqa: PLC0415 (why)``, or
    with the reason on the line above."""
    unexplained = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            lines = path.read_text().splitlines()
            for number, line in enumerate(lines, 1):
                noqa = re.search(r"# noqa: ([A-Z0-9, ]+)(.*)$", line)
                if not noqa or "PLC0415" not in noqa.group(1):
                    continue
                reason = noqa.group(2).strip()
                above = lines[number - 2].strip() if number > 1 else ""
                if not reason.startswith("(") and not above.startswith("#"):
                    unexplained.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not unexplained, "\n".join(unexplained)


def test_the_architecture_page_names_every_module_in_its_place():
    """docs/architecture.md lists every module of the product (a package's parts under
    it), so that a newcomer finds each one and a new module is placed on purpose."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    missing = []
    for package in PRODUCT:
        for path in sorted((ROOT / package).rglob("*.py")):
            relative = path.relative_to(ROOT / package)
            if {"migrations", "commands"} & set(relative.parts) or path.name == "__init__.py":
                continue
            names = (relative.as_posix(), relative.name, f"{package}/{relative.as_posix()}")
            if not any(f"`{name}`" in page for name in names):
                missing.append(f"{package}/{relative.as_posix()}")
    assert not missing, "not in docs/architecture.md: " + ", ".join(missing)
