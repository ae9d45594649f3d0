import secrets
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
        "so write-backs never touch the repository) and (re)set the demo login's password "
        "to a fresh random one, printed once."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--url", default=settings.MEMORYUI_BASE_URL + "/")

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
        password = secrets.token_urlsafe(12)
        user.set_password(password)
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
