"""``python -m tests.oidc_provider PORT``: migrate the provider's database, register the
clients, and serve on 127.0.0.1:PORT until killed."""

import json
import os
import sys

os.environ["DJANGO_SETTINGS_MODULE"] = "tests.oidc_provider.settings"

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.core.servers.basehttp import run  # noqa: E402
from django.core.wsgi import get_wsgi_application  # noqa: E402
from oauth2_provider.models import Application  # noqa: E402

port = int(sys.argv[1])
call_command("migrate", verbosity=0)
for client in json.loads(os.environ["OIDC_PROVIDER_CLIENTS"]):
    Application.objects.create(
        name=client["client_id"],
        client_id=client["client_id"],
        client_secret=client["client_secret"],
        client_type=Application.CLIENT_CONFIDENTIAL,
        authorization_grant_type=Application.GRANT_AUTHORIZATION_CODE,
        redirect_uris=" ".join(client["redirect_uris"]),
        algorithm=Application.RS256_ALGORITHM,
        skip_authorization=True,
    )
print("ready", flush=True)
run("127.0.0.1", port, get_wsgi_application(), threading=True)
