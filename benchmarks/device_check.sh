#!/usr/bin/env bash
# Every GPU check of jaxlab in one run of at most 9 minutes, most valuable first.
#
# With network access, once:  bash benchmarks/device_check.sh --prepare
#   downloads into .wheels/ the pure-Python packages that a GPU image with JAX alone lacks (one
#   with jax 0.11, flax, optax, orbax, chex, absl, tqdm, matplotlib; not ml_collections,
#   tensorboardX, gymnax, gymnasium, craftax, ott-jax, jaxopt, and rejax with distrax and
#   tfp-nightly for the PPO peer), for Python 3.12, without their dependencies.
# Then on the GPU machine (no network needed), with .wheels copied beside the repository (<= 590 s):
#                             bash benchmarks/device_check.sh
# CPU dry run of the same commands at small shapes (no install; the current python):
#                             bash benchmarks/device_check.sh --cpu
# ONLY=ppo,itc runs only the checks named (a rerun of what a cut-short run missed).
#
# The whole run, install included, stops by $BUDGET seconds (default 540 on the GPU): each check
# gets its own timeout, cut to what is left of the budget, and a check that no longer fits is
# skipped and says so. Each check writes its own file under $OUT as it runs, and summary.txt gets
# its last lines when it ends, so a run cut short still returns every figure measured so far.
# Files (10 at most): summary.txt (GPU, versions, each check's command, exit status, seconds and
# last lines), lm1b.txt, uhm.txt, ppo.txt, ppo_seeds.txt, ppo_seeds_craftax.txt, attention.txt,
# dasbs.txt, itc.txt, and xla.tgz: the persistent compilation cache of the run so far. A second
# run starts warm (no compilation, Craftax's included) with it copied to .wheels/xla.tgz. The
# per-check limits add up to more than the budget: when the first checks use all of theirs, the
# last ones are skipped (summary.txt says so) and ONLY= runs them in a second call.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

# The whole script is one function, read before it runs: editing the file during a run is safe.
main() {

MODE=gpu
case "${1:-}" in
  --prepare)
    mkdir -p .wheels
    # Pinned to the versions this repository is tested with; --no-deps: each missing one is named.
    python3 -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: -d .wheels \
      ml-collections==1.1.0 tensorboardX==2.6.5 gymnax==1.0.1 gymnasium==1.3.0 \
      farama-notifications==0.0.6 craftax==1.6.1 ott-jax==0.6.0 jaxopt==0.8.5 \
      rejax==0.1.3 distrax==0.1.9 tfp-nightly==0.26.0.dev20261027 dm-tree==0.1.10 \
      decorator==5.3.2 gast==0.7.0 || exit 1
    ls -l .wheels
    exit 0
    ;;
  --cpu) MODE=cpu ;;
  "") ;;
  *)
    echo "usage: bash benchmarks/device_check.sh [--prepare | --cpu]" >&2
    exit 2
    ;;
esac

START=$SECONDS
if [ "$MODE" = gpu ]; then
  BUDGET=${BUDGET:-540}
  OUT="${OUT:-/tmp/jaxlab_device}"
else
  BUDGET=${BUDGET:-3000}  # 2 shared cores: each check compiles a few programs from scratch
  OUT="${OUT:-/tmp/jaxlab_device_cpu}"
  export JAX_PLATFORMS=cpu
fi
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
PY=${PY:-python3}

say() { echo "$*" | tee -a "$SUMMARY"; }

say "device_check ($MODE) $(date -u +%FT%TZ), budget ${BUDGET} s, commit $(git rev-parse --short HEAD 2>/dev/null)"
if [ "$MODE" = gpu ]; then
  if ls .wheels/*.whl > /dev/null 2>&1; then
    timeout 60 $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target /tmp/jaxlab_site .wheels/*.whl 2>&1 | tail -2 | tee -a "$SUMMARY"
    export PYTHONPATH="/tmp/jaxlab_site:$PWD"
  else
    say "no .wheels/ (run --prepare here and carry .wheels): checks needing ml_collections fail"
    export PYTHONPATH="$PWD"
  fi
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 \
    | tee -a "$SUMMARY"
fi
timeout 60 $PY -c "import jax; print('jax', jax.__version__, jax.devices())" 2>&1 | tail -1 \
  | tee -a "$SUMMARY"
# Every program keeps its compiled programs there; a previous run's cache makes this one warm.
export JAXLAB_COMPILE_CACHE=/tmp/jaxlab_device_${MODE}_xla
mkdir -p "$JAXLAB_COMPILE_CACHE"
if [ -f .wheels/xla.tgz ]; then
  tar -xzf .wheels/xla.tgz -C "$JAXLAB_COMPILE_CACHE" && say "compile cache: $(ls "$JAXLAB_COMPILE_CACHE" | grep -c -- '-cache$') entries from .wheels/xla.tgz"
fi
say "load $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores; setup took $((SECONDS - START)) s"

# check NAME SECONDS ARGS...: python -m ARGS into $OUT/NAME.txt, within SECONDS and the budget.
check() {
  local name=$1 secs=$2
  shift 2
  [ -n "${ONLY:-}" ] && [[ ",$ONLY," != *",$name,"* ]] && return
  local left=$((BUDGET - (SECONDS - START) - 5))
  [ "$secs" -gt "$left" ] && secs=$left
  if [ "$secs" -lt 20 ]; then
    say "== $name: skipped, $left s of the budget left"
    return
  fi
  say "== $name (timeout ${secs} s): python -m $*"
  local t0=$SECONDS
  timeout -k 5 "$secs" $PY -m "$@" > "$OUT/$name.txt" 2>&1
  local rc=$?
  say "   exit $rc$([ $rc = 124 ] && echo ' (timed out)') after $((SECONDS - t0)) s"
  grep -vE "^(I|W)[0-9]{4}|^\s*$" "$OUT/$name.txt" | tail -12 | sed 's/^/   /' | tee -a "$SUMMARY"
  tar -czf /tmp/jaxlab_device_xla.tgz -C "$JAXLAB_COMPILE_CACHE" . && mv /tmp/jaxlab_device_xla.tgz "$OUT/xla.tgz"
}

# pick GPU CPU: the GPU value, or the CPU one for the dry run.
pick() { if [ "$MODE" = gpu ]; then echo "$1"; else echo "$2"; fi; }

# 1. LM: training tokens/s and MFU of the ~1B preset (bf16, dense attention, one H200).
# shellcheck disable=SC2046  # the picked flags are meant to split into words
check lm1b $(pick 140 900) benchmarks.lm --part=throughput \
  $(pick "--model=1b --steps=10" "--model=tiny --steps=2")
# 2. UHM vs ReBRAC update cost at FQL's 4x512 networks (batch 256), random data on the GPU image.
#    --noflops: the FLOP counts do not depend on the device and cost compiles (docs/results/uhm/notes.md has them).
check uhm $(pick 80 900) benchmarks.uhm --config=experiments/configs/uhm.py:paper \
  --agents=rebrac,uhm --noflops $(pick "--steps=200" "--steps=3 --config.batch_size=16")
# 3. PPO on Craftax-Classic-Symbolic: jaxlab's PPO vs the PureJaxRL-style reference, same process.
check ppo $(pick 150 1500) benchmarks.ppo --env=craftax-classic-symbolic --seeds=1 \
  $(pick "--num_envs=1024 --rollout=64 --steps=524288" "--num_envs=8 --rollout=8 --steps=128")
# 3b. Seeds as a vmapped axis: 8-64 PPO seeds in one compiled program against one seed at a time,
#    and rejax's PPO at the same settings the same two ways (needs rejax: pip install -e '.[bench]';
#    without it the check exits 2 naming --rejax). CartPole at 64 and 256 environments per seed.
check ppo_seeds $(pick 90 1200) benchmarks.seeds --nouhm --rejax \
  $(pick "--num_envs=64,256 --seeds=64 --updates=16 --reps=2" "--num_envs=4 --seeds=2 --updates=2 --reps=1")
# 3c. jaxlab's part of it on Craftax-Classic-Symbolic (Craftax_Baselines' 3x512 MLP, 64-step
#    rollouts): rejax 0.1.3's PPO does not build on craftax 1.6's action space. Not in the CPU dry
#    run: there the vmapped Craftax chunk stalls XLA's CPU runtime (docs/reliability.md).
if [ "$MODE" = gpu ]; then
  check ppo_seeds_craftax 120 benchmarks.seeds --nouhm --env=craftax-classic-symbolic \
    --num_envs=256 --seeds=8 --updates=4 --reps=1
else
  say "== ppo_seeds_craftax: GPU only (on CPU the vmapped Craftax chunk stalls XLA's runtime)"
fi
# 4. Attention memory per variant (compile only). One GPU: context 1, so the figures are the head
#    chunking of UPipe against Ulysses on the GPU compiler; the CPU run simulates 2 devices.
check attention $(pick 50 600) benchmarks.lm --part=memory \
  $(pick "--context=1" "--seq=256 --heads=8 --kv_heads=2 --head_dim=16 --d_model=64 --context=2 --block=64")
# 5. DASBS at L = 24, beta_c: training steps/s, sampling samples/s, MCMC effective samples/s. The
#    schedule is cut to 60 steps, so the throughputs hold, the ESS is an untrained model's.
check dasbs $(pick 45 600) benchmarks.dasbs \
  $(pick "--config=experiments/configs/dasbs.py:ising_critical --config.num_stages=1 --config.ctrl_steps=40 --config.corr_steps=20" \
    "--config=experiments/configs/dasbs.py:ising_critical_cpu --config.num_stages=1 --config.ctrl_steps=4 --config.corr_steps=2 --config.sampling_steps=8 --timed_steps=2 --num_samples=16 --mcmc_chains=4 --mcmc_samples=20 --mcmc_burn_in=5")
# 6. ITC at the paper's shapes: imagined tokens/s per decoding, world-model steps/s, decode cost.
check itc $(pick 45 900) benchmarks.itc $(pick "--scale=paper --repeats=3" "--repeats=1 --decodes=sample,itc")

say "done in $((SECONDS - START)) s of ${BUDGET}; load $(cut -d' ' -f1-3 /proc/loadavg)"
}

main "$@"
exit
