#!/bin/bash
# A/B: old (HEAD a200d02) vs new issue13 binary, alternating, both orders
export RAYON_NUM_THREADS=2
NEW=$(ls -t /work/main/target/release/deps/issue13-* | grep -v '\.d$' | head -1)
OLD=/tmp/issue13_old
S=~/.cache/sinklab/smollm2/model/SmolLM2-135M-Instruct.Q4_1.gguf
Q=~/.cache/sinklab/qwen2.5-coder-0.5b/model/qwen2.5-coder-0.5b-instruct.gguf
G=~/.cache/sinklab/gemma3-270m/model/gemma-3-270m-q4_k_m.gguf
TEXT="The quick brown fox jumps over the lazy dog. Attention sinks are tokens that receive a large share of attention."
ids512=$($OLD ids $S "$(printf '%s ' $(seq 1 60 | xargs -I{} echo "$TEXT"))" 512)
for round in 1 2; do
 for order in "OLD NEW" "NEW OLD"; do
  for which in $order; do
   B=${!which}
   r=$(cat /proc/loadavg | cut -d' ' -f4)
   f=$($B forward $S "$ids512" 3 all | python3 -c "import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print(round(d['best_s'],3))")
   for m in S Q G; do
     M=${!m}; ids=$($OLD ids $M "$TEXT" 32)
     g=$(SINKLAB_MATMUL=q8 $B generate $M "$ids" 128 | python3 -c "import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print(round(d['tokens_per_s'],1))")
     e=$($B generate $M "$ids" 128 | python3 -c "import json,sys; d=json.loads(sys.stdin.readlines()[-1]); print(round(d['tokens_per_s'],1))")
     eval "g_$m=$g; e_$m=$e"
   done
   echo "$which runnable=$r forward_all_s=$f q8_gen S/Q/G=$g_S/$g_Q/$g_G exact_gen S/Q/G=$e_S/$e_Q/$e_G"
  done
 done
done
