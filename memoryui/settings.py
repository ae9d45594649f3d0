"""Settings for memoryui, read from the environment (see the README's table).

The defaults are a local setup: SQLite and a Celery broker on the file system under
``var/``, so one command starts everything. ``DEBUG`` is off unless set (``bin/start`` and
the test run set ``DEBUG=1``); with it off, ``SECRET_KEY`` and ``ALLOWED_HOSTS`` are
required. Production adds a Postgres ``DATABASE_URL`` and a Redis ``CELERY_BROKER_URL``.

Importing this module reads the environment and nothing else: the folders under
``VAR_DIR`` are made where they are used (the SQLite database's and, with ``DEBUG``, the
static root's when Django starts, in ``memoryui.apps``; the file-system broker's and beat's
by the Celery app, ``memoryui.celery``; the rest by the code that writes there).
"""

import os
from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(os.environ.get("MEMORYUI_VAR_DIR", BASE_DIR / "var"))


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    if value.lower() in ("1", "true", "yes", "on"):
        return True
    if value.lower() in ("0", "false", "no", "off"):
        return False
    raise ImproperlyConfigured(f"{name} must be a boolean (1/0, true/false), got {value!r}")


def env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return int(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer, got {value!r}") from None


def env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    if value is None or value == "":
        return default
    try:
        return float(value)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number, got {value!r}") from None


def database_from_url(name: str, default: str, conn_max_age: int) -> dict[str, Any]:
    """The database ``name`` (an environment variable holding a URL) points at: SQLite or
    PostgreSQL, the two this project runs on and tests; anything else is one clear line
    naming the variable (the URL's scheme only: it may hold a password)."""
    url = env_str(name) or default  # set but empty: the default, as for the other settings
    scheme = url.partition("://")[0] if "://" in url else ""
    supported = "sqlite:///PATH or postgres://USER:PASSWORD@HOST:PORT/NAME"
    if scheme not in ("sqlite", "postgres", "postgresql", "pgsql", "postgis"):
        shown = f"a {scheme}:// URL" if scheme else "no URL"
        raise ImproperlyConfigured(
            f"{name} must be {supported} (SQLite or PostgreSQL), got {shown}"
        )
    try:
        config: dict[str, Any] = dict(dj_database_url.parse(url, conn_max_age=conn_max_age))
    except (ValueError, KeyError) as exc:
        raise ImproperlyConfigured(f"{name} is not a valid {scheme}:// URL ({exc})") from None
    return config


def env_list(name: str, default: list[str], sep: str = ",") -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(sep) if item.strip()]


DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "django-insecure-local-development-key-only-for-debug-mode"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # The admin's modules (and what they import) load with the site's routes
    # (memoryui/site_urls.py), not in every command.
    "django.contrib.admin.apps.SimpleAdminConfig",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "axes",
    "memoryui",
]
# django-ninja is not an installed app: importing it (and pydantic) would cost every
# command and process a quarter of a second; the API loads it on its first request.
# Its templates and static files (the Swagger UI, served locally) are found here instead.
NINJA_DIR = Path(find_spec("ninja").origin).parent  # type: ignore[union-attr, arg-type]

MIDDLEWARE = [
    # HEAD is answered wherever GET is (views run as for GET, the body is dropped).
    "memoryui.middleware.HeadAsGetMiddleware",
    # /healthz first: load balancers probe it by IP over plain HTTP, without a login.
    "memoryui.health.HealthCheckMiddleware",
    # /metrics likewise: Prometheus scrapes by address; allowed callers only.
    "memoryui.observability.MetricsMiddleware",
    "django.middleware.security.SecurityMiddleware",
    # Static files with far-future cache headers for hashed names (also with DEBUG=0).
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # A live review poll that finds nothing changed: 304 from the cache, before the
    # session is read (memoryui/live_polls.py).
    "memoryui.live_polls.LivePollMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "memoryui.middleware.ContentSecurityPolicyMiddleware",
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "memoryui.site_urls"
WSGI_APPLICATION = "memoryui.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates", NINJA_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    }
]

DATABASES = {
    "default": database_from_url(
        "DATABASE_URL",
        f"sqlite:///{VAR_DIR / 'memoryui.sqlite3'}",
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # WAL lets the web server read while the worker writes; wait instead of failing.
    # A file, not memory, for the test database: tests that start a real Celery
    # worker share it with that process.
    DATABASES["default"]["TEST"] = {"NAME": str(VAR_DIR / "test-db.sqlite3")}
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            "timeout": 20,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
elif DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Pages run short queries: PostgreSQL's JIT compiles them for tens of milliseconds
    # whenever an estimate looks large (as it does before autovacuum has analyzed a
    # fresh import) and never wins that back. An ?options=... in DATABASE_URL wins.
    DATABASES["default"].setdefault("OPTIONS", {}).setdefault("options", "-c jit=off")
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
AUTHENTICATION_BACKENDS = [
    # django-axes refuses logins of locked-out accounts and addresses before any
    # password is checked.
    "axes.backends.AxesStandaloneBackend",
    # Passwords (staff only with MEMORYUI_LOCAL_LOGIN=0), then the identity provider's
    # sign-in (memoryui/signin.py), which does nothing unless MEMORYUI_OIDC_ISSUER is set.
    "memoryui.auth.PasswordBackend",
    "memoryui.signin.ProviderBackend",
]
# Login throttling (the policy is in memoryui/auth.py and the README): after this many
# failed logins for one username from one client address, that pair is refused for the
# cool-off (even with the right password: the same user from another address is not);
# after MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT failures from one address, whatever the
# usernames, that address is. Unlock early: Django admin > Axes > Access attempts, or
# ``manage.py axes_reset``; people who forgot their password reset it by e-mail.
AXES_FAILURE_LIMIT = env_int("MEMORYUI_LOGIN_FAILURE_LIMIT", 5)
MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT = env_int("MEMORYUI_LOGIN_ADDRESS_FAILURE_LIMIT", 20)
# Seconds a client may leave its connection without progress (a restore it stops reading,
# an upload it stops sending) before the web server cuts it off (memoryui/wsgi.py).
MEMORYUI_CLIENT_STALL_SECONDS = env_int("MEMORYUI_CLIENT_STALL_SECONDS", 60)
# Password-reset mails within an hour: at most this many to one account, and at most this
# many reset forms sent from one client address (then it answers 429).
MEMORYUI_PASSWORD_RESET_ACCOUNT_LIMIT = env_int("MEMORYUI_PASSWORD_RESET_ACCOUNT_LIMIT", 3)
MEMORYUI_PASSWORD_RESET_ADDRESS_LIMIT = env_int("MEMORYUI_PASSWORD_RESET_ADDRESS_LIMIT", 10)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("MEMORYUI_LOGIN_COOLOFF_MINUTES", 15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_HANDLER = "memoryui.lockout.LockoutHandler"
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_CALLABLE = "memoryui.auth.lockout_response"
AXES_CLIENT_IP_CALLABLE = "memoryui.auth.client_ip"
AXES_USERNAME_CALLABLE = "memoryui.auth.attempt_username"
AXES_VERBOSE = False  # no banner on every command; lockouts are still logged
# Behind reverse proxies that append the client's address to X-Forwarded-For, how many
# (0: the connecting address is the client's).
MEMORYUI_TRUSTED_PROXIES = env_int("MEMORYUI_TRUSTED_PROXIES", 0)
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "memoryui:workspace_list"
LOGOUT_REDIRECT_URL = "login"

# Sign-in with an OpenID Connect identity provider (memoryui/signin.py): on when the issuer
# is set. Its endpoints come from the issuer's discovery document; the flow uses PKCE.
MEMORYUI_OIDC_ISSUER = env_str("MEMORYUI_OIDC_ISSUER").rstrip("/")
MEMORYUI_OIDC_NAME = env_str("MEMORYUI_OIDC_NAME", "your identity provider")
MEMORYUI_OIDC_GROUPS_CLAIM = env_str("MEMORYUI_OIDC_GROUPS_CLAIM", "groups")
MEMORYUI_OIDC_CLOCK_SKEW_SECONDS = env_int("MEMORYUI_OIDC_CLOCK_SKEW_SECONDS", 60)


def group_roles(value: str) -> list[tuple[str, str, str]]:
    """``GROUP=WORKSPACE:ROLE,...;GROUP=...`` (WORKSPACE ``*``: every workspace) as
    (group, workspace, role) triples."""
    triples = []
    for part in value.split(";"):
        if not part.strip():
            continue
        group, _, grants = part.partition("=")
        for grant in grants.split(","):
            workspace, _, role = grant.strip().rpartition(":")
            if not group.strip() or not workspace or role not in _ROLES:
                raise ImproperlyConfigured(
                    "MEMORYUI_OIDC_GROUP_ROLES must be GROUP=WORKSPACE:ROLE[,...][;...] with "
                    f"a role among {', '.join(_ROLES)}, got {part.strip()!r}"
                )
            triples.append((group.strip(), workspace, role))
    return triples


_ROLES = ("viewer", "reviewer", "editor", "admin")
MEMORYUI_OIDC_GROUP_ROLES = group_roles(env_str("MEMORYUI_OIDC_GROUP_ROLES"))
# Password login: off leaves it to staff accounts only (break-glass); API tokens unchanged.
MEMORYUI_LOCAL_LOGIN = env_bool("MEMORYUI_LOCAL_LOGIN", True)
# mozilla-django-oidc's own settings, from the ones above.
OIDC_RP_CLIENT_ID = env_str("MEMORYUI_OIDC_CLIENT_ID")
OIDC_RP_CLIENT_SECRET = env_str("MEMORYUI_OIDC_CLIENT_SECRET")
OIDC_RP_SCOPES = env_str("MEMORYUI_OIDC_SCOPES", "openid email profile")
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_PKCE = True
OIDC_USE_NONCE = True
OIDC_TIMEOUT = 10
OIDC_AUTHENTICATION_CALLBACK_URL = "oidc_callback"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [NINJA_DIR / "static"]
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))
# Production (DEBUG=0) serves collectstatic's compressed files with content hashes in
# their names, cached for a year; development serves the source files uncached.
STORAGES: dict[str, dict[str, Any]] = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}

# Security: strict by default when DEBUG is off (manage.py check --deploy passes).
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", not DEBUG)
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0 if DEBUG else 31536000)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", not DEBUG)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", not DEBUG)
SECURE_PROXY_SSL_HEADER = (
    ("HTTP_X_FORWARDED_PROTO", "https") if env_bool("SECURE_PROXY_SSL_HEADER", False) else None
)
SESSION_COOKIE_HTTPONLY = True
CONTENT_SECURITY_POLICY = env_str(
    "CONTENT_SECURITY_POLICY",
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
)
X_FRAME_OPTIONS = "DENY"
SECURE_REFERRER_POLICY = "same-origin"

# Django's cache: each process's memory by default; production shares Redis (CACHE_URL),
# which live review's quick 304 needs (every web process must see a proposal's stamp).
CACHE_URL = env_str("CACHE_URL")
if CACHE_URL and not CACHE_URL.startswith(("redis://", "rediss://")):
    raise ImproperlyConfigured("CACHE_URL must be a redis:// or rediss:// URL.")
CACHES: dict[str, dict[str, Any]] = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}
MEMORYUI_LIVE_FAST_POLLS = env_bool("MEMORYUI_LIVE_FAST_POLLS", bool(CACHE_URL))

# Celery: a file-system broker needs no server; production points this at Redis.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
_BROKER_SCHEMES = (
    "filesystem",
    "redis",
    "rediss",
    "redis+socket",
    "sentinel",
    "amqp",
    "amqps",
    "pyamqp",
)


def broker_problem(url: str) -> str | None:
    """What is wrong with a broker URL, naming the scheme only (the URL may hold a
    password); None when Celery can use it. Celery itself takes a word without a scheme
    for a RabbitMQ host and retries it for ever, and a Redis database that is no number
    ends the worker in a traceback."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in _BROKER_SCHEMES:
        shown = f"a {scheme}:// URL" if sep else "no URL"
        return (
            "CELERY_BROKER_URL must be a redis://HOST:PORT/DB, rediss://, amqp://, amqps:// "
            f"or filesystem:// URL, got {shown}"
        )
    if scheme in ("redis", "rediss"):
        database = rest.partition("?")[0].partition("/")[2].strip("/")
        if database and not database.isdigit():
            return "CELERY_BROKER_URL names a Redis database that is no number (its path: e.g. /0)"
    return None


if (_problem := broker_problem(CELERY_BROKER_URL)) is not None:
    raise ImproperlyConfigured(_problem)
if CELERY_BROKER_URL.startswith("filesystem://"):
    if CELERY_BROKER_URL == "filesystem://":
        # The transport ignores the host; naming one keeps kombu from warning that none was.
        CELERY_BROKER_URL = "filesystem://localhost/"
    _broker_dir = VAR_DIR / "celery-broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(VAR_DIR / "celery-processed"),
        "control_folder": str(VAR_DIR / "celery-control"),
        "store_processed": False,
    }
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
# Worker processes (or threads) per worker; Celery's default is one per CPU.
CELERY_WORKER_CONCURRENCY = env_int("CELERY_WORKER_CONCURRENCY", 0) or None
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Webhook deliveries wait on other people's servers: their own queue (and, in production,
# their own worker: compose.yaml's ``webhooks``), so they do not occupy generation workers.
CELERY_TASK_ROUTES = {"memoryui.webhooks.deliver_webhook": {"queue": "webhooks"}}
# Celery beat (``celery -A memoryui beat``, or ``worker -B`` for one worker) sends again,
# every this many seconds, generation work whose task was lost with a worker.
MEMORYUI_RECOVERY_SECONDS = env_int("MEMORYUI_RECOVERY_SECONDS", 30)
# Beat also sends a heartbeat that a worker records; /healthz fails once the last one is
# older than MEMORYUI_HEARTBEAT_STALE_SECONDS (no beat, or no worker taking tasks).
MEMORYUI_HEARTBEAT_SECONDS = env_int("MEMORYUI_HEARTBEAT_SECONDS", 30)
MEMORYUI_HEARTBEAT_STALE_SECONDS = env_int(
    "MEMORYUI_HEARTBEAT_STALE_SECONDS", 3 * MEMORYUI_HEARTBEAT_SECONDS
)
# Mail to people who watch a workspace: the digests go out at this hour (UTC; beat's entry
# is made in memoryui/celery.py, with Celery's crontab); a mail the
# SMTP server does not take is tried again after base, 2 base, 4 base ... seconds.
MEMORYUI_DIGEST_HOUR = env_int("MEMORYUI_DIGEST_HOUR", 7)
if not 0 <= MEMORYUI_DIGEST_HOUR <= 23:  # else the worker and beat fail in Celery's crontab
    raise ImproperlyConfigured(
        f"MEMORYUI_DIGEST_HOUR must be an hour from 0 to 23, got {MEMORYUI_DIGEST_HOUR}"
    )
MEMORYUI_NOTIFICATION_RETRY_BASE_SECONDS = env_float("MEMORYUI_NOTIFICATION_RETRY_BASE_SECONDS", 60)
MEMORYUI_NOTIFICATION_MAX_ATTEMPTS = env_int("MEMORYUI_NOTIFICATION_MAX_ATTEMPTS", 10)
MEMORYUI_NOTIFICATION_SMTP_TIMEOUT_SECONDS = env_int(
    "MEMORYUI_NOTIFICATION_SMTP_TIMEOUT_SECONDS", 30
)
CELERY_BEAT_SCHEDULE = {
    "recover-stalled-runs": {
        "task": "memoryui.tasks.recover_stalled_runs",
        "schedule": MEMORYUI_RECOVERY_SECONDS,
        "options": {"expires": MEMORYUI_RECOVERY_SECONDS},
    },
    # Re-imports the workspaces whose sync interval has passed (see memoryui/workspaces.py).
    "sync-workspaces": {
        "task": "memoryui.tasks.sync_workspaces",
        "schedule": 60,
        "options": {"expires": 60},
    },
    # Search vectors an import's own task did not compute (its message lost with a
    # worker, the broker down at its commit); PostgreSQL only, a no-op elsewhere.
    "index-search": {
        "task": "memoryui.tasks.index_search",
        "schedule": 60,
        "options": {"expires": 60},
    },
    "heartbeat": {
        "task": "memoryui.tasks.heartbeat",
        "schedule": MEMORYUI_HEARTBEAT_SECONDS,
        "options": {"expires": MEMORYUI_HEARTBEAT_SECONDS},
    },
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Generation: the openai client talks to OpenAI or any OpenAI-compatible server.
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
# A demo model for every entry point (web, workers, commands), resolved here once:
# "offline" answers with generation/offline_model.py's demo responder, served in each
# process that calls it; "local" is llama.cpp's server with Gemma 3 270M that bin/start runs
# on MEMORYUI_LOCAL_MODEL_PORT; "off" uses OPENAI_API_KEY / OPENAI_BASE_URL. The default is
# "offline" in development when neither variable is set, and "off" in production.
MEMORYUI_DEMO_MODEL = env_str(
    "MEMORYUI_DEMO_MODEL",
    "offline" if DEBUG and not (OPENAI_API_KEY or OPENAI_BASE_URL) else "off",
).lower()
if MEMORYUI_DEMO_MODEL in ("", "0", "none", "no", "false"):
    MEMORYUI_DEMO_MODEL = "off"
if MEMORYUI_DEMO_MODEL not in ("off", "offline", "local"):
    raise ImproperlyConfigured(
        f"MEMORYUI_DEMO_MODEL must be offline, local or off, got {MEMORYUI_DEMO_MODEL!r}"
    )
MEMORYUI_LOCAL_MODEL_PORT = env_int("MEMORYUI_LOCAL_MODEL_PORT", 8766)
_local = MEMORYUI_DEMO_MODEL == "local"
if _local:
    OPENAI_BASE_URL = f"http://127.0.0.1:{MEMORYUI_LOCAL_MODEL_PORT}/v1"
    OPENAI_API_KEY = "not-needed"
MEMORYUI_OPENAI_API = env_str("MEMORYUI_OPENAI_API", "chat_json_object" if _local else "responses")
MEMORYUI_PHASE_ONE_MODEL = env_str(
    "MEMORYUI_PHASE_ONE_MODEL", "gemma-3-270m" if _local else "gpt-5-mini"
)
MEMORYUI_PHASE_TWO_MODEL = env_str(
    "MEMORYUI_PHASE_TWO_MODEL", "gemma-3-270m" if _local else "gpt-5"
)
MEMORYUI_MODEL_TIMEOUT = env_float("MEMORYUI_MODEL_TIMEOUT", 300)
# A worker holds the job (or phase two) it works on under a lease that it renews every
# MEMORYUI_LEASE_RENEW_SECONDS, however long the model takes; once the worker is dead the
# lease runs out and the work is taken over (sent again by beat, or redelivered by the
# broker): with the defaults, at most lease + recovery = 90 s after the worker died.
MEMORYUI_JOB_LEASE_SECONDS = env_int("MEMORYUI_JOB_LEASE_SECONDS", 60)
MEMORYUI_LEASE_RENEW_SECONDS = env_int(
    "MEMORYUI_LEASE_RENEW_SECONDS", max(1, MEMORYUI_JOB_LEASE_SECONDS // 4)
)
if not 0 < 2 * MEMORYUI_LEASE_RENEW_SECONDS <= MEMORYUI_JOB_LEASE_SECONDS:
    # A renewal that comes late, or fails once, must not let a live worker's work go.
    raise ImproperlyConfigured(
        "MEMORYUI_LEASE_RENEW_SECONDS must be positive and at most half of "
        "MEMORYUI_JOB_LEASE_SECONDS."
    )
MEMORYUI_RETRY_BASE_SECONDS = env_float("MEMORYUI_RETRY_BASE_SECONDS", 2)
# A sandbox's merge shows its progress on its job's page once it has run this long (most
# take a tenth of a second under the workspace's lock; each progress write is a request
# to object storage).
MEMORYUI_MERGE_PROGRESS_AFTER_SECONDS = env_float("MEMORYUI_MERGE_PROGRESS_AFTER_SECONDS", 1)
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # Unacknowledged tasks of a worker that died go back to the queue after this long.
    # Kombu looks for them every interval x throttle seconds.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
        "unacked_restore_interval": env_int("CELERY_UNACKED_RESTORE_INTERVAL", 10),
        "unacked_restore_throttle": env_int("CELERY_UNACKED_RESTORE_THROTTLE", 10),
    }

# The dashboard's address, for the links that commands print: this variable, else the
# address bin/start serves on (it writes it to VAR_DIR/base-url, for commands run in
# another terminal), else runserver's default.
BASE_URL_FILE = VAR_DIR / "base-url"
MEMORYUI_BASE_URL = (
    env_str("MEMORYUI_BASE_URL")
    or (BASE_URL_FILE.read_text().strip() if BASE_URL_FILE.is_file() else "")
    or "http://127.0.0.1:8000"
).rstrip("/")

# Where export_snapshot and the export page write <snapshot-id>.tar by default.
MEMORYUI_SNAPSHOT_BASE_PATH = Path(
    env_str("MEMORYUI_SNAPSHOT_BASE_PATH", str(VAR_DIR / "snapshots"))
)

# The role of a logged-in person who is not a member of a workspace: viewer, reviewer,
# editor, admin, or none (no access).
MEMORYUI_DEFAULT_ROLE = env_str("MEMORYUI_DEFAULT_ROLE", "viewer")

# People's text is refused past these sizes (UTF-8 bytes): a MEMORY.md entry (edited,
# added, or edited while reviewing a proposal) and a comment.
MEMORYUI_MAX_ENTRY_BYTES = env_int("MEMORYUI_MAX_ENTRY_BYTES", 64 * 1024)
MEMORYUI_MAX_COMMENT_BYTES = env_int("MEMORYUI_MAX_COMMENT_BYTES", 16 * 1024)
# A skill file people write or add (SKILL.md, a script, a template).
MEMORYUI_MAX_SKILL_FILE_BYTES = env_int("MEMORYUI_MAX_SKILL_FILE_BYTES", 256 * 1024)

# Directories under which workspaces may be registered, changed (Django admin included),
# re-imported and synced from the web. The import_workspace command (run by an operator
# on the server) may import any path.
MEMORYUI_WORKSPACE_ROOTS = [
    Path(p).resolve()
    for p in env_list(
        "MEMORYUI_WORKSPACE_ROOTS",
        [str(BASE_DIR / "sample"), str(VAR_DIR / "workspaces")],
        sep=os.pathsep,
    )
]
# Snapshots uploaded from the dashboard stream into this directory (never into memory)
# and stay there as the workspace's source; one larger than the limit is refused while
# it streams. Web and worker processes must share it.
MEMORYUI_UPLOAD_DIR = Path(env_str("MEMORYUI_UPLOAD_DIR", str(VAR_DIR / "uploads"))).resolve()
MEMORYUI_MAX_UPLOAD_BYTES = env_int("MEMORYUI_MAX_UPLOAD_BYTES", 2 * 1024 * 1024 * 1024)
# A file over this size is stored but shown as head and tail; over the hard limit it is
# not imported; reading stops once an import has read the total (archive bomb guard).
MEMORYUI_HUGE_FILE_BYTES = env_int("MEMORYUI_HUGE_FILE_BYTES", 5 * 1024 * 1024)
MEMORYUI_MAX_FILE_BYTES = env_int("MEMORYUI_MAX_FILE_BYTES", 256 * 1024 * 1024)
MEMORYUI_MAX_IMPORT_BYTES = env_int("MEMORYUI_MAX_IMPORT_BYTES", 4 * 1024 * 1024 * 1024)
# The remote snapshot store (/api/workspaces/<name>/snapshots/<id>): where uploads are
# kept, and the largest upload accepted (its contents are held to the import limits).
MEMORYUI_REMOTE_STORE_DIR = Path(
    env_str("MEMORYUI_REMOTE_STORE_DIR", str(VAR_DIR / "remote-store"))
)
MEMORYUI_REMOTE_MAX_UPLOAD_BYTES = env_int("MEMORYUI_REMOTE_MAX_UPLOAD_BYTES", 1024 * 1024 * 1024)
# Sandbox downloads, kept on this host once built and sent again while nothing they are
# made of has changed (memoryui/download_cache.py): where, and how many bytes of them at
# most (the least recently sent go first; 0 keeps none and builds every download).
MEMORYUI_DOWNLOAD_CACHE_DIR = Path(
    env_str("MEMORYUI_DOWNLOAD_CACHE_DIR", str(VAR_DIR / "download-cache"))
)
MEMORYUI_DOWNLOAD_CACHE_BYTES = env_int("MEMORYUI_DOWNLOAD_CACHE_BYTES", 2 * 1024 * 1024 * 1024)
# Uploads (and their import's progress), the remote store's archives and server exports:
# the directories above ("local", the embedded default; web and workers must then share
# them), or objects in an S3-compatible bucket ("s3": no shared directory), one prefix each.
# boto3 reads the credentials (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) from the environment.
MEMORYUI_STORAGE = env_str("MEMORYUI_STORAGE", "local")
if MEMORYUI_STORAGE not in ("local", "s3"):
    raise ImproperlyConfigured(f"MEMORYUI_STORAGE must be local or s3, got {MEMORYUI_STORAGE!r}")
_transfer: Any = None
if MEMORYUI_STORAGE == "s3":
    from boto3.s3.transfer import TransferConfig

    # Multipart in 8 MiB parts, 4 at a time: what a transfer holds in memory is bounded.
    _transfer = TransferConfig(
        multipart_threshold=8 * 1024 * 1024,
        multipart_chunksize=8 * 1024 * 1024,
        max_concurrency=env_int("MEMORYUI_S3_CONCURRENCY", 4),
    )
for _alias, _directory in (
    ("uploads", MEMORYUI_UPLOAD_DIR),
    ("snapshots", MEMORYUI_REMOTE_STORE_DIR),
    ("exports", MEMORYUI_SNAPSHOT_BASE_PATH),
):
    STORAGES[_alias] = (
        {
            "BACKEND": "storages.backends.s3.S3Storage",
            "OPTIONS": {
                "bucket_name": env_str("MEMORYUI_S3_BUCKET", "memoryui"),
                "location": env_str("MEMORYUI_S3_PREFIX", "") + _alias,
                "endpoint_url": env_str("MEMORYUI_S3_ENDPOINT_URL") or None,
                "region_name": env_str("MEMORYUI_S3_REGION") or None,
                "file_overwrite": True,  # an id's new upload replaces the last one
                "default_acl": None,  # private: every read goes through the dashboard
                "querystring_auth": True,
                # A file opened through the storage (not the streams memoryui reads)
                # spills to disk past this size instead of filling memory.
                "max_memory_size": 8 * 1024 * 1024,
                "transfer_config": _transfer,
            },
        }
        if MEMORYUI_STORAGE == "s3"
        else {
            "BACKEND": "django.core.files.storage.FileSystemStorage",
            "OPTIONS": {"location": str(_directory)},
        }
    )
# Webhooks: a failing receiver is tried again after base, 2 base, 4 base ... seconds.
MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS = env_float("MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS", 30)
MEMORYUI_WEBHOOK_MAX_ATTEMPTS = env_int("MEMORYUI_WEBHOOK_MAX_ATTEMPTS", 6)
# One delivery (connect, send, the answer) ends by this deadline, however slowly the
# receiver drips; at most this much of its answer is read.
MEMORYUI_WEBHOOK_DEADLINE_SECONDS = env_float("MEMORYUI_WEBHOOK_DEADLINE_SECONDS", 10)
MEMORYUI_WEBHOOK_MAX_RESPONSE_BYTES = env_int("MEMORYUI_WEBHOOK_MAX_RESPONSE_BYTES", 64 * 1024)
# Outbound calls (webhooks) go to public addresses only; these host names and address
# ranges (comma-separated, e.g. "hooks.corp.example,10.20.0.0/16") are allowed anyway.
MEMORYUI_OUTBOUND_ALLOW = env_list("MEMORYUI_OUTBOUND_ALLOW", [])

# E-mail (password resets): printed on the console unless an SMTP server is configured.
EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = env_str("EMAIL_HOST_USER")
EMAIL_HOST_PASSWORD = env_str("EMAIL_HOST_PASSWORD")
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "memoryui@localhost")

# /metrics (memoryui/observability.py): for these addresses (comma-separated ranges), or
# for anyone sending "Authorization: Bearer <MEMORYUI_METRICS_TOKEN>"; 404 otherwise.
MEMORYUI_METRICS_ALLOW = env_list("MEMORYUI_METRICS_ALLOW", ["127.0.0.1/32", "::1/128"])
MEMORYUI_METRICS_TOKEN = env_str("MEMORYUI_METRICS_TOKEN")

# Errors to Sentry (optional): only when SENTRY_DSN is set; no personal data is sent.
SENTRY_DSN = env_str("SENTRY_DSN")
if SENTRY_DSN:
    import sentry_sdk
    from sentry_sdk.integrations.celery import CeleryIntegration
    from sentry_sdk.integrations.django import DjangoIntegration
    from sentry_sdk.utils import BadDsn

    try:
        sentry_sdk.init(
            dsn=SENTRY_DSN,
            integrations=[DjangoIntegration(), CeleryIntegration()],
            environment=env_str("SENTRY_ENVIRONMENT", "development" if DEBUG else "production"),
            traces_sample_rate=env_float("SENTRY_TRACES_SAMPLE_RATE", 0),
            send_default_pii=False,
        )
    except BadDsn as exc:  # its message names the part that is wrong, never the key
        raise ImproperlyConfigured(f"SENTRY_DSN is not a Sentry DSN ({exc})") from None

# Logging's own names only: anything else fails in Django's set-up, with a traceback.
_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
LOG_LEVEL = env_str("LOG_LEVEL", "INFO").upper() or "INFO"
if LOG_LEVEL not in _LOG_LEVELS:
    raise ImproperlyConfigured(
        f"LOG_LEVEL must be one of {', '.join(_LOG_LEVELS)}, got {env_str('LOG_LEVEL')!r}"
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    # memoryui's own lines are key=value (memoryui/observability.py), one logger per area.
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    # One line per model request is noise; their failures are recorded on the jobs.
    # (The openai client's transport logs as "httpx2" in recent versions.) Axes: lockouts
    # (warnings), not every login.
    "loggers": {
        **{
            name: {"level": "WARNING"} for name in ("httpx", "httpx2", "httpcore", "openai", "axes")
        },
        # Django's default logging gives "django" a console handler of its own (with DEBUG)
        # and lets it propagate to the root's too: every line of it printed twice
        # (runserver's "Watching for file changes", its warnings). The root's handler only.
        "django": {"handlers": [], "level": "INFO"},
    },
}
