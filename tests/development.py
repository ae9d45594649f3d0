"""A pytest plugin (``-p tests.development`` in pyproject's ``addopts``) loaded before
pytest-django reads the settings: the test run is a development environment, with
``DEBUG`` on (it is off unless set), as ``bin/start`` sets it. The commands, workers and
servers the tests start inherit it; a test that wants production says ``DEBUG=0``."""

import os

os.environ.setdefault("DEBUG", "1")
