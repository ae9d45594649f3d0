import sys
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from generation.tasks import start_generation
from memoryui import pipeline
from memoryui.models import GenerationRun, Layout, Workspace


class Command(BaseCommand):
    help = (
        "Run the two-phase memory generation for a workspace's layouts (all, or one with "
        "--layout). Without --wait the runs are queued for the Celery workers; with "
        "--wait they run in this process and the command prints their progress."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("workspace", help="workspace name")
        parser.add_argument("--layout", metavar="MEMORIES_DIR", help="only this layout")
        parser.add_argument(
            "--wait", action="store_true", help="run here and wait for the proposals"
        )
        parser.add_argument(
            "--threads", type=int, default=None, help="with --wait: model calls at once"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        workspace = Workspace.objects.filter(name=options["workspace"]).first()
        if workspace is None:
            raise CommandError(f"No workspace named {options['workspace']!r}.")
        layouts = Layout.objects.present().filter(workspace=workspace)
        if options["layout"]:
            layouts = layouts.filter(memories_dir=options["layout"].strip("/"))
            if not layouts.exists():
                raise CommandError(
                    f"No layout with memories dir {options['layout']!r} in {workspace.name}."
                )
        failed = False
        for layout in layouts:
            try:
                run = pipeline.start_run(layout)
            except (pipeline.RunConflict, pipeline.GenerationUnavailable) as exc:
                raise CommandError(str(exc)) from exc
            label = f"{workspace.name}: {layout.memories_dir} run #{run.pk}"
            if run.offline_demo:
                label += " (offline demo model)"
            if not options["wait"]:
                start_generation.delay_on_commit(run.pk)
                self.stdout.write(f"queued {label}")
                continue
            self.stdout.write(f"running {label}")
            started = time.monotonic()
            run = pipeline.run_inline(run.pk, threads=options["threads"])
            failed |= self._report(run, time.monotonic() - started)
        if failed:
            sys.exit(1)

    def _report(self, run: GenerationRun, seconds: float) -> bool:
        p = pipeline.progress(run)
        self.stdout.write(
            f"  {run.get_status_display()} in {seconds:.1f} s: {p.done}/{p.total} rollouts "
            f"({p.reused} reused, {p.nothing} with nothing to remember), {p.failed} failed; "
            f"tokens {p.input_tokens:,} in / {p.output_tokens:,} out"
        )
        for job in run.jobs.filter(status="failed").select_related("rollout")[:20]:
            self.stdout.write(f"  failed {job.rollout.rollout_id}: {job.error}")
        if run.error:
            self.stdout.write(self.style.ERROR(f"  {run.error}"))
        if run.phase_two_turns:
            self.stdout.write(f"  phase two: {run.phase_two_turns} turn(s)")
        if run.phase_two_note:
            self.stdout.write(f"  phase two ended without a proposal: {run.phase_two_note}")
        proposal = getattr(run, "proposal", None)
        if proposal is not None:
            self.stdout.write(
                f"  proposal #{proposal.pk}: {len(proposal.selection)} raw memories selected "
                f"({len(proposal.added)} added, {len(proposal.removed)} forgotten); "
                "review it in the dashboard"
            )
        return run.status != GenerationRun.Status.DONE
