#!/usr/bin/env python
import os
import sys

from django.core.exceptions import ImproperlyConfigured
from django.core.management import execute_from_command_line


def main() -> int:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
    # Commands print their own progress; the key=value INFO lines are for the web server
    # and the workers (LOG_LEVEL=INFO shows them here too).
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    try:
        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # A setting from the environment is missing or wrong: say which, not a traceback
        # (unless asked for one, as Django's --traceback asks for a command's errors).
        if "--traceback" in sys.argv:
            raise
        print(f"manage.py: configuration error: {exc}", file=sys.stderr)
        if "SECRET_KEY" in str(exc) and os.environ.get("DEBUG", "") == "":
            print(
                "  For development on this machine, `export DEBUG=1` first (bin/start does); "
                "in production set SECRET_KEY and ALLOWED_HOSTS (README, Configuration).",
                file=sys.stderr,
            )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
