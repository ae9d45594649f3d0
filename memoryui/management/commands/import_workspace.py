import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from generation.tree import TreeError
from memoryui.importer import import_workspace, valid_workspace_name
from memoryui.management.common import DATA_COMMAND_CHECKS, dashboard_url, progress_bar


class Command(BaseCommand):
    requires_system_checks = DATA_COMMAND_CHECKS
    help = (
        "Import (or re-import) a workspace directory or an SDK snapshot .tar. "
        "Re-running it only stores what changed; files on disk are never modified."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("path", help="workspace directory or snapshot .tar")
        parser.add_argument("--name", help="workspace name (default: from the path)")
        parser.add_argument(
            "--json", action="store_true", help="print exactly one JSON object on stdout"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        as_json = options["json"]
        name = options["name"]
        if name is not None and not valid_workspace_name(name):
            raise CommandError(
                f"invalid workspace name {name!r}: use letters, digits, '.', '_' or '-' "
                "(up to 100, starting with a letter or digit)"
            )
        progress = None if as_json else progress_bar(options["verbosity"])
        try:
            result = import_workspace(Path(options["path"]), name, progress=progress)
        except TreeError as exc:
            if as_json:
                self.stdout.write(
                    json.dumps(
                        {
                            "workspace": name,
                            "layouts": [],
                            "errors": [{"path": ".", "error": str(exc)}],
                        }
                    )
                )
                sys.exit(1)
            raise CommandError(str(exc)) from exc
        finally:
            if progress is not None:
                progress.close()
        if as_json:
            self.stdout.write(json.dumps(result.as_json()))
        else:
            self._summary(result)
        if not result.imported_anything:
            if not as_json:
                self.stderr.write(f"Nothing imported: {options['path']} holds no files.")
            sys.exit(1)

    def _summary(self, result: Any) -> None:
        out = self.stdout
        out.write(self.style.SUCCESS(f"Workspace {result.workspace.name}"))
        out.write(
            f"  {result.files} entries: {result.added} added, {result.changed} changed, "
            f"{result.unchanged} unchanged, {result.missing} gone from disk"
        )
        for layout in result.layouts:
            out.write(
                f"  layout {layout.memories_dir} + {layout.sessions_dir}: "
                f"{layout.rollouts} rollouts, {layout.raw_memories} raw memories, "
                f"{layout.rollout_summaries} rollout summaries, {layout.skills} skill files, "
                f"MEMORY.md {'yes' if layout.memory_md else 'no'}, "
                f"memory_summary.md {'yes' if layout.memory_summary_md else 'no'}"
            )
        for path in result.new_versions:
            out.write(f"  new version of {path}")
        if result.errors:
            out.write(self.style.WARNING(f"  {len(result.errors)} problem(s):"))
            for error in result.errors:
                out.write(f"    {error['path']}: {error['error']}")
        elif result.imported_anything:
            out.write("  no problems")
        out.write(f"  {dashboard_url('memoryui:workspace_detail', result.workspace.name)}")
