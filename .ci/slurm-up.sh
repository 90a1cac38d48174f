#!/usr/bin/env bash
# Start a one-node Slurm cluster on this machine, for the Slurm tests (tests/online_trainer/parallel/test_slurm.py).
#
# Run as root on Debian (or Ubuntu): installs slurm-wlm and munge from the distribution's packages when missing,
# writes /etc/slurm/slurm.conf (one partition "debug" holding this machine's cores; no cgroups, which a container
# lacks), starts munged, slurmctld and slurmd, and waits until sinfo shows the node idle. Running it again
# restarts the daemons with a fresh configuration. Exit status 0: the cluster is up; else the reason is printed.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then echo "slurm-up: needs root" >&2; exit 1; fi
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
    command -v apt-get >/dev/null || { echo "slurm-up: no apt-get to install slurm-wlm and munge" >&2; exit 1; }
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends slurm-wlm munge >/dev/null
fi

host=$(hostname -s)
cpus=$(nproc)
memory=$(awk '/MemTotal/ {print int($2 / 1024 * 0.9)}' /proc/meminfo)
mkdir -p /etc/slurm /var/spool/slurmctld /var/spool/slurmd /var/log/slurm /run/munge
cat > /etc/slurm/slurm.conf <<CONF
# Written by .ci/slurm-up.sh: one node, one partition, no cgroups (a container has none to give).
ClusterName=online-trainer-ci
SlurmctldHost=$host
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# A requeued job may start again after cred_expire seconds (default 120).
AuthInfo=cred_expire=10
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
ReturnToService=2
JobRequeue=1
# Seconds between the SIGTERM of a cancelled, requeued or preempted job and its SIGKILL.
KillWait=30
MinJobAge=600
MpiDefault=none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd.pid
SlurmctldLogFile=/var/log/slurm/slurmctld.log
SlurmdLogFile=/var/log/slurm/slurmd.log
SlurmctldTimeout=30
SlurmdTimeout=30
NodeName=$host CPUs=$cpus RealMemory=$memory State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF

# Stop daemons of an earlier start (by their pid files), then start afresh.
for pidfile in /run/slurmd.pid /run/slurmctld.pid; do
    if [ -s "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
        kill "$(cat "$pidfile")"; sleep 1
    fi
done
if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --keyfile /etc/munge/munge.key 2>/dev/null \
        || dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null
fi
chown -R munge:munge /etc/munge /var/lib/munge /var/log/munge /run/munge 2>/dev/null || true
chmod 0700 /etc/munge; chmod 0400 /etc/munge/munge.key
if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    runuser -u munge -- /usr/sbin/munged
fi
slurmctld -c -i
slurmd -c
for _ in $(seq 60); do
    state=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
    if [ "$state" = idle ]; then echo "slurm-up: node $host idle ($cpus CPUs, partition debug)"; exit 0; fi
    sleep 1
done
echo "slurm-up: the node did not become idle (sinfo: '${state:-nothing}'); see /var/log/slurm/" >&2
exit 1
