"""Mail for people who watch a workspace, through a real SMTP server (aiosmtpd) on a
loopback port: one mail per watched event (or one digest a day), each with the page's link
and a signed one-click unsubscribe (RFC 8058) that works once; a mail server that is down
is tried again by a real worker, and what caused the mail is not held up."""

import email
import email.policy
import socket
import threading
from email.message import EmailMessage as ParsedMessage
from urllib.parse import urlsplit

import pytest
from aiosmtpd.controller import Controller
from django.core import signing
from django.test import Client
from django.urls import reverse

from memoryui import notifications, pipeline, tasks
from memoryui.celery import app
from memoryui.models import (
    AuditEvent,
    GenerationRun,
    Layout,
    Membership,
    Notification,
    Proposal,
    Watch,
    Workspace,
)
from tests.factories import make_user
from tests.test_celery_worker import start_worker, stop, wait_for

BASE = "http://dash.example"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Mailbox:
    """An SMTP server on 127.0.0.1 that keeps every message it is given."""

    def __init__(self, port: int) -> None:
        self.messages: list[ParsedMessage] = []
        self.arrived = threading.Condition()
        outer = self

        class Handler:
            async def handle_DATA(self, server, session, envelope):  # noqa: N802
                parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
                with outer.arrived:
                    outer.messages.append(parsed)
                    outer.arrived.notify_all()
                return "250 OK"

        self.controller = Controller(Handler(), hostname="127.0.0.1", port=port)

    def __enter__(self) -> "Mailbox":
        self.controller.start()
        return self

    def __exit__(self, *exc) -> None:
        self.controller.stop()

    def wait(self, count: int, timeout: float = 60) -> None:
        with self.arrived:
            assert self.arrived.wait_for(lambda: len(self.messages) >= count, timeout), (
                f"{len(self.messages)} of {count} mails arrived"
            )


@pytest.fixture
def smtp_port(settings) -> int:
    port = free_port()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST = "127.0.0.1"
    settings.EMAIL_PORT = port
    settings.MEMORYUI_BASE_URL = BASE
    return port


@pytest.fixture
def mailbox(smtp_port):
    with Mailbox(smtp_port) as box:
        yield box


@pytest.fixture
def sent_now(monkeypatch, django_capture_on_commit_callbacks):
    """The tasks that a commit queues, run here as the worker would run them."""
    queued: list[int] = []
    monkeypatch.setattr(tasks.send_notification, "delay", lambda pk: queued.append(pk))

    def run():
        for pk in queued:
            assert notifications.send_one(pk) is None
        done = list(queued)
        queued.clear()
        return done

    return run


@pytest.fixture
def world(tmp_path):
    workspace = Workspace.objects.create(
        name="alpha", source_kind="directory", source_path=str(tmp_path)
    )
    layout = Layout.objects.create(workspace=workspace, memories_dir="memories", sessions_dir="s")
    people = {}
    for name in ("ada", "bob", "cleo", "dan"):
        people[name] = make_user(name)
        people[name].email = f"{name}@example.com"
        people[name].save()
    Watch.objects.create(user=people["ada"], workspace=workspace, mode="each")
    Watch.objects.create(user=people["cleo"], workspace=workspace, mode="daily")
    # dan watches another workspace; bob watches nothing
    other = Workspace.objects.create(name="beta", source_kind="directory", source_path="/x")
    Watch.objects.create(user=people["dan"], workspace=other, mode="each")
    return workspace, layout, people


def proposal_in(layout: Layout) -> Proposal:
    run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.DONE)
    return Proposal.objects.create(
        layout=layout, run=run, memory_md="", memory_summary="", raw_memories_md=""
    )


def unsubscribe_link(message: ParsedMessage) -> str:
    header = str(message["List-Unsubscribe"]).strip()  # folded: the URL is long
    assert header.startswith("<") and header.endswith(">")
    return header[1:-1]


@pytest.mark.django_db
def test_each_watched_event_sends_exactly_one_mail_to_each_watcher(
    world, mailbox, sent_now, django_capture_on_commit_callbacks
):
    workspace, layout, people = world

    with django_capture_on_commit_callbacks(execute=True):
        proposal = proposal_in(layout)
        AuditEvent.record(workspace, "snapshot_store.held_back", layout=layout, target="v7")
        run = GenerationRun.objects.create(layout=layout, status=GenerationRun.Status.EXTRACTING)
        pipeline.fail_run(run.pk, "the model went away")
    assert len(sent_now()) == 3

    assert len(mailbox.messages) == 3
    assert {m["To"] for m in mailbox.messages} == {"ada@example.com"}
    by_subject = {m["Subject"]: m for m in mailbox.messages}
    assert set(by_subject) == {
        "[memoryui] alpha: A proposal awaits review",
        "[memoryui] alpha: An agent's change is held back from sandboxes",
        "[memoryui] alpha: A generation run failed",
    }
    review = by_subject["[memoryui] alpha: A proposal awaits review"]
    body = review.get_content()
    page = reverse(
        "memoryui:proposal_review",
        kwargs={"name": "alpha", "layout_pk": layout.pk, "pk": proposal.pk},
    )
    assert f"Open: {BASE}{page}" in body
    assert review["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    link = unsubscribe_link(review)
    assert link.startswith(BASE + "/notifications/unsubscribe/") and f"Stop: {link}" in body
    failed = by_subject["[memoryui] alpha: A generation run failed"].get_content()
    assert "the model went away" in failed
    # Sent once: the same task run again (a redelivery) sends nothing more.
    for pk in Notification.objects.values_list("pk", flat=True):
        notifications.send_one(pk)
    assert len(mailbox.messages) == 3


@pytest.mark.django_db
def test_a_watcher_who_may_no_longer_see_the_workspace_is_told_nothing(
    world, mailbox, sent_now, settings, django_capture_on_commit_callbacks
):
    workspace, layout, people = world
    settings.MEMORYUI_DEFAULT_ROLE = "none"  # ada and cleo watch, but are no members
    Membership.objects.create(user=people["cleo"], workspace=workspace, role="viewer")
    Watch.objects.filter(user=people["cleo"]).update(mode="each")

    with django_capture_on_commit_callbacks(execute=True):
        proposal_in(layout)
    sent_now()

    assert [m["To"] for m in mailbox.messages] == ["cleo@example.com"]


@pytest.mark.django_db
def test_a_daily_watcher_gets_one_digest_with_every_event_and_nothing_in_between(
    world, mailbox, sent_now, django_capture_on_commit_callbacks
):
    workspace, layout, people = world
    with django_capture_on_commit_callbacks(execute=True):
        proposal_in(layout)
        proposal_in(layout)
    sent_now()
    assert [m["To"] for m in mailbox.messages] == ["ada@example.com"] * 2

    assert notifications.send_digests() == 1

    digests = [m for m in mailbox.messages if m["To"] == "cleo@example.com"]
    assert len(digests) == 1
    assert digests[0]["Subject"] == "[memoryui] alpha: daily digest"
    body = digests[0].get_content()
    assert "2 events since the last digest" in body and body.count("awaits review") == 2
    assert digests[0]["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    assert notifications.send_digests() == 0  # nothing new: no second digest
    assert len(mailbox.messages) == 3


@pytest.mark.django_db
def test_the_unsubscribe_link_is_signed_needs_no_login_and_works_once(
    world, mailbox, sent_now, django_capture_on_commit_callbacks
):
    workspace, layout, people = world
    with django_capture_on_commit_callbacks(execute=True):
        proposal_in(layout)
    sent_now()
    path = urlsplit(unsubscribe_link(mailbox.messages[0])).path
    mail_client = Client(enforce_csrf_checks=True)  # no session, no CSRF cookie

    looked = mail_client.get(path)  # a link checker opening it unsubscribes nobody
    assert looked.status_code == 200 and Watch.objects.filter(user=people["ada"]).exists()
    first = mail_client.post(
        path, "List-Unsubscribe=One-Click", content_type="application/x-www-form-urlencoded"
    )
    again = mail_client.post(
        path, "List-Unsubscribe=One-Click", content_type="application/x-www-form-urlencoded"
    )

    assert first.status_code == 200 and "no more mail about alpha" in first.content.decode()
    assert not Watch.objects.filter(user=people["ada"]).exists()
    assert Watch.objects.filter(user=people["cleo"]).exists()  # only that watch ended
    assert again.status_code == 410 and "used already" in again.content.decode()
    assert AuditEvent.objects.filter(action="notifications.unsubscribe", target="ada").count() == 1

    token = path.rstrip("/").rsplit("/", 1)[1]
    forged = signing.dumps(
        {"w": Watch.objects.get(user=people["cleo"]).pk, "u": people["cleo"].pk}, salt="other"
    )
    for bad in (token[:-2] + "xx", forged):
        answer = mail_client.post(reverse("notifications_unsubscribe", args=[bad]))
        assert answer.status_code == 400 and "not valid" in answer.content.decode()
    assert Watch.objects.filter(user=people["cleo"]).exists()
    # Watching again makes a new watch: the old link does not end it.
    Watch.objects.create(user=people["ada"], workspace=workspace)
    assert mail_client.post(path).status_code == 410
    assert Watch.objects.filter(user=people["ada"]).exists()


@pytest.mark.django_db
def test_a_member_watches_and_stops_watching_on_the_notifications_page(world):
    workspace, layout, people = world
    client = Client()
    client.force_login(people["bob"])
    page = reverse("memoryui:watch", args=["alpha"])
    assert "You do not watch this workspace" in client.get(page).content.decode()

    assert client.post(page, {"mode": "daily"}).status_code == 302
    assert Watch.objects.get(user=people["bob"]).mode == "daily"
    assert "One daily digest" in client.get(page).content.decode()
    assert client.post(page, {"mode": "sometimes"}).status_code == 400
    assert client.post(page, {"mode": "off"}).status_code == 302
    assert not Watch.objects.filter(user=people["bob"]).exists()

    people["bob"].email = ""
    people["bob"].save()
    answer = client.post(page, {"mode": "each"})
    assert answer.status_code == 400 and "no e-mail address" in answer.content.decode()
    assert Client().get(page).status_code == 302  # a login first


@pytest.mark.django_db(transaction=True)
def test_a_mail_server_that_is_down_is_tried_again_by_the_worker_and_holds_nothing_up(
    broker, smtp_port, tmp_path, monkeypatch, settings
):
    monkeypatch.setenv("EMAIL_BACKEND", "django.core.mail.backends.smtp.EmailBackend")
    monkeypatch.setenv("EMAIL_HOST", "127.0.0.1")
    monkeypatch.setenv("EMAIL_PORT", str(smtp_port))
    monkeypatch.setenv("MEMORYUI_BASE_URL", BASE)
    monkeypatch.setenv("MEMORYUI_NOTIFICATION_RETRY_BASE_SECONDS", "1")
    workspace = Workspace.objects.create(name="alpha", source_kind="directory", source_path="/x")
    layout = Layout.objects.create(workspace=workspace, memories_dir="memories", sessions_dir="s")
    ada = make_user("ada")
    ada.email = "ada@example.com"
    ada.save()
    Watch.objects.create(user=ada, workspace=workspace)
    settings.CELERY_BROKER_URL = broker
    worker = start_worker(broker, "", "mail", tmp_path, beat=False)
    try:
        # With no mail server at all, the change that causes the mail commits at once.
        with app.connection_for_write(broker) as connection:
            monkeypatch.setattr(
                tasks.send_notification,
                "delay",
                lambda pk: tasks.send_notification.apply_async((pk,), connection=connection),
            )
            proposal = proposal_in(layout)
        assert Proposal.objects.filter(pk=proposal.pk).exists()
        notification = Notification.objects.get()
        wait_for(
            lambda: Notification.objects.get().attempts >= 1,
            60,
            "a first try against the mail server that is down",
            worker,
        )
        assert Notification.objects.get().sent_at is None
        assert "Connection refused" in Notification.objects.get().error
        with Mailbox(smtp_port) as box:
            box.wait(1, timeout=60)
            wait_for(
                lambda: Notification.objects.get().sent_at is not None,
                30,
                "the notification to be marked sent",
                worker,
            )
    finally:
        log = stop(worker)
    assert len(box.messages) == 1, log
    assert box.messages[0]["Subject"] == "[memoryui] alpha: A proposal awaits review"
    assert Notification.objects.get(pk=notification.pk).attempts >= 2


@pytest.mark.django_db
def test_a_mail_server_that_stays_down_is_tried_with_backoff_up_to_the_limit(
    world, smtp_port, settings, django_capture_on_commit_callbacks, monkeypatch
):
    settings.MEMORYUI_NOTIFICATION_RETRY_BASE_SECONDS = 60
    settings.MEMORYUI_NOTIFICATION_MAX_ATTEMPTS = 3
    queued: list[int] = []
    monkeypatch.setattr(tasks.send_notification, "delay", queued.append)
    workspace, layout, people = world
    with django_capture_on_commit_callbacks(execute=True):
        proposal_in(layout)  # nothing listens on smtp_port

    waits = [notifications.send_one(queued[0]) for _ in range(3)]

    assert waits == [60.0, 120.0, None]  # then no more tries
    failed = Notification.objects.get(pk=queued[0])
    assert failed.attempts == 3 and failed.sent_at is None and failed.error


def test_beat_sends_the_digests_once_a_day_at_the_configured_hour(settings):
    entry = app.conf.beat_schedule["send-digests"]

    assert entry["task"] == "memoryui.tasks.send_digests"
    assert entry["task"] in app.tasks
    assert entry["schedule"].hour == {settings.MEMORYUI_DIGEST_HOUR} == {7}
    assert entry["schedule"].minute == {0}
