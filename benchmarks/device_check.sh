#!/usr/bin/env bash
# Every GPU check of jaxlab in one prepared run, sized for the device tool's budget (~8 min).
#
# Here (CPU machine), once:   bash benchmarks/device_check.sh --prepare
#   downloads into .wheels/ the pure-Python packages the GPU image lacks (it has jax 0.11, flax,
#   optax, orbax, chex; not ml_collections or tensorboardX).
# Then, with the device tool:  run(command="bash benchmarks/device_check.sh", carry=[".wheels"],
#                                  timeout_s=560)
# Results come back under $OUT: nvidia_smi.txt, lm.txt, uhm.txt, vi.txt, ppo.txt, dasbs.txt, summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p .wheels
  python3 -m pip download -q --no-deps -d .wheels ml-collections tensorboardX
  ls .wheels
  exit 0
fi

OUT="${OUT:-/tmp/jaxlab_device}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=python3
$PY -m pip install -q --no-index --find-links .wheels ml-collections tensorboardX 2>&1 | tail -2
$PY -m pip install -q --no-deps --no-build-isolation -e . 2>&1 | tail -2
nvidia-smi > "$OUT/nvidia_smi.txt" 2>&1
$PY -c "import jax; print(jax.__version__, jax.devices())" | tee "$OUT/summary.txt"

run() {  # name, seconds, command...
  local name=$1 secs=$2; shift 2
  echo "== $name ($*)" | tee -a "$OUT/summary.txt"
  timeout "$secs" "$@" > "$OUT/$name.txt" 2>&1
  echo "   exit $?" | tee -a "$OUT/summary.txt"
  grep -vE "^(I|W)[0-9]{4}" "$OUT/$name.txt" | tail -12 | tee -a "$OUT/summary.txt"
}
# LM: ~126M-parameter `small` preset tokens/s + MFU, then per-variant attention memory.
run lm 240 $PY -m benchmarks.lm --model=small --steps=10
# UHM vs ReBRAC update cost at paper scale (4x512), random data (no ogbench on the GPU image).
run uhm 150 $PY -m benchmarks.uhm --paper_scale --agents=rebrac,ghm,uhm --steps=200
# GOMA: 1024 vmapped instances vs the NumPy loop.
run vi 60 $PY -m benchmarks.goma
# DASBS: training/sampling throughput vs MCMC effective samples/s at L=24, beta_c.
# PPO on Craftax: env-only builtin reset (a), optimistic resets (b), PPO MLP (c), at 1024 envs.
run ppo 420 $PY -m benchmarks.ppo --envs=craftax-classic-symbolic,craftax-symbolic --num_envs=1024 --rollout=64 --iterations=4
run dasbs 60 $PY -m benchmarks.dasbs  # default preset: L = 24 at beta_c
# ITC (paper shapes): imagined tokens/s, world-model steps/s, decode cost of ITC / ITC-Hungarian vs
# sampling. The Sinkhorn figures need ott-jax (+ jaxopt lineax equinox jaxtyping wadler-lindig) in
# .wheels; without it benchmarks.itc skips them and prints why.
$PY -m pip install -q --no-index --find-links .wheels ott-jax 2>&1 | tail -1
run itc 300 $PY -m benchmarks.itc --scale=paper
# LM: the ~1B preset's training tokens/s + MFU.
run lm1b 420 $PY -m benchmarks.lm --part=throughput --model=1b --steps=10
