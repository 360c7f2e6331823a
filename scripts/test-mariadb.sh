#!/usr/bin/env bash
# The MariaDB server the test suite runs against: a private one, started for
# the run and stopped after it, shaped like a production primary (binary
# logging on, ROW format, GTIDs), on a port and data directory of its own,
# so that no test depends on or changes the machine's own server.
#
#   scripts/test-mariadb.sh up     start it; prints its address (host:port)
#   scripts/test-mariadb.sh down   stop it and remove its data
#
# HOLDFAST_TEST_MARIADB_ADDR names a server to use instead (nothing is
# started or stopped then); it must have binary logging on. Progress goes to
# stderr. Installs mariadb-server with apt-get when mariadbd is missing.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
dir="$top/.local/test-mariadb"
say() { echo "test-mariadb: $*" >&2; }

ping_addr() { # host:port
  local h=${1%:*} p=${1##*:}
  mariadb-admin --no-defaults --protocol=tcp -h "$h" -P "$p" -uroot --connect-timeout=2 ping >/dev/null 2>&1
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

install_server() {
  if command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; then
    command -v mariadb-admin >/dev/null 2>&1 && return 0
  fi
  say "installing mariadb-server with apt-get"
  local sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq >&2 || true
  $sudo_cmd apt-get install -y -qq mariadb-server mariadb-client >&2
}

down() {
  if [ -f "$dir/mysqld.pid" ]; then
    pid=$(cat "$dir/mysqld.pid" 2>/dev/null || true)
    if [ -n "$pid" ] && kill "$pid" 2>/dev/null; then
      for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
      kill -9 "$pid" 2>/dev/null || true
    fi
  fi
  rm -rf "$dir"
}

up() {
  if [ -n "${HOLDFAST_TEST_MARIADB_ADDR:-}" ]; then
    echo "$HOLDFAST_TEST_MARIADB_ADDR"
    return 0
  fi
  install_server
  down # a server left by an interrupted run
  mkdir -p "$dir"
  local user_opt=()
  [ "$(id -u)" -eq 0 ] && user_opt=(--user=root)
  mariadb-install-db --no-defaults "${user_opt[@]}" --datadir="$dir/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
    || { cat "$dir/install.log" >&2; exit 1; }
  local port=${HOLDFAST_TEST_MARIADB_PORT:-3310}
  while ! port_free "$port"; do port=$((port + 1)); done
  local mariadbd
  mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)
  say "starting a private MariaDB with binary logging on 127.0.0.1:$port (data and log in $dir)"
  nohup "$mariadbd" --no-defaults "${user_opt[@]}" --datadir="$dir/data" --port="$port" \
    --bind-address=127.0.0.1 --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
    --log-error="$dir/error.log" --max-connections=2000 --max-allowed-packet=64M \
    --innodb-buffer-pool-size=256M --innodb-log-file-size=64M \
    --log-bin="$dir/data/binlog" --binlog-format=ROW --server-id=1 \
    >/dev/null 2>&1 &
  for _ in $(seq 1 120); do
    if ping_addr "127.0.0.1:$port"; then
      mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$port" -uroot -e "CREATE DATABASE IF NOT EXISTS test" >&2
      echo "127.0.0.1:$port"
      return 0
    fi
    sleep 0.5
  done
  say "MariaDB did not start; see $dir/error.log"
  tail -20 "$dir/error.log" >&2 || true
  exit 1
}

case "${1:-}" in
up) up ;;
down) [ -n "${HOLDFAST_TEST_MARIADB_ADDR:-}" ] || down ;;
*) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
