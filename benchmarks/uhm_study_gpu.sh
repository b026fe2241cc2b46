#!/usr/bin/env bash
# UHM against ReBRAC on the five OGBench cube-single tasks, 3 vmapped training seeds each, in ONE
# GPU call of about 8 minutes: table with 95 % intervals (success and the held-out diagnostics) and
# curves, written to $OUT (docs/uhm.md, "The GPU study").
#
# Here (CPU machine, with internet), once:   bash benchmarks/uhm_study_gpu.sh --prepare
#   1. .wheels/uhm/: what the GPU image lacks for OGBench evaluation (it has jax, flax, optax,
#      orbax, chex, absl, tqdm, matplotlib): mujoco, ogbench, gymnasium, lxml, dm_env, dm_tree,
#      ml_collections, tensorboardX and a slimmed dm_control (only its mjcf / mujoco parts that
#      OGBench's manipulation envs import; its suite and locomotion assets are 105 of its 116 MB),
#      for Python 3.12, ~46 MB;
#   2. runs/uhm_gpu_data/: the generated cube-single-play set, $EPISODES episodes (default 60,
#      ~11 MB: with the wheels and the repository it stays under the 64 MiB the device tool
#      carries; 4-30 s per episode here, so ~5-30 min).
# Then with the device tool:  run(command="bash benchmarks/uhm_study_gpu.sh",
#                                 carry=[".wheels/uhm", "runs/uhm_gpu_data"], timeout_s=590)
# CPU dry run, end to end at tiny size (a 2-episode set, 2x64 networks, 20 updates):
#                             bash benchmarks/uhm_study_gpu.sh --cpu
#
# Device-time estimate (an assumption, not a measurement: no H200 figure of a UHM update exists in
# this repository or in /work/shared/anchors.md, which times Craftax and matmuls only): the paper
# (arXiv 2605.15603, wall-clock figure) reports ~2.4 ms per UHM update and ~1.3 ms per ReBRAC update
# on an unnamed GPU (4x512 networks, one seed). We assume the same per update for 3 vmapped seeds of
# the 3x256 networks used here (at these sizes a GPU update is bound by kernel launches, not
# FLOPs). The 10 runs share the GPU (XLA_PYTHON_CLIENT_PREALLOCATE=false, $PAR at once), so their
# GPU time adds up: 5 tasks x STEPS x (2.4 + 1.3) ms = 5 x 15000 x 3.7 ms = 278 s, plus ~60 s of
# compiles (in parallel, on the CPU cores), ~30 s of MuJoCo evaluation (3 evaluations x 10
# episodes x 3 seeds per run, 16 cores) and ~20 s of installing the wheels: ~6.5 min. Each run's
# metrics.csv records its measured updates/s, and the table's wall-clock curves use them, so the
# call measures the figure it assumed; if the study does not finish, lower STEPS.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MODE=gpu
case "${1:-}" in
  --prepare) MODE=prepare ;;
  --cpu) MODE=cpu ;;
  "") ;;
  *)
    echo "usage: bash benchmarks/uhm_study_gpu.sh [--prepare | --cpu]" >&2
    exit 2
    ;;
esac
PY=${PY:-python3}
EPISODES=${EPISODES:-60}
DATA=runs/uhm_gpu_data

if [ "$MODE" = prepare ]; then
  mkdir -p .wheels/uhm
  $PY -m pip download -q --no-deps --python-version 3.12 --only-binary=:all: \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .wheels/uhm mujoco==3.17.0 ogbench==1.2.2 dm_control==1.0.50 gymnasium==1.3.0 \
    farama-notifications==0.0.6 lxml==6.1.3 dm-env==1.6 dm-tree==0.1.10 ml-collections==1.1.0 \
    tensorboardX==2.6.5 || exit 1
  # dm_control without the parts OGBench never imports (same files otherwise, same version).
  $PY - <<'EOF' || exit 1
import glob, os, zipfile
src = glob.glob(".wheels/uhm/dm_control-*.whl")[0]
dst = src + ".slim"
drop = ("dm_control/suite/", "dm_control/locomotion/", "dm_control/blender/", "dm_control/manipulation/")
with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zout:
  for item in zin.infolist():
    if not item.filename.startswith(drop):
      zout.writestr(item, zin.read(item.filename))
os.replace(dst, src)
EOF
  JAX_PLATFORMS=cpu $PY -c "
from jaxlab.envs import ogbench as og
og.load('cube-single-play-singletask-task1-v0', dataset_dir='$DATA', num_episodes=$EPISODES, seed=0)
" || exit 1
  du -sh .wheels/uhm "$DATA"
  exit 0
fi

if [ "$MODE" = gpu ]; then
  OUT="${OUT:-/tmp/uhm_study_gpu}"
  STEPS=${STEPS:-15000}
  EVAL_EVERY=${EVAL_EVERY:-5000}
  EVAL_EPISODES=${EVAL_EPISODES:-10}
  PAR=${PAR:-10}
  NET=cpu  # experiments.uhm's default config: 3x256 networks, batch 256
  EXTRA=""
  if ! ls "$DATA"/jaxlab-generated/e"$EPISODES"-s0/cube-single-play-v0.npz > /dev/null 2>&1; then
    echo "no $DATA/jaxlab-generated/e$EPISODES-s0: run --prepare here and carry $DATA" >&2
    exit 2
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/uhm_site .wheels/uhm/*.whl \
    || exit 1
  export PYTHONPATH="/tmp/uhm_site:$PWD" MUJOCO_GL=egl
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
else
  OUT="${OUT:-/tmp/uhm_study_gpu_cpu}"
  STEPS=20
  EVAL_EVERY=10
  EVAL_EPISODES=1
  PAR=2
  EPISODES=2
  DATA=$OUT/data  # generated here (seconds)
  NET=cpu
  EXTRA="--config=experiments/configs/uhm.py:cpu --config.k_max=4"
  export JAX_PLATFORMS=cpu
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
ROOT=$OUT/study
SWEEP=(--suite=cube --agents=uhm,rebrac --vmap_seeds --seeds=0,1,2 --data_seeds=0
  --episodes="$EPISODES" --dataset_dir="$DATA" --net="$NET" --steps="$STEPS"
  --eval_every="$EVAL_EVERY" --eval_episodes="$EVAL_EPISODES" --workdir="$ROOT")
[ -n "$EXTRA" ] && SWEEP+=(--extra="$EXTRA")
START=$SECONDS
$PY -m experiments.uhm_sweep "${SWEEP[@]}" || exit 1
# The data set is generated (or checked) once before the runs start in parallel.
$PY -c "
from jaxlab.envs import ogbench as og
og.load('cube-single-play-singletask-task1-v0', dataset_dir='$DATA', num_episodes=$EPISODES, seed=0)
" > "$OUT/data.log" 2>&1 || { tail -5 "$OUT/data.log"; exit 1; }
# At most $PAR runs at once; each one's log is run.log beside its workdir.
while IFS= read -r cmd; do
  wd=$(sed -E 's|.*--workdir=([^ ]*).*|\1|' <<< "$cmd")
  mkdir -p "$(dirname "$wd")"
  (eval "$cmd" > "$(dirname "$wd")/run.log" 2>&1) &
  while [ "$(jobs -rp | wc -l)" -ge "$PAR" ]; do wait -n; done
done < "$ROOT/commands.sh"
wait
for f in "$ROOT"/cube-single-play/task*/*/d0/run.log; do
  echo "== $f"
  tail -2 "$f"
done > "$OUT/runs.log" 2>&1
$PY -m experiments.uhm_sweep "${SWEEP[@]}" --table > "$OUT/table.md" 2>&1
cp "$ROOT"/curves_cube_*.png "$OUT"/ 2>/dev/null
echo "uhm_study_gpu ($MODE): $((SECONDS - START)) s; table in $OUT/table.md"
cat "$OUT/table.md"
