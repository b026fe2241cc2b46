"""Held-out diagnostics: is the horizon model learning, is the critic learning?

At this budget the success rate of a CPU run stays at 0 % (docs/uhm.md), so success alone cannot
show learning. These two measurements can, on trajectories of the data set that training never
reads (OGBench's validation split: other episodes of the same generator):

(a) horizon model: for n = 1..k_max, the root-mean-square error (in standardised observation units,
    ``state.obs_std``) between the mean of ``num_samples`` futures drawn from the target flow model
    m(.|s, a, n) (the model UHM's value target samples from) and the true state n steps ahead in the
    held-out episode; the same error of two baselines, measured identically: the current state s
    (no model) and s + the training set's mean displacement at that n (a model that ignores s, a).
(b) critic: Q(s, a) (mean over the ensemble) against the discounted Monte-Carlo return of the data's
    own continuation, G_i = r_i + gamma m_i G_{i+1}, cut at the episode end; start states are drawn
    where at least ``mc_horizon`` steps remain (gamma^mc_horizon <= 0.05), so the cut changes G
    little; baseline: the constant training-set mean of G.

Caveat for both: the data continue with the behaviour policy, while UHM's model and critic aim at
the current actor's futures (m^pi, Q^pi). The errors measure agreement with the data, which is
what a model and critic trained on that data should first learn; they are not errors against
m^pi / Q^pi.

    held = make_heldout(val_arrays, train_arrays, k_max=8, discount=0.99)   # numpy, fixed
    fn = make_diagnostics_fn(config, held, num_seeds)                      # jitted once
    out = fn(state, key)       # dict of arrays, leading seed axis when num_seeds > 1
    row = summarize(out)       # eval.csv columns (means over seeds)
"""

from __future__ import annotations

import dataclasses
import json
import math
import pathlib

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import require
from jaxlab.rl.uhm import agent

HELDOUT_BATCH = 128  # held-out start states: small enough to cost well under a second per eval
NUM_SAMPLES = 4  # futures averaged per (s, a, n): a mean predictor, comparable with the baselines
DIAG_SEED = 1234  # the held-out batch is the same in every run, seed and evaluation
DIAGNOSTICS_FILE = "diagnostics.jsonl"  # per run: one line per evaluation step, per seed

__all__ = [
  "DIAGNOSTICS_FILE",
  "DIAG_SEED",
  "HELDOUT_BATCH",
  "NUM_SAMPLES",
  "HeldOut",
  "episode_bounds",
  "has_horizon_model",
  "make_diagnostics_fn",
  "make_heldout",
  "mc_returns",
  "moved",
  "verdicts",
  "per_seed",
  "read_diagnostics",
  "summarize",
]


def has_horizon_model(config) -> bool:
  """Only UHM's model is conditioned on n; the other agents get the critic diagnostic only."""
  return config.agent == "uhm"


def episode_bounds(terminals: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(start, end) index of each episode (end inclusive); the array end closes the last one."""
  term = np.asarray(terminals).reshape(-1).astype(bool).copy()
  term[-1] = True
  ends = np.nonzero(term)[0]
  starts = np.concatenate([[0], ends[:-1] + 1])
  return starts, ends


def mc_returns(rewards, masks, terminals, discount: float) -> np.ndarray:
  """G_i = r_i + gamma m_i G_{i+1} inside each episode, G = r at its last transition (float64)."""
  r = np.asarray(rewards, np.float64).reshape(-1)
  m = np.asarray(masks, np.float64).reshape(-1)
  G = np.zeros_like(r)
  for s, e in zip(*episode_bounds(terminals)):
    acc = 0.0
    for i in range(e, s - 1, -1):  # one backward pass per episode
      acc = r[i] + discount * m[i] * acc if i < e else r[i]
      G[i] = acc
  return G


def _futures(d: dict, idx: np.ndarray, k_max: int) -> np.ndarray:
  """States 1..k_max steps after each idx: next_observations[idx + n - 1] (BxKxO)."""
  return np.asarray(d["next_observations"])[idx[:, None] + np.arange(k_max)[None]]


def _candidates(d: dict, k_max: int, min_left: int) -> np.ndarray:
  """Indices with k_max real successors and, where episodes allow, min_left steps to their end."""
  starts, ends = episode_bounds(d["terminals"])
  out = []
  for need in (max(min_left, k_max), k_max):
    out = [np.arange(s, e - need + 2) for s, e in zip(starts, ends) if e - s + 1 >= need]
    if out:
      break
  return np.concatenate(out) if out else np.zeros(0, np.int64)


@dataclasses.dataclass(frozen=True)
class HeldOut:
  """A fixed batch of held-out start states with what each diagnostic compares against."""

  observations: np.ndarray  # BxO
  actions: np.ndarray  # BxA
  futures: np.ndarray  # BxKxO, the true state n = 1..K steps ahead
  mc_return: np.ndarray  # B, discounted return of the data's continuation
  mean_displacement: np.ndarray  # KxO, training set's mean s_{i+n} - s_i
  mean_return: float  # training set's mean G (the critic's constant baseline)
  discount: float
  mc_horizon: int
  episodes: int  # held-out episodes the batch was drawn from

  @property
  def k_max(self) -> int:
    return int(self.futures.shape[1])


def make_heldout(
  heldout: dict,
  train: dict,
  *,
  k_max: int,
  discount: float,
  batch_size: int = HELDOUT_BATCH,
  seed: int = DIAG_SEED,
  action_clip_eps: float | None = None,
) -> HeldOut:
  """The fixed diagnostic batch from held-out episodes (OGBench layout dicts of numpy arrays).

  Baselines (mean displacement, mean return) come from the training arrays, as a model fit on them
  would. Raises ConfigError('data', ...) when no held-out episode has k_max + 1 states.
  """
  mc_horizon = int(math.ceil(math.log(0.05) / math.log(discount)))
  idx_all = _candidates(heldout, k_max, mc_horizon)
  require(
    idx_all.size > 0, "data", f"no held-out episode has {k_max} transitions for the diagnostics"
  )
  rng = np.random.default_rng(seed)
  idx = np.sort(rng.choice(idx_all, size=min(batch_size, idx_all.size), replace=False))
  G = mc_returns(heldout["rewards"], heldout["masks"], heldout["terminals"], discount)
  # Baselines from the training data: every start with k_max successors (a subsample bounds cost).
  tr = _candidates(train, k_max, 0)
  tr = tr if tr.size <= 20_000 else rng.choice(tr, 20_000, replace=False)
  obs_tr = np.asarray(train["observations"], np.float64)
  disp = (_futures(train, tr, k_max) - obs_tr[tr][:, None]).mean(0)
  G_tr = mc_returns(train["rewards"], train["masks"], train["terminals"], discount)
  actions = np.asarray(heldout["actions"], np.float32)[idx]
  if action_clip_eps is not None:  # as the training data are clipped (task.ACTION_CLIP_EPS)
    actions = np.clip(actions, -1 + action_clip_eps, 1 - action_clip_eps)
  return HeldOut(
    observations=np.asarray(heldout["observations"], np.float32)[idx],
    actions=actions,
    futures=_futures(heldout, idx, k_max).astype(np.float32),
    mc_return=G[idx].astype(np.float32),
    mean_displacement=disp.astype(np.float32),
    mean_return=float(G_tr.mean()),
    discount=float(discount),
    mc_horizon=mc_horizon,
    episodes=len(episode_bounds(heldout["terminals"])[0]),
  )


def _rmse_by_n(pred_KxBxO, true_BxKxO, std_O):
  err = (pred_KxBxO - jnp.swapaxes(true_BxKxO, 0, 1)) / std_O
  return jnp.sqrt(jnp.mean(err**2, axis=(1, 2)))


def _sample_futures(state, s_BxO, a_BxA, n, key, num_samples: int):
  """Mean of num_samples draws of m(.|s, a, n) per row, from the target flow model (KxBxO)."""
  c = state.config
  K, B = n.shape[0], s_BxO.shape[0]
  rows = num_samples * K * B
  s = jnp.broadcast_to(s_BxO, (num_samples, K) + s_BxO.shape).reshape(rows, -1)
  a = jnp.broadcast_to(a_BxA, (num_samples, K) + a_BxA.shape).reshape(rows, -1)
  n_R = jnp.broadcast_to(n[None, :, None], (num_samples, K, B)).reshape(rows)
  s_norm = (s - state.obs_mean) / state.obs_std
  v = lambda t, x: state.flow(t, x, s_norm, a, n_R, params=state.flow.target_params)
  y = agent.flow_sample(v, jax.random.normal(key, s.shape), c.flow_steps, solver=c.flow_solver)
  x = agent.from_flow_coords(state, y, s)
  return x.reshape(num_samples, K, B, -1).mean(0)


def _diagnostics(state, held: dict, key, num_samples: int):
  """Every diagnostic of one training seed (a pure function of the state and the batch)."""
  s, a = held["observations"], held["actions"]
  q = jnp.mean(agent.q_values(state, s, a), 0)
  G = held["mc_return"]
  out = dict(q_pred=q, q_mae=jnp.mean(jnp.abs(q - G)), q_bias=jnp.mean(q - G))
  qc, Gc = q - q.mean(), G - G.mean()
  out["q_corr"] = jnp.sum(qc * Gc) / jnp.sqrt(jnp.sum(qc**2) * jnp.sum(Gc**2) + 1e-12)
  if has_horizon_model(state.config):
    K = held["futures"].shape[1]
    n = jnp.arange(1, K + 1, dtype=jnp.int32)
    pred = _sample_futures(state, s, a, n, key, num_samples)
    out["model_err"] = _rmse_by_n(pred, held["futures"], state.obs_std)
  return out


def make_diagnostics_fn(config, held: HeldOut, num_seeds: int = 1, num_samples: int = NUM_SAMPLES):
  """``fn(state, key) -> dict`` of device arrays (leading seed axis when num_seeds > 1), jitted
  once, plus the baselines (which depend only on the data and the state's obs_std) as
  ``model_err_state`` / ``model_err_mean`` and ``q_base_mae``."""
  arrays = {
    k: jnp.asarray(getattr(held, k)) for k in ("observations", "actions", "futures", "mc_return")
  }
  disp = jnp.asarray(held.mean_displacement)
  base_mae = float(np.mean(np.abs(held.mean_return - held.mc_return)))
  horizon_model = has_horizon_model(config)

  def one(state, key):
    out = _diagnostics(state, arrays, key, num_samples)
    out["q_base_mae"] = jnp.asarray(base_mae, jnp.float32)
    if horizon_model:
      s = arrays["observations"]
      K = arrays["futures"].shape[1]
      stay = jnp.broadcast_to(s, (K,) + s.shape)
      out["model_err_state"] = _rmse_by_n(stay, arrays["futures"], state.obs_std)
      out["model_err_mean"] = _rmse_by_n(stay + disp[:, None], arrays["futures"], state.obs_std)
    return out

  if num_seeds == 1:
    return jax.jit(one)
  return jax.jit(lambda states, key: jax.vmap(one, in_axes=(0, None))(states, key))


def summarize(out: dict) -> dict:
  """eval.csv columns from a diagnostics output: means over seeds, model errors per horizon n."""
  row = {}
  for k, v in out.items():
    v = np.asarray(v, np.float64)
    if k == "q_pred":
      continue
    if k.startswith("model_err"):
      v = v.reshape(-1, v.shape[-1]).mean(0)
      row.update({f"{k}_n{i + 1}": float(x) for i, x in enumerate(v)})
    else:
      row[k] = float(v.mean())
  return row


def per_seed(out: dict) -> list[dict]:
  """The diagnostics of each seed as JSON-ready lists (one dict per seed)."""
  arrs = {k: np.asarray(v, np.float64) for k, v in out.items()}
  single = arrs["q_mae"].ndim == 0
  n = 1 if single else arrs["q_mae"].shape[0]
  return [{k: (v if single else v[i]).tolist() for k, v in arrs.items()} for i in range(n)]


def moved(first: dict, last: dict, n: int, rel: float = 0.1) -> dict:
  """What changed between two eval.csv rows: {figure: (label, before, after, baseline)} for each
  diagnostic whose error fell by more than ``rel`` of its value (model error at horizon n; critic
  mean |Q - G|)."""
  out = {}
  key = f"model_err_n{n}"
  if key in first and key in last and last[key] < (1 - rel) * first[key]:
    base = last.get(f"model_err_state_n{n}", float("nan"))
    out["horizon_model.png"] = (f"horizon-model error at n={n}", first[key], last[key], base)
  if "q_mae" in first and "q_mae" in last and last["q_mae"] < (1 - rel) * first["q_mae"]:
    base = last.get("q_base_mae", float("nan"))
    out["critic.png"] = ("critic |Q - G|", first["q_mae"], last["q_mae"], base)
  return out


def verdicts(first: dict, last: dict, n: int, rel: float = 0.1) -> dict:
  """Each diagnostic figure against its baseline, from two eval.csv rows: {figure: {label, before,
  after, baseline, baseline_name, beat, fell}}. ``beat``: the last error is below the baseline's
  (the best of the two baselines for the horizon model; the training set's mean return for the
  critic); ``fell``: it fell by more than ``rel`` of its first value."""
  out = {}
  key = f"model_err_n{n}"
  if key in first and key in last:
    bases = {
      "current state": last.get(f"model_err_state_n{n}", float("nan")),
      "mean displacement": last.get(f"model_err_mean_n{n}", float("nan")),
    }
    finite = {k: v for k, v in bases.items() if np.isfinite(v)} or bases
    name = min(finite, key=finite.get)
    out["horizon_model.png"] = dict(
      label=f"horizon-model error at n={n}",
      before=first[key],
      after=last[key],
      baseline=finite[name],
      baseline_name=f"the {name} baseline",
    )
  if "q_mae" in first and "q_mae" in last:
    out["critic.png"] = dict(
      label="critic |Q - G|",
      before=first["q_mae"],
      after=last["q_mae"],
      baseline=last.get("q_base_mae", float("nan")),
      baseline_name="the constant (training mean return) baseline",
    )
  for v in out.values():
    v["beat"] = bool(v["after"] < v["baseline"])
    v["fell"] = bool(v["after"] < (1 - rel) * v["before"])
  return out


def read_diagnostics(workdir) -> dict:
  """{step: {seed (str): diagnostics}} of a run's diagnostics.jsonl ({} when it has none)."""
  path = pathlib.Path(workdir) / DIAGNOSTICS_FILE
  if not path.exists():
    return {}
  out = {}
  for line in path.read_text().splitlines():
    if line.strip():
      rec = json.loads(line)
      out[int(rec["step"])] = rec["seeds"]
  return out
