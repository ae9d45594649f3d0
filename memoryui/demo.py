"""The local demo's workspace: a copy of the bundled sample under ``var/``, so that the
demo's write-backs and exports never touch the repository's tracked files."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from django.conf import settings

from .importer import Progress, import_workspace
from .models import Workspace

SAMPLE = Path(settings.BASE_DIR) / "sample" / "small-a"
DEMO_NAME = "small-a"


def demo_workspace_dir() -> Path:
    return Path(settings.VAR_DIR) / "workspaces" / DEMO_NAME  # under the default workspace roots


def prepare_demo_workspace(progress: Progress | None = None) -> Workspace:
    """Copy the sample to ``var/workspaces/small-a`` (once; later write-backs land there) and
    import it as the workspace ``small-a``, unless it already is imported from there. A
    demo database from before the copy existed is re-pointed at the copy."""
    target = demo_workspace_dir()
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".copy-", dir=target.parent))
        shutil.copytree(SAMPLE, staging / DEMO_NAME, symlinks=True)
        (staging / DEMO_NAME).rename(target)  # a half-copied tree is never taken
        staging.rmdir()
    workspace = Workspace.objects.filter(name=DEMO_NAME).first()
    if workspace is None or workspace.source_path != str(target):
        workspace = import_workspace(target, DEMO_NAME, progress=progress).workspace
    return workspace
