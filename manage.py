#!/usr/bin/env python
import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "memoryui.settings")
    # Commands print their own progress; the key=value INFO lines are for the web server
    # and the workers (LOG_LEVEL=INFO shows them here too).
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
