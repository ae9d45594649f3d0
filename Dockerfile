# memoryui's production image: the runtime dependencies only (no test tools, no llama.cpp),
# static files collected at build time, run as an unprivileged user. compose.yaml runs it
# as the web server (this CMD), the Celery worker and Celery beat.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_PROJECT_ENVIRONMENT=/app/.venv \
    UV_COMPILE_BYTECODE=1 \
    UV_LINK_MODE=copy

RUN pip install --no-cache-dir "uv==0.13.9" \
    && useradd --system --create-home --uid 10001 memoryui
WORKDIR /app

# The locked production dependencies first: a layer that changes only with uv.lock.
COPY pyproject.toml uv.lock ./
RUN uv sync --frozen --no-default-groups --no-install-project --no-cache

COPY . .
# MALLOC_ARENA_MAX: gunicorn's gthread workers run 32 threads, and glibc gives threads
# malloc arenas of their own (up to 8 per core) whose pages stay with the process; two
# arenas keep a worker's memory near what one request needs.
ENV PATH=/app/.venv/bin:$PATH \
    MALLOC_ARENA_MAX=2 \
    DEBUG=0 \
    STATIC_ROOT=/app/staticfiles \
    MEMORYUI_VAR_DIR=/app/var
# Hashed, compressed static files for WhiteNoise (any SECRET_KEY will do for this step).
RUN SECRET_KEY=collectstatic-only python manage.py collectstatic --noinput \
    && rm -rf /app/var && mkdir -p /app/var/workspaces /app/var/snapshots /app/var/uploads /app/var/journal \
       /app/var/remote-store \
    && chown -R memoryui:memoryui /app/var

USER memoryui
EXPOSE 8000
# gthread: a slow upload or a stalled restore holds a thread, never the process (README).
CMD ["gunicorn", "memoryui.wsgi:application", "--bind", "0.0.0.0:8000", "--access-logfile", "-", "--worker-class", "gthread", "--threads", "32"]
