"""What the management commands share: finding a workspace by name, the lint findings'
option and report, quiet HTTP logs, progress bars, the dashboard's links and the crash
hook of the tests."""

import logging
import os
import sys
from collections.abc import Callable, Sequence

from django.conf import settings
from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.core.management.color import Style
from django.urls import reverse

from generation.lint import Finding
from memoryui.management.progress import ProgressBar
from memoryui.models import Workspace


def workspace_named(name: str) -> Workspace:
    workspace = Workspace.objects.filter(name=name).first()
    if workspace is None:
        raise CommandError(f"no workspace named {name!r}")
    return workspace


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


def dashboard_url(name: str, *args: object) -> str:
    """The dashboard's address of a page: MEMORYUI_BASE_URL and the route ``name``'s path,
    reversed with the dashboard's routes only (``memoryui.urls``: not the API's)."""
    return settings.MEMORYUI_BASE_URL + reverse(name, args=args, urlconf="memoryui.urls")


def progress_bar(verbosity: int) -> ProgressBar | None:
    return ProgressBar() if verbosity >= 1 else None
