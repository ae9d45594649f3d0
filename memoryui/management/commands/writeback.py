from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from generation.export import WrittenFile
from memoryui.management.common import (
    DATA_COMMAND_CHECKS,
    add_allow_finding,
    crash_hook,
    dashboard_url,
    layouts_named,
    progress_bar,
    workspace_named,
    write_findings,
)
from memoryui.writeback import Refused, WritebackError, WritebackResult, write_back


class Command(BaseCommand):
    requires_system_checks = DATA_COMMAND_CHECKS
    help = (
        "Write a workspace's curated memory (current MEMORY.md and memory_summary.md, and "
        "the latest approved consolidation) into its layouts' directories on this server. "
        "Files changed on disk since the import, and lint findings, block until named."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("workspace", help="workspace name")
        parser.add_argument(
            "--layout",
            dest="layouts",
            action="append",
            metavar="MEMORIES_DIR",
            help="only this layout (repeatable; default: every layout)",
        )
        parser.add_argument("--dry-run", action="store_true", help="report, write nothing")
        parser.add_argument(
            "--overwrite",
            nargs="+",
            action="extend",
            default=[],
            metavar="PATH",
            help="replace these conflicting files although they changed on disk",
        )
        add_allow_finding(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        workspace = workspace_named(options["workspace"])
        layouts = layouts_named(workspace, options["layouts"])
        on_step = crash_hook()
        failed = []
        for layout in layouts:
            self.stdout.write(self.style.MIGRATE_HEADING(f"Layout {layout.memories_dir}"))
            bar = progress_bar(options["verbosity"])
            try:
                result = write_back(
                    layout,
                    overwrite=options["overwrite"],
                    allow_findings=options["allow_findings"],
                    dry_run=options["dry_run"],
                    on_written=self._written,
                    on_step=on_step,
                    progress=bar,
                )
            except Refused as exc:
                self._refused(exc)
                failed.append(layout.memories_dir)
                continue
            except WritebackError as exc:
                self.stderr.write(self.style.ERROR(f"  {exc}"))
                failed.append(layout.memories_dir)
                continue
            finally:
                if bar is not None:
                    bar.close()
            self._report(result)
            url = dashboard_url("memoryui:layout_writeback", workspace.name, layout.pk)
            self.stdout.write(f"  {url}")
        if failed:
            raise CommandError(f"write-back not done for {', '.join(failed)}")

    def _written(self, written: WrittenFile) -> None:
        self.stdout.write(f"  wrote {written.path}  sha256 {written.sha256}")

    def _report(self, result: WritebackResult) -> None:
        plan = result.plan
        out = self.stdout
        out.write(f"  {len(plan.changed)} changed file(s), {plan.unchanged_count} unchanged")
        for path in result.skipped_on_disk:
            out.write(f"  already on disk {path}")
        if result.dry_run:
            for planned in result.would_write:
                verb = "would delete" if planned.deleted else "would write"
                out.write(f"  {verb} {planned.path}  ({planned.source})")
            self._conflicts(result.blocking_conflicts)
            write_findings(self.stdout, self.style, result.blocking_findings, indent="  ")
            for refusal in plan.refused:
                out.write(self.style.ERROR(f"  REFUSED {refusal.path}: {refusal.reason}"))
            out.write(self.style.SUCCESS("  dry run: nothing written"))
            return
        for path in result.deleted:
            out.write(f"  deleted {path}")
        out.write(
            self.style.SUCCESS(
                f"  wrote {len(result.written)} file(s)"
                + (f", deleted {len(result.deleted)}" if result.deleted else "")
            )
        )

    def _refused(self, exc: Refused) -> None:
        for refusal in exc.refused:
            self.stdout.write(self.style.ERROR(f"  REFUSED {refusal.path}: {refusal.reason}"))
        self._conflicts(exc.conflicts)
        write_findings(self.stdout, self.style, exc.findings, indent="  ")
        self.stderr.write(self.style.ERROR(f"  {exc}"))

    def _conflicts(self, conflicts: list[Any]) -> None:
        for conflict in conflicts:
            state = "deleted" if conflict.disk_sha256 is None else "changed"
            self.stdout.write(
                self.style.WARNING(f"  CONFLICT {conflict.path} {state} on disk since the import:")
            )
            self.stdout.write(conflict.unified() or "  (no text difference)")
            self.stdout.write(
                f"  import it first, or pass --overwrite {conflict.path} to replace it knowingly"
            )
