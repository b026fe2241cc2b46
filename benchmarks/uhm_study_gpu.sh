#!/usr/bin/env bash
# The study uhm/cube (jaxlab/studies/uhm.py): UHM against ReBRAC on the five OGBench cube-single
# tasks, 3 vmapped training seeds each, in ONE GPU call: per-seed results, table with the IQM, the
# mean and their bootstrap intervals and the declared test, written to $OUT (docs/uhm.md, "The GPU
# study").
#
# Here (CPU machine, with internet), once:   bash benchmarks/uhm_study_gpu.sh --prepare
#   1. .wheels/uhm/: what the GPU image lacks for OGBench evaluation (it has jax, flax, optax,
#      orbax, chex, absl, tqdm, matplotlib): mujoco, ogbench, gymnasium, lxml, dm_env, dm_tree,
#      ml_collections, tensorboardX and a slimmed dm_control (only its mjcf / mujoco parts that
#      OGBench's manipulation envs import; its suite and locomotion assets are 105 of its 116 MB),
#      for Python 3.12, ~46 MB;
#   2. runs/uhm_gpu_data/: the generated cube-single-play set, 60 episodes (~11 MB: with the
#      wheels and the repository it stays under the 64 MiB the device tool carries; 4-30 s per
#      episode here, so ~5-30 min).
# Then with the device tool:  run(command="bash benchmarks/uhm_study_gpu.sh",
#                                 carry=[".wheels/uhm", "runs/uhm_gpu_data"], timeout_s=590)
# CPU dry run, end to end at tiny size (a 2-episode set, 2x64 networks, 20 updates):
#                             bash benchmarks/uhm_study_gpu.sh --cpu
#
# The study runs its 10 runs (2 agents x 5 tasks) one after the other; a run is skipped when its
# result is in $OUT/results, so a call that runs out of time is continued by a second call that
# carries $OUT/results back. Device-time estimate (an assumption, not a measurement: no H200 figure
# of a UHM update exists in this repository): the paper (arXiv 2605.15603, wall-clock figure)
# reports ~2.4 ms per UHM update and ~1.3 ms per ReBRAC update on an unnamed GPU (4x512 networks,
# one seed); assumed the same for 3 vmapped seeds of 3x256 networks: 5 tasks x 15000 x (2.4 + 1.3)
# ms = 278 s of updates, plus two compiles (the other tasks reuse them from the compilation cache)
# and the MuJoCo evaluations (3 x 10 episodes x 3 seeds per run, on the CPU). Each run's
# metrics.csv records its measured updates/s.
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
EPISODES=60  # the study's data set (jaxlab.studies.uhm.cube)
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
  if ! ls "$DATA"/jaxlab-generated/e"$EPISODES"-s0/cube-single-play-v0.npz > /dev/null 2>&1; then
    echo "no $DATA/jaxlab-generated/e$EPISODES-s0: run --prepare here and carry $DATA" >&2
    exit 2
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/uhm_site .wheels/uhm/*.whl \
    || exit 1
  export PYTHONPATH="/tmp/uhm_site:$PWD" MUJOCO_GL=egl
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  # where the study's load_task looks for a generated set of $EPISODES episodes
  mkdir -p ~/.ogbench/data && cp -r "$DATA"/jaxlab-generated ~/.ogbench/data/
  STUDY="from jaxlab import studies; s = studies.get('uhm/cube')"
else
  OUT="${OUT:-/tmp/uhm_study_gpu_cpu}"
  export JAX_PLATFORMS=cpu HOME="$OUT/home"  # the 2-episode set is generated under it (seconds)
  STUDY="from jaxlab.studies import uhm
s = uhm.cube(steps=20, eval_every=10, eval_episodes=1, episodes=2, fields=(
  ('actor_hidden_dims', (64, 64)), ('value_hidden_dims', (64, 64)),
  ('model_hidden_dims', (64, 64)), ('reward_hidden_dims', (64,)), ('batch_size', 64),
  ('flow_steps', 2), ('k_max', 4)))"
fi
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
START=$SECONDS
$PY -c "
$STUDY
from jaxlab.core import experiment
from jaxlab.studies import runner
experiment.enable_compile_cache()
runner.run(s, root='$OUT/runs', results='$OUT/results')
" > "$OUT/study.log" 2>&1
rc=$?
tail -3 "$OUT/study.log"
cp "$OUT"/runs/uhm/cube/*/task*/s0-2/learning_curve.png "$OUT"/ 2>/dev/null
echo "uhm_study_gpu ($MODE): $((SECONDS - START)) s, exit $rc; table in $OUT/results/table.md"
cat "$OUT/results/table.md" 2>/dev/null
exit $rc
