"""Generate an OGBench data set locally (the program; the generator is
:mod:`jaxlab.envs.ogbench_generate`).

    python -m envs.ogbench_generate --env_name=cube-single-play-v0 --dataset_dir=~/.ogbench/data
    python -m envs.ogbench_generate --env_name=cube-single-play-v0 --episodes=60 --dataset_dir=/tmp
"""

from __future__ import annotations

import os

from absl import flags

from jaxlab.core.errors import ConfigError, require
from jaxlab.envs.ogbench_generate import DEFAULT_DATASET_DIR, generate, spec_for


def _define_flags() -> None:
  """The generator's own flags (defined only when it runs as a program: `envs.ogbench` imports this
  module next to experiments that define flags of the same names)."""
  flags.DEFINE_string(
    "env_name",
    None,
    "Data set name, e.g. cube-single-play-v0, pointmaze-medium-navigate-v0 (single-task names map "
    "to their data set).",
  )
  flags.DEFINE_integer(
    "episodes", None, "Train episodes (default: OGBench's count, e.g. 1000); validation adds 1/10."
  )
  flags.DEFINE_string("dataset_dir", DEFAULT_DATASET_DIR, "Output folder (created if missing).")
  flags.DEFINE_float(
    "noise",
    None,
    "play: plan noise (0.1); noisy: max Gaussian action noise (0.1); pointmaze: action noise "
    "(0.5).",
  )
  flags.DEFINE_float("p_random_action", None, "noisy: 0.1 (cube/scene), 0.2 (puzzle).")
  flags.DEFINE_integer("max_episode_steps", None, "Steps per episode (default 1001).")
  flags.DEFINE_integer("val_episodes", None, "Validation episodes (default episodes // 10).")
  flags.DEFINE_bool("drop_qvel", False, "Omit qvel (not needed by the loader) to save space.")


_UNUSED_SHARED_FLAGS = ("workdir", "steps", "log_every", "ckpt_every", "mesh", "profile")


def main(argv) -> None:
  del argv
  f = flags.FLAGS
  for name in _UNUSED_SHARED_FLAGS:
    require(not f[name].present, name, "is not used by envs.ogbench_generate; remove it")
  require(bool(f.env_name), "env_name", "give the data set to generate, e.g. cube-single-play-v0")
  try:
    meta = generate(
      f.env_name,
      f.episodes,
      f.dataset_dir,
      seed=f.seed,
      noise=f.noise,
      p_random_action=f.p_random_action,
      max_episode_steps=f.max_episode_steps,
      num_val_episodes=f.val_episodes,
      drop_keys=("qvel",) if f.drop_qvel else (),
    )
  except FileExistsError as e:
    raise ConfigError("dataset_dir", str(e)) from None
  size = sum(os.path.getsize(meta[k]) for k in ("train_path", "val_path"))
  standard = spec_for(f.env_name).num_episodes
  if meta["num_episodes"] < standard:
    print(
      f"note: this set has {meta['num_episodes']} episodes, OGBench's has {standard}; it sits "
      "under the standard name, so OGBench's downloader would skip this file later (delete it to "
      "fetch the real one)."
    )
  print(
    f"wrote {meta['train_path']} ({meta['train_steps']} steps) and {meta['val_path']} "
    f"({meta['val_steps']} steps), {size / 1e6:.2f} MB, in {meta['seconds']:.1f} s "
    f"({meta['seconds_per_1000_steps']:.2f} s per 1000 steps); oracle finished "
    f"{meta['oracle_tasks_finished']} sub-tasks/goals"
  )


if __name__ == "__main__":
  from jaxlab.core import experiment  # defines the shared flags (--seed) and the exit-2 convention

  _define_flags()
  experiment.run(main)
