#!/usr/bin/env bash
# Stop the one-node SLURM test cluster started by start_slurm.sh:
# slurmd, slurmctld, munged -- each by the pid in its pid file (never by name).
# SIGTERM, bounded wait (20 s each), then SIGKILL.
#
# Exit codes: 0 stopped (or nothing was running); 1 not root; 4 a daemon
# survived SIGKILL.
# Set QS_SLURM_KEEP_MUNGE=1 to leave munged running.
set -euo pipefail

RUN_DIR="/run/slurm"
log() { echo "[stop_slurm] $*"; }

if [[ "$(id -u)" -ne 0 ]]; then
    echo "[stop_slurm] ERROR: must be root" >&2
    exit 1
fi

source "$(dirname "${BASH_SOURCE[0]}")/slurm_common.sh"

rc=0
stop_pid() {
    local pidfile="$1" name="$2" pid
    if ! alive "$pidfile" "$name"; then
        log "$name not running"
        return 0
    fi
    pid="$(tr -dc '0-9' <"$pidfile")"
    log "stopping $name (pid $pid)"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do
        kill -0 "$pid" 2>/dev/null || { rm -f "$pidfile"; return 0; }
        sleep 0.5
    done
    log "$name did not exit after SIGTERM, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 1
    if kill -0 "$pid" 2>/dev/null; then
        echo "[stop_slurm] ERROR: $name (pid $pid) still alive" >&2
        rc=4
    else
        rm -f "$pidfile"
    fi
}

stop_pid "$RUN_DIR/slurmd.pid" slurmd
stop_pid "$RUN_DIR/slurmctld.pid" slurmctld
if [[ "${QS_SLURM_KEEP_MUNGE:-0}" != 1 ]]; then
    stop_pid /run/munge/munged.pid munged
fi
exit "$rc"
