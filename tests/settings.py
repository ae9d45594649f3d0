"""The settings the type checker's Django plugin loads (``[tool.django-stubs]`` in
pyproject.toml): development's, ``DEBUG`` on unless set, as for the tests
(``tests/development.py``), so that ``mypy`` needs no environment of its own."""

import os

os.environ.setdefault("DEBUG", "1")

from memoryui.settings import *  # noqa: E402, F403
