"""The dashboard under load, as in production: gunicorn (compose.yaml's command, DEBUG=0),
PostgreSQL and Redis, the 10,000-rollout workspace, and 8 clients each requesting a mix of
dashboard pages and the API's rollout list (with a personal API token) over loopback HTTP.

    .venv/bin/python bench/bench_load.py --tree /tmp/bench-10k \\
        --database-url postgres://postgres@127.0.0.1:5432/memoryui_load_bench \\
        --redis-url redis://127.0.0.1:6379/7

The login page (no session, no query beyond the session middleware's) is requested in the
same mix by the same clients: its p95 is the baseline, measured under the same load. Each
other page's p95 and the p95 of the whole mix are printed against it (goal: at most 3x),
with every error (a status other than 200, a refused or dropped connection).

``--live-pages N``: meanwhile N open review pages of one proposal, each its own signed-in
reviewer, poll the live review endpoint every second as ``live.js`` does (``If-None-Match``,
its poll token, a move to another card every ``--move-every`` polls); their answers (200,
304 from the view, 304 answered early from the cache's stamp) are counted apart from the
mix. Compare the mix's p95 of a run with and without them. ``--cache-url`` is the Redis
the web processes share as Django's cache (``CACHE_URL``, as compose.yaml sets it); empty:
each process's memory, so that every poll takes the full path.

Bounded: ``--rounds`` passes over the mix per client and at most ``--seconds`` in all;
only 127.0.0.1 is ever contacted. The database is created for the run and dropped after
it (its name must contain ``bench``).
"""

from __future__ import annotations

import argparse
import http.client
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlencode

BENCH_DIR = Path(__file__).resolve().parent
PROJECT_DIR = BENCH_DIR.parent
for _path in (PROJECT_DIR, BENCH_DIR):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import bench_pages  # noqa: E402
import generate_tree  # noqa: E402

GOAL_RATIO = 3.0
HOST = "127.0.0.1"
LOGIN = "login page"
API = "API rollout list"
# The pages of bench_pages.py that people wait on most (the proposal review pages are
# measured by bench_pages.py; they change with every proposal).
MIX = [
    "workspace",
    "layout overview",
    "rollouts, page 1",
    "rollouts, page 100",
    "rollout (most segments)",
    "MEMORY.md",
    "MEMORY.md, page 50",
]
USER, PASSWORD = "load", "load-bench-pass-123"
LIVE = "live review poll"
POLL_SECONDS = 1.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def environment(
    database_url: str, redis_url: str, workdir: Path, cache_url: str = ""
) -> dict[str, str]:
    """compose.yaml's settings, without TLS (loopback HTTP)."""
    env = dict(os.environ)
    env.update(
        DJANGO_SETTINGS_MODULE="memoryui.settings",
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(48),
        ALLOWED_HOSTS=HOST,
        DATABASE_URL=database_url,
        DATABASE_CONN_MAX_AGE="60",
        CELERY_BROKER_URL=redis_url,
        CACHE_URL=cache_url,
        MEMORYUI_VAR_DIR=str(workdir / "var"),
        STATIC_ROOT=str(workdir / "static"),
        SECURE_SSL_REDIRECT="0",
        SESSION_COOKIE_SECURE="0",
        CSRF_COOKIE_SECURE="0",
        LOG_LEVEL="WARNING",
    )
    return env


def prepare(tree: Path, env: dict[str, str], live_pages: int = 0) -> tuple[dict[str, str], str]:
    """Migrate, import the tree, create the user, its membership and an API token (in
    this process, on the same database); return the URLs of the mix and the token (and,
    with ``live_pages``, the live endpoint of a proposal and one reviewer per page)."""
    os.environ.update(env)
    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connections
    from django.urls import reverse

    from memoryui import tokens
    from memoryui.importer import import_workspace
    from memoryui.models import Layout, Membership, Role, Workspace

    call_command("migrate", verbosity=0)
    call_command("collectstatic", interactive=False, verbosity=0)  # as the image's build
    started = time.perf_counter()
    import_workspace(tree, "bench")
    log(f"imported in {time.perf_counter() - started:.1f} s")
    user = get_user_model().objects.create_user(USER, password=PASSWORD)
    Membership.objects.create(
        workspace=Workspace.objects.get(name="bench"), user=user, role=Role.REVIEWER
    )
    urls = {label: url for label, url in bench_pages.pages() if label in MIX}
    layout = Layout.objects.select_related("workspace").order_by("memories_dir").first()
    assert layout is not None
    api = reverse("api:list_rollouts", args=["bench", layout.pk])
    urls[API] = api + "?" + urlencode({"limit": 50, "offset": 5000})
    urls[LOGIN] = reverse("login")
    secret = tokens.create_token(user, "load bench", ["bench"]).secret
    if live_pages:
        proposal = bench_pages.proposal_pk(layout)
        urls[LIVE] = reverse("memoryui:proposal_live", args=["bench", layout.pk, proposal])
        for i in range(live_pages):
            reviewer = get_user_model().objects.create_user(f"{USER}{i}", password=PASSWORD)
            Membership.objects.create(
                workspace=Workspace.objects.get(name="bench"), user=reviewer, role=Role.REVIEWER
            )
    connections.close_all()
    return urls, secret


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def request(
    port: int, method: str, url: str, headers: dict[str, str], body: str | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    try:
        conn.request(method, url, body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, data
    finally:
        conn.close()


def cookies_of(headers: list[tuple[str, str]]) -> dict[str, str]:
    jar = {}
    for name, value in headers:
        if name.lower() == "set-cookie":
            key, _, rest = value.partition("=")
            jar[key] = rest.split(";", 1)[0]
    return jar


def sign_in(port: int, login_url: str, username: str = USER) -> str:
    """A session cookie, through the login form as a browser would (with its CSRF token)."""
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    conn.request("GET", login_url)
    page = conn.getresponse()
    jar = cookies_of(page.getheaders())
    html = page.read().decode()
    conn.close()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', html)
    assert token, "no CSRF token on the login page"
    body = urlencode(
        {"username": username, "password": PASSWORD, "csrfmiddlewaretoken": token.group(1)}
    )
    conn = http.client.HTTPConnection(HOST, port, timeout=60)
    conn.request(
        "POST",
        login_url,
        body=body,
        headers={
            "Content-Type": "application/x-www-form-urlencoded",
            "Cookie": "; ".join(f"{k}={v}" for k, v in jar.items()),
            "Referer": f"http://{HOST}:{port}{login_url}",
        },
    )
    answer = conn.getresponse()
    answer.read()
    jar.update(cookies_of(answer.getheaders()))
    conn.close()
    assert answer.status == 302 and "sessionid" in jar, f"login failed ({answer.status})"
    return "; ".join(f"{k}={v}" for k, v in jar.items())


@dataclass
class Results:
    times: dict[str, list[float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, label: str, ms: float) -> None:
        with self.lock:
            self.times.setdefault(label, []).append(ms)

    def error(self, message: str) -> None:
        with self.lock:
            self.errors.append(message)


def client(
    index: int,
    port: int,
    urls: dict[str, str],
    cookie: str,
    secret: str,
    rounds: int,
    deadline: float,
    results: Results,
) -> None:
    labels = list(urls)
    labels = labels[index % len(labels) :] + labels[: index % len(labels)]  # staggered
    for _ in range(rounds):
        for label in labels:
            if time.monotonic() > deadline:
                return
            headers = {"Host": f"{HOST}:{port}"}
            if label == API:
                headers["Authorization"] = f"Bearer {secret}"
            elif label != LOGIN:
                headers["Cookie"] = cookie
            started = time.perf_counter()
            try:
                status, _, _ = request(port, "GET", urls[label], headers)
            except OSError as exc:
                results.error(f"{label}: {exc}")
                continue
            elapsed = (time.perf_counter() - started) * 1000
            if status != 200:
                results.error(f"{label}: HTTP {status}")
                continue
            results.add(label, elapsed)


def live_page(
    index: int,
    port: int,
    url: str,
    cookie: str,
    done: threading.Event,
    results: Results,
    move_every: int = 10,
    keep_alive: bool = False,
) -> None:
    """One open review page: polls ``url`` every second with the last ETag and poll
    token, as live.js does, and moves to another card every ``move_every`` polls (a
    presence write, and a new stamp for every page). With ``keep_alive``, on one
    connection while the server keeps it, as a browser does; else a new one a poll."""
    etag, token, cursor, polls = "", "", None, 0
    conn: http.client.HTTPConnection | None = None
    while not done.is_set():
        started = time.perf_counter()
        card = f"entry-memory_md-{(index * 7 + polls // move_every) % 4096:012x}"
        query = {"at": card, **({"since": cursor} if cursor is not None else {"drawn": 0})}
        headers = {"Host": f"{HOST}:{port}", "Cookie": cookie}
        if etag:
            headers["If-None-Match"] = etag
        if token:
            headers["X-Live-Token"] = token
        try:
            if keep_alive:
                status, answer, body = -1, {}, b""
                for _ in range(2):  # a connection the server closed meanwhile: a new one
                    conn = conn or http.client.HTTPConnection(HOST, port, timeout=60)
                    try:
                        conn.request("GET", f"{url}?{urlencode(query)}", headers=headers)
                        response = conn.getresponse()
                        body = response.read()
                    except (http.client.HTTPException, ConnectionError):
                        conn.close()
                        conn = None
                        continue
                    status = response.status
                    answer = {k.lower(): v for k, v in response.getheaders()}
                    if response.will_close:
                        conn.close()
                        conn = None
                    break
                if status < 0:
                    raise ConnectionError("the connection was closed twice")
            else:
                status, answer, body = request(port, "GET", f"{url}?{urlencode(query)}", headers)
        except OSError as exc:
            results.error(f"{LIVE}: {exc}")
            status = 0
        elapsed = (time.perf_counter() - started) * 1000
        if status in (200, 304):
            etag = answer.get("etag", etag)
            token = answer.get("x-live-token", token)
        if status == 200:
            cursor = re.search(rb'"cursor": ?(\d+)', body).group(1).decode()  # type: ignore[union-attr]
        if status == 304 and "x-live-token" not in answer:
            results.add(f"{LIVE} 304 early", elapsed)
        elif status in (200, 304):
            results.add(f"{LIVE} {status}", elapsed)
        elif status:
            results.error(f"{LIVE}: HTTP {status}")
        polls += 1
        done.wait(max(0.0, POLL_SECONDS - elapsed / 1000))


def server_cpu(master: int) -> float:
    """CPU seconds the gunicorn workers (the master's children) have used so far."""
    total = 0.0
    for child in Path(f"/proc/{master}/task/{master}/children").read_text().split():
        fields = Path(f"/proc/{child}/stat").read_text().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[max(0, round(0.95 * len(ordered)) - 1)]


def report(results: Results, seconds: float, clients: int, workers: str) -> str:
    login = results.times.get(LOGIN, [])
    if not login:
        return "no successful login page request: nothing to compare with"
    base = p95(login)
    every = [t for label, ts in results.times.items() if label != LOGIN for t in ts]
    count = sum(len(ts) for ts in results.times.values())
    lines = [
        f"gunicorn {workers} workers, {clients} clients, {count} requests answered 200 in "
        f"{seconds:.1f} s ({count / seconds:.1f}/s), {len(results.errors)} errors; "
        f"load average {os.getloadavg()[0]:.1f}",
        "",
        f"{'page':<26} {'n':>5} {'p50 ms':>8} {'p95 ms':>8} {'x login':>8}",
    ]
    for label, ts in results.times.items():
        ratio = p95(ts) / base
        lines.append(
            f"{label:<26} {len(ts):5d} {sorted(ts)[len(ts) // 2]:8.1f} {p95(ts):8.1f} {ratio:8.2f}"
        )
    if every:
        ratio = p95(every) / base
        verdict = "ok" if ratio <= GOAL_RATIO and not results.errors else "OVER"
        lines.append(
            f"{'whole mix (not login)':<26} {len(every):5d} {sorted(every)[len(every) // 2]:8.1f} "
            f"{p95(every):8.1f} {ratio:8.2f}  goal <= {GOAL_RATIO:.0f}x, no error: {verdict}"
        )
    for message in results.errors[:20]:
        lines.append(f"error: {message}")
    return "\n".join(lines)


def live_report(polls: Results, seconds: float, pages: int) -> str:
    lines = [f"{pages} open review pages polling: {sum(map(len, polls.times.values()))} polls"]
    for label, ts in sorted(polls.times.items()):
        lines.append(
            f"{label:<26} {len(ts):5d} {sorted(ts)[len(ts) // 2]:8.1f} {p95(ts):8.1f}"
            f"  ({len(ts) / seconds:.1f}/s)"
        )
    lines += [f"error: {message}" for message in polls.errors[:20]]
    return "\n".join(lines)


def reset_database(url: str, drop_only: bool = False) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    if "bench" not in name:
        raise SystemExit("give a PostgreSQL database whose name contains 'bench'")
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if not drop_only:
            conn.execute(f'CREATE DATABASE "{name}"')


def wait_until_up(port: int, server: subprocess.Popen, url: str, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"gunicorn exited with {server.returncode}")
        try:
            if request(port, "GET", url, {})[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise SystemExit("gunicorn did not answer in time")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, help="reuse (or generate) the tree here")
    parser.add_argument("--rollouts", type=int, default=10_000)
    parser.add_argument(
        "--database-url", default="postgres://postgres@127.0.0.1:5432/memoryui_load_bench"
    )
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    parser.add_argument(
        "--cache-url",
        default="redis://127.0.0.1:6379/11",
        help="Django's cache (CACHE_URL); empty: each process's memory",
    )
    parser.add_argument(
        "--move-every", type=int, default=10, help="a live page moves card every N polls"
    )
    parser.add_argument(
        "--keep-alive",
        action="store_true",
        help="live pages keep their connection open between polls, as browsers do",
    )
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--workers", type=int, default=3, help="gunicorn workers (compose: 3)")
    parser.add_argument(
        "--threads",
        type=int,
        default=0,
        help="gthread workers with this many threads each, as compose.yaml runs them (32); "
        "0: gunicorn's sync workers",
    )
    parser.add_argument("--rounds", type=int, default=10, help="passes over the mix per client")
    parser.add_argument("--seconds", type=float, default=300, help="stop after this long")
    parser.add_argument("--keep", action="store_true", help="keep the database")
    parser.add_argument(
        "--live-pages", type=int, default=0, help="open review pages polling meanwhile"
    )
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="memoryui-load-"))
    tree = args.tree or workdir / "tree"
    if not (tree / "README.md").exists():
        log(f"generating {args.rollouts:,} rollouts in {tree} ...")
        generate_tree.main([str(tree), "--rollouts", str(args.rollouts)])
    reset_database(args.database_url)
    env = environment(args.database_url, args.redis_url, workdir, args.cache_url)
    server = None
    try:
        urls, secret = prepare(tree, env, args.live_pages)
        live_url = urls.pop(LIVE, "")
        port = free_port()
        env["WEB_CONCURRENCY"] = str(args.workers)
        server = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "memoryui.wsgi:application"]
            + ["--bind", f"{HOST}:{port}", "--workers", str(args.workers)]
            + (
                ["--worker-class", "gthread", "--threads", str(args.threads)]
                if args.threads
                else []
            ),
            cwd=PROJECT_DIR,
            env=env,
            stdout=(workdir / "gunicorn.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        wait_until_up(port, server, urls[LOGIN])
        cookie = sign_in(port, urls[LOGIN])
        for label, url in urls.items():  # warm every worker's caches a little
            for _ in range(args.workers):
                headers = {"Cookie": cookie, "Authorization": f"Bearer {secret}"}
                status = request(port, "GET", url, headers if label != LOGIN else {})[0]
                if status != 200:
                    raise SystemExit(f"{label} ({url}) answered HTTP {status} before the run")
        live_cookies = [sign_in(port, urls[LOGIN], f"{USER}{i}") for i in range(args.live_pages)]
        log(f"{args.clients} clients, {args.rounds} rounds of {len(urls)} requests each ...")
        results, polls, done = Results(), Results(), threading.Event()
        pollers = [
            threading.Thread(
                target=live_page,
                args=(i, port, live_url, c, done, polls, args.move_every, args.keep_alive),
            )
            for i, c in enumerate(live_cookies)
        ]
        for thread in pollers:
            thread.start()
        if pollers:  # every page has drawn and polls; then what polling alone costs
            time.sleep(POLL_SECONDS)
            cpu, count = server_cpu(server.pid), sum(map(len, polls.times.values()))
            time.sleep(10)
            count = sum(map(len, polls.times.values())) - count
            per_poll = (server_cpu(server.pid) - cpu) / count * 1000
            log(f"polling alone: {per_poll:.1f} ms of CPU a poll")
        cpu = server_cpu(server.pid)
        started = time.monotonic()
        deadline = started + args.seconds
        threads = [
            threading.Thread(
                target=client,
                args=(i, port, urls, cookie, secret, args.rounds, deadline, results),
            )
            for i in range(args.clients)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        cpu = server_cpu(server.pid) - cpu
        done.set()
        for thread in pollers:
            thread.join()
        workers = f"{args.workers}{f' x {args.threads} threads' if args.threads else ' sync'}"
        print(report(results, time.monotonic() - started, args.clients, workers))
        answered = sum(map(len, results.times.values()))
        print(f"server CPU {cpu:.1f} s, {cpu / answered * 1000:.1f} ms a request of the mix")
        if pollers:
            print(live_report(polls, time.monotonic() - started, len(pollers)))
        return 0 if not results.errors and not polls.errors else 1
    finally:
        if server is not None:
            os.killpg(server.pid, signal.SIGTERM)
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(server.pid, signal.SIGKILL)
                server.wait()
        if not args.keep:
            reset_database(args.database_url, drop_only=True)
            shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
