#!/bin/bash
# Decoding only: seed3's members (member 2 stopped early) reranked by a short de->en channel run.
# usage: chsplit.sh M2_STEP CH_STEP [WEIGHTS]
cd "$(dirname "$0")/../../.."  # the repository root
export OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
D=../shared/data/multi30k
for w in ${3:-0.2}; do
  printf "m2=%s ch=%s w=%s " $1 $2 $w
  .venv/bin/python -m translator eval --quiet runs/seed3/member-1/avg.pt runs/seed3/member-2/$1.pt --src $D/valid.en --ref $D/valid.de --channel runs/ch24/$2.pt --channel-weight $w -o runs/chsplit.hyp 2>&1 | grep "^BLEU" | cut -c1-14
done
