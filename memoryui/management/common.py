"""What the management commands share: finding a workspace by name, the lint findings'
option and report, quiet HTTP logs, progress bars, the dashboard's links and the crash
hook of the tests."""

import logging
import os
import sys
from collections.abc import Callable, Sequence
from urllib.parse import quote

from django.conf import settings
from django.core import checks
from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.core.management.color import Style
from django.urls import get_script_prefix, reverse

from generation.lint import Finding
from memoryui.management.progress import ProgressBar
from memoryui.models import Layout, Workspace

# The system checks a data command runs before its work: the models' (9 ms). The URL
# checks import every route of the site (the API, django-ninja, pydantic, the admin):
# half a second of CPU, more than a write-back of one file costs; ``manage.py check``,
# ``runserver``, ``migrate`` and the test suite run them all.
DATA_COMMAND_CHECKS = [checks.Tags.models]


def workspace_named(name: str) -> Workspace:
    """The workspace called ``name``, or a CommandError naming the ones there are."""
    workspace = Workspace.objects.filter(name=name).first()
    if workspace is None:
        names = list(Workspace.objects.order_by("name").values_list("name", flat=True)[:11])
        if not names:
            there = "there is none yet (manage.py import_workspace PATH makes one)"
        else:
            there = "there are: " + ", ".join(names[:10]) + (", ..." if len(names) > 10 else "")
        raise CommandError(f"no workspace named {name!r}; {there}")
    return workspace


def layouts_named(workspace: Workspace, wanted: list[str] | None) -> list[Layout]:
    """The workspace's layouts by memories dir (every one when ``wanted`` is empty), or a
    CommandError naming the ones there are."""
    layouts = list(workspace.layouts.present().order_by("memories_dir"))
    if not wanted:
        return layouts
    known = {layout.memories_dir: layout for layout in layouts}
    missing = [m for m in wanted if m not in known]
    if missing:
        raise CommandError(
            f"no layout {', '.join(missing)} in {workspace.name}; "
            f"its layouts are {', '.join(known) or 'none'}"
        )
    return [known[m] for m in dict.fromkeys(wanted)]


def add_allow_finding(parser: CommandParser) -> None:
    parser.add_argument(
        "--allow-finding",
        nargs="+",
        action="extend",
        default=[],
        metavar="ID",
        dest="allow_findings",
        help="let these lint findings through",
    )


def write_findings(
    out: OutputWrapper, style: Style, findings: Sequence[Finding], indent: str = ""
) -> None:
    """Each finding with where it is, then the option that lets them all through."""
    for f in findings:
        where = f"{f.path}:{f.line}" if f.line else f.path
        out.write(style.WARNING(f"{indent}FINDING {f.id} {where}: {f.message}"))
        if f.excerpt:
            out.write(f"{indent}    {f.excerpt}")
    if findings:
        ids = " ".join(f.id for f in findings)
        out.write(f"{indent}to let them through knowingly: --allow-finding {ids}")


# Test hook of the write-back and export commands: end the process at once (os._exit, as
# a kill would: no cleanup, no commit) at the K-th step boundary, 1 being the first.
CRASH_ENV = "MEMORYUI_CRASH_AT_STEP"


def crash_hook() -> Callable[[str], None] | None:
    value = os.environ.get(CRASH_ENV, "")
    if not value:
        return None
    try:
        at = int(value)
    except ValueError as exc:
        raise CommandError(f"{CRASH_ENV} must be a step number, not {value!r}") from exc
    seen = 0

    def step(name: str) -> None:
        nonlocal seen
        seen += 1
        if seen == at:
            sys.stdout.write(f"crashing at step {at} ({name})\n")
            sys.stdout.flush()
            os._exit(86)

    return step


def quiet_http_logs(verbosity: int) -> None:
    """One log line per model request is noise on the command line: shown at -v 2 only."""
    level = logging.INFO if verbosity >= 2 else logging.WARNING
    for name in ("httpx", "httpx2", "httpcore", "openai"):
        logging.getLogger(name).setLevel(level)


# The pages the commands link to, routed as in memoryui.urls (tests/test_cli_output.py
# checks every one against reverse()): reversing imports every view module of the
# dashboard, a tenth of a second of a command that writes back one file.
COMMAND_LINKS = {
    "memoryui:workspace_detail": "w/{}/",
    "memoryui:workspace_export": "w/{}/export/",
    "memoryui:layout_writeback": "w/{}/layouts/{}/writeback/",
    "memoryui:run_detail": "w/{}/layouts/{}/runs/{}/",
    "memoryui:proposal_review": "w/{}/layouts/{}/proposals/{}/",
}


def dashboard_url(name: str, *args: object) -> str:
    """The dashboard's address of a page: MEMORYUI_BASE_URL and the route ``name``'s path
    (from ``COMMAND_LINKS``, else reversed with the dashboard's routes only)."""
    route = COMMAND_LINKS.get(name)
    if route is None:
        return settings.MEMORYUI_BASE_URL + reverse(name, args=args, urlconf="memoryui.urls")
    path = get_script_prefix() + route.format(*(str(arg) for arg in args))
    return settings.MEMORYUI_BASE_URL + quote(path, safe="!$&'()*+,;=/~:@")


def progress_bar(verbosity: int) -> ProgressBar | None:
    return ProgressBar() if verbosity >= 1 else None
