"""``generation`` (the format and the pipeline's plain functions) never imports Django
or the web app: ``memoryui`` uses it, never the other way round."""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MODULES = sorted(p for p in (ROOT / "generation").glob("*.py"))


def imported_names(path: Path) -> set[str]:
    """Every module a file imports, at its top or inside a function."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
    return names


def test_no_generation_module_imports_django_or_memoryui_even_inside_a_function():
    offenders = {
        path.name: sorted(
            n for n in imported_names(path) if n.split(".")[0] in ("django", "memoryui")
        )
        for path in MODULES
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_every_generation_module_imports_with_django_missing():
    names = [f"generation.{p.stem}" for p in MODULES if p.stem != "__init__"]
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
