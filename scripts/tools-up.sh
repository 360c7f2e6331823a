#!/usr/bin/env bash
# Installs the peers the test suite drives (sysbench, the mariadb client,
# Prometheus with promtool, Chromium for the status page's browser test,
# redis-server for the Redis-migration tests) with apt-get when they are
# missing.
set -euo pipefail
need=()
command -v sysbench >/dev/null 2>&1 || need+=(sysbench)
command -v mariadb >/dev/null 2>&1 || need+=(mariadb-client)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
[ -x /usr/bin/chromium ] || need+=(chromium)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
[ ${#need[@]} -eq 0 ] && exit 0
echo "tools-up: installing ${need[*]} with apt-get" >&2
sudo_cmd=""
[ "$(id -u)" -ne 0 ] && sudo_cmd="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo_cmd apt-get update -qq >&2 || true
$sudo_cmd apt-get install -y -qq "${need[@]}" >&2
