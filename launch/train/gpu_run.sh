#!/bin/bash
# The GPU-machine side of the training run (see launch/train/README.md): a smoke test of the whole
# pipeline on a tiny corpus and model (fails fast, before the real run spends its minutes), then
# the real run. Expects the corpus in .device/corpus (and .device/corpus_smoke) and $OUT set;
# leaves the model's shards, its small files (meta.tar.gz) and the logs in $OUT.
set -uo pipefail
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=true
: "${OUT:?}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
python3 -c "import torch, transformers, tokenizers; print('torch', torch.__version__, 'transformers', transformers.__version__, 'tokenizers', tokenizers.__version__)"

if [ -d .device/corpus_smoke ]; then
  python3 launch/train/train.py --corpus .device/corpus_smoke --out /tmp/smoke --steps 40 --warmup 30 \
    --batch 8 --seq 128 --hidden 64 --layers 2 --heads 2 --kv-heads 1 --ffn 128 --vocab 512 \
    --tokenizer-train-mb 1 --eval-every 20 --max-pos 256 --ref-tokens 100 --compile 0 >"$OUT/smoke.log" 2>&1 \
    || { tail -60 "$OUT/smoke.log"; echo "SMOKE TEST FAILED"; exit 1; }
  echo "smoke test passed: $(ls /tmp/smoke | tr '\n' ' ')"
fi

python3 launch/train/train.py --corpus .device/corpus --out /tmp/model "$@" 2>&1 | tee "$OUT/train.log"
rc=$?
ls -la /tmp/model
(cd /tmp/model && tar czf "$OUT/meta.tar.gz" ./*.json && cp ./*.safetensors "$OUT/")
exit $rc
