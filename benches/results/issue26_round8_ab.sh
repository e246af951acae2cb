#!/bin/bash
# usage: ab.sh MODEL_GGUF N_PAIRS MATMUL [bins...]
M=$1; N=$2; MM=$3; shift 3
IDS=$(/tmp/ab/issue13_new ids "$M" "The theory of attention sinks says that heads park their attention on the first token when they have nothing to do." 32)
for i in $(seq 1 $N); do
  for b in "$@"; do
    r=$(awk '{print $1}' /proc/loadavg); run=$(awk '{print $4}' /proc/loadavg)
    SINKLAB_MATMUL=$MM /tmp/ab/$b generate "$M" "$IDS" 256 | python3 -c "import json,sys; j=json.load(sys.stdin); print('$b', round(j['tokens_per_s'],1), hash(tuple(j['first_ids']))%10000, 'load $r $run')"
  done
done
