#!/usr/bin/env bash
# A UHM study (jaxlab/studies/uhm.py) in one GPU job of under 10 minutes: per-seed results, the
# table with the IQM, the mean and their bootstrap intervals and the declared tests, written to
# $OUT (docs/uhm.md, "GPU studies"; the estimate: docs/results/uhm/notes.md). Two studies, the
# second argument (default noisy):
#   noisy  uhm/noisy_gpu: uhm/noisy's six arms (uhm, ghm, mbtd, dtd, rebrac and uhm_kmax64, the
#          winsorization ablation) on scene-noisy-singletask-task1-v0, 3 vmapped training seeds,
#          3x256 networks, 20000 updates, success over 20 held-out episodes at 10k and 20k;
#   cube   uhm/cube: UHM against ReBRAC on the five cube-single tasks, 15000 updates.
#
# With network access, once:   bash benchmarks/uhm_study_gpu.sh --prepare [noisy|cube]
#   1. .wheels/uhm/: what a GPU image with JAX alone lacks for OGBench evaluation (one with jax,
#      flax, optax, orbax, chex, absl, tqdm, matplotlib): mujoco, ogbench, gymnasium, lxml, dm_env,
#      dm_tree, ml_collections, tensorboardX and a slimmed dm_control (only its mjcf / mujoco parts that
#      OGBench's manipulation envs import; its suite and locomotion assets are 105 of its 116 MB),
#      for Python 3.12, ~46 MB;
#   2. runs/uhm_gpu_data/<study>/: the study's generated data set: noisy, 50 scene-noisy episodes
#      (+5 validation) without qvel, which training never reads (~10 MB; ~4-8 min here); cube, 60
#      cube-single-play episodes (~11 MB; ~5-30 min). With the wheels and the repository either
#      stays under 64 MiB in all, to copy to the GPU machine; --prepare checks that sum.
# Then, on the GPU machine (no network needed), in at most 590 s:
#   bash benchmarks/uhm_study_gpu.sh [noisy|cube]
#   with .wheels/uhm and runs/uhm_gpu_data/<study> (noisy: runs/uhm_gpu_data/noisy) beside it.
# CPU dry run, end to end at tiny size (a 2-episode set, 2x64 networks, 20 updates, every arm):
#   bash benchmarks/uhm_study_gpu.sh --cpu [noisy|cube]
#
# Each arm runs in its own process, $JOBS at a time (default: every arm at once on the GPU, 2 on a
# CPU): a process trains its arm's 3 seeds together (vmapped) while the others evaluate theirs on
# other CPU cores. An arm is skipped when its results are in $OUT/results, so a run that runs out
# of time is continued by a second run on the same $OUT/results (an unfinished arm starts
# again); the table is built from $OUT/results alone.
#
# Device-time estimate (an assumption, not a measurement: no GPU time of these updates is
# measured in this repository). The paper (arXiv 2605.15603, wall-clock figure) reports per
# update, on a GPU it does not name (4x512 networks, one seed): ReBRAC 1.3 ms, DTD 1.6, MBTD 7.1,
# GHM 2.4, UHM 2.4; assumed the same for 3 vmapped seeds of 3x256 networks, uhm_kmax64's the same
# as UHM's, and no overlap of the six processes on the GPU:
#   noisy: 20000 x (2.4 + 2.4 + 2.4 + 7.1 + 1.6 + 1.3) ms = 344 s of updates;
#   evaluations, on CPU cores beside the other arms' updates: per arm 2 points x 3 seeds x 20
#   episodes of <= 750 steps, at an assumed ~2 ms per step (MuJoCo and one policy call; the --cpu
#   dry run measured ~7 ms on the loaded 2-core CPU with the policy on the CPU) <= 180 s, of which
#   the last arm's last point (<= 90 s) overlaps nothing; start-up (wheels, imports, data, six
#   compiles side by side) ~1-1.5 min: about 8-8.5 min in all;
#   cube: 5 tasks x 15000 x (2.4 + 1.3) ms = 278 s of updates, its two arms side by side.
# Each run's metrics.csv records its measured updates/s, so the run measures what it assumes.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

MODE=gpu
KIND=noisy
for arg in "$@"; do
  case "$arg" in
    --prepare) MODE=prepare ;;
    --cpu) MODE=cpu ;;
    noisy | cube) KIND=$arg ;;
    *)
      echo "usage: bash benchmarks/uhm_study_gpu.sh [--prepare | --cpu] [noisy | cube]" >&2
      exit 2
      ;;
  esac
done
PY=${PY:-python3}
DATA=runs/uhm_gpu_data/$KIND
if [ "$KIND" = noisy ]; then
  EPISODES=50  # jaxlab.studies.uhm.GPU_NOISY_EPISODES
  DATASET=scene-noisy-v0
  NAME=uhm/noisy_gpu
  FULL="s = studies.get('uhm/noisy_gpu')"
  TINY="s = uhm.noisy(uhm.noisy_gpu_setting(steps=20, eval_every=10, eval_episodes=1, episodes=2,
  fields=TINY), seeds=(0, 1, 2), name='uhm/noisy_gpu')"
else
  EPISODES=60  # jaxlab.studies.uhm.cube's data set
  DATASET=cube-single-play-v0
  NAME=uhm/cube
  FULL="s = studies.get('uhm/cube')"
  TINY="s = uhm.cube(steps=20, eval_every=10, eval_episodes=1, episodes=2, fields=TINY)"
fi
SET=$DATA/jaxlab-generated/e$EPISODES-s0  # where the study's load_task looks (under ~/.ogbench/data)

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
  if [ -e "$SET/$DATASET.npz" ]; then
    echo "$SET/$DATASET.npz exists: kept"
  elif [ "$KIND" = noisy ]; then
    # the generator itself rather than og.load, to leave qvel out (the loader does not need it)
    JAX_PLATFORMS=cpu $PY -c "
from jaxlab.envs import ogbench_generate as gen
gen.generate('$DATASET', num_episodes=$EPISODES, dataset_dir='$SET', seed=0, drop_keys=('qvel',))
" || exit 1
  else
    JAX_PLATFORMS=cpu $PY -c "
from jaxlab.envs import ogbench as og
og.load('cube-single-play-singletask-task1-v0', dataset_dir='$DATA', num_episodes=$EPISODES, seed=0)
" || exit 1
  fi
  du -sh .wheels/uhm "$DATA"
  # what is copied: the repository's files (tracked, and untracked but not ignored), wheels, data
  total=$( (git ls-files -z --cached --others --exclude-standard | xargs -0 cat 2> /dev/null
    find .wheels/uhm "$DATA" -type f -exec cat {} +) | wc -c)
  echo "repository + .wheels/uhm + $DATA: $((total / 1048576)) MiB (limit 64 MiB)"
  [ "$total" -lt $((64 * 1048576)) ] || {
    echo "over 64 MiB: fewer episodes (EPISODES here and in the study)" >&2
    exit 1
  }
  exit 0
fi

if [ "$MODE" = gpu ]; then
  OUT="${OUT:-/tmp/uhm_study_gpu_$KIND}"
  JOBS=${JOBS:-0}  # 0: every arm at once
  if ! ls "$SET/$DATASET.npz" > /dev/null 2>&1; then
    echo "no $SET/$DATASET.npz: run --prepare $KIND and copy $DATA here" >&2
    exit 2
  fi
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/uhm_site .wheels/uhm/*.whl \
    || exit 1
  export PYTHONPATH="/tmp/uhm_site:$PWD" MUJOCO_GL=egl
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  mkdir -p ~/.ogbench/data && cp -r "$DATA"/jaxlab-generated ~/.ogbench/data/
  STUDY="from jaxlab import studies
$FULL"
else
  OUT="${OUT:-/tmp/uhm_study_gpu_cpu_$KIND}"
  JOBS=${JOBS:-2}
  export JAX_PLATFORMS=cpu HOME="$OUT/home"  # the 2-episode set is generated under it (seconds)
  STUDY="from jaxlab.studies import uhm
TINY = (('actor_hidden_dims', (64, 64)), ('value_hidden_dims', (64, 64)),
  ('model_hidden_dims', (64, 64)), ('reward_hidden_dims', (64,)), ('batch_size', 64),
  ('flow_steps', 2), ('k_max', 4))
$TINY"
fi
mkdir -p "$OUT/logs"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false
START=$SECONDS
ARMS=$($PY -c "$STUDY
print(' '.join(s.arms))") || {
  echo "the study $NAME did not build" >&2
  exit 1
}
if [ "$MODE" = cpu ] && [ ! -e "$HOME/.ogbench/data/jaxlab-generated/e2-s0/$DATASET.npz" ]; then
  # one process generates the 2-episode set before the arms start, so none waits on another's lock
  $PY -c "
from jaxlab.envs import ogbench_generate as gen
gen.generate('$DATASET', num_episodes=2, dataset_dir='$HOME/.ogbench/data/jaxlab-generated/e2-s0',
  seed=0, progress=False)
" > "$OUT/logs/data.log" 2>&1 || {
    tail -3 "$OUT/logs/data.log"
    exit 1
  }
fi
# One arm: the runner's step for one arm (runner.run), so that arms can run side by side.
ARM="
import sys
from jaxlab.core import experiment, workdir
from jaxlab.studies import runner
experiment.enable_compile_cache()
arm, results = sys.argv[1], '$OUT/results'
todo = tuple(k for k in s.seeds if not runner.raw_path(results, arm, k).exists())
if todo:
  wd = runner.cell_dir(s, '$OUT/runs', arm)
  with workdir.session(wd):
    out = s.cell(arm, todo, wd)
  runner.write_raw(s, results, arm, todo, out)
  print(f'{arm}: seeds {todo} done')
else:
  print(f'{arm}: every seed finished, skipped')
"
PIDS=()
for arm in $ARMS; do
  while [ "$JOBS" -gt 0 ] && [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do sleep 1; done
  (
    t0=$SECONDS
    $PY -c "$STUDY
$ARM" "$arm" > "$OUT/logs/$arm.log" 2>&1
    rc=$?
    echo "$arm: exit $rc after $((SECONDS - t0)) s" | tee -a "$OUT/logs/$arm.log"
    exit $rc
  ) &
  PIDS+=($!)
done
rc=0
for pid in "${PIDS[@]}"; do wait "$pid" || rc=1; done
for arm in $ARMS; do
  [ -e "$OUT/results/raw/$arm" ] || {
    echo "--- $arm did not finish:"
    tail -5 "$OUT/logs/$arm.log"
  }
  # <arm>[_task<k>]_curve.png: each run's learning curve, next to the table
  for png in "$OUT/runs/$NAME/$arm"/{,task*/}s0-2/learning_curve.png; do
    [ -e "$png" ] || continue
    run=${png#"$OUT/runs/$NAME/"}
    run=${run%/s0-2/learning_curve.png}
    cp "$png" "$OUT/${run//\//_}_curve.png"
  done
done
$PY -c "$STUDY
from jaxlab.studies import runner
runner.run(s, root='$OUT/runs', results='$OUT/results', only_table=True)
" > "$OUT/logs/table.log" 2>&1 || {
  tail -3 "$OUT/logs/table.log"
  rc=1
}
echo "uhm_study_gpu ($MODE, $NAME): $((SECONDS - START)) s, exit $rc; table: $OUT/results/table.md"
cat "$OUT/results/table.md" 2>/dev/null
exit $rc
