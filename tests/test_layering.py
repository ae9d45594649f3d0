"""One direction of dependency, so that a change to a page never breaks the pipeline:
``generation`` (the format and the pipeline's plain functions) imports neither Django
nor the web app; memoryui's services (models, importer, curation, rendering ...) never
import its pages (views, forms, template tags); and no product code imports the tests.
Each rule reads every import, at a module's top or inside a function."""

import ast
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ("memoryui", "generation", "memoryui_client")
# memoryui's entry points: they wire pages and services together, so they may import both.
ENTRY_POINTS = ("urls", "site_urls", "admin", "api", "management", "apps", "celery", "tasks")
ENTRY_POINTS += ("wsgi", "migrations")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_of(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


def imported_names(path: Path) -> set[str]:
    """Every module a file imports, relative imports resolved; ``from x import y`` counts
    as importing both ``x`` and ``x.y`` (``y`` may be a module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            names.add(source)
            names.update(f"{source}.{alias.name}" for alias in node.names)
    return names


def is_page(name: str) -> bool:
    """The web layer's pages: the views (``memoryui.views``, its package or any
    ``*_views`` module), the forms and the template tags."""
    parts = name.split(".")
    return (
        parts[0] == "memoryui"
        and len(parts) > 1
        and (parts[1] in ("views", "forms", "templatetags") or parts[1].endswith("_views"))
    )


def is_service(name: str) -> bool:
    parts = name.split(".")
    if parts[0] != "memoryui" or is_page(name):
        return False
    return len(parts) == 1 or not (parts[1] in ENTRY_POINTS or parts[1].endswith("urls"))


def test_the_rules_see_the_services_and_the_pages():
    """The rules below hold only if they find what they are about (a rename would
    otherwise leave them checking nothing)."""
    names = set(modules_of("memoryui"))

    assert {"memoryui.documents", "memoryui.curation", "memoryui.rendering"} <= {
        n for n in names if is_service(n)
    }
    assert "memoryui.templatetags.markdown" in {n for n in names if is_page(n)}
    assert any(n == "memoryui.views" or n.startswith("memoryui.views.") for n in names)
    assert not is_service("memoryui.urls") and not is_service("memoryui.api.endpoints")


def test_no_service_imports_a_page_even_inside_a_function():
    offenders = {
        name: sorted(n for n in imported_names(path) if is_page(n))
        for name, path in modules_of("memoryui").items()
        if is_service(name)
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_no_generation_module_imports_django_or_memoryui_even_inside_a_function():
    offenders = {
        name: sorted(n for n in imported_names(path) if n.split(".")[0] in ("django", "memoryui"))
        for name, path in modules_of("generation").items()
    }
    assert {name: found for name, found in offenders.items() if found} == {}


def test_no_product_module_imports_the_tests():
    offenders = {
        name: sorted(n for n in imported_names(path) if n.split(".")[0] == "tests")
        for package in PRODUCT
        for name, path in modules_of(package).items()
    }
    assert {name: found for name, found in offenders.items() if found} == {}


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
