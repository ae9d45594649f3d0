"""Outbound calls that cannot be turned inward: webhook receivers are refused at
registration and at connect time when they point inside the network, redirects are not
followed, a slow receiver is cut at the deadline, a huge answer is not read, and pages
and the audit log show a receiver's origin only. And the README's receiver recipe."""

import re
import socket
import threading
from pathlib import Path

import pytest
from django.test import Client
from django.urls import reverse

from memoryui import webhooks
from memoryui.celery import app
from memoryui.models import AuditEvent, Webhook, WebhookDelivery
from tests.factories import make_user
from tests.test_production import COMPOSE
from tests.test_webhooks import Receiver

README = (Path(__file__).resolve().parent.parent / "docs" / "api.md").read_text()  # the recipe
PUBLIC = "93.184.215.14"  # a public address (no connection is made to it in these tests)
_real_getaddrinfo = socket.getaddrinfo


@pytest.fixture
def dns(monkeypatch):
    """Names this test resolves itself: name -> [address, ...]; others as usual."""
    names: dict[str, list[str]] = {}

    def getaddrinfo(host, port, *args, **kwargs):
        if host in names:
            return [
                (
                    socket.AF_INET6 if ":" in a else socket.AF_INET,
                    socket.SOCK_STREAM,
                    6,
                    "",
                    (a, port),
                )
                for a in names[host]
            ]
        return _real_getaddrinfo(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return names


@pytest.fixture
def admin_client(layout):
    client = Client()
    client.force_login(make_user("ada", staff=True))
    return client


REFUSED = [
    ("http://127.0.0.1/hook", "loopback"),
    ("http://localhost:8080/hook", "loopback"),
    ("http://[::1]/hook", "loopback"),
    ("http://[::ffff:127.0.0.1]/hook", "IPv4-mapped"),
    ("http://0.0.0.0/hook", "unspecified"),
    ("http://169.254.169.254/latest/meta-data", "169.254.169.254 is a link-local"),
    ("http://10.1.2.3/hook", "private"),
    ("http://172.16.0.9/hook", "private"),
    ("http://192.168.1.1/hook", "private"),
    ("http://[fd00::1]/hook", "private"),
    ("http://[fe80::1]/hook", "link-local"),
    ("http://100.64.0.1/hook", "not a public address"),
    ("http://224.0.0.1/hook", "multicast"),
    ("http://240.0.0.1/hook", "reserved"),
    # IPv6 ranges that embed an IPv4 address a relay may deliver to: refused whole.
    ("http://[2002:7f00:1::1]/hook", "6to4"),  # 127.0.0.1
    ("http://[2002:a00:1::1]/hook", "6to4"),  # 10.0.0.1
    ("http://[2002:808:808::1]/hook", "6to4"),  # even a public 8.8.8.8
    ("http://[2001:0:4136:e378:8000:63bf:3fff:fdd2]/hook", "Teredo"),
    ("http://[64:ff9b::a00:1]/hook", "NAT64"),
    ("http://[64:ff9b:1::a00:1]/hook", "local-use NAT64"),
    ("http://[::ffff:0:a00:1]/hook", "IPv4-translated"),
    ("http://[::10.0.0.1]/hook", "IPv4-compatible"),
    ("http://six.example.com/hook", "resolves to 2002:a00:1::1"),
    ("http://intranet.example.com/hook", "resolves to 10.0.0.7"),
    ("http://sneaky.example.com/hook", "resolves to 127.0.0.1"),
    ("http://metadata.google.internal/computeMetadata/v1/", "does not resolve"),
    ("https://user:secret@hooks.example.com/hook", "credentials"),
    ("ftp://hooks.example.com/hook", "only http:// and https://"),
    ("gopher://hooks.example.com/hook", "Enter a valid URL"),
]


@pytest.mark.parametrize("url,why", REFUSED)
def test_a_receiver_inside_the_network_is_refused_at_registration(admin_client, dns, url, why):
    dns["intranet.example.com"] = ["10.0.0.7"]
    dns["six.example.com"] = ["2002:a00:1::1"]
    dns["sneaky.example.com"] = [PUBLIC, "127.0.0.1"]  # one bad answer is enough
    dns["hooks.example.com"] = [PUBLIC]
    dns["metadata.google.internal"] = []

    response = admin_client.post(reverse("memoryui:webhook_list", args=["a"]), {"url": url})

    assert response.status_code == 400
    assert why in response.content.decode()
    assert not Webhook.objects.exists()


def test_the_allow_setting_lets_an_on_premises_receiver_through(admin_client, dns, settings):
    dns["hooks.corp.example"] = ["10.20.3.4"]
    url = reverse("memoryui:webhook_list", args=["a"])
    settings.MEMORYUI_OUTBOUND_ALLOW = ["10.20.0.0/16"]
    by_range = admin_client.post(url, {"url": "https://hooks.corp.example/hook"})
    settings.MEMORYUI_OUTBOUND_ALLOW = ["hooks.corp.example"]
    by_name = admin_client.post(url, {"url": "https://hooks.corp.example/other"})
    settings.MEMORYUI_OUTBOUND_ALLOW = ["10.30.0.0/16"]
    outside = admin_client.post(url, {"url": "https://hooks.corp.example/third"})

    assert by_range.status_code == 200 and by_name.status_code == 200
    assert outside.status_code == 400
    assert Webhook.objects.count() == 2


def test_the_admin_refuses_the_same_targets(layout):
    hook = Webhook(workspace=layout.workspace, url="http://169.254.169.254/", secret="s")
    with pytest.raises(Exception, match="link-local"):
        hook.full_clean()


def test_pages_and_the_audit_log_show_the_receivers_origin_only(admin_client, dns):
    dns["hooks.example.com"] = [PUBLIC]
    secret_url = "https://hooks.example.com:8443/T0KEN-in-path/hook?key=s3cret"
    url = reverse("memoryui:webhook_list", args=["a"])
    added = admin_client.post(url, {"url": secret_url})
    hook = Webhook.objects.get()
    WebhookDelivery.objects.create(webhook=hook, event="export.done", payload={})
    page = admin_client.get(url).content.decode()
    deleted = admin_client.post(reverse("memoryui:webhook_delete", args=["a", hook.pk]))
    audit = admin_client.get(reverse("memoryui:audit_log", args=["a"]) + "?format=csv")

    csv = b"".join(audit.streaming_content).decode()
    assert "webhook.create" in csv
    for shown in (added.content.decode(), page, csv):
        assert "T0KEN" not in shown and "s3cret" not in shown
    assert "https://hooks.example.com:8443" in page
    assert deleted.status_code == 302
    targets = set(AuditEvent.objects.filter(action__startswith="webhook.").values_list("target"))
    assert targets == {("https://hooks.example.com:8443",)}


def _delivery(layout, url: str) -> WebhookDelivery:
    hook = Webhook.objects.create(workspace=layout.workspace, url=url, secret="whsec_test")
    return WebhookDelivery.objects.create(webhook=hook, event="export.done", payload={"x": 1})


def _last_error(delivery: WebhookDelivery) -> str:
    return delivery.attempts.order_by("-number").first().error


def test_a_name_that_resolves_inside_at_delivery_time_is_not_called(layout, dns, settings):
    """Registered while the name pointed outside, then DNS answers 127.0.0.1: the check
    runs at connect time, so nothing reaches the receiver."""
    settings.MEMORYUI_OUTBOUND_ALLOW = []
    with Receiver() as receiver:
        port = receiver.server.server_port
        dns["rebind.example.com"] = ["127.0.0.1"]
        delivery = _delivery(layout, f"http://rebind.example.com:{port}/hook")

        webhooks.attempt(delivery.pk)

    assert receiver.requests == []
    assert "resolves to 127.0.0.1, a loopback address" in _last_error(delivery)


def test_the_connection_goes_to_the_checked_address_under_the_receivers_name(layout, dns, settings):
    settings.MEMORYUI_OUTBOUND_ALLOW = ["127.0.0.1"]
    with Receiver() as receiver:
        port = receiver.server.server_port
        dns["hooks.test"] = ["127.0.0.1"]
        delivery = _delivery(layout, f"http://hooks.test:{port}/hook")

        assert webhooks.attempt(delivery.pk) is None

    _, headers, _ = receiver.requests[0]
    assert headers["Host"] == f"hooks.test:{port}"
    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "delivered"


class RawServer:
    """A TCP server on 127.0.0.1 that answers every connection with ``respond(conn)``
    and records how many bytes it managed to send."""

    def __init__(self, respond) -> None:
        self.respond, self.sent, self.done = respond, 0, threading.Event()
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/hook"
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        conn.settimeout(30)
        try:
            conn.recv(65536)
            self.respond(self, conn)
        except OSError:
            pass
        finally:
            conn.close()
            self.done.set()

    def send(self, conn, data: bytes) -> None:
        conn.sendall(data)
        self.sent += len(data)

    def close(self) -> None:
        self.sock.close()


def test_a_receiver_that_drips_its_answer_is_cut_at_the_deadline(layout, settings):
    settings.MEMORYUI_OUTBOUND_ALLOW = ["127.0.0.1"]
    settings.MEMORYUI_WEBHOOK_DEADLINE_SECONDS = 1.5
    lines = 60

    def drip(server, conn):
        server.send(conn, b"HTTP/1.1 200 OK\r\n")
        for n in range(lines):  # one header line every 0.25 s: 15 s in all
            server.send(conn, f"X-Drip-{n}: 1\r\n".encode())
            threading.Event().wait(0.25)
        server.send(conn, b"Content-Length: 0\r\n\r\n")

    server = RawServer(drip)
    delivery = _delivery(layout, server.url)
    webhooks.attempt(delivery.pk)
    assert server.done.wait(30)
    server.close()

    assert "did not answer within the 1.5 s deadline" in _last_error(delivery)
    assert server.sent < len(b"HTTP/1.1 200 OK\r\n") + lines * len(b"X-Drip-10: 1\r\n")


def test_a_huge_answer_is_not_read(layout, settings):
    settings.MEMORYUI_OUTBOUND_ALLOW = ["127.0.0.1"]
    size = 100 * 1024 * 1024

    def huge(server, conn):
        server.send(conn, f"HTTP/1.1 200 OK\r\nContent-Length: {size}\r\n\r\n".encode())
        chunk = b"x" * 65536
        for _ in range(size // len(chunk)):
            server.send(conn, chunk)

    server = RawServer(huge)
    delivery = _delivery(layout, server.url)
    webhooks.attempt(delivery.pk)
    assert server.done.wait(60)
    server.close()

    assert WebhookDelivery.objects.get(pk=delivery.pk).status == "delivered"
    assert server.sent < size // 4  # what the kernel's buffers took, no more


def test_a_redirect_is_not_followed_and_the_signature_goes_nowhere_else(layout, settings):
    settings.MEMORYUI_OUTBOUND_ALLOW = ["127.0.0.1"]
    with Receiver() as elsewhere:

        def redirect(server, conn):
            server.send(
                conn,
                f"HTTP/1.1 302 Found\r\nLocation: {elsewhere.url}\r\n"
                "Content-Length: 0\r\n\r\n".encode(),
            )

        server = RawServer(redirect)
        delivery = _delivery(layout, server.url)
        retry_in = webhooks.attempt(delivery.pk)
        server.close()

    assert elsewhere.requests == []
    attempt = delivery.attempts.get()
    assert attempt.status_code == 302 and "redirects are not followed" in attempt.error
    assert retry_in is not None  # a failed try, tried again later


def test_deliveries_have_their_own_queue_and_generation_stays_on_the_default_one():
    def queue(task: str) -> str:
        return app.amqp.router.route({}, task, (1,), {})["queue"].name

    assert queue("memoryui.webhooks.deliver_webhook") == "webhooks"
    assert queue("memoryui.tasks.phase_one_task") == "celery"
    assert queue("memoryui.tasks.start_generation") == "celery"
    for name, service in COMPOSE["services"].items():
        command = " ".join(service.get("command", []))
        if " worker" in command:
            consumes = command.split("-Q ")[1].split()[0].split(",")
            assert ("webhooks" in consumes) == (name == "webhooks"), name


# --- the README's receiver recipe ------------------------------------------------------


def readme_verifier() -> dict:
    block = re.search(r"To verify a delivery.*?```python\n(.*?)```", README, re.S).group(1)
    namespace: dict = {}
    exec(compile(block, "docs/api.md", "exec"), namespace)  # noqa: S102 (our own docs)
    return namespace


def test_the_readme_recipe_verifies_a_real_delivery_and_refuses_its_replay(layout, settings):
    settings.MEMORYUI_OUTBOUND_ALLOW = ["127.0.0.1"]
    recipe = readme_verifier()
    with Receiver([500, 200]) as receiver:
        delivery = _delivery(layout, receiver.url)
        webhooks.attempt(delivery.pk)
        webhooks.attempt(delivery.pk)  # the retry: same delivery id, new timestamp
    (_, first, body1), (_, retry, body2) = receiver.requests
    seen: set = set()

    assert recipe["verify"]("whsec_test", first, body1, seen) == str(delivery.pk)
    with pytest.raises(recipe["Replay"]):
        recipe["verify"]("whsec_test", first, body1, seen)  # replayed as it was
    with pytest.raises(recipe["Replay"]):
        recipe["verify"]("whsec_test", retry, body2, seen)  # handled already
    with pytest.raises(recipe["Rejected"], match="bad signature"):
        recipe["verify"]("another-secret", retry, body2, set())


@pytest.mark.parametrize("timestamp", ["", "abc", "12.5", "-1", "١٢٣", "9" * 400])
def test_the_readme_recipe_refuses_a_malformed_timestamp_clearly(timestamp):
    recipe = readme_verifier()
    headers = {"X-Memoryui-Timestamp": timestamp, "X-Memoryui-Signature": "sha256=00"}
    with pytest.raises(recipe["Rejected"], match="malformed X-Memoryui-Timestamp|bad signature"):
        recipe["verify"]("s", headers, b"{}", set())


def test_the_readme_recipe_refuses_an_old_delivery():
    recipe = readme_verifier()
    timestamp = "1000000000"
    mac = webhooks.signature("s", timestamp, b"{}")
    headers = {"X-Memoryui-Timestamp": timestamp, "X-Memoryui-Signature": mac}
    with pytest.raises(recipe["Rejected"], match="tolerance"):
        recipe["verify"]("s", headers, b"{}", set())


def add_in_the_admin(layout, url: str, events: str):  # type: ignore[no-untyped-def]
    """A superuser's admin client, and its answer to adding a receiver at ``url``."""
    from django.contrib.auth import get_user_model  # noqa: PLC0415

    admin = Client()
    admin.force_login(get_user_model().objects.create_superuser("root", "", "pw-for-tests-9"))
    added = admin.post(
        reverse("admin:memoryui_webhook_add"),
        {"workspace": layout.workspace.pk, "url": url, "events": events, "active": "on"},
    )
    return admin, added


def test_the_django_admin_shows_a_webhooks_origin_never_its_secret_nor_query(layout, dns):
    dns["hooks.example.com"] = [PUBLIC]
    admin, added = add_in_the_admin(
        layout,
        "https://hooks.example.com:8443/T0KEN-in-path/hook?key=s3cret",
        '["export.done", "proposal.ready"]',
    )
    assert added.status_code == 302, added.context["adminform"].form.errors
    hook = Webhook.objects.get()
    assert hook.secret.startswith("whsec_")

    pages = [
        admin.get(reverse("admin:memoryui_webhook_changelist")),
        admin.get(reverse("admin:memoryui_webhook_change", args=[hook.pk])),
        admin.get(reverse("admin:memoryui_webhook_delete", args=[hook.pk])),
    ]
    for page in pages:
        text = page.content.decode()
        assert page.status_code == 200 and "https://hooks.example.com:8443" in text
        assert hook.secret not in text and "s3cret" not in text and "T0KEN" not in text
    # A change keeps the receiver and its secret as they were.
    admin.post(
        reverse("admin:memoryui_webhook_change", args=[hook.pk]),
        {"workspace": layout.workspace.pk, "events": '["export.done"]'},
    )
    changed = Webhook.objects.get()
    assert (changed.url, changed.secret) == (hook.url, hook.secret)
    assert changed.events == ["export.done"] and not changed.active


def test_a_receiver_added_in_the_admin_without_a_scheme_is_taken_as_https(layout, dns):
    dns["hooks.example.com"] = [PUBLIC]
    _, added = add_in_the_admin(layout, "hooks.example.com/hook", '["export.done"]')
    assert added.status_code == 302, added.context["adminform"].form.errors
    assert Webhook.objects.get().url == "https://hooks.example.com/hook"
