from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from generation.export import ExportError
from memoryui.management.common import (
    DATA_COMMAND_CHECKS,
    add_allow_finding,
    crash_hook,
    dashboard_url,
    progress_bar,
    workspace_named,
    write_findings,
)
from memoryui.snapshots import export_snapshot
from memoryui.writeback import Refused


class Command(BaseCommand):
    requires_system_checks = DATA_COMMAND_CHECKS
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
        add_allow_finding(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        workspace = workspace_named(options["workspace"])
        bar = progress_bar(options["verbosity"])
        try:
            result = export_snapshot(
                workspace,
                snapshot_id=options["snapshot_id"],
                base_path=options["base_path"].absolute(),
                memories_dirs=options["layouts"],
                allow_findings=options["allow_findings"],
                session_state=options["session_state"],
                workspace_root=options["workspace_root"],
                on_step=crash_hook(),
                progress=bar,
            )
        except Refused as exc:
            for refusal in exc.refused:
                self.stdout.write(self.style.ERROR(f"REFUSED {refusal.path}: {refusal.reason}"))
            write_findings(self.stdout, self.style, exc.findings)
            raise CommandError(str(exc)) from exc
        except ExportError as exc:
            raise CommandError(str(exc)) from exc
        finally:
            if bar is not None:
                bar.close()
        info = result.snapshot
        out = self.stdout
        out.write(self.style.SUCCESS(f"Wrote {info.path}"))
        out.write(f"  {info.members} members, {info.size:,} bytes, sha256 {info.sha256}")
        for planned in result.plan.overlay.values():
            out.write(f"  curated {planned.path}  ({planned.source})")
        if result.session_state:
            source = result.session_state_source or "a fresh unix_local state"
            out.write(f"Wrote {result.session_state} (from {source})")
        out.write(f"  {dashboard_url('memoryui:workspace_export', workspace.name)}")
