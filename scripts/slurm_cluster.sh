#!/usr/bin/env bash
# A real single-node SLURM cluster (with accounting) for ablate's tests.
#
#   scripts/slurm_cluster.sh start    install packages if missing, write configs, start daemons, wait until usable
#   scripts/slurm_cluster.sh stop     stop the daemons (by the PIDs in their pid files), in reverse order
#   scripts/slurm_cluster.sh status   each daemon's state, then sinfo; exit 0 only when the cluster is usable
#
# Needs root, Debian 12 (bookworm). No systemd is needed or used: nothing starts services here, so
# every daemon is started by this script and stopped by the PID it recorded.
#
# Environment:
#   ABLATE_SLURM_DIR       state directory (configs, pid files, logs, spool, database)   [/tmp/ablate-slurm]
#   ABLATE_SLURM_TIMEOUT   seconds to wait for each daemon / the first job                  [90]
#   ABLATE_SLURM_DB_PORT   TCP port of the private MariaDB, bound to 127.0.0.1             [3306]
#
# Layout of the state directory:
#   etc/slurm.conf etc/slurmdbd.conf   configs (/etc/slurm/slurm.conf links to etc/slurm.conf when possible)
#   run/<daemon>.pid                   pid files: munged mariadbd slurmdbd slurmctld slurmd
#   log/<daemon>.log                   logs
#   spool/ mariadb/                    slurmctld state, slurmd spool, MariaDB datadir
set -euo pipefail

STATE=${ABLATE_SLURM_DIR:-/tmp/ablate-slurm}
TIMEOUT=${ABLATE_SLURM_TIMEOUT:-90}
DB_PORT=${ABLATE_SLURM_DB_PORT:-3306}
CLUSTER=ablate
PARTITION=debug
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)
PACKAGES=(slurm-wlm munge slurmdbd mariadb-server)
MARKER="# Written by ablate scripts/slurm_cluster.sh"

ETC=$STATE/etc
RUN=$STATE/run
LOG=$STATE/log
DBDIR=$STATE/mariadb
DBSOCK=$DBDIR/mysqld.sock
export SLURM_CONF=$ETC/slurm.conf
PROG=${0##*/}
T0=$(date +%s.%N)

say() { printf '%s: %s\n' "$PROG" "$*"; }
elapsed() { awk -v a="$T0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }
die() { printf '%s: ERROR: %s\n' "$PROG" "$*" >&2; exit 1; }

# die_daemon NAME WHAT: the one line that says which daemon failed and where its log is
# (preceded by the tail of that log, to make CI output self-explanatory).
die_daemon() {
    local name=$1 what=$2 log=$LOG/$1.log
    if [[ -s $log ]]; then
        printf '%s: last lines of %s:\n' "$PROG" "$log" >&2
        tail -n 15 "$log" | sed 's/^/    | /' >&2
    fi
    die "$name $what (log: $log)"
}

need_root() { [[ $(id -u) == 0 ]] || die "must run as root (it installs packages and starts daemons)"; }

# ---------------------------------------------------------------------------------------- pids
pidfile() { echo "$RUN/$1.pid"; }

# pid_of NAME: the PID recorded for NAME if that process is alive and really is NAME, else nothing.
pid_of() {
    local name=$1 f pid state
    f=$(pidfile "$name")
    [[ -r $f ]] || return 1
    pid=$(tr -dc '0-9' <"$f")
    [[ -n $pid && -r /proc/$pid/comm ]] || return 1
    [[ $(cat "/proc/$pid/comm" 2>/dev/null) == "$name" ]] || return 1
    state=$(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null) || return 1
    [[ $state != Z && $state != X ]] || return 1
    echo "$pid"
}

# launch NAME USER CMD...: for daemons kept in the foreground (munged, mariadbd). Start CMD in its own
# session, as USER, output to log/NAME.log, and record its PID (setsid and setpriv exec, so $! is the
# daemon itself).
launch() {
    local name=$1 user=$2
    shift 2
    printf '\n==== %s: %s starting %s\n' "$(date -Is)" "$PROG" "$name" >>"$LOG/$name.log"
    if [[ $user == root ]]; then
        setsid "$@" </dev/null >>"$LOG/$name.log" 2>&1 9>&- &
    else
        setsid setpriv --reuid="$user" --regid="$user" --init-groups "$@" \
            </dev/null >>"$LOG/$name.log" 2>&1 9>&- &
    fi
    echo $! >"$(pidfile "$name")"
    LAUNCHED_AT=$SECONDS
}

# launch_daemon NAME CMD...: for the Slurm daemons, which daemonize and write their own pid file
# (run/NAME.pid, set in the configs) and log file (log/NAME.log, timestamped). Run in the foreground
# (-D) they would copy every line to stderr too. Errors before they daemonize land in the same log.
launch_daemon() {
    local name=$1
    shift
    printf '\n==== %s: %s starting %s\n' "$(date -Is)" "$PROG" "$name" >>"$LOG/$name.log"
    rm -f "$(pidfile "$name")"
    LAUNCHED_AT=$SECONDS
    setsid "$@" </dev/null >>"$LOG/$name.log" 2>&1 9>&- || die_daemon "$name" "failed to start"
}

# still_alive NAME: die naming NAME if it has exited. A daemonizing daemon gets PID_GRACE seconds
# to write its pid file; a process still exec'ing (setsid, setpriv) gets a moment to take its name.
PID_GRACE=10
LAUNCHED_AT=0
still_alive() {
    local name=$1
    pid_of "$name" >/dev/null && return 0
    if [[ ! -e $(pidfile "$name") ]] && ((SECONDS - LAUNCHED_AT < PID_GRACE)); then return 0; fi
    sleep 0.3
    pid_of "$name" >/dev/null || die_daemon "$name" "exited during startup"
}

# wait_ready NAME CHECK...: poll CHECK until it succeeds; fail naming NAME if it dies or times out.
wait_ready() {
    local name=$1 deadline=$((SECONDS + TIMEOUT))
    shift
    while ! "$@" >/dev/null 2>&1; do
        still_alive "$name"
        ((SECONDS < deadline)) || die_daemon "$name" "did not become ready within ${TIMEOUT}s"
        sleep 0.3
    done
}

# ------------------------------------------------------------------------------------ install
installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }

install_packages() {
    local missing=() p
    for p in "${PACKAGES[@]}"; do installed "$p" || missing+=("$p"); done
    ((${#missing[@]})) || return 0
    say "installing ${missing[*]} (apt-get, non-interactive)"
    # Never let package scripts start services: this script starts its own daemons.
    local made_policy=0
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
        chmod 755 /usr/sbin/policy-rc.d
        made_policy=1
    fi
    local rc=0
    {
        DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
            DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
                -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
    } >"$STATE/apt.log" 2>&1 || rc=$?
    ((made_policy)) && rm -f /usr/sbin/policy-rc.d
    ((rc == 0)) || { tail -n 20 "$STATE/apt.log" >&2; die "apt-get failed (log: $STATE/apt.log)"; }
    say "packages installed after $(elapsed)s"
}

# ------------------------------------------------------------------------------------ configs
# put_file PATH OWNER MODE: write stdin to PATH only if the content changed; set owner and mode.
put_file() {
    local path=$1 owner=$2 mode=$3 tmp
    tmp=$(mktemp "$path.XXXXXX")
    cat >"$tmp"
    if [[ -f $path ]] && cmp -s "$tmp" "$path"; then
        rm -f "$tmp"
    else
        [[ -f $path ]] && CONFIG_CHANGED=1
        mv -f "$tmp" "$path"
    fi
    chown "$owner" "$path"
    chmod "$mode" "$path"
}

CONFIG_CHANGED=0
write_configs() {
    install -d -m 0755 "$STATE" "$ETC" "$RUN" "$STATE/spool"
    # Group slurm may write (slurmdbd chdirs there); sticky, so munged still accepts it as secure.
    install -d -o root -g slurm -m 1775 "$LOG"
    install -d -m 0755 "$STATE/spool/slurmd"
    install -d -o slurm -g slurm -m 0755 "$STATE/spool/slurmctld"
    install -d -o mysql -g mysql -m 0750 "$DBDIR"
    install -d -o munge -g munge -m 0755 /run/munge
    # Daemons that drop privileges reopen their logs as their own user.
    local f
    for f in slurmctld slurmdbd; do
        touch "$LOG/$f.log"
        chown slurm:slurm "$LOG/$f.log"
    done
    touch "$LOG/munged.log"
    chown munge:munge "$LOG/munged.log"
    chmod 0640 "$LOG/munged.log"

    if [[ ! -s $ETC/db.pass ]]; then
        (umask 077 && head -c 18 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' >"$ETC/db.pass")
    fi
    DB_PASS=$(cat "$ETC/db.pass")

    NODE=$(hostname -s)
    local cpus mem
    cpus=$(nproc)
    mem=$(slurmd -C 2>/dev/null | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p' | head -n 1)
    [[ -n $mem ]] || mem=$(awk '/^MemTotal:/ { print int($2 / 1024) }' /proc/meminfo)
    mem=$((mem > 2048 ? mem - 1024 : mem / 2))

    put_file "$ETC/slurm.conf" root:root 0644 <<EOF
$MARKER on every start; edit the script, not this file.
ClusterName=$CLUSTER
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=slurm
SlurmdUser=root
SlurmctldPort=6817
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
# Default 120 s delays every requeued job by two minutes.
AuthInfo=cred_expire=10
StateSaveLocation=$STATE/spool/slurmctld
SlurmdSpoolDir=$STATE/spool/slurmd
SlurmctldPidFile=$RUN/slurmctld.pid
SlurmdPidFile=$RUN/slurmd.pid
SlurmctldLogFile=$LOG/slurmctld.log
SlurmdLogFile=$LOG/slurmd.log
# No cgroups here.
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
# CR_Core_Memory without DefMemPerCPU would make every job take the whole node.
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
KillWait=5
MailProg=/bin/true
ReturnToService=2
MinJobAge=300
JobRequeue=1
InactiveLimit=0
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=6819
JobCompType=jobcomp/none
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=$PARTITION Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF

    # slurmdbd refuses a config not owned by SlurmUser or readable by others.
    put_file "$ETC/slurmdbd.conf" slurm:slurm 0600 <<EOF
$MARKER on every start; edit the script, not this file.
AuthType=auth/munge
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=6819
SlurmUser=slurm
PidFile=$RUN/slurmdbd.pid
LogFile=$LOG/slurmdbd.log
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DB_PORT
StorageUser=slurm
StoragePass=$DB_PASS
StorageLoc=slurm_acct_db
EOF

    if ((CONFIG_CHANGED)) && { pid_of slurmctld || pid_of slurmd || pid_of slurmdbd; } >/dev/null; then
        say "WARNING: configs changed but daemons run with the old ones; apply with: $0 stop && $0 start"
    fi

    # Client commands (sinfo, sbatch, submitit...) read /etc/slurm/slurm.conf unless SLURM_CONF is set.
    install -d -m 0755 /etc/slurm
    local sys=/etc/slurm/slurm.conf
    if [[ -L $sys || ! -e $sys ]] || grep -q "^$MARKER" "$sys" 2>/dev/null; then
        ln -sfn "$ETC/slurm.conf" "$sys"
    elif [[ $(readlink -f "$sys") != "$ETC/slurm.conf" ]]; then
        say "WARNING: $sys belongs to someone else; left alone. Clients need: export SLURM_CONF=$ETC/slurm.conf"
    fi
}

# ------------------------------------------------------------------------------------ daemons
munge_works() { munge -n </dev/null | unmunge >/dev/null; }

start_munged() {
    if pid_of munged >/dev/null; then return 0; fi
    if munge_works 2>/dev/null; then
        say "munged: a munged not started by this script already answers; using it"
        return 0
    fi
    local key=/etc/munge/munge.key
    if [[ ! -s $key ]]; then
        install -d -o munge -g munge -m 0700 /etc/munge
        if command -v mungekey >/dev/null; then
            mungekey --create --keyfile="$key"
        else
            dd if=/dev/urandom of="$key" bs=1 count=1024 status=none
        fi
    fi
    chown munge:munge "$key"
    chmod 0400 "$key"
    install -d -o munge -g munge -m 0700 /var/lib/munge
    launch munged munge /usr/sbin/munged --foreground --log-file="$LOG/munged.log"
    wait_ready munged munge_works
}

db() { mariadb --no-defaults --socket="$DBSOCK" -uroot; }
db_up() { mariadb-admin --no-defaults --socket="$DBSOCK" -uroot ping; }

start_mariadbd() {
    if ! pid_of mariadbd >/dev/null; then
        if [[ ! -d $DBDIR/data/mysql ]]; then
            rm -rf "$DBDIR/data"
            mariadb-install-db --no-defaults --user=mysql --basedir=/usr --datadir="$DBDIR/data" \
                --auth-root-authentication-method=socket --skip-test-db >>"$LOG/mariadbd.log" 2>&1 ||
                die_daemon mariadbd "could not initialise its datadir $DBDIR/data"
        fi
        if (exec 3<>"/dev/tcp/127.0.0.1/$DB_PORT") 2>/dev/null; then
            die "port 127.0.0.1:$DB_PORT is taken by another process; set ABLATE_SLURM_DB_PORT"
        fi
        # 1 GiB buffer pool: what slurmdbd checks for (it logs an error below that); the pages are
        # only touched as used, so resident memory stays small. No native AIO (io_setup fails in
        # crowded containers) and fsync flushing (O_DIRECT fails on tmpfs): this is a test database.
        launch mariadbd root /usr/sbin/mariadbd --no-defaults --user=mysql --basedir=/usr \
            --datadir="$DBDIR/data" --socket="$DBSOCK" --pid-file="$DBDIR/mariadbd.pid" \
            --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
            --innodb-buffer-pool-size=1024M --innodb-lock-wait-timeout=900 \
            --innodb-use-native-aio=0 --innodb-flush-method=fsync --innodb-flush-log-at-trx-commit=2
        wait_ready mariadbd db_up
    fi
    # Idempotent: also refreshes the password if etc/db.pass was regenerated.
    db <<EOF || die_daemon mariadbd "refused the SQL that creates user slurm"
CREATE DATABASE IF NOT EXISTS slurm_acct_db;
CREATE USER IF NOT EXISTS 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'localhost' IDENTIFIED BY '$DB_PASS';
ALTER USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'localhost';
GRANT ALL PRIVILEGES ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';
FLUSH PRIVILEGES;
EOF
}

dbd_up() { sacctmgr -n -P list cluster format=cluster; }

start_slurmdbd() {
    if ! pid_of slurmdbd >/dev/null; then
        launch_daemon slurmdbd /usr/sbin/slurmdbd
        wait_ready slurmdbd dbd_up
    fi
    # slurmctld reports jobs only for a cluster the database knows. (Users need no associations:
    # AccountingStorageEnforce is off; root's jobs get the account "root" that sacctmgr creates.)
    if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
        sacctmgr -i add cluster "$CLUSTER" >/dev/null || die_daemon slurmdbd "would not add cluster $CLUSTER"
    fi
}

ctld_up() { scontrol ping | grep -q 'is UP'; }

start_slurmctld() {
    pid_of slurmctld >/dev/null && return 0
    launch_daemon slurmctld /usr/sbin/slurmctld
    wait_ready slurmctld ctld_up
}

node_state() { sinfo -h -N -n "$NODE" -o '%T' 2>/dev/null | head -n 1; }
node_usable() { [[ $(node_state) =~ ^(idle|mixed|allocated|completing)$ ]]; }

start_slurmd() {
    if ! pid_of slurmd >/dev/null; then
        launch_daemon slurmd /usr/sbin/slurmd
        # slurmctld may still show the node idle from before; wait for this slurmd's pid file.
        until pid_of slurmd >/dev/null; do still_alive slurmd; sleep 0.1; done
    fi
    local deadline=$((SECONDS + TIMEOUT)) resumed=0 st
    until node_usable; do
        still_alive slurmd
        st=$(node_state)
        # A node left down/drained by an earlier run: slurmd is up, so put it back.
        if [[ $st =~ ^(down|drain|drained|draining|fail)$ ]] && ((!resumed)); then
            scontrol update NodeName="$NODE" State=RESUME >/dev/null 2>&1 || true
            resumed=1
        fi
        if ((SECONDS >= deadline)); then
            local why
            why=$(sinfo -h -R -o '%E' 2>/dev/null | head -n 1)
            die_daemon slurmd "did not bring node $NODE to idle within ${TIMEOUT}s (state '${st:-unknown}'${why:+, reason: $why})"
        fi
        sleep 0.3
    done
    # The real test: a job step runs. Retried until the deadline (the node may still be registering).
    local out
    until out=$(cd / && timeout 30 srun -N1 -n1 -t 1 -J ablate-probe hostname 2>&1); do
        still_alive slurmd
        ((SECONDS < deadline)) ||
            die_daemon slurmd "could not run 'srun -N1 hostname' within ${TIMEOUT}s: ${out//$'\n'/ }"
        sleep 1
    done
}

cmd_start() {
    need_root
    install -d -m 0755 "$STATE"
    exec 9>"$STATE/.lock"
    flock 9
    install_packages
    write_configs
    start_munged
    start_mariadbd
    start_slurmdbd
    start_slurmctld
    start_slurmd
    say "cluster '$CLUSTER' up after $(elapsed)s: node $NODE ($(nproc) CPUs), partition $PARTITION, accounting via slurmdbd"
    say "state: $STATE   config: $ETC/slurm.conf (SLURM_CONF)   logs: $LOG/{$(IFS=,; echo "${DAEMONS[*]}")}.log"
}

# ------------------------------------------------------------------------------------ stop
stop_one() {
    local name=$1 pid i
    if ! pid=$(pid_of "$name"); then
        rm -f "$(pidfile "$name")"
        return 0
    fi
    kill -TERM "$pid" 2>/dev/null || true
    for ((i = 0; i < 300; i++)); do # 60 s, then SIGKILL
        pid_of "$name" >/dev/null || break
        sleep 0.2
    done
    if pid_of "$name" >/dev/null; then
        say "$name (pid $pid) ignored SIGTERM for 60 s; sending SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        for ((i = 0; i < 50; i++)); do pid_of "$name" >/dev/null || break; sleep 0.2; done
    fi
    rm -f "$(pidfile "$name")"
    say "stopped $name (pid $pid)"
}

# Jobs would outlive slurmd (their slurmstepd processes are not daemons of ours): cancel them first
# and give them KillWait to end, so nothing of the cluster keeps running after stop.
cancel_jobs() {
    pid_of slurmctld >/dev/null || return 0
    local jobs=() i
    read -ra jobs <<<"$(timeout 15 squeue -h -o '%i' 2>/dev/null | tr '\n' ' ')" || true
    ((${#jobs[@]})) || return 0
    say "cancelling ${#jobs[@]} job(s) still queued or running"
    timeout 15 scancel --quiet "${jobs[@]}" 2>/dev/null || true
    for ((i = 0; i < 100; i++)); do # 20 s
        [[ -z $(timeout 15 squeue -h -o '%i' 2>/dev/null) ]] && break
        sleep 0.2
    done
}

cmd_stop() {
    need_root
    [[ -d $STATE ]] || { say "nothing to stop ($STATE does not exist)"; return 0; }
    exec 9>"$STATE/.lock"
    flock 9
    cancel_jobs
    local i
    for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do stop_one "${DAEMONS[i]}"; done
}

# ------------------------------------------------------------------------------------ status
cmd_status() {
    local name pid ok=1
    for name in "${DAEMONS[@]}"; do
        if pid=$(pid_of "$name"); then
            printf '%-10s running (pid %s)\n' "$name" "$pid"
        elif [[ -e $(pidfile "$name") ]]; then
            printf '%-10s dead (stale pid file %s)\n' "$name" "$(pidfile "$name")"
            ok=0
        else
            printf '%-10s stopped\n' "$name"
            ok=0
        fi
    done
    echo "state: $STATE   logs: $LOG   SLURM_CONF=$SLURM_CONF"
    if command -v sinfo >/dev/null && [[ -e $SLURM_CONF ]]; then
        timeout 15 sinfo || ok=0
    else
        echo "sinfo: not available (cluster never started here)"
        ok=0
    fi
    ((ok)) || return 3
}

case ${1:-} in
start) cmd_start ;;
stop) cmd_stop ;;
status) cmd_status ;;
*)
    echo "usage: $PROG start|stop|status   (state dir: \$ABLATE_SLURM_DIR, default /tmp/ablate-slurm)" >&2
    exit 2
    ;;
esac
