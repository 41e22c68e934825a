#!/usr/bin/env bash
# Runs a long command ("$2"...) and, when stderr is not a terminal (CI logs,
# `| tee`), prints "<what>: still running, N min" every minute until it ends,
# so a quiet compile step never looks like a hang. Exits with the command's status.
# Usage: scripts/with-heartbeat.sh WHAT COMMAND [ARGS...]
set -euo pipefail
what=$1
shift
if [[ -t 2 ]]; then
    exec "$@"
fi
start=$SECONDS
echo "== $what: started $(date -u +%H:%M:%S) UTC" >&2
( while sleep 60; do echo "== $what: still running, $(( (SECONDS - start) / 60 )) min" >&2; done ) &
beat=$!
trap 'kill "$beat" 2>/dev/null || true' EXIT
set +e
"$@"
rc=$?
set -e
echo "== $what: done in $(( (SECONDS - start) / 60 )) min $(( (SECONDS - start) % 60 )) s (exit $rc)" >&2
exit "$rc"
