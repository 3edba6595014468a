#!/bin/bash
# Decoding only: seed3's full ensemble reranked by the de->en channel run at several points of its training.
cd "$(dirname "$0")/../../.."  # the repository root
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
D=../shared/data/multi30k
for ch in step-1600 step-2400 step-3647; do for w in 0.2 0.3; do
  printf "ch=%s w=%s " $ch $w
  .venv/bin/python -m translator eval --quiet runs/seed3/member-1/avg.pt runs/seed3/member-2/avg.pt --src $D/valid.en --ref $D/valid.de --channel runs/ch24/$ch.pt --channel-weight $w -o runs/chc.hyp 2>&1 | grep "^BLEU" | cut -c1-14
done; done
