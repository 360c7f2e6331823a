#!/usr/bin/env bash
# Runs holdfast on a local default: builds it and holdfastctl into bin/,
# makes sure the configured backend answers (starting a private MariaDB
# under .local/ when it does not), applies the schema, and serves on the
# configured address.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
config=${HOLDFAST_CONFIG:-config.yaml}

go build -ldflags "$(scripts/ldflags.sh)" -o bin/ ./cmd/holdfast ./cmd/holdfastctl

if ! backend=$(bin/holdfast check-backend -config "$config" 2>/tmp/holdfast-check.$$); then
  echo "run: $(cat /tmp/holdfast-check.$$)" >&2
  want=$(bin/holdfast check-backend -config "$config" -print-address 2>/dev/null || echo 127.0.0.1:3306)
  addr=$(HOLDFAST_MARIADB_ADDR="$want" scripts/mariadb-up.sh)
  export HOLDFAST_BACKEND_ADDRESS="$addr" HOLDFAST_BACKEND_USER=root HOLDFAST_BACKEND_PASSWORD=
  backend=$(bin/holdfast check-backend -config "$config")
fi
rm -f /tmp/holdfast-check.$$
echo "run: backend $backend is up" >&2

bin/holdfast migrate -config "$config"

listen=$(bin/holdfast check-config -config "$config" -print-listen)
admin=$(bin/holdfast check-config -config "$config" -print-admin-listen)
host=${listen%:*} port=${listen##*:}
if [ -n "$admin" ]; then
  ctl="bin/holdfastctl -addr $admin top"
  [ "$admin" = 127.0.0.1:6034 ] && ctl="bin/holdfastctl top"
  watch="Watch it, in another terminal:

    $ctl

or open the status page at http://$admin/ in a browser."
else
  watch="(admin.listen is empty: no admin API, holdfastctl or status page.)"
fi
cat >&2 <<MSG

holdfast is starting on $listen. Connect with:

    mariadb -c -h $host -P $port -u app -papp test

(-c keeps comments: without it the client strips /* conn_tag:... */ before
sending, and the statement counts as untagged. Users and passwords are in
$config.)

$watch

Stop with Ctrl-C.

MSG
exec bin/holdfast serve -config "$config"
