# Shared by start_slurm.sh and stop_slurm.sh (sourced, not run).

# alive PIDFILE NAME -> 0 if the pid in PIDFILE is alive and is process NAME
alive() {
    local pidfile="$1" name="$2" pid
    [[ -r "$pidfile" ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null || return 1
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$name"* ]]
}
