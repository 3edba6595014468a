#!/bin/bash
# Experiment: the bidirectional members as their own channel (reversed copies of their checkpoints).
set -e
cd "$(dirname "$0")/../../.."  # the repository root
R=${1:-runs/bidir}
D=../shared/data/multi30k
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
.venv/bin/python - "$R" <<'PY'
import sys, torch
r = sys.argv[1]
for m in (1, 2):
    p = torch.load(f"{r}/member-{m}/avg.pt", map_location="cpu", weights_only=False)
    d = p["config"]["data"]
    d["src_lang"], d["tgt_lang"] = d["tgt_lang"], d["src_lang"]
    torch.save(p, f"{r}/rev-{m}.pt")
PY
T=".venv/bin/python -m translator eval --quiet"
F="$R/member-1/avg.pt $R/member-2/avg.pt"
B="$R/rev-1.pt $R/rev-2.pt"
echo "== en->de plain"; $T $F --src $D/valid.en --ref $D/valid.de -o $R/ende.plain.txt
for w in 0.1 0.2 0.3 0.5; do
  echo "== en->de channel $w"; $T $F --src $D/valid.en --ref $D/valid.de --channel $R/rev-1.pt --channel $R/rev-2.pt --channel-weight $w -o $R/ende.ch$w.txt
done
echo "== de->en plain"; $T $B --src $D/valid.de --ref $D/valid.en -o $R/deen.plain.txt
echo "== de->en channel 0.2"; $T $B --src $D/valid.de --ref $D/valid.en --channel $R/member-1/avg.pt --channel $R/member-2/avg.pt --channel-weight 0.2 -o $R/deen.ch0.2.txt
