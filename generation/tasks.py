"""Celery tasks: thin wrappers that take ids and call plain functions.

The one module of ``generation`` that touches Django models.
"""

from pathlib import Path

from celery import shared_task


@shared_task(acks_late=True)
def reimport_workspace(workspace_id: int, user_id: int | None = None) -> None:
    """Re-run the import of a workspace from its recorded source. Safe to run twice:
    the import is a sync that skips unchanged files."""
    from django.contrib.auth import get_user_model

    from generation.tree import TreeError
    from memoryui.importer import import_workspace
    from memoryui.models import ImportRun, Workspace

    workspace = Workspace.objects.filter(pk=workspace_id).first()
    if workspace is None:
        return
    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    try:
        import_workspace(Path(workspace.source_path), workspace.name, user=user)
    except TreeError as exc:
        ImportRun.objects.create(
            workspace=workspace,
            status=ImportRun.Status.FAILED,
            report={"layouts": [], "errors": [{"path": ".", "error": str(exc)}]},
            triggered_by=user,
        )
