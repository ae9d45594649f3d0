from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from generation.export import ExportError
from memoryui.models import Workspace
from memoryui.snapshots import ExportRefused, export_snapshot


class Command(BaseCommand):
    help = (
        "Export a workspace as an SDK LocalSnapshot archive <base-path>/<snapshot-id>.tar: "
        "the imported tree byte for byte, with the curated memory of all or chosen layouts. "
        "With --session-state, also the session state that UnixLocalSandboxClient.resume() "
        "accepts, beside it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("workspace", help="workspace name")
        parser.add_argument("--base-path", required=True, type=Path, help="snapshot directory")
        parser.add_argument("--snapshot-id", required=True, help="archive name, without .tar")
        parser.add_argument(
            "--layout",
            dest="layouts",
            nargs="+",
            action="extend",
            metavar="MEMORIES_DIR",
            help="curated memory of these layouts only (default: every layout)",
        )
        parser.add_argument(
            "--session-state",
            action="store_true",
            help="also write <snapshot-id>.session_state.json beside the archive",
        )
        parser.add_argument(
            "--workspace-root",
            type=Path,
            help="where the resumed sandbox's workspace lives "
            "(default: <base-path>/<snapshot-id>-workspace; emptied on resume)",
        )
        parser.add_argument(
            "--allow-finding",
            nargs="+",
            action="extend",
            default=[],
            metavar="ID",
            dest="allow_findings",
            help="let these lint findings through",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        workspace = Workspace.objects.filter(name=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"no workspace named {options['workspace']!r}")
        try:
            result = export_snapshot(
                workspace,
                snapshot_id=options["snapshot_id"],
                base_path=options["base_path"].absolute(),
                memories_dirs=options["layouts"],
                allow_findings=options["allow_findings"],
                session_state=options["session_state"],
                workspace_root=options["workspace_root"],
            )
        except ExportRefused as exc:
            for f in exc.findings:
                where = f"{f.path}:{f.line}" if f.line else f.path
                self.stdout.write(self.style.WARNING(f"FINDING {f.id} {where}: {f.message}"))
                if f.excerpt:
                    self.stdout.write(f"    {f.excerpt}")
            for refusal in exc.refused:
                self.stdout.write(self.style.ERROR(f"REFUSED {refusal.path}: {refusal.reason}"))
            if exc.findings:
                ids = " ".join(f.id for f in exc.findings)
                self.stdout.write(f"to let them through knowingly: --allow-finding {ids}")
            raise CommandError(str(exc)) from exc
        except ExportError as exc:
            raise CommandError(str(exc)) from exc
        info = result.snapshot
        out = self.stdout
        out.write(self.style.SUCCESS(f"Wrote {info.path}"))
        out.write(f"  {info.members} members, {info.size:,} bytes, sha256 {info.sha256}")
        for planned in result.plan.overlay.values():
            out.write(f"  curated {planned.path}  ({planned.source})")
        if result.session_state:
            source = result.session_state_source or "a fresh unix_local state"
            out.write(f"Wrote {result.session_state} (from {source})")
