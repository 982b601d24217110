# The verifier hand-over (POSIX sh; `set -- DEPTH KEEP_SERVERS [TICKS [MASK]]` precedes it):
# ends every process commands started in the sandbox, sparing PID 1, this script and its
# ancestors, and the backend's own processes: the oldest child of PID 1 (the keeper or exec
# server) and DEPTH generations below it. With KEEP_SERVERS=1 a process holding a listening
# TCP socket or a bound UDP socket is kept (a server the task asked for) and reported.
# SIGKILL in rounds until a round finds no new process (a forking process cannot outrun it:
# the dead fork no more). Prints `guard BITS`, `kept PID COMM PORTS` lines (`unguarded ...`
# for a server killed by the ptrace guard's rule below), then `killed N`; exits 3 when
# processes remain. Before that, a server still starting is given time to listen (see
# "Services still starting"). Only shell builtins run, but for one `ls` per leftover that
# holds a socket. A third argument (`handover::command`'s `start_secs`) sets that wait's limit
# in 0.25 s ticks (default 120: 30 s); a fourth, the guard's capability bits.
depth=$1
keep=$2
ticks=${3:-120}
mask=${4:-}
# One pass over /proc: "pid:ppid" of every live (not zombie) process.
scan() {
  PROCS=" "
  for d in /proc/[0-9]*; do
    read -r line 2>/dev/null <"$d/stat" || continue
    set -- ${line##*) }
    [ "$1" = Z ] || PROCS="$PROCS${d#/proc/}:$2 "
  done
}
# Sets PP to the parent of pid $1 per the last scan (empty when gone).
parent() {
  PP=${PROCS#* $1:}
  [ "$PP" = "$PROCS" ] && PP= && return 1
  PP=${PP%% *}
}
scan
spare=" 1 "
p=$$
while [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != 1 ]; do
  spare="$spare$p "
  parent "$p" || break
  p=$PP
done
infra=
for e in $PROCS; do
  [ "${e#*:}" = 1 ] || continue
  p=${e%:*}
  if [ -z "$infra" ] || [ "$p" -lt "$infra" ]; then infra=$p; fi
done
if [ -n "$infra" ]; then
  spare="$spare$infra "
  level=" $infra "
  i=0
  while [ "$i" -lt "$depth" ]; do
    next=" "
    for e in $PROCS; do
      case $level in *" ${e#*:} "*)
        next="$next${e%:*} "
        spare="$spare${e%:*} "
        ;;
      esac
    done
    level=$next
    i=$((i + 1))
  done
fi
# The ptrace guard (`ptrace_guard.rs`): capabilities PID 1 holds and the agent's shell (the
# oldest child of PID 1) lacks, or the bits `$4` names. A server kept for the tests must lack
# them too: one holding them did not come from the agent's shell and could ptrace the
# verifier; it is killed.
capbnd() {
  CB=0
  while read -r k v; do
    [ "$k" = CapBnd: ] && CB=$((0x$v)) && break
  done 2>/dev/null <"/proc/$1/status"
}
# A backend whose own processes are not the oldest child of PID 1 names the bits (`$4`).
guard=0
if [ -n "$mask" ]; then
  guard=$mask
elif [ -n "$infra" ]; then
  capbnd 1
  g1=$CB
  capbnd "$infra"
  guard=$((g1 & ~CB))
fi
echo "guard $guard"
# Listening sockets ("inode:port"), read only once some leftover holds a socket: reading
# /proc/net costs ~10 ms, a socket test on a process's fds costs nothing.
socks=
load_socks() {
  socks=" "
  for f in /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; do
    [ -r "$f" ] || continue
    case $f in *tcp*) want=0A ;; *) want=07 ;; esac
    while read -r _ la _ st rest; do
      [ "$st" = "$want" ] || continue
      set -- $rest
      socks="$socks$6:$((0x${la##*:})) "
    done <"$f"
  done
}
# Whether pid $1 holds any socket.
has_socket() {
  for f in /proc/$1/fd/*; do
    [ -S "$f" ] && return 0
  done
  return 1
}
# Sets PORTS to the listening ports pid $1 holds (empty when none).
ports_of() {
  PORTS=
  set -f
  for l in $(ls -l "/proc/$1/fd" 2>/dev/null); do
    case $l in socket:\[*)
      ino=${l#socket:\[}
      ino=${ino%\]}
      case $socks in *" $ino:"*)
        port=${socks#* $ino:}
        PORTS="$PORTS${PORTS:+,}${port%% *}"
        ;;
      esac
      ;;
    esac
  done
  set +f
}
# Services still starting: with KEEP_SERVERS=1, a leftover that is not listening yet may be a
# server binding its port a moment after the agent ended (`setsid python server.py &` as a
# solution's last step). Wait, polling every 0.25 s, while some leftover is not listening and
# it is either within the first 2 s or still starting: a new leftover appeared, or the
# non-listening ones are runnable, used CPU or moved bytes (reads, writes, downloads) since
# the last poll. Never past the start window (default 30 s). A trial that left nothing, or only listeners, does not
# wait; an idle leftover (asleep, no I/O) costs 2 s.
if [ "$keep" = 1 ]; then
  t=0
  last=
  lastw=
  while :; do
    socks=
    waiting=" "
    work=0
    run=0
    for e in $PROCS; do
      p=${e%:*}
      case "$spare" in *" $p "*) continue ;; esac
      if has_socket "$p"; then
        [ -n "$socks" ] || load_socks
        ports_of "$p"
        [ -n "$PORTS" ] && continue
      fi
      line=
      read -r line 2>/dev/null <"/proc/$p/stat" || continue
      set -- ${line##*) }
      case $1 in R | D) run=1 ;; esac
      waiting="$waiting$p "
      work=$((work + ${12:-0} + ${13:-0}))
      while read -r k v; do
        case $k in rchar: | wchar:) work=$((work + v)) ;; esac
      done 2>/dev/null <"/proc/$p/io"
    done
    [ "$waiting" = " " ] && break
    [ "$t" -ge "$ticks" ] && break
    if [ "$t" -ge 8 ] && [ "$run" = 0 ] && [ "$waiting" = "$lastw" ] && [ "$work" = "$last" ]; then
      break
    fi
    last=$work
    lastw=$waiting
    sleep 0.25 2>/dev/null || break
    t=$((t + 1))
    scan
  done
  socks=
fi
done_=" "
gone=""
killed=0
round=0
while [ "$round" -lt 50 ]; do
  n=0
  for e in $PROCS; do
    p=${e%:*}
    case "$spare$done_" in *" $p "*) continue ;; esac
    done_="$done_$p "
    if [ "$keep" = 1 ] && has_socket "$p"; then
      [ -n "$socks" ] || load_socks
      ports_of "$p"
      if [ -n "$PORTS" ]; then
        read -r comm 2>/dev/null <"/proc/$p/comm" || comm=?
        CB=0
        [ "$guard" = 0 ] || capbnd "$p"
        if [ $((CB & guard)) = 0 ]; then
          echo "kept $p $comm $PORTS"
          continue
        fi
        echo "unguarded $p $comm $PORTS"
      fi
    fi
    kill -9 "$p" 2>/dev/null && n=$((n + 1)) && gone="$gone $p"
  done
  [ "$n" = 0 ] && break
  killed=$((killed + n))
  round=$((round + 1))
  scan
done
# SIGKILL is delivered at once but a process takes a moment to exit: wait (up to ~1 s)
# until every killed one is gone or a zombie, so that nothing of it runs beside the verifier.
w=0
while [ "$w" -lt 100 ]; do
  alive=0
  for p in $gone; do
    st=""
    { read -r st <"/proc/$p/stat"; } 2>/dev/null || continue
    case "${st##*) }" in Z*) ;; *) alive=1; break ;; esac
  done
  [ "$alive" = 0 ] && break
  sleep 0.01 2>/dev/null || :
  w=$((w + 1))
done
echo "killed $killed"
[ "$round" -lt 50 ] || exit 3
