#!/bin/bash
# Instructions per request of the proxy by connection choice, counted by callgrind (robust to
# the host's load; callgrind runs the proxy ~50x slower, so requests stack on connections
# more than natively): the saturated 10-key closed loop of syscalls.py against one
# `tailtrim proxy -t 1 --server-connections 4` under callgrind over 3 memcached, counters zeroed
# after the preload and dumped after the 3 s load; choices alternated, REPS times each.
#   bash experiments/proxy/connection-choice/avoid-slow/callgrind.sh BINARY REPS > callgrind.json
set -e
B=${1:?tailtrim binary}
REPS=${2:-3}
CL=target/experiments/closedloop
TMP=$(mktemp -d)
ports=()
for i in 1 2 3; do
  p=$((21810 + i))
  taskset -c 1 memcached -l 127.0.0.1 -p $p -U 0 -m 64 -t 1 -u root &
  ports+=($p)
done
mcpids=$(jobs -p)
sleep 0.5
servers="127.0.0.1:${ports[0]}:1,127.0.0.1:${ports[1]}:1,127.0.0.1:${ports[2]}:1"
port=21820
echo '{"binary": "'"$($B --version)"'", "load_average_start": "'"$(cut -d' ' -f1-3 /proc/loadavg)"'", "runs": ['
first=1
for rep in $(seq 0 $((REPS - 1))); do
  for choice in round-robin avoid-slow; do
    port=$((port + 1))
    out=$TMP/cg-$choice-$port.out
    taskset -c 0 valgrind --tool=callgrind --callgrind-out-file=$out $B proxy \
      -l 127.0.0.1:$port --admin off -s $servers --hash fnv1a_64 --distribution ketama \
      --timeout-ms 2000 -t 1 --server-failure-limit 1000000000 --server-connections 4 \
      --connection-choice $choice 2>/dev/null &
    vp=$!
    for i in $(seq 100); do (echo > /dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.2; done
    $CL -s 127.0.0.1:$port -preload > /dev/null
    callgrind_control -z $vp > /dev/null
    completed=$(taskset -c 1 $CL -s 127.0.0.1:$port -c 8 -depth 1 -keys 10 -d 3s \
      | python3 -c 'import json,sys; print(json.load(sys.stdin)["completed"])')
    callgrind_control -d $vp > /dev/null
    sleep 0.5
    kill $vp; wait $vp 2> /dev/null || true
    ir=$(grep -E '^summary:' $out.1 | head -1 | cut -d' ' -f2)
    [ $first = 1 ] || echo ','
    first=0
    echo '{"rep": '$rep', "target": "'$choice'", "completed": '$completed', "instructions": '$ir', "instructions_per_request": '$((ir / completed))'}'
  done
done
echo '], "load_average_end": "'"$(cut -d' ' -f1-3 /proc/loadavg)"'"}'
kill $mcpids 2> /dev/null || true
rm -rf "$TMP"
