#!/bin/bash
# Decoding only: seed3's member 1 with member 2 stopped at U updates (runs/m2-32: the same seed and
# batches, retrained), reranked by the de->en channel run stopped at C updates.
cd "$(dirname "$0")/../../.."  # the repository root
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
D=../shared/data/multi30k
E=".venv/bin/python -m translator eval --quiet runs/seed3/member-1/avg.pt"
for pair in 3200:3647 4400:2400 4789:2000; do
  u=${pair%:*}; c=${pair#*:}
  printf "m2=%s plain " $u; $E runs/m2-32/step-$u.pt --src $D/valid.en --ref $D/valid.de -o runs/s2.hyp 2>&1 | grep "^BLEU" | cut -c1-14
  for w in 0.2 0.3; do
    printf "m2=%s ch=%s w=%s " $u $c $w
    $E runs/m2-32/step-$u.pt --src $D/valid.en --ref $D/valid.de --channel runs/ch24/step-$c.pt --channel-weight $w -o runs/s2.hyp 2>&1 | grep "^BLEU" | cut -c1-14
  done
done
