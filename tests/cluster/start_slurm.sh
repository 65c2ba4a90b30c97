#!/usr/bin/env bash
# Start a one-node SLURM cluster on localhost (munged + slurmctld + slurmd),
# for the `cluster` pytest marker and the profiles/slurm Snakemake profile.
#
# Idempotent: installs slurm-wlm + munge with apt-get if missing (root only),
# (re)writes /etc/slurm/slurm.conf, creates the munge key if missing, starts
# only the daemons that are not running, waits until the node is idle and
# prints the node's CPUs and memory.  No systemd needed.
#
# Exit codes (see tests/cluster/README.md):
#   0  cluster up, node idle
#   3  SLURM unavailable (not root / no apt / install failed); one line
#      "SLURM unavailable: <reason>" on stderr -- callers should skip
#   4  a daemon failed to start (see the log files named in the message)
#   5  node did not become idle within QS_SLURM_WAIT seconds
#
# Environment knobs:
#   QS_SLURM_WAIT            seconds to wait for the idle node (default 60)
#   QS_SLURM_MEM_HEADROOM_MB memory kept out of RealMemory (default: max(1024, 10%))
set -euo pipefail

WAIT_S="${QS_SLURM_WAIT:-60}"
PARTITION="main"
CONF_DIR="/etc/slurm"
CONF="$CONF_DIR/slurm.conf"
RUN_DIR="/run/slurm"
LOG_DIR="/var/log/slurm"
CTLD_SPOOL="/var/spool/slurmctld"
SLURMD_SPOOL="/var/spool/slurmd"
MUNGE_KEY="/etc/munge/munge.key"
MUNGE_PID="/run/munge/munged.pid"
CTLD_PID="$RUN_DIR/slurmctld.pid"
SLURMD_PID="$RUN_DIR/slurmd.pid"
T="timeout -s INT"   # every cluster command is bounded (sacct/squeue can hang)

log() { echo "[start_slurm] $*"; }
unavailable() { echo "SLURM unavailable: $*" >&2; exit 3; }
die() { local code="$1"; shift; echo "[start_slurm] ERROR: $*" >&2; exit "$code"; }

source "$(dirname "${BASH_SOURCE[0]}")/slurm_common.sh"
# running PIDFILE NAME -> alive, or a process of that exact name exists
# (started by other means, without our pid file; detection only, never killed)
running() { alive "$1" "$2" || pgrep -x "$2" >/dev/null 2>&1; }

node_state() {  # prints e.g. "idle", "mix", "down*", "" on failure
    $T 10 sinfo -h -N -p "$PARTITION" -o '%T' 2>/dev/null | head -n1 || true
}

print_node() {
    log "node ready:"
    $T 10 sinfo -N -p "$PARTITION" -o '%N %P %c %m %T' || true
    local line
    line="$($T 10 sinfo -h -N -p "$PARTITION" -o '%N %c %m' | head -n1 || true)"
    # shellcheck disable=SC2086
    set -- $line
    echo "SLURM node ${1:-?}: CPUs=${2:-?} RealMemory=${3:-?}MB partition=$PARTITION"
}

# ---------------------------------------------------------------- 0. root?
if [[ "$(id -u)" -ne 0 ]]; then
    # A non-root caller can still use an already-running cluster.
    if command -v sinfo >/dev/null && [[ "$(node_state)" == idle* || "$(node_state)" == mix* ]]; then
        print_node; exit 0
    fi
    unavailable "not root (cannot install or start the SLURM daemons)"
fi

# ---------------------------------------------------------------- 1. install
need_install=0
for b in munged mungekey slurmctld slurmd sinfo sbatch squeue scontrol; do
    command -v "$b" >/dev/null 2>&1 || [[ -x "/usr/sbin/$b" ]] || need_install=1
done
if (( need_install )); then
    command -v apt-get >/dev/null 2>&1 || unavailable "slurm-wlm/munge not installed and apt-get not found"
    log "installing slurm-wlm + munge with apt-get ..."
    $T 300 apt-get update -qq >/dev/null 2>&1 || unavailable "apt-get update failed (no package mirror reachable?)"
    DEBIAN_FRONTEND=noninteractive $T 600 apt-get install -y -qq slurm-wlm munge >/dev/null 2>&1 \
        || unavailable "apt-get install slurm-wlm munge failed"
fi
export PATH="$PATH:/usr/sbin:/sbin"
for b in munged slurmctld slurmd sinfo sbatch squeue scontrol; do
    command -v "$b" >/dev/null 2>&1 || unavailable "$b not found after installation"
done

# ---------------------------------------------------------------- 2. config
HOST="$(hostname -s)"
CPUS="$(nproc)"
MEM_MB=$(( $(awk '/^MemTotal:/ {print $2}' /proc/meminfo) / 1024 ))
HEADROOM_MB="${QS_SLURM_MEM_HEADROOM_MB:-$(( MEM_MB / 10 > 1024 ? MEM_MB / 10 : 1024 ))}"
REAL_MB=$(( MEM_MB - HEADROOM_MB ))
(( REAL_MB >= 512 )) || REAL_MB=$(( MEM_MB / 2 ))

mkdir -p "$CONF_DIR" "$RUN_DIR" "$LOG_DIR" "$CTLD_SPOOL" "$SLURMD_SPOOL"
new_conf="$(mktemp)"
trap 'rm -f "$new_conf"' EXIT
cat >"$new_conf" <<EOF
# Written by tests/cluster/start_slurm.sh -- one-node throwaway test cluster.
# Re-running the script regenerates this file (and restarts the daemons if
# it changed).  No systemd, no cgroups, no accounting database.
ClusterName=querysmasher
SlurmctldHost=${HOST}(127.0.0.1)
SlurmUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=${CTLD_SPOOL}
SlurmdSpoolDir=${SLURMD_SPOOL}
SlurmctldPidFile=${CTLD_PID}
SlurmdPidFile=${SLURMD_PID}
SlurmctldLogFile=${LOG_DIR}/slurmctld.log
SlurmdLogFile=${LOG_DIR}/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
MpiDefault=none
# no cgroups in this container: track processes via /proc, no task binding
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
# no slurmdbd: Snakemake must use --slurm-status-command squeue
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# keep finished jobs visible in squeue for 10 min (the plugin polls squeue)
MinJobAge=600
ReturnToService=2
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
SlurmdParameters=config_overrides
SlurmdTimeout=300
InactiveLimit=0
KillWait=30
Waittime=0
NodeName=${HOST} NodeAddr=127.0.0.1 CPUs=${CPUS} RealMemory=${REAL_MB} State=UNKNOWN
PartitionName=${PARTITION} Nodes=${HOST} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
EOF
conf_changed=0
if ! cmp -s "$new_conf" "$CONF" 2>/dev/null; then
    install -m 0644 "$new_conf" "$CONF"
    conf_changed=1
    log "wrote $CONF (node $HOST: CPUs=$CPUS RealMemory=${REAL_MB}MB of ${MEM_MB}MB)"
fi

# ---------------------------------------------------------------- 3. munge
if [[ ! -s "$MUNGE_KEY" ]]; then
    log "creating munge key $MUNGE_KEY"
    mkdir -p /etc/munge
    if command -v mungekey >/dev/null 2>&1; then
        mungekey --create --keyfile="$MUNGE_KEY" --force
    else
        dd if=/dev/urandom of="$MUNGE_KEY" bs=1 count=1024 status=none
    fi
fi
chown -R munge:munge /etc/munge; chmod 0700 /etc/munge; chmod 0600 "$MUNGE_KEY"
mkdir -p /run/munge /var/lib/munge /var/log/munge
chown munge:munge /run/munge /var/lib/munge /var/log/munge; chmod 0755 /run/munge

if running "$MUNGE_PID" munged; then
    log "munged already running (pid $(cat "$MUNGE_PID" 2>/dev/null || pgrep -x munged))"
else
    log "starting munged"
    rm -f /run/munge/munge.socket.2.lock
    runuser -u munge -- munged --pid-file="$MUNGE_PID" \
        || die 4 "munged failed to start (see /var/log/munge/munged.log)"
fi
for _ in $(seq 1 20); do
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then break; fi
    sleep 0.5
done
munge -n 2>/dev/null | unmunge >/dev/null 2>&1 || die 4 "munge credential round-trip failed (see /var/log/munge/munged.log)"

# ---------------------------------------------------------------- 4. slurm daemons
stop_pid() {  # stop_pid PIDFILE NAME -- SIGTERM, bounded wait, then SIGKILL
    local pidfile="$1" name="$2" pid
    alive "$pidfile" "$name" || return 0
    pid="$(tr -dc '0-9' <"$pidfile")"
    kill -TERM "$pid" 2>/dev/null || true
    for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
    kill -KILL "$pid" 2>/dev/null || true
}
if (( conf_changed )) && { alive "$CTLD_PID" slurmctld || alive "$SLURMD_PID" slurmd; }; then
    log "slurm.conf changed: restarting slurmd + slurmctld"
    stop_pid "$SLURMD_PID" slurmd
    stop_pid "$CTLD_PID" slurmctld
fi

if running "$CTLD_PID" slurmctld; then
    log "slurmctld already running (pid $(cat "$CTLD_PID" 2>/dev/null || pgrep -x slurmctld))"
else
    log "starting slurmctld"
    slurmctld || die 4 "slurmctld failed to start (see $LOG_DIR/slurmctld.log)"
fi
ok=0
for _ in $(seq 1 40); do
    if $T 5 scontrol ping 2>/dev/null | grep -q 'is UP'; then ok=1; break; fi
    sleep 0.5
done
(( ok )) || die 4 "slurmctld does not answer 'scontrol ping' (see $LOG_DIR/slurmctld.log)"

if running "$SLURMD_PID" slurmd; then
    log "slurmd already running (pid $(cat "$SLURMD_PID" 2>/dev/null || pgrep -x slurmd))"
else
    log "starting slurmd"
    slurmd || die 4 "slurmd failed to start (see $LOG_DIR/slurmd.log)"
fi

# ---------------------------------------------------------------- 5. wait for idle
log "waiting up to ${WAIT_S}s for node $HOST to become idle"
deadline=$(( SECONDS + WAIT_S ))
resumed=0
while :; do
    st="$(node_state)"
    case "$st" in
        idle|idle~|mix|alloc|mixed|allocated) break ;;   # up (busy counts as up on re-run)
        down*|drain*|fail*)
            # e.g. left "down" by an earlier unclean stop; ReturnToService=2
            # normally handles it, but resume explicitly once to be sure.
            if (( ! resumed )); then
                $T 10 scontrol update NodeName="$HOST" State=RESUME >/dev/null 2>&1 || true
                resumed=1
            fi ;;
    esac
    if (( SECONDS >= deadline )); then
        $T 10 sinfo -N -l >&2 || true
        $T 10 scontrol show node "$HOST" 2>/dev/null | grep -iE 'State|Reason' >&2 || true
        die 5 "node $HOST not idle after ${WAIT_S}s (state '${st:-no answer}'; see $LOG_DIR/*.log)"
    fi
    sleep 1
done
print_node
