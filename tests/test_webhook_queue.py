"""A backlog of slow webhook deliveries does not hold up generation.

Deliveries have their own Celery queue (``webhooks``), consumed in production by their own
worker (compose.yaml's ``webhooks`` service). Here two real worker processes on the Redis
broker do as in production: one consumes the default queue, one the ``webhooks`` queue.
Every delivery goes to a receiver that drips one header line every half second and never
finishes its answer, so each one holds a webhooks thread until the delivery deadline.
A generation run started behind that backlog finishes while deliveries are still waiting.
"""

import signal
import socket
import threading

import pytest

from memoryui.celery import app
from memoryui.models import Webhook, WebhookAttempt, WebhookDelivery, Workspace
from memoryui.tasks import deliver_webhook

from . import test_celery_worker as workers
from .test_celery_worker import finish, start, start_worker, stop, wait_for, wait_ready

pytestmark = pytest.mark.django_db(transaction=True)

# The worker tests' fixtures: a model answering in 0.4 s, a run over medium-300's rollouts.
slow_model = workers.slow_model
medium = workers.medium

DEADLINE = 15  # seconds a delivery may take before the outbound client cuts it
BACKLOG = 24  # deliveries queued before the run: 4 threads x 15 s x 6 rounds = 90 s


class DripReceiver:
    """A receiver that answers a status line, then one header line every half second,
    forever: the slowest receiver a deadline per socket read would never cut."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.connections = 0
        self.closed = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                conn.sendall(b"HTTP/1.1 200 OK\r\n")
                while not self.closed.wait(0.5):
                    conn.sendall(b"X-Still-Thinking: yes\r\n")
            except OSError:
                return

    def close(self) -> None:
        self.closed.set()
        self.server.close()


@pytest.fixture
def receiver():
    drip = DripReceiver()
    yield drip
    drip.close()


def test_a_backlog_of_slow_deliveries_does_not_delay_a_generation_run(
    broker, slow_model, medium, receiver, tmp_path, monkeypatch
):
    monkeypatch.setenv("MEMORYUI_OUTBOUND_ALLOW", "127.0.0.1")
    monkeypatch.setenv("MEMORYUI_WEBHOOK_DEADLINE_SECONDS", str(DEADLINE))
    monkeypatch.setenv("MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS", "600")
    run = medium(jobs=8, concurrency=4)
    hook = Webhook.objects.create(
        workspace=Workspace.objects.get(name="medium"),
        url=f"http://127.0.0.1:{receiver.port}/hook",
        secret="whsec_test",
    )
    deliveries = [
        WebhookDelivery.objects.create(webhook=hook, event="proposal.ready", payload={"n": n})
        for n in range(BACKLOG)
    ]
    generation = start_worker(
        broker, slow_model.base_url, "gen", tmp_path, beat=False, queues="celery"
    )
    hooks = start_worker(
        broker, slow_model.base_url, "hooks", tmp_path, beat=False, queues="webhooks"
    )
    try:
        wait_ready(hooks, broker)

        with app.connection_for_write(broker) as conn:
            for delivery in deliveries:
                deliver_webhook.apply_async((delivery.pk,), connection=conn)
        # The webhooks worker's four threads are all held by the receiver.
        wait_for(lambda: receiver.connections >= 4, 30, "four deliveries in flight", hooks)
        wait_ready(generation, broker)
        start(run, broker)
        log = finish(run, generation, timeout=DEADLINE * BACKLOG / 4 - 5)
        attempted = WebhookAttempt.objects.filter(delivery__in=deliveries).count()
    finally:
        stop(generation)
        # Killed: a warm shutdown would wait for its held deliveries' deadline, and how
        # it ends is not what this test is about.
        stop(hooks, signal.SIGKILL)

    # The run finished with most of the backlog still waiting its turn, not after it.
    assert attempted < BACKLOG // 2, log
    assert receiver.connections < BACKLOG
