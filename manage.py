#!/usr/bin/env python
import gc

gc.disable()  # until the command is loaded: see Utility

import os  # noqa: E402
import sys  # noqa: E402

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.management import BaseCommand, ManagementUtility  # noqa: E402

from memoryui.configuration import configuration_error_line  # noqa: E402


class Utility(ManagementUtility):
    """Django's own, but for the garbage collector: start-up (Django, the settings, the
    models, the command's modules) makes hundreds of thousands of objects that live as
    long as the process, and collecting among them was an eighth of a command's start.
    The collector is off until the command is loaded, then those objects are frozen out
    of it (as ``memoryui/wsgi.py`` does for the web process) and it runs as usual."""

    def fetch_command(self, subcommand: str) -> BaseCommand:
        command = super().fetch_command(subcommand)
        gc.freeze()
        gc.enable()
        return command


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
    # Commands print their own progress; the key=value INFO lines are for the web server
    # and the workers (LOG_LEVEL=INFO shows them here too).
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    try:
        Utility(sys.argv).execute()
    except ImproperlyConfigured as exc:
        # A setting from the environment is missing or wrong: say which, not a traceback
        # (unless asked for one, as Django's --traceback asks for a command's errors).
        if "--traceback" in sys.argv:
            raise
        print(configuration_error_line("manage.py", exc), file=sys.stderr)
        if "SECRET_KEY" in str(exc) and os.environ.get("DEBUG", "") == "":
            print(
                "  For development on this machine, `export DEBUG=1` first (bin/start does); "
                "in production set SECRET_KEY and ALLOWED_HOSTS (docs/configuration.md).",
                file=sys.stderr,
            )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
