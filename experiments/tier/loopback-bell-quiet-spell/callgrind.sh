#!/bin/bash
# cg.sh BIN KIND PORT : callgrind instructions of the server under the per-server load
B=$1; K=$2; PORT=$3; W="$(dirname "$0")/../loopback-size-aware-cut/per-server.toml"
valgrind --tool=callgrind --callgrind-out-file=cg-$K.out $B serve -t 4 -m 128 -p $PORT -l 127.0.0.1 --dispatch $K >/dev/null 2>cg-$K.err &
VP=$!
sleep 4
$B bench -s 127.0.0.1:$PORT --workload-file $W -q --preload-only >/dev/null
$B bench -s 127.0.0.1:$PORT --workload-file $W -q --no-preload -r 150 -d 10 --warmup 1 -c 4 > bench-$K.txt 2>&1
printf 'stats\r\nquit\r\n' | nc -q1 127.0.0.1 $PORT | egrep 'cmd_get|cmd_set' 
kill -INT $VP; wait $VP
callgrind_annotate cg-$K.out 2>/dev/null | head -30
