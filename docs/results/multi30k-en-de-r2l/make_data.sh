#!/bin/bash
# The right-to-left copy of Multi30k (item 41): English as it is, each German line's
# whitespace-separated words in reverse order. Then, from the repository root:
#   python -m translator.recipe configs/multi30k-en-de.yaml --data runs/r2l-data \
#     --set data.splits.valid=valid --set data.splits.test=test2016 --budget 48 --average 1 \
#     --members 2 --valid-only --quiet --set train.run_dir=runs/r2l --set data.name=multi30k-en-de-r2l
#   (member 1 again to 2,800 updates, for split.sh: OMP_NUM_THREADS=1 python -m translator train
#    runs/r2l/member-1/config.yaml --set train.run_dir=runs/r2l-short --set train.max_updates=2800
#    --set train.keep_last=20 --quiet)
set -e
cd "$(dirname "$0")/../../.."  # the repository root
D=../shared/data/multi30k
mkdir -p runs/r2l-data
for split in train valid test2016; do
  cp "$D/$split.en" runs/r2l-data/
  awk '{n = split($0, w, " "); o = ""; for (i = n; i >= 1; i--) o = o (i < n ? " " : "") w[i]; print o}' \
    "$D/$split.de" > "runs/r2l-data/$split.de"
done
