"""Every environment variable the code reads is in the Configuration table, and the table
names none the code does not read: a new setting without its row fails here."""

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "configuration.md"
SOURCES = ["manage.py", "memoryui", "generation", "memoryui_client"]
READERS = {"env_str", "env_bool", "env_int", "env_float", "env_list", "database_from_url"}
# Read by the code but no setting of the product's (each with why):
NOT_SETTINGS = {
    "DJANGO_SETTINGS_MODULE": "Django's own: which settings module (always memoryui.settings)",
    "MEMORYUI_FIXTURES": "the tests' SDK fixtures folder",
    "MEMORYUI_CRASH_AT_STEP": "a test hook: the write-back and export commands die at a step",
}
# In the table, read by a library rather than by this project's code:
READ_BY_LIBRARIES = {
    "AWS_ACCESS_KEY_ID": "boto3",
    "AWS_SECRET_ACCESS_KEY": "boto3",
    "WEB_CONCURRENCY": "gunicorn",
}
NAME = re.compile(r"^[A-Z][A-Z0-9_]+$")


def _python_files() -> list[Path]:
    files: list[Path] = []
    for source in SOURCES:
        path = ROOT / source
        files += [path] if path.is_file() else sorted(path.rglob("*.py"))
    return [f for f in files if "migrations" not in f.parts]


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def variables_read() -> dict[str, str]:
    """Each variable name read from the environment, with the first place it is read."""
    found: dict[str, str] = {}
    for path in _python_files():
        tree = ast.parse(path.read_text(), str(path))
        constants = {
            target.id: node.value.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
            for target in node.targets
            if isinstance(target, ast.Name) and isinstance(node.value.value, str)
        }

        def name_of(arg: ast.AST, constants: dict[str, str] = constants) -> str | None:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return arg.value
            if isinstance(arg, ast.Name):
                return constants.get(arg.id)
            return None

        for node in ast.walk(tree):
            name = None
            if isinstance(node, ast.Call) and node.args:
                func = node.func
                if (
                    (isinstance(func, ast.Name) and func.id in READERS)
                    or (isinstance(func, ast.Attribute) and func.attr == "getenv")
                    or (
                        isinstance(func, ast.Attribute)
                        and func.attr in ("get", "setdefault", "pop")
                        and _is_environ(func.value)
                    )
                ):
                    name = name_of(node.args[0])
            elif isinstance(node, ast.Subscript) and _is_environ(node.value):
                name = name_of(node.slice)
            if name and NAME.match(name):
                found.setdefault(name, f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def variables_documented() -> set[str]:
    rows = [line for line in TABLE.read_text().splitlines() if line.startswith("| `")]
    return {name for row in rows for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1])}


def test_every_variable_the_code_reads_is_in_the_configuration_table():
    read = variables_read()
    documented = variables_documented()

    missing = {name: where for name, where in read.items() if name not in documented}
    for name in NOT_SETTINGS:
        missing.pop(name, None)
    assert not missing, f"read but not in the Configuration table: {missing}"


def test_the_configuration_table_names_only_variables_something_reads():
    read = variables_read()

    unread = variables_documented() - set(read) - set(READ_BY_LIBRARIES)
    assert not unread, f"in the Configuration table but read by nothing: {sorted(unread)}"


def test_the_scan_finds_settings_read_every_way_the_code_reads_them():
    """The scan itself: a setting read through each reader is found (so the two tests
    above cannot pass by finding nothing)."""
    read = variables_read()
    for name in (
        "DEBUG",  # env_bool
        "DATABASE_URL",  # database_from_url
        "MEMORYUI_DEMO_MODEL",  # env_str over several lines
        "MEMORYUI_LLAMA_GGUF",  # os.environ.get(a constant)
        "LOG_LEVEL",  # os.environ.setdefault in manage.py
        "CELERY_UNACKED_RESTORE_INTERVAL",
    ):
        assert name in read, name
