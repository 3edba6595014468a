#!/bin/bash
# One GPU loan (docs/experiments.md, item 42): the cuda tests, beside four en->de recipe runs (2
# members each) at a fixed 5,600 updates, each differing from the config in one setting (same seeds,
# same batches); ROUND2=1 SKIP_TESTS=1 for the second call's four. Run as .gpu/sweep.sh on
# the device machine with .gpu/multi30k (a copy of ../shared/data/multi30k), .whl (datasets, dill,
# multiprocess wheels for its Python 3.12) and data/multi30k-en-de (prepared here) carried.
set -u
cd "$(dirname "$0")/.."
T0=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader > $OUT/env.txt
python3 -c "import torch,sys,pyarrow;print(sys.version.split()[0],torch.__version__,torch.cuda.get_device_name(0),'pyarrow',pyarrow.__version__)" >> $OUT/env.txt 2>&1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl >> $OUT/env.txt 2>&1
export PYTHONPATH=$PWD:/tmp/site HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1
mkdir -p ../shared/data && cp -r .gpu/multi30k ../shared/data/
python3 -c "import datasets;print('datasets',datasets.__version__)" >> $OUT/env.txt 2>&1
cat $OUT/env.txt
mkdir -p $OUT/logs
( [ -n "${SKIP_TESTS:-}" ] || timeout 300 python3 -m pytest -q -m cuda -p no:cacheprovider tests > $OUT/logs/cuda-tests.log 2>&1; echo "rc $?" >> $OUT/logs/cuda-tests.log ) &
run() {  # name, then --set pairs
  local name=$1; shift
  OMP_NUM_THREADS=4 timeout 540 python3 -m translator.recipe configs/multi30k-en-de.yaml \
    --data ../shared/data/multi30k --set data.splits.valid=valid --set data.splits.test=test2016 \
    --budget 7 --average 1 --members 2 --valid-only --quiet \
    --set train.max_updates=5600 --set train.run_dir=runs/gpu-$name "$@" > $OUT/logs/$name.log 2>&1
  echo "rc $? at $(( $(date +%s) - T0 )) s" >> $OUT/logs/$name.log
}
if [ -n "${ROUND2:-}" ]; then
run base-s3 --set train.seed=3 &
run ls02-s3 --set train.label_smoothing=0.2 --set train.seed=3 &
run combo --set train.label_smoothing=0.2 --set model.attention_dropout=0.2 --set train.lr=1.5e-3 &
run combo-s3 --set train.label_smoothing=0.2 --set model.attention_dropout=0.2 --set train.lr=1.5e-3 --set train.seed=3 &
else
run base &
run ls02 --set train.label_smoothing=0.2 &
run attdrop02 --set model.attention_dropout=0.2 &
run lr15 --set train.lr=1.5e-3 &
fi
wait
tail -3 $OUT/logs/cuda-tests.log
for d in runs/gpu-*; do
  python3 - "$d" <<'PY'
import json, sys, pathlib
d = pathlib.Path(sys.argv[1]); m = json.loads((d / "recipe.json").read_text())
print(d.name, m["training"]["member_updates"], " ".join(f"{k}={v['bleu']:.2f}/{v['lc_tok_bleu']:.2f}" for k, v in m["valid"].items()), "chosen", m["chosen"])
PY
done
tar czf $OUT/runs.tgz --exclude='*.pt' --exclude='events.*' runs/gpu-*
echo "total $(( $(date +%s) - T0 )) s"
