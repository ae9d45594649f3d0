"""Settings for memoryui, read from the environment (see the README's table).

The defaults are a safe local setup: SQLite and a Celery broker on the file system under
``var/``, so one command starts everything. Production sets ``DEBUG=0``, ``SECRET_KEY``,
``ALLOWED_HOSTS``, a Postgres ``DATABASE_URL`` and a Redis ``CELERY_BROKER_URL``.
"""

import os
from pathlib import Path

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


def env_list(name: str, default: list[str], sep: str = ",") -> list[str]:
    value = os.environ.get(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(sep) if item.strip()]


DEBUG = env_bool("DEBUG", True)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off.")
    SECRET_KEY = "django-insecure-local-development-key-only-for-debug-mode"

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django.contrib.humanize",
    "django_htmx",
    "template_partials",
    "ninja",
    "memoryui",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.auth.middleware.LoginRequiredMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "memoryui.middleware.ContentSecurityPolicyMiddleware",
]

ROOT_URLCONF = "memoryui.urls"
WSGI_APPLICATION = "memoryui.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
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
    "default": dj_database_url.parse(
        env_str("DATABASE_URL", f"sqlite:///{VAR_DIR / 'memoryui.sqlite3'}"),
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 0),
    )
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    if DATABASES["default"]["NAME"] not in ("", ":memory:"):
        Path(DATABASES["default"]["NAME"]).parent.mkdir(parents=True, exist_ok=True)
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
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "memoryui:workspace_list"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = Path(env_str("STATIC_ROOT", str(VAR_DIR / "static")))

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

# Celery: a file-system broker needs no server; production points this at Redis.
CELERY_BROKER_URL = env_str("CELERY_BROKER_URL", "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    _broker_dir = VAR_DIR / "celery-broker"
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_broker_dir),
        "data_folder_out": str(_broker_dir),
        "processed_folder": str(VAR_DIR / "celery-processed"),
        "control_folder": str(VAR_DIR / "celery-control"),
        "store_processed": False,
    }
    for _folder in ("celery-broker", "celery-processed", "celery-control"):
        (VAR_DIR / _folder).mkdir(parents=True, exist_ok=True)
CELERY_TASK_ALWAYS_EAGER = env_bool("CELERY_TASK_ALWAYS_EAGER", False)
CELERY_TASK_IGNORE_RESULT = True
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Celery beat (``celery -A memoryui beat``, or ``worker -B`` for one worker) sends again,
# every this many seconds, generation work whose task was lost with a worker.
MEMORYUI_RECOVERY_SECONDS = env_int("MEMORYUI_RECOVERY_SECONDS", 60)
CELERY_BEAT_SCHEDULE = {
    "recover-stalled-runs": {
        "task": "generation.tasks.recover_stalled_runs",
        "schedule": MEMORYUI_RECOVERY_SECONDS,
        "options": {"expires": MEMORYUI_RECOVERY_SECONDS},
    }
}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Generation: the openai client talks to OpenAI or any OpenAI-compatible server.
OPENAI_API_KEY = env_str("OPENAI_API_KEY")
OPENAI_BASE_URL = env_str("OPENAI_BASE_URL")
MEMORYUI_OFFLINE_DEMO = env_bool("MEMORYUI_OFFLINE_DEMO", False)
MEMORYUI_OPENAI_API = env_str("MEMORYUI_OPENAI_API", "responses")
MEMORYUI_PHASE_ONE_MODEL = env_str("MEMORYUI_PHASE_ONE_MODEL", "gpt-5-mini")
MEMORYUI_PHASE_TWO_MODEL = env_str("MEMORYUI_PHASE_TWO_MODEL", "gpt-5")
MEMORYUI_MODEL_TIMEOUT = float(env_int("MEMORYUI_MODEL_TIMEOUT", 300))
# A job whose worker died is taken over once its lease has passed.
MEMORYUI_JOB_LEASE_SECONDS = env_int("MEMORYUI_JOB_LEASE_SECONDS", 900)
MEMORYUI_RETRY_BASE_SECONDS = float(env_int("MEMORYUI_RETRY_BASE_SECONDS", 2))
if CELERY_BROKER_URL.startswith(("redis://", "rediss://")):
    # Unacknowledged tasks of a worker that died go back to the queue after this long.
    # Kombu looks for them every interval x throttle seconds.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": env_int("CELERY_VISIBILITY_TIMEOUT", 3600),
        "unacked_restore_interval": env_int("CELERY_UNACKED_RESTORE_INTERVAL", 10),
        "unacked_restore_throttle": env_int("CELERY_UNACKED_RESTORE_THROTTLE", 10),
    }

# Where export_snapshot and the export page write <snapshot-id>.tar by default.
MEMORYUI_SNAPSHOT_BASE_PATH = Path(
    env_str("MEMORYUI_SNAPSHOT_BASE_PATH", str(VAR_DIR / "snapshots"))
)

# The role of a logged-in person who is not a member of a workspace: viewer, reviewer,
# editor, admin, or none (no access).
MEMORYUI_DEFAULT_ROLE = env_str("MEMORYUI_DEFAULT_ROLE", "viewer")

# Directories under which workspaces may be registered from the dashboard. The
# import_workspace command (run by an operator on the server) may import any path.
MEMORYUI_WORKSPACE_ROOTS = [
    Path(p).resolve()
    for p in env_list(
        "MEMORYUI_WORKSPACE_ROOTS",
        [str(BASE_DIR / "sample"), str(VAR_DIR / "workspaces")],
        sep=os.pathsep,
    )
]
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
# Webhooks: a failing receiver is tried again after base, 2 base, 4 base ... seconds.
MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS = float(env_str("MEMORYUI_WEBHOOK_RETRY_BASE_SECONDS", "30"))
MEMORYUI_WEBHOOK_MAX_ATTEMPTS = env_int("MEMORYUI_WEBHOOK_MAX_ATTEMPTS", 6)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    # One line per model request is noise; their failures are recorded on the jobs.
    "loggers": {"httpx": {"level": "WARNING"}, "openai": {"level": "WARNING"}},
}
