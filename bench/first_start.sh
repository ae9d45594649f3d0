#!/usr/bin/env bash
# A new user's first `bin/start`: a fresh clone in a temp dir, empty uv and pip caches, and
# the time from running bin/start until the login page answers 200. Stops it afterwards.
#   bench/first_start.sh [PORT]      (default 8931; clones this repository's current branch)
set -uo pipefail
cd "$(dirname "$0")/.."
PORT=${1:-8931}
BRANCH=$(git rev-parse --abbrev-ref HEAD)
DIR=$(mktemp -d /tmp/memoryui-first-start.XXXXXX)
git clone -q --branch "$BRANCH" "$PWD" "$DIR/memoryui"
cd "$DIR/memoryui"
t0=$(date +%s.%N)
# The caller's environment (proxies, CA bundles) minus memoryui's own variables.
env -u DATABASE_URL -u MEMORYUI_VAR_DIR -u TEST_REDIS_URL -u CELERY_BROKER_URL -u DEBUG \
  -u OPENAI_API_KEY -u OPENAI_BASE_URL -u MEMORYUI_DEMO_MODEL -u VIRTUAL_ENV \
  UV_CACHE_DIR="$DIR/uv-cache" PIP_NO_CACHE_DIR=1 PORT="$PORT" \
  setsid bin/start >"$DIR/start.log" 2>&1 &
pid=$!
code=000
while kill -0 "$pid" 2>/dev/null; do
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/accounts/login/")
  [ "$code" = 200 ] && break
  sleep 0.5
done
t1=$(date +%s.%N)
kill -- -"$pid" 2>/dev/null
wait "$pid" 2>/dev/null
printf 'login page %s after %.1f s (log: %s/start.log)\n' "$code" "$(echo "$t1 - $t0" | bc)" "$DIR"
grep '^bin/start \[' "$DIR/start.log"
