"""A real OpenID Connect provider for the sign-in tests: django-oauth-toolkit's, in a small
Django project of its own, run as a separate process (``python -m tests.oidc_provider``)
on a loopback port. tests/test_oidc.py starts it, creates its people and groups through
its /testing/ endpoints, and signs in through it the way a browser does."""
