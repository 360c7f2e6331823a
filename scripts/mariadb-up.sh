#!/usr/bin/env bash
# Makes sure a MariaDB server answers as root with an empty password, and
# prints its address (host:port) on stdout.
#
#   1. The server at HOLDFAST_MARIADB_ADDR (default 127.0.0.1:3306) answers: use it.
#   2. Otherwise install mariadb-server with apt-get when it is missing, and
#      start a private server with its data under .local/mariadb (ignored by
#      git) on HOLDFAST_LOCAL_MARIADB_PORT (default 3307).
# Progress goes to stderr.
set -euo pipefail

top=$(cd "$(dirname "$0")/.." && pwd)
addr=${HOLDFAST_MARIADB_ADDR:-127.0.0.1:3306}
port=${HOLDFAST_LOCAL_MARIADB_PORT:-3307}
dir="$top/.local/mariadb"

say() { echo "mariadb-up: $*" >&2; }

ping_addr() { # host:port
  local h=${1%:*} p=${1##*:}
  command -v mariadb-admin >/dev/null 2>&1 || return 1
  mariadb-admin --no-defaults --protocol=tcp -h "$h" -P "$p" -uroot --connect-timeout=2 ping >/dev/null 2>&1
}

if ping_addr "$addr"; then
  echo "$addr"
  exit 0
fi
say "no MariaDB answering as root at $addr"

if ! command -v mariadbd >/dev/null 2>&1 && [ ! -x /usr/sbin/mariadbd ]; then
  say "installing mariadb-server with apt-get"
  sudo_cmd=""
  [ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $sudo_cmd apt-get update -qq >&2 || true
  $sudo_cmd apt-get install -y -qq mariadb-server mariadb-client >&2
fi
mariadbd=$(command -v mariadbd || echo /usr/sbin/mariadbd)

local_addr="127.0.0.1:$port"
if ping_addr "$local_addr"; then
  echo "$local_addr"
  exit 0
fi

mkdir -p "$dir"
user_opt=()
[ "$(id -u)" -eq 0 ] && user_opt=(--user=root)
if [ ! -d "$dir/data/mysql" ]; then
  say "initialising a private data directory in $dir/data"
  mariadb-install-db --no-defaults "${user_opt[@]}" --datadir="$dir/data" \
    --auth-root-authentication-method=normal --skip-test-db >"$dir/install.log" 2>&1 \
    || { cat "$dir/install.log" >&2; exit 1; }
fi
say "starting a private MariaDB on $local_addr (log: $dir/error.log)"
nohup "$mariadbd" --no-defaults "${user_opt[@]}" --datadir="$dir/data" --port="$port" \
  --bind-address=127.0.0.1 --socket="$dir/mysqld.sock" --pid-file="$dir/mysqld.pid" \
  --log-error="$dir/error.log" --max-connections=2000 --max-allowed-packet=64M \
  --innodb-buffer-pool-size=256M >/dev/null 2>&1 &
for _ in $(seq 1 60); do
  if ping_addr "$local_addr"; then
    mariadb --no-defaults --protocol=tcp -h 127.0.0.1 -P "$port" -uroot -e "CREATE DATABASE IF NOT EXISTS test" >&2
    echo "$local_addr"
    exit 0
  fi
  sleep 1
done
say "MariaDB did not start; see $dir/error.log"
tail -20 "$dir/error.log" >&2 || true
exit 1
