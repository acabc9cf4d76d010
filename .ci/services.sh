#!/usr/bin/env bash
# Services the test suite uses beyond Python packages, from Debian's packages:
#   - PostgreSQL on loopback (127.0.0.1:5432): the ledger's PostgreSQL tests connect to
#     postgresql://promptcache:promptcache@127.0.0.1:5432/promptcache_test
#     (override with PROMPTCACHE_TEST_POSTGRES_URL);
#   - chromium: the HTML report test renders the page headless and takes a screenshot.
# Runs as root on a fresh Debian machine (or with sudo). Tests that need a service that
# could not be started skip with a reason that says so.
set -uo pipefail
export DEBIAN_FRONTEND=noninteractive

SUDO=""
if [ "$(id -u)" != "0" ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "[services] not root and no sudo: cannot install PostgreSQL/chromium" >&2; exit 1
  fi
fi

status=0
need=()
command -v pg_ctlcluster >/dev/null 2>&1 || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium fonts-dejavu-core)
if [ "${#need[@]}" -gt 0 ]; then
  echo "[services] apt-get install ${need[*]}"
  $SUDO apt-get update -qq || status=1
  $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null || status=1
fi

# --- PostgreSQL: start the packaged cluster on loopback, create the test role and db ----
if command -v pg_lsclusters >/dev/null 2>&1; then
  read -r ver name port st _ < <(pg_lsclusters -h | head -n1) || true
  if [ -z "${ver:-}" ]; then
    ver=$(ls /usr/lib/postgresql | sort -V | tail -n1)
    $SUDO pg_createcluster "$ver" main >/dev/null || status=1
    name=main; port=5432; st=down
  fi
  if [ "${st:-down}" != "online" ]; then
    $SUDO pg_ctlcluster "$ver" "$name" start || status=1
  fi
  as_postgres() {  # run a command as the postgres OS user
    if [ -n "$SUDO" ]; then $SUDO -u postgres "$@"; else su postgres -c "$(printf '%q ' "$@")"; fi
  }
  for _ in $(seq 1 30); do
    as_postgres pg_isready -q -h 127.0.0.1 -p "${port:-5432}" && break
    sleep 1
  done
  psql_as_postgres() { as_postgres psql -p "${port:-5432}" -qAt "$@"; }
  psql_as_postgres -c "DO \$\$BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname='promptcache') THEN CREATE ROLE promptcache LOGIN PASSWORD 'promptcache'; END IF; END\$\$;" || status=1
  if [ "$(psql_as_postgres -c "SELECT 1 FROM pg_database WHERE datname='promptcache_test'")" != "1" ]; then
    psql_as_postgres -c "CREATE DATABASE promptcache_test OWNER promptcache" || status=1
  fi
  echo "[services] PostgreSQL $ver/$name on 127.0.0.1:${port:-5432} (db promptcache_test)"
else
  echo "[services] PostgreSQL not available" >&2; status=1
fi

if command -v chromium >/dev/null 2>&1; then
  echo "[services] $(chromium --version 2>/dev/null | head -n1)"
else
  echo "[services] chromium not available" >&2; status=1
fi
exit $status
