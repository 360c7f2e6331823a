#!/usr/bin/env bash
# Prints the -ldflags that stamp holdfast's version into a build (package
# internal/version; `holdfast version` shows it):
#
#   go build -ldflags "$(scripts/ldflags.sh)" ./cmd/holdfast
#
# VERSION, COMMIT and BUILD_DATE in the environment override what git and
# the clock say. Outside a git checkout, with none of them set, only the
# date is stamped and holdfast reports version "devel".
set -euo pipefail
cd "$(dirname "$0")/.."
pkg=github.com/holdfast-db/holdfast/internal/version
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || true)}
commit=${COMMIT:-$(git rev-parse HEAD 2>/dev/null || true)}
date=${BUILD_DATE:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
for v in "$version" "$commit" "$date"; do
  case $v in
    *[[:space:]\'\"]*) echo "ldflags: $v: a version, commit or date has no spaces or quotes" >&2; exit 1 ;;
  esac
done
flags=()
[ -n "$version" ] && flags+=("-X $pkg.version=$version")
[ -n "$commit" ] && flags+=("-X $pkg.commit=$commit")
flags+=("-X $pkg.date=$date")
echo "${flags[*]}"
