#!/bin/bash
# Decoding only (item 41): seed3's member 1 with member 2 stopped at U updates (its own run up to
# 5,600; runs/m2-32 below that), reranked by the right-to-left run stopped at R updates
# (runs/r2l-short: runs/r2l/member-1 again, the same losses update for update).
# usage: split.sh U:R [U:R ...]   e.g. split.sh 5600:1200 4400:2400
cd "$(dirname "$0")/../../.."  # the repository root
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
D=../shared/data/multi30k
for pair in "$@"; do
  u=${pair%:*}; r=${pair#*:}
  m2=runs/seed3/member-2/step-$u.pt; [ -f "$m2" ] || m2=runs/m2-32/step-$u.pt
  echo "== member 2 at $u, right-to-left at $r"
  .venv/bin/python docs/results/multi30k-en-de-r2l/rerank_r2l.py --l2r runs/seed3/member-1/avg.pt \
    "$m2" --r2l runs/r2l-short/step-$r.pt --src $D/valid.en --ref $D/valid.de \
    --weights ${WEIGHTS:-0,0.3,0.5,0.7,1.0} 2>&1 | grep "^w "
done
