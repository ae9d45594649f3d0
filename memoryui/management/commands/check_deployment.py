"""Check that this installation can run what the settings name, and list the directories
web, workers and beat must share. Exit status 1 when a module cannot be imported."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from memoryui.deployment import (
    missing_modules,
    named_modules,
    object_stores,
    shared_directories,
)


class Command(BaseCommand):
    help = (
        "Import every module the settings name (and the broker's transport); list the "
        "directories that web, workers and beat must share."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        missing = missing_modules()
        for name, why in missing.items():
            self.stderr.write(f"cannot import {name}: {why}")
        if missing:
            raise CommandError(
                f"{len(missing)} module(s) named by the settings are not installed; "
                "install the locked runtime dependencies (uv sync --frozen --no-default-groups)."
            )
        self.stdout.write(f"{len(named_modules()) + 1} modules import.")
        self.stdout.write("Directories that web, workers and beat must share:")
        for what, paths in shared_directories().items():
            for path in paths:
                self.stdout.write(f"  {what}: {path}")
        stores = object_stores()
        if stores:
            self.stdout.write("In object storage (no shared directory needed):")
            for what, where in stores.items():
                self.stdout.write(f"  {what}: {where}")
