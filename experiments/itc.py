r"""ITC (arXiv 2605.16457): a transformer world model agent on Craftax-Classic (pixels) whose
imagined frames are decoded by independent sampling or by ITC's token correspondence.

One runtime step is one Dyna iteration (`jaxlab.rl.itc.dyna`): real rollout, PPO, tokenizer and
world-model updates, then (after warm-up) imagined rollouts with PPO. Chunked, checkpointed and
resumable like every jaxlab run. Outputs in the workdir (default ``runs/itc/<preset>/<decode>/
<scale>``): metrics.csv (``return_pct``, ``score`` = Crafter score of the training episodes,
world-model losses, codebook size, imagination statistics), curves.png, summary.json,
rollout.png (a real rollout and the world model's open-loop imagination of it under the same
actions, decoded by ``--decode`` and by independent sampling). See docs/itc.md.

Commands:
  python -m experiments.itc                       # tiny CPU run: 1536 env steps, a few minutes
  python -m experiments.itc --decode=sample       # the same with independent sampling
  python -m experiments.itc --decode=itc --env_steps=1000000   # paper scale: a GPU run
  python -m experiments.itc --config.preset=baseline_reproduced --env_steps=1000000
  python -m experiments.itc --config.preset=baseline_our_hyperparams --env_steps=1000000

Presets (``--config.preset``, experiments/configs/itc.py): the three control runs of the paper's
code. Scale (``--config.scale``): ``auto`` takes the paper's sizes when ``env_steps >= 200000``
and the tiny CPU sizes otherwise; ``cpu`` is the 50k-step reduced-budget run of docs/itc.md
(``python -m experiments.itc --config.scale=cpu``). A field given on the command line always
wins.
"""

from __future__ import annotations

import importlib.util
import pathlib

import jax
import jax.numpy as jnp
import numpy as np
from absl import flags
from ml_collections import config_flags

from jaxlab.core import experiment, plots, runtime
from jaxlab.core.errors import check_choice, check_config, require
from jaxlab.rl import ppo
from jaxlab.rl.itc import buffer as buffer_lib
from jaxlab.rl.itc import decode as decode_lib
from jaxlab.rl.itc import dyna, imagine
from jaxlab.rl.itc import tokenizer as tok_lib
from jaxlab.rl.itc import world_model as wm_lib
from jaxlab.rl.ppo import policies


def _load_configs():
  path = pathlib.Path(__file__).with_name("configs") / "itc.py"
  spec = importlib.util.spec_from_file_location("_itc_configs", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


CONFIGS = _load_configs()
ENV = "craftax-classic-pixels"
PAPER_SCALE_STEPS = 200_000
flags.DEFINE_string("decode", None, "sample | argmax | itc | itc_hungarian (default: the preset's)")
flags.DEFINE_integer("env_steps", None, "Real environment steps (default: 1536 tiny, 1M paper).")
_CONFIG = experiment.define_config(CONFIGS.get_config())
FLAGS = flags.FLAGS

_CHECKS = {
  **{
    k: "positive"
    for k in (
      "env_steps num_envs num_steps epochs minibatches lr max_grad_norm policy_embed "
      "policy_hidden head_hidden codebook_size threshold max_candidates wm_embed wm_layers "
      "wm_heads max_blocks wm_lr wm_updates wm_batch replay_size imag_batch imag_minibatches "
      "horizon sinkhorn_epsilon picture_steps reset_ratio"
    ).split()
  },
  **{k: "nonneg" for k in "warmup_steps imag_updates burn_in tok_passes vf_coef ent_coef".split()},
}


def resolve(config):
  """The run's config: preset, then scale, then the command line (which always wins)."""
  given = set(config_flags.get_override_values(FLAGS["config"]))
  check_choice("config.preset", config.preset, tuple(CONFIGS.PRESETS))
  check_choice("config.scale", config.scale, ("auto", "paper", *CONFIGS.SCALES))
  out = config.copy_and_resolve_references()
  with out.unlocked():
    for name, value in CONFIGS.PRESETS[config.preset].items():
      if name not in given:
        out[name] = value
    if FLAGS.env_steps is not None:
      out.env_steps = FLAGS.env_steps
    elif "env_steps" not in given and config.scale != "paper":
      out.env_steps = CONFIGS.SCALES.get(config.scale, CONFIGS.TINY)["env_steps"]
    scale = config.scale
    if scale == "auto":
      scale = "paper" if out.env_steps >= PAPER_SCALE_STEPS else "tiny"
    out.scale = scale
    if scale != "paper":
      for name, value in CONFIGS.SCALES[scale].items():
        if name not in given and name != "env_steps":
          out[name] = value
    if FLAGS.decode is not None:
      out.decode = FLAGS.decode
  check_choice("decode", out.decode, decode_lib.METHODS)
  require(FLAGS.env_steps is None or FLAGS.env_steps >= 1, "env_steps", "must be >= 1")
  check_config(out, _CHECKS)
  return out


def agent_config(c, num_actions: int) -> dyna.DynaConfig:
  return dyna.DynaConfig(
    # On CPU the PPO loops are unrolled: XLA:CPU's CNN gradients are slow inside loops.
    ppo=ppo.PPOConfig.from_config(c, anneal_lr=False, unroll=jax.default_backend() == "cpu"),
    wm=wm_lib.WorldModelConfig.from_config(c, num_actions),
    tokenizer=tok_lib.TokenizerConfig(
      codebook_size=c.codebook_size, threshold=c.threshold, max_candidates=c.max_candidates
    ),
    itc=decode_lib.ITCConfig(
      num_dummy=c.num_dummy,
      distance_coef=c.distance_coef,
      trash_cost=c.trash_cost,
      epsilon=c.sinkhorn_epsilon,
    ),
    decode=c.decode,
    **{
      k: c[k]
      for k in (
        "replay_size warmup_steps imag_updates imag_batch imag_minibatches horizon burn_in "
        "wm_updates wm_batch wm_lr tok_passes"
      ).split()
    },
  )


def make_policy(c, num_actions: int) -> policies.ImpalaRNNPolicy:
  return policies.ImpalaRNNPolicy(
    num_actions,
    channels=tuple(c.channels),
    embed=c.policy_embed,
    hidden=c.policy_hidden,
    head_hidden=c.head_hidden,
  )


def rollout_picture(state: dyna.DynaState, cfg: dyna.DynaConfig, steps: int, path, key):
  """A real replayed sequence, its tokenization and the world model's open-loop imagination."""
  steps = min(steps, cfg.wm.max_blocks)
  seq = buffer_lib.sample(state.replay, key, 1, steps + 1)
  tokens = tok_lib.encode(state.book, seq["obs"], cfg.tokenizer)
  rows = {
    "real": seq["obs"][0, 1:],
    "real (tokenized)": tok_lib.decode(state.book, tokens, cfg.tokenizer)[0, 1:],
  }
  for method in dict.fromkeys([cfg.decode, "sample"]):
    imagined = imagine.open_loop(
      state.wm,
      state.book,
      tokens[:, 0],
      seq["action"][:, :steps],
      jnp.zeros((1,), bool),
      jax.random.fold_in(key, 1),
      method=method,
      itc_cfg=cfg.itc,
    )
    rows[f"imagined ({method})"] = tok_lib.decode(state.book, imagined, cfg.tokenizer)[0]
  rows = {k: np.asarray(v) for k, v in rows.items()}
  title = "real vs imagined frames (same actions, world model from the first real frame)"
  return plots.frames(path, rows, title)


def main(argv):
  del argv
  from jaxlab.envs import craftax

  c = resolve(_CONFIG.value)
  # Validate everything before the (slow) environment is built and before anything is written.
  num_actions = 17
  cfg = agent_config(c, num_actions).validate()
  iterations = max(1, c.env_steps // cfg.steps_per_iteration)
  run = experiment.common(
    "itc",
    default_steps=iterations,
    default_log_every=1,  # one iteration per chunk: no XLA loop around the CNN (ppo.PPOConfig)
    variant=(c.preset, c.decode, c.scale),
    unused=("mesh",),
  )
  env = craftax.make(ENV, c.num_envs, c.reset_ratio)
  require(env.num_actions == num_actions, "env", f"expected {num_actions} actions")
  key = jax.random.key_data(jax.random.key(run.seed))
  state = dyna.init(env, make_policy(c, num_actions), cfg, jax.random.fold_in(key, 1))
  loop = run.loop(
    units_per_step=cfg.steps_per_iteration,
    units_name="env_steps_per_sec",
    progress_keys=("return_pct", "score", "wm_loss"),
  )
  state, result = runtime.train(
    state, dyna.make_update(env, cfg), loop, key=key, workdir=run.workdir, config=c
  )
  png = rollout_picture(
    state, cfg, c.picture_steps, run.workdir / "rollout.png", jax.random.fold_in(key, 2)
  )
  s = result.summary
  get = lambda k: float(s.get(f"train/{k}", float("nan")))
  print(
    f"{c.preset} decode={c.decode} scale={c.scale} env_steps={get('env_steps'):.0f}: "
    f"return {get('return_pct'):.2f}% score {get('score'):.2f} codebook "
    f"{get('codebook_size'):.0f} -> {run.workdir}/summary.json, {png}"
  )


if __name__ == "__main__":
  experiment.run(main)
