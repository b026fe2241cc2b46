"""The end of a DiCode run (arXiv 2602.08194): held-out evaluation, summary, comparison.

:func:`evaluate` plays ``ppo.eval_envs`` worlds of the unmodified game from the fixed key
(``evaluation.held_out_keys``) through the run's training program without learning, one episode
each; :func:`finish` writes summary.json (last: its presence means the run finished) and
achievements.png; :func:`compare` charts finished runs side by side (a dir of seed*/ runs is
averaged). The ``*_together`` forms do the same for several seeds' loops at once, their agents
playing in one vmapped program. Inside :func:`evaluation_videos` (``python -m experiments.dicode``
enters it; ``--videos=0`` does not) :func:`finish` also writes ``<workdir>/videos/eval_<step>.gif``
(:func:`write_videos`): the agent playing the original game, rendered in JAX.
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import time
import types

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core import metrics, provenance, runtime
from jaxlab.core import workdir as workdir_lib
from jaxlab.rl.dicode import curriculum as curriculum_lib
from jaxlab.rl.dicode.counters import first_episodes
from jaxlab.rl.dicode.evolution import archive_summary
from jaxlab.rl.dicode.pools import num_units
from jaxlab.rl.dicode.training import play_together


def evaluate(run, curriculum: str) -> tuple[dict, dict]:
  """Held-out original-game evaluation of the run's agent (see ``evaluation``), played through
  the run's training program without learning: ``eval_envs`` held-out worlds, ``num_envs`` at a
  time, each environment starting in its own world (``TaskTable.first``), its first episode
  recorded over ``eval_steps`` steps."""
  return evaluate_together([run], curriculum)[0]


def evaluate_together(loops, curriculum: str) -> list[tuple[dict, dict]]:
  """:func:`evaluate` of each loop's agent, on the same held-out worlds; several loops' agents
  play together through their vmapped training program (:func:`play_together`)."""
  from jaxlab.rl.dicode import evaluation, seeds
  from jaxlab.rl.ppo import evaluation as ppo_eval

  c = loops[0].config
  n, envs, p = c.ppo.eval_envs, c.ppo.num_envs, c.pool_size
  k = num_units(curriculum_lib.SessionPlan("worlds", [], np.ones(0)), c)
  pools = evaluation.held_out_pools(n, p)
  original = seeds.load_seed_tasks()[curriculum_lib.ORIGINAL]
  key = jax.random.key(evaluation.EVAL_SEED)
  outs: list[list] = [[] for _ in loops]
  for base in range(0, n, k * p):  # one table holds k * p worlds
    part = pools[base // p : base // p + k]
    plans = []
    for lp in loops:
      if curriculum == "dr":
        slot = lp.curriculum.names.index(curriculum_lib.ORIGINAL)
      else:
        slot = c.num_slots - 1
      plans.append(
        curriculum_lib.SessionPlan(
          "worlds",
          [curriculum_lib.ORIGINAL] * len(part),
          np.full(len(part), 1.0 / len(part)),
          [original] * len(part),
          [slot] * len(part),
          pools=part,
        )
      )
    for first in range(0, min(k * p, n - base), envs):
      for plan in plans:
        plan.first = first
      keys = [jax.random.fold_in(key, base + first)] * len(loops)
      played = play_together(loops, plans, c.ppo.eval_steps, keys, True)
      keep = min(envs, n - base - first)
      for out, state in zip(outs, played):
        out.append({name: v[:keep] for name, v in first_episodes(state).items()})
  env = types.SimpleNamespace(
    max_return=craftax_max_return(), achievement_names=craftax_achievement_names()
  )
  return [
    ppo_eval.summarize({name: np.concatenate([o[name] for o in out]) for name in out[0]}, env)
    for out in outs
  ]


def craftax_max_return() -> float:
  from jaxlab.envs import craftax

  return craftax.MAX_RETURN[False]


def craftax_achievement_names() -> tuple[str, ...]:
  from jaxlab.envs import craftax

  return craftax.achievement_names(False)


VIDEO_STEPS = 100  # steps of each clip: a few seconds at videos.FPS, one short lax.scan
VIDEO_STRIDE = 2  # frames shrunk 2 x 2 -> 1 pixel (craftax draws 10-pixel blocks)
_VIDEOS = {"episodes": 0}  # episodes per seed of the evaluation video; 0: none (library default)


@contextlib.contextmanager
def evaluation_videos(episodes: int):
  """Within it, :func:`finish` / :func:`finish_together` also write the evaluation video with
  ``episodes`` episodes per seed (0: none). Off by default: rendering full Craftax loads its
  texture atlas (built once, ~100 s, then cached; ``jaxlab.envs.craftax.prepare_textures``)."""
  before = _VIDEOS["episodes"]
  _VIDEOS["episodes"] = int(episodes)
  try:
    yield
  finally:
    _VIDEOS["episodes"] = before


def original_slot(run, curriculum: str) -> int:
  """The task slot of the original game in ``run``'s observation (as the evaluation plays it)."""
  if curriculum == "dr":
    return run.curriculum.names.index(curriculum_lib.ORIGINAL)
  return run.config.num_slots - 1


def original_game_env(num_envs: int, num_slots: int, slot: int):
  """Craftax-Symbolic (``jaxlab.envs.craftax``, with its renderer) observed as the DiCode agent
  sees the original game: the symbolic observation with the one-hot of ``slot`` appended."""
  from jaxlab.envs import craftax

  # the atlas loaded here, eagerly: built inside the rollout's trace its jnp ops would be tracers
  craftax.prepare_textures(False)
  env = craftax.make("craftax-symbolic", num_envs)
  one_hot = jax.nn.one_hot(slot, num_slots, dtype=jnp.float32)

  def tag(obs):
    return jnp.concatenate([obs, jnp.broadcast_to(one_hot, (obs.shape[0], num_slots))], axis=-1)

  def reset(key):
    obs, state = env.reset(key)
    return tag(obs), state

  def step(state, action, key):
    obs, state, reward, done, info = env.step(state, action, key)
    return tag(obs), state, reward, done, info

  return dataclasses.replace(env, reset=reset, step=step, obs_shape=(env.obs_shape[0] + num_slots,))


def write_videos(loops, curriculum: str, episodes: int, step: int, steps: int = VIDEO_STEPS):
  """``<workdir>/videos/eval_<step>.gif`` of each loop: ``episodes`` original-game episodes (at
  most ``steps`` steps, fresh worlds from the held-out key) played by its agent, rendered inside
  one jitted ``lax.scan`` (``ppo.evaluation.make_video``), the seeds' agents vmapped. Several
  loops (seeds) also write the grid of all of them, one row per seed, in their workdirs' parent
  (the program's workdir). Returns the paths written."""
  from jaxlab.core import videos
  from jaxlab.rl.dicode import evaluation
  from jaxlab.rl.ppo import evaluation as ppo_eval

  c = loops[0].config
  key = jax.random.key(evaluation.EVAL_SEED)
  rows: list = [None] * len(loops)
  slots = [original_slot(lp, curriculum) for lp in loops]
  for slot in dict.fromkeys(slots):  # one program per slot (in practice one: every seed's)
    idx = [i for i, s in enumerate(slots) if s == slot]
    env = original_game_env(episodes, c.num_slots, slot)
    video = jax.jit(jax.vmap(ppo_eval.make_video(env, loops[idx[0]].policy, steps), (0, None)))
    params = jax.tree.map(lambda *p: jnp.stack(p), *(loops[i].carried["train"].params for i in idx))
    frames, lengths = jax.device_get(video(params, key))
    frames = _downscale(frames, VIDEO_STRIDE)
    for j, i in enumerate(idx):
      rows[i] = (frames[j], lengths[j])
  paths = []
  for lp, (frames, lengths) in zip(loops, rows):
    clip = videos.grid(videos.trim(frames, lengths))
    paths.append(videos.write_gif(videos.path_for(lp.workdir, step), clip))
  if len(loops) > 1:
    frames = np.stack([r[0] for r in rows])
    clip = videos.grid(videos.trim(frames, np.stack([r[1] for r in rows])))
    paths.append(videos.write_gif(videos.path_for(loops[0].workdir.parent, step), clip))
  return paths


def _downscale(frames: np.ndarray, k: int) -> np.ndarray:
  """``[..., H, W, 3]`` uint8 -> ``[..., H // k, W // k, 3]``, each pixel the mean of a k x k
  block (striding would alias craftax's textures into stripes)."""
  *lead, h, w, c = frames.shape
  a = frames[..., : h - h % k, : w - w % k, :].astype(np.float32)
  a = a.reshape(*lead, h // k, k, w // k, k, c).mean(axis=(-4, -2))
  return np.round(a).astype(np.uint8)


def finish(run, state: dict, curriculum: str) -> dict:
  """Evaluates the agent, writes summary.json and achievements.png; returns the summary."""
  return finish_together([run], [state], curriculum)[0]


def finish_together(loops, states, curriculum: str) -> list[dict]:
  """:func:`finish` of each loop (its own summary.json and achievements.png in its workdir), the
  agents evaluated together (:func:`evaluate_together`)."""
  from jaxlab.rl.ppo import evaluation as ppo_eval

  t0 = time.perf_counter()
  results = evaluate_together(loops, curriculum)
  eval_wall = time.perf_counter() - t0
  if _VIDEOS["episodes"]:  # before summary.json: a run killed here evaluates again on resume
    history = states[0]["history"]
    step = history[-1]["env_steps"] if history else 0
    for path in write_videos(loops, curriculum, _VIDEOS["episodes"], step):
      loops[0].log(f"[dicode] evaluation video -> {path}")
  out = []
  for run, state, (scalars, rates) in zip(loops, states, results):
    history = state["history"]
    summary = {
      "curriculum": curriculum,
      "sessions": state["session"],
      "env_steps": history[-1]["env_steps"] if history else 0,
      "train_wall_s": float(sum(h["wall_s"] for h in history)),
      "eval_wall_s": eval_wall,
      **{f"eval/{k}": v for k, v in scalars.items()},
      "achievements": rates,
      "history": history,
    }
    if run.archive is not None:
      summary["archive"] = archive_summary(run.archive)
      summary["evolution"] = state["evolution"]
    summary["provenance"] = provenance.collect()
    ppo_eval.achievement_chart(
      run.workdir / "achievements.png", rates, title=f"{curriculum}: held-out original-game worlds"
    )
    runtime.write_summary(run.workdir, summary)  # last: its presence means the run finished
    run.log(
      f"[dicode] {curriculum}: eval return {scalars['return']:.3g} "
      f"({scalars.get('return_pct', float('nan')):.3g}% of max) over {run.config.ppo.eval_envs} "
      f"held-out worlds -> {run.workdir}"
    )
    out.append(summary)
  return out


def compare(dirs, out) -> dict:
  """comparison.png / comparison.json over finished runs (a dir of seed*/ runs is averaged), in
  the workdir ``out`` whose config.json records the compared runs."""
  from jaxlab.rl.dicode import evaluation

  out = workdir_lib.check_writable(out, "workdir")  # before anything is read or written
  results = {}
  for d in map(pathlib.Path, dirs):
    paths = (
      [d / "summary.json"]
      if (d / "summary.json").exists()
      else sorted(d.glob("seed*/summary.json"))
    )
    runs = [metrics.read_json(p) for p in paths]
    label = runs[0].get("curriculum", d.name)
    evals = [{k[5:]: v for k, v in r.items() if k.startswith("eval/")} for r in runs]
    results[label if label not in results else f"{label} ({d})"] = evaluation.aggregate(evals)
  # locked, and recorded with the runs it compares: a comparison of other runs is refused there
  # (choose another --workdir), one of the same runs rewrites the same bytes
  with workdir_lib.session(out, {"compare": [str(d) for d in dirs]}):
    metrics.write_json(out / "comparison.json", results)
    evaluation.comparison_chart(
      out / "comparison.png", results, title="held-out original-game return by curriculum"
    )
  for label, r in results.items():
    print(
      f"{label:>12}: {r['return_pct']:.3g}% of max (±{r['return_pct_std']:.2g}, "
      f"{int(r['seeds'])} seed(s)), return {r['return']:.3g}"
    )
  return results
