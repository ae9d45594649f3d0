import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from memoryui.demo import demo_workspace_dir, prepare_demo_workspace
from memoryui.management.common import progress_bar
from memoryui.models import WorkspaceFile


class Command(BaseCommand):
    help = (
        "For the local demo: import a copy of the bundled sample workspace (under var/workspaces, "
        "so write-backs never touch the repository) and print the demo login: its password "
        "is random, chosen on the first start and kept across restarts (in var/demo-password) "
        "until --reset-password chooses another."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--url", default=settings.MEMORYUI_BASE_URL + "/")
        parser.add_argument(
            "--reset-password",
            action="store_true",
            help="choose a new random password (the last one stops working)",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        bar = progress_bar(options["verbosity"])
        try:
            workspace = prepare_demo_workspace(progress=bar)
        finally:
            if bar is not None:
                bar.close()
        rollouts = workspace.files.present().filter(kind=WorkspaceFile.Kind.ROLLOUT).count()
        User = get_user_model()
        user, _ = User.objects.get_or_create(username=options["username"])
        kept = password_file()
        password = "" if options["reset_password"] else _read(kept)
        if not password or not user.check_password(password):
            password = secrets.token_urlsafe(12)
            user.set_password(password)
            _write(kept, password)
        user.is_staff = user.is_superuser = True
        user.save()
        self.stdout.write(
            f"Sample workspace 'small-a' (a copy in {demo_workspace_dir()}): "
            f"{workspace.layouts.present().count()} layouts, {rollouts} rollouts.\n"
            + self.style.SUCCESS(
                f"\n  memoryui is at {options['url']}\n"
                f"  Log in as  {user.get_username()}  with password  {password}\n"
            )
        )


def password_file() -> Path:
    """Where the demo login's password is kept between starts (readable by its owner only):
    a restart prints it again instead of logging everyone out."""
    return Path(settings.VAR_DIR) / "demo-password"


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (FileNotFoundError, UnicodeDecodeError):
        return ""


def _write(path: Path, password: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(path.name + ".tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as out:
        out.write(password + "\n")
    os.replace(temporary, path)
