"""What the management commands share: finding a workspace by name, and the lint
findings' option and report."""

from collections.abc import Sequence

from django.core.management.base import CommandError, CommandParser, OutputWrapper
from django.core.management.color import Style

from generation.lint import Finding
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
