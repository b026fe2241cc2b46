r"""ITC (arXiv 2605.16457): a transformer world model agent on Craftax-Classic (pixels) whose
imagined frames are decoded by independent sampling or by ITC's token correspondence.

One runtime step is one Dyna iteration (`jaxlab.rl.itc.dyna`): real rollout, PPO, tokenizer and
world-model updates, then (after warm-up) imagined rollouts with PPO. Chunked, checkpointed and
resumable like every jaxlab run. Outputs in the workdir (default ``runs/itc/<preset>/<decode>``):
metrics.csv (``return_pct``, ``score`` = Crafter score of the training episodes, world-model
losses, codebook size, imagination statistics), curves.png, summary.json, rollout.png (a real
rollout and the world model's open-loop imagination of it under the same actions, decoded by
``--decode`` and by independent sampling). See docs/itc.md.

Defaults: ``jaxlab.rl.itc.get_config()`` (the paper's baseline); presets (the paper's three arms,
``tiny``, ``cpu``) in experiments/configs/itc.py. Without ``--config`` the run is ``tiny``: the
``itc`` arm at 1536 env steps, a few minutes on a CPU. ``--decode`` sets ``config.decode``.

``--seeds=N`` (or a list ``--seeds=0,3,7``) trains the seeds together: the whole Dyna iteration of
every seed, vmapped in one compiled program (docs/seeds.md). Seed ``k`` there is the run
``--seed=k`` alone; metrics.csv has a ``seed`` column, summary.json ``per_seed``, and each seed
gets its own ``rollout_seed<k>.png``.

Commands:
  python -m experiments.itc
  python -m experiments.itc --decode=sample
  python -m experiments.itc --seeds=3          # seeds 0, 1, 2 in one program
  python -m experiments.itc --config=experiments/configs/itc.py:cpu
  python -m experiments.itc --config=experiments/configs/itc.py:itc
  python -m experiments.itc --config=experiments/configs/itc.py:baseline_reproduced
  python -m experiments.itc --config=experiments/configs/itc.py:baseline_our_hyperparams

The decoders on a fixed world model (docs/itc.md) are the study
``python -m experiments.study itc/decoders`` (`jaxlab.studies.itc`).
"""

from __future__ import annotations

import jax
from absl import flags

from jaxlab.core import experiment, runtime, workdir
from jaxlab.core import seeds as seeds_lib
from jaxlab.rl import itc
from jaxlab.rl.itc import dyna

flags.DEFINE_string("decode", None, "sample | argmax | itc | itc_hungarian: sets config.decode.")
_CONFIG = experiment.define_config_file(experiment.config_path(__file__))
FLAGS = flags.FLAGS


def preset() -> str:
  """The ``:<arg>`` of ``--config`` (``tiny`` without one), for the default workdir."""
  return FLAGS["config"].config_filename.partition(":")[2] or "tiny"


UNUSED_FLAGS = ("mesh", "videos")  # also out of --help


def main(argv):
  del argv
  c = _CONFIG.value
  if FLAGS.decode is not None:
    c.decode = experiment.check_choice("decode", FLAGS.decode, itc.METHODS)
  cfg = itc.dyna_config(itc.validate_config(c))  # checked before the (slow) env is built
  run = experiment.common(
    "itc",
    default_steps=itc.iterations(c),
    default_log_every=1,  # one iteration per chunk: no XLA loop around the CNN (ppo.PPOConfig)
    variant=(preset(), c.decode),
    unused=UNUSED_FLAGS,
    seeds=True,
  )
  workdir.check_writable(run.workdir)  # before the (slow) environment and agent are built
  seeds = run.seeds if len(run.seeds) > 1 else None
  keys = seeds_lib.seed_keys(run.seeds)  # seed k's key streams: 1 init, 2 picture; training keys
  key = keys if seeds else keys[0]
  env, state = itc.create(
    c, cfg, seeds_lib.stream(keys, 1) if seeds else jax.random.fold_in(key, 1)
  )
  loop = run.loop(
    units_per_step=cfg.steps_per_iteration,
    units_name="env_steps_per_sec",
    progress_keys=("return_pct", "score", "wm_loss"),
  )
  record = itc.recorded(run.workdir)
  with workdir.identity(run.seeds):  # another seed never continues or replaces this run
    state, result = runtime.train(
      state,
      dyna.make_update(env, cfg),
      loop,
      key=key,
      workdir=run.workdir,
      config=c,
      seeds=seeds,
      seed_vmap=dyna.seed_vmap if seeds else None,
    )
  pngs = pictures(run.workdir, state, cfg, c.picture_steps, keys, seeds, record)
  s = result.summary
  get = lambda k, s=s: float(s.get(f"train/{k}", float("nan")))
  line = (
    f"{preset()} decode={c.decode} env_steps={get('env_steps'):.0f}: "
    f"return {get('return_pct'):.2f}% score {get('score'):.2f} codebook "
    f"{get('codebook_size'):.0f}"
  )
  if seeds:
    each = ", ".join(
      f"{k}: {float(result.per_seed[k].get('train/return_pct', float('nan'))):.2f}%" for k in seeds
    )
    line += f" (means over seeds {','.join(map(str, seeds))}; return per seed {each})"
  print(f"{line} -> {run.workdir}/summary.json, {', '.join(map(str, pngs))}")


def pictures(wd, state, cfg, steps, keys, seeds, record) -> list:
  """rollout.png (several seeds: rollout_seed<k>.png, one per seed), unless the run was a
  finished one re-run (its summary.json unchanged): then the pictures are left as they are."""
  if seeds is None:
    targets = [(wd / "rollout.png", state, jax.random.fold_in(keys[0], 2))]
  else:
    targets = [
      (wd / f"rollout_seed{k}.png", seeds_lib.take(state, i), jax.random.fold_in(keys[i], 2))
      for i, k in enumerate(seeds)
    ]
  if all(p.exists() for p, _, _ in targets) and itc.recorded(wd) == record:
    return [p for p, _, _ in targets]
  return [itc.rollout_picture(st, cfg, steps, p, k) for p, st, k in targets]


if __name__ == "__main__":
  experiment.run(main)
