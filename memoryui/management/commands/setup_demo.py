import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser

from memoryui.importer import import_workspace
from memoryui.models import Workspace, WorkspaceFile

SAMPLE = Path(settings.BASE_DIR) / "sample" / "small-a"


class Command(BaseCommand):
    help = (
        "For the local demo: import the bundled sample workspace and (re)set the demo "
        "login's password to a fresh random one, printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--url", default="http://127.0.0.1:8000/")

    def handle(self, *args: Any, **options: Any) -> None:
        if not Workspace.objects.filter(name="small-a").exists():
            import_workspace(SAMPLE, "small-a")
        workspace = Workspace.objects.get(name="small-a")
        rollouts = workspace.files.present().filter(kind=WorkspaceFile.Kind.ROLLOUT).count()
        User = get_user_model()
        user, _ = User.objects.get_or_create(username=options["username"])
        password = secrets.token_urlsafe(12)
        user.set_password(password)
        user.is_staff = user.is_superuser = True
        user.save()
        self.stdout.write(
            f"Sample workspace 'small-a': {workspace.layouts.present().count()} layouts, "
            f"{rollouts} rollouts.\n"
            + self.style.SUCCESS(
                f"\n  memoryui is at {options['url']}\n"
                f"  Log in as  {user.get_username()}  with password  {password}\n"
            )
        )
