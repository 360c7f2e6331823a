#!/usr/bin/env bash
# Runs holdfast on a local default: builds it and holdfastctl into bin/,
# makes sure the configured backend answers (starting a private MariaDB
# under .local/ when it does not), applies the schema, and serves on the
# configured address.
#
#   scripts/run-local.sh            bin/holdfast on config.yaml (HOLDFAST_CONFIG names another)   (make run)
#   scripts/run-local.sh --image IMAGE ROOT TOOL   the image make image built, as a container runtime would  (make image-run)
#
# --image runs every holdfast command (check-backend, migrate, serve) from
# the image archive IMAGE, unpacked into ROOT by TOOL (holdfast-image, see
# internal/imagebuild): its entrypoint, its user, its environment and its
# own configuration (config.yaml, at /etc/holdfast/config.yaml); the
# HOLDFAST_* variables of this environment are passed in, as
# `docker run -e` would, and the MariaDB this script may start is passed
# that way too. It needs root.
set -euo pipefail
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"

if [ "${1:-}" = --image ]; then
  [ $# -eq 4 ] || { echo "usage: $0 --image IMAGE ROOT TOOL" >&2; exit 2; }
  IMAGE=$2 IMAGE_ROOT=$3 IMAGE_TOOL=$4
  go build -ldflags "$(scripts/ldflags.sh)" -o bin/ ./cmd/holdfastctl
  config=/etc/holdfast/config.yaml
  passed() { # -e NAME for each HOLDFAST_* variable of the environment
    local v
    for v in $(compgen -e); do
      case $v in HOLDFAST_*) printf -- '-e\n%s\n' "$v" ;; esac
    done
  }
  image() { # runs the image; arguments replace its Cmd
    local e
    mapfile -t e < <(passed)
    "$IMAGE_TOOL" run -image "$IMAGE" -root "$IMAGE_ROOT" "${e[@]}" -- "$@"
  }
  hf() { image "$@"; }
  serve() {
    local e
    mapfile -t e < <(passed)
    exec "$IMAGE_TOOL" run -image "$IMAGE" -root "$IMAGE_ROOT" "${e[@]}"
  }
  what="the image $IMAGE (unpacked into $IMAGE_ROOT)"
  shown="config.yaml, the image's $config"
else
  config=${HOLDFAST_CONFIG:-config.yaml}
  go build -ldflags "$(scripts/ldflags.sh)" -o bin/ ./cmd/holdfast ./cmd/holdfastctl
  hf() { bin/holdfast "$@"; }
  serve() { exec bin/holdfast serve -config "$config"; }
  what=holdfast shown=$config
fi

if ! backend=$(hf check-backend -config "$config" 2>/tmp/holdfast-check.$$); then
  echo "run: $(cat /tmp/holdfast-check.$$)" >&2
  want=$(hf check-backend -config "$config" -print-address 2>/dev/null || echo 127.0.0.1:3306)
  addr=$(HOLDFAST_MARIADB_ADDR="$want" scripts/mariadb-up.sh)
  export HOLDFAST_BACKEND_ADDRESS="$addr" HOLDFAST_BACKEND_USER=root HOLDFAST_BACKEND_PASSWORD=
  backend=$(hf check-backend -config "$config")
fi
rm -f /tmp/holdfast-check.$$
echo "run: backend $backend is up" >&2

hf migrate -config "$config"

listen=$(hf check-config -config "$config" -print-listen)
admin=$(hf check-config -config "$config" -print-admin-listen)
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

$what is starting on $listen. Connect with:

    mariadb -c -h $host -P $port -u app -papp test

(-c keeps comments: without it the client strips /* conn_tag:... */ before
sending, and the statement counts as untagged. Users and passwords are in
$shown.)

$watch

Stop with Ctrl-C.

MSG
serve
