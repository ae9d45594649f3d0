"""The local demo's workspace: a copy of the bundled sample under ``var/``, so that the
demo's write-backs and exports never touch the repository's tracked files."""

from __future__ import annotations

import shutil
import tarfile
import tempfile
from pathlib import Path

from django.conf import settings

from .importer import Progress, import_workspace
from .models import Workspace

SAMPLE = Path(settings.BASE_DIR) / "sample" / "small-a"
DEMO_NAME = "small-a"
# The sample's default layout as a sandbox's agent consolidated it (its README says how).
SANDBOX_STATE = Path(settings.BASE_DIR) / "sample" / "small-a-sandbox"
DEMO_SANDBOX = "demo-sandbox"


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
        upload_agent_consolidation()
    return workspace


def upload_agent_consolidation() -> None:
    """Merge the sandbox state of ``sample/small-a-sandbox`` into the demo workspace as
    the remote snapshot store merges a sandbox's upload (with the sample's rollouts, as
    a sandbox's archive holds them): its agent's change to ``MEMORY.md`` and
    ``memory_summary.md`` becomes a proposal awaiting review. Once: a text the layout
    had already is no change."""
    with tempfile.TemporaryDirectory() as tmp:
        archive = Path(tmp) / f"{DEMO_SANDBOX}.tar"
        with tarfile.open(archive, "w") as tar:
            for name in ("MEMORY.md", "memory_summary.md"):
                tar.add(SANDBOX_STATE / "memories" / name, f"memories/{name}")
            for rollout in sorted((SAMPLE / "sessions").glob("*.jsonl")):
                tar.add(rollout, f"sessions/{rollout.name}")
        import_workspace(archive, DEMO_NAME, merge=DEMO_SANDBOX)
