import sys
import time
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from memoryui import pipeline
from memoryui.management.common import (
    dashboard_url,
    layouts_named,
    progress_bar,
    quiet_http_logs,
    workspace_named,
)
from memoryui.models import GenerationRun
from memoryui.tasks import start_generation

PING_TIMEOUT = 1.0  # seconds to wait for a Celery worker to answer


class Command(BaseCommand):
    help = (
        "Run the two-phase memory generation for a workspace's layouts (all, or one with "
        "--layout). Without --wait the runs are queued for the Celery workers (the command "
        "says whether one is listening); with --wait they run in this process with a "
        "progress bar on stderr. Each run ends with its dashboard URL (MEMORYUI_BASE_URL)."
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
        parser.add_argument(
            "--reextract",
            action="store_true",
            help="also run phase one on rollouts already extracted on disk (by the SDK)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        quiet_http_logs(options["verbosity"])
        workspace = workspace_named(options["workspace"])
        wanted = [options["layout"].strip("/")] if options["layout"] else None
        layouts = layouts_named(workspace, wanted)
        failed = False
        queued = False
        for layout in layouts:
            try:
                run = pipeline.start_run(layout, reextract=options["reextract"])
            except (pipeline.RunConflict, pipeline.GenerationUnavailable) as exc:
                raise CommandError(str(exc)) from exc
            label = f"{workspace.name}: {layout.memories_dir} run #{run.pk}"
            if run.offline_demo:
                label += " (offline demo model)"
            if not options["wait"]:
                start_generation.delay_on_commit(run.pk)
                self.stdout.write(f"queued {label}")
                self.stdout.write(f"  {_run_url(run)}")
                queued = True
                continue
            self.stdout.write(f"running {label}")
            self.stdout.flush()
            started = time.monotonic()
            bar = progress_bar(options["verbosity"])
            try:
                run = pipeline.run_inline(run.pk, threads=options["threads"], progress=bar)
            finally:
                if bar is not None:
                    bar.close()
            failed |= self._report(run, time.monotonic() - started)
        if queued:
            self._workers()
        if failed:
            sys.exit(1)

    def _workers(self) -> None:
        """Say whether a Celery worker will take the queued runs."""
        if settings.CELERY_TASK_ALWAYS_EAGER:
            return
        from memoryui.celery import app  # noqa: PLC0415 (deferred: Celery loads only to send the run)

        try:
            replies = app.control.ping(timeout=PING_TIMEOUT)
        except Exception as exc:  # the broker is down: the runs wait for it
            self.stdout.write(
                self.style.WARNING(f"The broker cannot be reached ({exc}); the runs wait for it.")
            )
            return
        if replies:
            names = ", ".join(sorted(name for reply in replies for name in reply))
            self.stdout.write(f"A worker is listening ({names}): follow the runs at the URLs.")
        else:
            self.stdout.write(
                self.style.WARNING(
                    f"No Celery worker answered within {PING_TIMEOUT:g} s: the runs wait until "
                    "one starts (celery -A memoryui worker -B; bin/start runs one), "
                    "or use --wait to run them here."
                )
            )

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
                f"({len(proposal.added)} added, {len(proposal.removed)} forgotten); review it at"
            )
            url = dashboard_url(
                "memoryui:proposal_review", run.layout.workspace.name, run.layout_id, proposal.pk
            )
            self.stdout.write(f"  {url}")
        else:
            self.stdout.write(f"  {_run_url(run)}")
        return run.status != GenerationRun.Status.DONE


def _run_url(run: GenerationRun) -> str:
    return dashboard_url("memoryui:run_detail", run.layout.workspace.name, run.layout_id, run.pk)
