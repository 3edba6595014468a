#!/bin/bash
# Decoding only (item 41): each left-to-right member of the recipe's two draws (runs/wd02: item 31,
# runs/seed3: item 37) reranked by one right-to-left member, and each draw's ensemble by them.
cd "$(dirname "$0")/../../.."  # the repository root
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
D=../shared/data/multi30k
S=".venv/bin/python docs/results/multi30k-en-de-r2l/rerank_r2l.py --src $D/valid.en --ref $D/valid.de"
echo "== pair 1"; $S --l2r runs/wd02/member-1/avg.pt --r2l runs/r2l/member-1/avg.pt
echo "== pair 2"; $S --l2r runs/wd02/member-2/best.pt --r2l runs/r2l/member-2/avg.pt
echo "== pair 3"; $S --l2r runs/seed3/member-1/avg.pt --r2l runs/r2l/member-1/avg.pt
echo "== pair 4"; $S --l2r runs/seed3/member-2/avg.pt --r2l runs/r2l/member-2/avg.pt
echo "== wd02 ensemble, both right-to-left members"
$S --l2r runs/wd02/member-1/avg.pt runs/wd02/member-2/best.pt \
  --r2l runs/r2l/member-1/avg.pt runs/r2l/member-2/avg.pt
echo "== seed3 ensemble, right-to-left member 1"
$S --l2r runs/seed3/member-1/avg.pt runs/seed3/member-2/avg.pt --r2l runs/r2l/member-1/avg.pt
