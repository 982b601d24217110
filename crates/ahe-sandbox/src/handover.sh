# The verifier hand-over (POSIX sh; `set -- DEPTH KEEP_SERVERS` precedes it): ends every
# process commands started in the sandbox, sparing PID 1, this script and its ancestors, and
# the backend's own processes: the oldest child of PID 1 (the keeper or exec server) and
# DEPTH generations below it. With KEEP_SERVERS=1 a process holding a listening TCP socket or
# a bound UDP socket is kept (a server the task asked for) and reported. SIGKILL in rounds
# until a round finds nothing (a forking process cannot outrun it: the dead fork no more).
# Prints `kept PID COMM PORTS` lines, then `killed N`; exits 3 when processes remain.
depth=$1
keep=$2
stat_of() {
  ST=
  PP=
  read -r line 2>/dev/null <"/proc/$1/stat" || return 1
  set -- ${line##*) }
  ST=$1
  PP=$2
}
spare=" 1 "
p=$$
while [ -n "$p" ] && [ "$p" != 0 ] && [ "$p" != 1 ]; do
  spare="$spare$p "
  stat_of "$p" || break
  p=$PP
done
infra=
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  stat_of "$p" || continue
  [ "$PP" = 1 ] || continue
  if [ -z "$infra" ] || [ "$p" -lt "$infra" ]; then infra=$p; fi
done
if [ -n "$infra" ]; then
  spare="$spare$infra "
  level=" $infra "
  i=0
  while [ "$i" -lt "$depth" ]; do
    next=" "
    for d in /proc/[0-9]*; do
      p=${d#/proc/}
      stat_of "$p" || continue
      case $level in *" $PP "*)
        next="$next$p "
        spare="$spare$p "
        ;;
      esac
    done
    level=$next
    i=$((i + 1))
  done
fi
socks=" "
if [ "$keep" = 1 ]; then
  for f in /proc/net/tcp /proc/net/tcp6 /proc/net/udp /proc/net/udp6; do
    [ -r "$f" ] || continue
    case $f in *tcp*) want=0A ;; *) want=07 ;; esac
    while read -r _ la _ st rest; do
      [ "$st" = "$want" ] || continue
      set -- $rest
      socks="$socks$6:$((0x${la##*:})) "
    done <"$f"
  done
fi
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
kept=" "
killed=0
round=0
while [ "$round" -lt 50 ]; do
  n=0
  for d in /proc/[0-9]*; do
    p=${d#/proc/}
    case "$spare$kept" in *" $p "*) continue ;; esac
    stat_of "$p" || continue
    [ "$ST" = Z ] && continue
    if [ "$socks" != " " ]; then
      ports_of "$p"
      if [ -n "$PORTS" ]; then
        kept="$kept$p "
        read -r comm 2>/dev/null <"/proc/$p/comm" || comm=?
        echo "kept $p $comm $PORTS"
        continue
      fi
    fi
    kill -9 "$p" 2>/dev/null && n=$((n + 1))
  done
  [ "$n" = 0 ] && break
  killed=$((killed + n))
  round=$((round + 1))
done
echo "killed $killed"
[ "$round" -lt 50 ] || exit 3
