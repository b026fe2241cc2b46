"""ITC decoding, tokenizer, world model and imagined rollouts (jaxlab.rl.itc; arXiv 2605.16457)."""

from __future__ import annotations

import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy.optimize import linear_sum_assignment

from jaxlab.core.train_state import TrainState
from jaxlab.rl import itc
from jaxlab.rl.itc import decode as D
from jaxlab.rl.itc import imagine
from jaxlab.rl.itc import tokenizer as T
from jaxlab.rl.itc import world_model as W
from jaxlab.rl.ppo import policies

BASE = itc.get_config()  # the library defaults; the dataclasses have none of their own
GRID = tuple(BASE.tokenizer.grid)
CFG = D.ITCConfig.from_config(BASE.itc, grid=GRID)
V = 16  # synthetic vocabulary: 0 background, 1..15 objects
B = 32


def tok_config(**overrides) -> T.TokenizerConfig:
  return T.TokenizerConfig.from_config(BASE.tokenizer, **overrides)


def wm_config(**overrides) -> W.WorldModelConfig:
  return W.WorldModelConfig.from_config(BASE.wm, grid=GRID, **overrides)


# --- NumPy transcriptions (independent of the JAX code) ---


def np_cost(probs, proposal, prev, alpha=0.6, tau=0.3, rows=9, cols=9, limit=4.1):
  n = rows * cols
  c = np.zeros((2 * n, 2 * n))
  for i in range(n):
    for j in range(n):
      d = (i // cols - j // cols) ** 2 + (i % cols - j % cols) ** 2
      d = 100.0 if d > limit else d
      c[i, j] = alpha * d - probs[j, prev[i]] - tau
  for d in range(n):
    for j in range(n):
      c[n + d, j] = -probs[j, proposal[j]] if d == j else 100.0
  return c  # trash columns and dummy-dummy block stay 0


def np_greedy(m, passes):
  m = m.copy()
  for _ in range(passes):
    target = m.argmax(0)
    claim = np.zeros_like(m, bool)
    claim[target, np.arange(m.shape[1])] = True
    conflict = np.where(claim, m, -np.inf)
    win = np.zeros_like(m, bool)
    win[np.arange(m.shape[0]), conflict.argmax(1)] = True
    m[claim & ~win] = -np.inf
  return m.argmax(0)


def test_cost_matrix_matches_numpy():
  rng = np.random.default_rng(0)
  probs = rng.dirichlet(np.ones(V), size=81).astype(np.float32)
  proposal, prev = rng.integers(0, V, 81), rng.integers(0, V, 81)
  got = D.cost_matrix(jnp.asarray(probs), jnp.asarray(proposal), jnp.asarray(prev), CFG)
  np.testing.assert_allclose(np.asarray(got), np_cost(probs, proposal, prev), atol=1e-5)


def test_masks():
  interior = D.interior_mask((9, 9), 2).reshape(9, 9)
  assert interior.sum() == 5 * 7 and interior[1:6, 1:8].all()
  d = D.distance_costs((9, 9), 4.1)
  assert d[0, 2] == 4 and d[0, 10] == 2 and d[0, 3] == 100 and d[0, 20] == 100  # (2, 2) is 8


def test_greedy_round_matches_numpy():
  m = np.random.default_rng(1).random((12, 12)).astype(np.float32)
  m[:, :3] = m[:, 3:6]  # ties between columns force conflicts
  for passes in (1, 3, 12):
    got = np.asarray(D.greedy_round(jnp.asarray(m), passes))
    np.testing.assert_array_equal(got, np_greedy(m, passes))


def test_sinkhorn_rounding_agrees_with_hungarian():
  costs = np.random.default_rng(2).random((40, 20, 20)).astype(np.float32)
  solve = jax.jit(jax.vmap(lambda c: D.greedy_round(D.sinkhorn_plan(c, 1e-3), 20)))
  got = np.asarray(solve(jnp.asarray(costs)))
  exact = np.asarray(D.hungarian_sources(jnp.asarray(costs)))
  for c, e in zip(costs, exact):  # the callback agrees with scipy
    rows, cols = linear_sum_assignment(c)
    np.testing.assert_array_equal(e[cols], rows)
  agree = np.mean([np.array_equal(g, e) for g, e in zip(got, exact)])
  assert agree >= 0.95, agree


# --- synthetic frames: K objects moving by at most one cell ---


def _frames(seed, num=B, k=4):
  rng = np.random.default_rng(seed)
  prev, nxt = np.zeros((num, 81), np.int32), np.zeros((num, 81), np.int32)
  cells = [(r, c) for r in range(2, 5) for c in range(2, 7)]
  for b in range(num):
    for obj, ci in enumerate(rng.choice(len(cells), k, replace=False)):
      r, c = cells[ci]
      tok = 1 + obj % (V - 1)
      prev[b, r * 9 + c] = tok
      r2, c2 = r + rng.integers(-1, 2), c + rng.integers(-1, 2)
      r2, c2 = (r2, c2) if nxt[b, r2 * 9 + c2] == 0 else (r, c)
      nxt[b, r2 * 9 + c2] = tok
  return prev, nxt


def _uncertain_logits(nxt):
  """A world model that is sure of the border and inventory (one-hot x 10) but unsure on the
  interior map (one-hot x 2 over 16 tokens: the true token has probability ~0.33)."""
  onehot = jax.nn.one_hot(nxt, V)
  interior = jnp.asarray(D.interior_mask((9, 9), 2))[None, :, None]
  return jnp.where(interior, 2.0 * onehot, 10.0 * onehot)


@pytest.fixture(scope="module")
def decoders():
  return {
    m: jax.jit(lambda lg, p, d, k, m=m: D.decode(lg, p, d, k, m, CFG)) for m in ("sample", "itc")
  }


def _hist(tokens):
  return np.stack([np.bincount(row, minlength=V)[1:] for row in np.asarray(tokens)])


def test_itc_keeps_object_counts(decoders):
  prev, nxt = _frames(0)
  logits = _uncertain_logits(nxt)
  done = jnp.zeros((B,), bool)
  err = {}
  for m, f in decoders.items():
    out = f(logits, jnp.asarray(prev), done, jax.random.key(2))
    err[m] = np.abs(_hist(out) - _hist(nxt)).sum(1).mean()
  # ~0.5 in NumPy simulations of 200 frames; 0.7 leaves room for the 32 frames drawn here.
  assert err["itc"] < 0.7 * err["sample"], err


def test_hungarian_itc_is_in_place_persistence():
  """With alpha_d = 0.6 > tau_trash = 0.3 a copy over a distance >= 1 costs more than generating
  the sample (p_j[t_j] is the largest p_j), so the exact ITC decoding keeps c_j in place iff
  p_j[c_j] + tau_trash > p_j[t_j] on interior cells of live episodes, and samples otherwise."""
  rng = np.random.default_rng(8)
  logits = jnp.asarray(1.5 * rng.normal(size=(4, 81, V)), jnp.float32)
  prev = rng.integers(0, V, (4, 81))
  done = np.array([False, False, True, False])
  key = jax.random.key(9)
  out = D.decode(logits, jnp.asarray(prev), jnp.asarray(done), key, "itc_hungarian", CFG)
  pert = np.asarray(logits + jax.random.gumbel(key, logits.shape), np.float64)
  p = np.exp(pert - pert.max(-1, keepdims=True))
  p /= p.sum(-1, keepdims=True)
  t = pert.argmax(-1)
  keep = np.take_along_axis(p, prev[..., None], -1)[..., 0] + 0.3 > p.max(-1)
  keep &= D.interior_mask((9, 9), 2)[None] & ~done[:, None]
  np.testing.assert_array_equal(np.asarray(out), np.where(keep, prev, t))
  assert 0 < keep.sum() < keep.size  # both branches occur


def test_peaked_logits_give_argmax(decoders):
  prev, nxt = _frames(3)
  logits = 50.0 * jax.nn.one_hot(nxt, V)
  out = decoders["itc"](logits, jnp.asarray(prev), jnp.zeros((B,), bool), jax.random.key(4))
  np.testing.assert_array_equal(np.asarray(out), nxt)


def test_done_disables_copies(decoders):
  prev, _ = _frames(5)
  logits = jnp.zeros((B, 81, V))  # flat: ITC would copy previous tokens everywhere it may
  key = jax.random.key(6)
  sampled = decoders["sample"](logits, jnp.asarray(prev), jnp.ones((B,), bool), key)
  done = decoders["itc"](logits, jnp.asarray(prev), jnp.ones((B,), bool), key)
  live = decoders["itc"](logits, jnp.asarray(prev), jnp.zeros((B,), bool), key)
  np.testing.assert_array_equal(np.asarray(done), np.asarray(sampled))
  interior = D.interior_mask((9, 9), 2)
  kept = lambda out: np.mean(np.asarray(out)[:, interior] == prev[:, interior])
  assert kept(sampled) < 0.2 < 0.35 < kept(live), (kept(sampled), kept(live))


# --- tokenizer ---


def test_tokenizer_round_trip_exact():
  cfg = tok_config(codebook_size=64, max_candidates=256)  # >= the 243 patches
  rng = np.random.default_rng(7)
  palette = rng.integers(0, 256, (20, 7, 7, 3)) / 255.0  # distinct patches (far apart)
  idx = rng.integers(0, 20, (3, 9, 9))
  frames = palette[idx].transpose(0, 1, 3, 2, 4, 5).reshape(3, 63, 63, 3).astype(np.float32)
  book = T.grow(T.init(cfg), jnp.asarray(frames), cfg)
  assert int(book.size) == len(np.unique(idx))
  out = T.decode(book, T.encode(book, jnp.asarray(frames), cfg), cfg)
  assert float(jnp.max(jnp.abs(out - frames))) == 0.0
  # A full codebook stops growing at its size.
  small = tok_config(codebook_size=8, max_candidates=256)
  assert int(T.grow(T.init(small), jnp.asarray(frames), small).size) == 8


def test_tokenizer_threshold():
  cfg = tok_config(codebook_size=8, threshold=0.75)
  base = np.zeros((1, 63, 63, 3), np.float32)
  near = base.copy()
  near[0, :7, :7, 0] = np.sqrt(0.7 / 49)  # squared distance 0.7 < 0.75: same code
  far = base.copy()
  far[0, :7, :7, 0] = np.sqrt(0.8 / 49)  # 0.8 > 0.75: a new code
  book = T.grow(T.init(cfg), jnp.asarray(base), cfg)
  assert int(T.grow(book, jnp.asarray(near), cfg).size) == 1
  assert int(T.grow(book, jnp.asarray(far), cfg).size) == 2


# --- world model and imagination ---

WM = wm_config(
  vocab_size=16,
  num_actions=5,
  max_blocks=5,
  embed=24,
  layers=1,
  heads=2,
  dropout=0.0,
  rope="spatiotemporal",
  absolute_embedding=True,
)


def test_world_model_is_block_causal():
  wm = W.WorldModel(WM)
  tok = jax.random.randint(jax.random.key(0), (2, 3, 81), 0, 16)
  act = jnp.zeros((2, 3), jnp.int32)
  params = wm.init(jax.random.key(1), tok, act)["params"]
  apply = jax.jit(lambda t, a: wm.apply({"params": params}, t, a)[0])
  obs, obs2 = apply(tok, act), apply(tok.at[:, 2, 5].set(0), act.at[:, 2].set(3))
  np.testing.assert_array_equal(np.asarray(obs[:, :2]), np.asarray(obs2[:, :2]))
  assert float(jnp.max(jnp.abs(obs[:, 2] - obs2[:, 2]))) > 0
  pos = np.asarray(W.positions(WM, 2))
  np.testing.assert_array_equal(pos[81], [1, 4, 4])  # action of frame 0: time 1, grid centre
  np.testing.assert_array_equal(pos[82 + 12], [2, 1, 3])  # token 12 of frame 1: row 1, col 3
  # The transformer is jaxlab.lm's (scanned blocks) with its world-model options.
  assert "blocks" in params and "attn" in params["blocks"]
  lm_cfg = WM.lm_config()
  assert (lm_cfg.block_size, lm_cfg.rope_mode, lm_cfg.frame_shape) == (82, "spatiotemporal", (9, 9))


def test_impala_policy_shapes():
  from jaxlab.rl import itc

  policy = itc.agent.make_policy(itc.get_config(), 17)  # the paper's sizes
  carry = policy.initial_carry(3)
  obs, reset = jnp.zeros((2, 3, 63, 63, 3)), jnp.zeros((2, 3), bool)
  params = jax.eval_shape(lambda: policy.init(jax.random.key(0), carry, obs, reset))
  out = jax.eval_shape(lambda p: policy.apply(p, carry, obs, reset), params)
  assert out[0].shape == (3, 256) and out[1]["logits"].shape == (2, 3, 17)
  assert out[2].shape == (2, 3)
  # The actor and critic read 8 x 8 x 128 CNN features plus the 256 recurrent units.
  assert params["params"]["actor"]["Dense_0"]["kernel"].shape == (8 * 8 * 128 + 256, 2048)


def test_imagined_rollout_under_jit():
  # A small recurrent policy keeps compilation cheap; the IMPALA agent runs in the slow test.
  policy = policies.GRUPolicy(5, 0, embed=8, hidden=8, head_hidden=(8,), activation="relu")
  carry = policy.initial_carry(2)
  obs = jnp.zeros((1, 2, 63, 63, 3))
  ptrain = TrainState.create(
    policy,
    policy.init(jax.random.key(0), carry, obs, jnp.ones((1, 2), bool))["params"],
    optax_sgd(),
  )
  wm = W.WorldModel(WM)
  tok = jnp.zeros((1, 5, 81), jnp.int32)
  wparams = wm.init(jax.random.key(1), tok, jnp.zeros((1, 5), jnp.int32))["params"]
  wtrain = TrainState.create(wm, wparams, optax_sgd())
  tcfg = tok_config(codebook_size=16)
  frames = jax.random.uniform(jax.random.key(2), (2, 3, 63, 63, 3))
  book = T.grow(T.init(tcfg), frames[:, -1], tcfg)
  start = {"obs": frames, "reset": jnp.zeros((2, 3), bool), "done": jnp.zeros((2,), bool)}

  @jax.jit
  def run(key):
    return imagine.rollout(
      ptrain,
      wtrain,
      book,
      start,
      key,
      horizon=5,
      method="itc",
      itc_cfg=CFG,
      tok_cfg=tcfg,
      max_blocks=5,
    )

  traj, _, last_value = run(jax.random.key(3))
  assert traj["obs"].shape == (5, 2, 63, 63, 3) and traj["reward"].shape == (5, 2)
  for x in jax.tree.leaves((traj, last_value)):
    assert np.all(np.isfinite(np.asarray(x, np.float32)))


def optax_sgd():
  import optax

  return optax.sgd(1e-3)


def test_experiment_rejects_bad_decode(tmp_path):
  out = subprocess.run(
    [sys.executable, "-m", "experiments.itc", "--decode=bogus", f"--workdir={tmp_path}/w"],
    capture_output=True,
    text=True,
    timeout=300,
  )
  assert out.returncode == 2 and "--decode" in out.stderr, out.stderr[-500:]
  assert not (tmp_path / "w").exists()


@pytest.mark.parametrize(
  "field,value,message",
  [
    ("policy.channels", (0, 8, 8), "positive integers"),
    ("policy.channels", (), "positive integers"),
    ("wm.dropout", float("nan"), "finite"),
    ("itc.trash_cost", float("inf"), "finite"),
    ("ppo.num_envs", 0, "> 0"),
    ("tokenizer.patch", 5, "tile"),
    ("tokenizer.grid", (9, 9, 1), "2 positive"),
    ("tokenizer.codebook_size", 0, "> 0"),
    ("itc.inventory_rows", 9, "rows"),
    ("horizon", 0, ">= 1"),
    ("imag_minibatches", 3, "divide"),
    ("replay_size", 10**12, "overflows"),
    ("imag_batch", 10**7, "needs about"),
    ("wm.max_blocks", 5000, "attention"),
    ("env", "craftax-symbolic", "pixels"),
    ("decode", "bogus", "allowed"),
  ],
)
def test_validate_config_names_the_field_before_anything_is_built(field, value, message):
  from experiments.configs import itc as presets
  from jaxlab.core.errors import ConfigError

  c = presets.get_config("tiny")
  *parents, leaf = field.split(".")
  node = c
  for p in parents:
    node = node[p]
  node[leaf] = value
  if field == "wm.max_blocks":  # a valid context for the rest of the config: only memory fails
    c.ppo.num_steps, c.replay_size = value + 1, c.ppo.num_envs * (value + 1)
  with pytest.raises(ConfigError) as e:
    itc.validate_config(c)
  assert e.value.field == f"config.{field}" and message in e.value.message, e.value


@pytest.mark.parametrize(
  "module,args,flag",
  [
    ("experiments.itc", ["--config.policy.channels=(0,8,8)"], "config.policy.channels"),
    ("experiments.itc", ["--config.wm.dropout=nan"], "config.wm.dropout"),
    ("experiments.itc", ["--config.env=craftax-symbolic"], "config.env"),
    ("experiments.itc", ["--config.replay_size=2000000000"], "config.replay_size"),
    ("experiments.itc", ["--seeds=0"], "seeds"),
    ("experiments.itc", ["--seeds=1,1"], "seeds"),
    ("benchmarks.itc", ["--batch=100000000"], "batch"),
  ],
)
def test_programs_refuse_bad_sizes_in_one_line_writing_nothing(tmp_path, module, args, flag):
  from tests.programs import run_program

  home = tmp_path / "home"
  home.mkdir()
  extra = [f"--workdir={tmp_path / 'w'}"] if module.startswith("experiments") else []
  env = {"HOME": str(home)}
  r = run_program(module, args + extra, tmp_path, env=env, drop=("XDG_CACHE_HOME",), timeout=120)
  errors = [ln for ln in r.stderr.splitlines() if ln.startswith("error:")]
  assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
  assert len(errors) == 1 and errors[0].startswith(f"error: --{flag}:"), r.stderr[-2000:]
  assert sorted(p.name for p in tmp_path.iterdir()) == ["home"] and not any(home.iterdir())


def test_replay_keeps_the_latest_steps_in_order():
  from jaxlab.rl.itc import buffer

  rep = buffer.init(2, 5, (1, 1, 3))
  for start in (0, 3, 6):  # 9 steps written into a ring of 5: steps 4..8 remain
    t = jnp.arange(start, start + 3)
    traj = {
      "obs": jnp.zeros((3, 2, 1, 1, 3)),
      "reset": jnp.zeros((3, 2), bool),
      "action": jnp.stack([t, t + 100], 1),
      "reward": jnp.zeros((3, 2)),
      "done": jnp.zeros((3, 2), bool),
    }
    rep = buffer.add(rep, traj)
  seq = buffer.sample(rep, jax.random.key(0), 64, 5)
  a = np.asarray(seq["action"])
  np.testing.assert_array_equal(a % 100, np.broadcast_to(np.arange(4, 9), a.shape))
  assert set(np.unique(a // 100)) == {0, 1}


@pytest.mark.slow
def test_tokenizer_round_trip_on_craftax_frames():
  from jaxlab.envs import craftax

  env = craftax.make("craftax-classic-pixels", 4, reset_ratio=4)
  obs, _ = env.reset(jax.random.key(0))
  cfg = tok_config()
  book = T.grow(T.init(cfg), obs, cfg)
  assert 0 < int(book.size) <= cfg.codebook_size
  out = T.decode(book, T.encode(book, obs, cfg), cfg)
  assert float(jnp.max(jnp.abs(out - obs))) == 0.0


@pytest.mark.slow
def test_tiny_experiment_runs_and_resumes(tmp_path):
  base = [sys.executable, "-m", "experiments.itc", f"--workdir={tmp_path}/w", "--log_every=1"]
  first = subprocess.run(base + ["--steps=2"], capture_output=True, text=True, timeout=3000)
  assert first.returncode == 0, first.stderr[-2000:]
  assert (tmp_path / "w" / "rollout.png").exists() and (tmp_path / "w" / "summary.json").exists()
  again = subprocess.run(base + ["--steps=3"], capture_output=True, text=True, timeout=3000)
  assert again.returncode == 0, again.stderr[-2000:]
  assert "return" in again.stdout
  files = {p: p.read_bytes() for p in (tmp_path / "w").rglob("*") if p.is_file()}
  rerun = subprocess.run(base + ["--steps=3"], capture_output=True, text=True, timeout=3000)
  assert rerun.returncode == 0, rerun.stderr[-2000:]
  assert {p: p.read_bytes() for p in (tmp_path / "w").rglob("*") if p.is_file()} == files


# --- the Dyna loop on the core runtime: checkpoint and resume ---


def _toy_env(num_envs: int):
  """A pixel env with the Craftax frame size: a 7 x 7 square walks along the middle row."""
  from jaxlab.envs import vec

  def frame(c):
    col = (c % 9)[:, None, None]
    cells = (jnp.arange(63)[None, None, :] // 7 == col) & (jnp.arange(63)[None, :, None] // 7 == 4)
    return jnp.stack([cells, jnp.zeros_like(cells), cells], -1).astype(jnp.float32)

  def reset(key):
    c = jax.random.randint(key, (num_envs,), 0, 9)
    return frame(c), vec.init_state(c, num_envs)

  def step(state, action, key):
    del key
    c = state.env + action
    done = c % 7 == 6
    reward = (action == 1).astype(jnp.float32)
    new, info = vec.track(state, c, reward, done)
    return frame(c), new, reward, done, info

  return vec.VecEnv("toy", num_envs, (63, 63, 3), 2, 1, (), 10.0, reset, step)


def _tiny_dyna(imag_updates: int):
  """(DynaConfig, GRU policy) of a Dyna iteration at toy sizes on `_toy_env(2)`."""
  from jaxlab.rl.itc import dyna

  c = itc.get_config()
  c.ppo.num_envs, c.ppo.num_steps, c.ppo.epochs, c.ppo.minibatches = 2, 3, 1, 1
  c.tokenizer.codebook_size, c.tokenizer.max_candidates = 8, 8
  c.wm.max_blocks, c.wm.embed, c.wm.layers, c.wm.heads = 2, 12, 1, 2
  c.replay_size, c.warmup_steps, c.imag_updates, c.wm_updates, c.wm_batch = 12, 0, 0, 1, 2
  if imag_updates:
    c.imag_updates, c.imag_batch, c.imag_minibatches = imag_updates, 2, 1
  c.burn_in, c.horizon, c.tok_passes = 1, 2, 1
  cfg = dyna.DynaConfig.from_config(c, 2, num_updates=1)
  return cfg, policies.GRUPolicy(2, 0, embed=4, hidden=4, head_hidden=(4,), activation="relu")


@pytest.mark.slow  # about a CPU-minute: two compilations of the whole Dyna iteration
def test_dyna_checkpoint_resumes(tmp_path):
  # One Dyna iteration, then a second run of the same workdir continues from its checkpoint
  # (replay, codebook, world model and agent), as `experiments.itc` does after a kill.
  from jaxlab.core import runtime
  from jaxlab.rl.itc import dyna

  env = _toy_env(2)
  cfg, policy = _tiny_dyna(imag_updates=0)
  update = dyna.make_update(env, cfg)
  key = jax.random.key_data(jax.random.key(0))
  fresh = lambda: dyna.init(env, policy, cfg, jax.random.fold_in(key, 1))
  loop = lambda n: runtime.Loop(n, log_every=1, ckpt_every=1, progress=False, plot=False)
  work = tmp_path / "w"
  first, _ = runtime.train(fresh(), update, loop(1), key=key, workdir=work, config={"a": 1})
  # Run again to the same step: the whole state comes back from the checkpoint, nothing reruns
  # (continuing past it is the core runtime's own tested behaviour).
  state, result = runtime.train(fresh(), update, loop(1), key=key, workdir=work, config={"a": 1})
  assert result.summary["step"] == 1 and int(state.iteration) == 1
  assert int(state.book.size) >= 1  # the restored codebook, not the empty initial one
  assert int(state.replay.count) == 3  # the restored replay: one iteration of 3 steps
  for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(state), strict=True):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  initial = fresh()
  changed = [
    not np.array_equal(np.asarray(a), np.asarray(b))
    for a, b in zip(jax.tree.leaves(initial.wm.params), jax.tree.leaves(state.wm.params))
  ]
  assert all(changed)  # the restored world model is the trained one, not a fresh init


def _two_iterations_with_warmup():
  """`_tiny_dyna(1)` whose imagination starts at the second iteration: 2 runtime steps run both
  branches of the update's cond."""
  import dataclasses

  cfg, policy = _tiny_dyna(imag_updates=1)
  return dataclasses.replace(cfg, warmup_steps=cfg.steps_per_iteration), policy


def test_dyna_seed_vmap_keeps_the_imagination_a_branch():
  # Every seed is at the same iteration: dyna.seed_vmap passes it unbatched, so the update's cond
  # (imagination after the warm-up) stays a cond; plain vmap would run both branches and select.
  from jaxlab.rl.itc import dyna

  env = _toy_env(2)
  cfg, policy = _two_iterations_with_warmup()
  keys = jax.ShapeDtypeStruct((2, 2), jnp.uint32)
  states = jax.eval_shape(lambda k: dyna.init_seeds(env, policy, cfg, k), keys)
  assert states.iteration.shape == (2,) and states.ppo.train.step.shape == (2,)
  update = dyna.make_update(env, cfg)
  one = lambda s, k: update(s, None, k)
  ours = str(jax.make_jaxpr(dyna.seed_vmap(one))(states, keys))
  plain = str(jax.make_jaxpr(jax.vmap(one))(states, keys))
  assert ours.count("cond[") == 1 and plain.count("cond[") == 0


@pytest.mark.slow  # about 1.5 CPU-minutes: the Dyna iteration compiled alone and over 2 seeds
def test_dyna_vmapped_seeds_equal_each_seed_alone():
  # Two seeds trained together (experiments.itc --seeds=2: the runtime's seed axis, dyna.seed_vmap)
  # for 2 iterations, the second one imagining: seed k there is the run of seed k alone.
  from jaxlab.core import runtime
  from jaxlab.core import seeds as seeds_lib
  from jaxlab.rl.itc import dyna

  env = _toy_env(2)
  cfg, policy = _two_iterations_with_warmup()
  update = dyna.make_update(env, cfg)
  loop = runtime.Loop(2, log_every=1, progress=False, plot=False, tensorboard=False)
  keys = seeds_lib.seed_keys((0, 1))
  states = dyna.init_seeds(env, policy, cfg, seeds_lib.stream(keys, 1))
  both, result = runtime.train(
    states, update, loop, key=keys, seeds=(0, 1), seed_vmap=dyna.seed_vmap
  )
  assert np.asarray(both.iteration).tolist() == [2, 2]
  for i, seed in enumerate((0, 1)):
    alone = dyna.init(env, policy, cfg, jax.random.fold_in(keys[i], 1))
    alone, solo = runtime.train(alone, update, loop, key=keys[i])
    assert solo.summary["train/imagining"] == 1.0  # the last iteration took the other branch
    for a, b in zip(jax.tree.leaves(seeds_lib.take(both, i)), jax.tree.leaves(alone), strict=True):
      np.testing.assert_allclose(
        np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=1e-5, atol=1e-6
      )
    for name, value in result.per_seed[seed].items():
      np.testing.assert_allclose(value, solo.summary[name], rtol=1e-5, atol=1e-6, err_msg=name)


# --- the decoder evaluation's metrics (jaxlab.rl.itc.decoder_eval) against loop-by-loop NumPy ---


def np_accuracy(imag, real):
  b, h, n = imag.shape
  return [
    sum(imag[i, t, j] == real[i, t, j] for i in range(b) for j in range(n)) / (b * n)
    for t in range(h)
  ]


def np_count_error(imag, real, vocab, mask):
  b, h, _ = imag.shape
  out = []
  for t in range(h):
    errs = []
    for i in range(b):
      ci = np.bincount(imag[i, t][mask], minlength=vocab)
      cr = np.bincount(real[i, t][mask], minlength=vocab)
      errs.append(np.abs(ci - cr).sum())
    out.append(np.mean(errs))
  return out


def np_flicker(tokens, first):
  seq = np.concatenate([first[:, None], tokens], 1)
  b, h1, n = seq.shape
  out = []
  for t in range(1, h1):
    if t + 1 >= h1:
      out.append(np.nan)
      continue
    hits = sum(
      seq[i, t, j] != seq[i, t - 1, j] and seq[i, t + 1, j] == seq[i, t - 1, j]
      for i in range(b)
      for j in range(n)
    )
    out.append(hits / (b * n))
  return out


def test_decoder_metrics_match_numpy_on_hand_made_sequences():
  from jaxlab.rl.itc import decoder_eval

  first = np.array([[1, 2, 3, 0], [0, 0, 5, 5]])
  tokens = np.array(  # [B=2, H=4, L=4]
    [
      [[1, 4, 3, 0], [1, 2, 3, 0], [1, 2, 3, 3], [1, 2, 3, 0]],  # a blip at h=1, h=3
      [[0, 5, 5, 5], [0, 0, 5, 5], [0, 0, 5, 5], [7, 0, 5, 5]],  # a blip at h=1; 7 appears
    ]
  )
  real = np.array(
    [
      [[1, 2, 3, 0]] * 4,
      [[0, 0, 5, 5], [0, 0, 5, 5], [0, 5, 0, 5], [0, 0, 5, 5]],
    ]
  )
  mask = np.array([True, True, True, False])  # the last position plays the inventory
  flick = np.asarray(decoder_eval.flicker(jnp.asarray(tokens), jnp.asarray(first)))
  np.testing.assert_allclose(flick, np_flicker(tokens, first))
  np.testing.assert_allclose(flick[:3], [2 / 8, 0.0, 1 / 8])  # counted by hand
  assert np.isnan(flick[3])
  np.testing.assert_allclose(
    np.asarray(decoder_eval.token_accuracy(jnp.asarray(tokens), jnp.asarray(real))),
    np_accuracy(tokens, real),
  )
  got = decoder_eval.count_error(
    jnp.asarray(tokens), jnp.asarray(real), 8, jnp.asarray(mask, float)
  )
  np.testing.assert_allclose(np.asarray(got), np_count_error(tokens, real, 8, mask))
  # By hand: h=1 a 4 for a 2 (2) and a 5 for a 0 (2); h=4 a 7 for a 0 (2, over 2 frames).
  np.testing.assert_allclose(np.asarray(got), [2.0, 0.0, 0.0, 1.0])
  # Swapping two tokens moves objects but keeps every count: no count error, two wrong tokens.
  swap = real.copy()
  swap[0, 0, [0, 1]] = swap[0, 0, [1, 0]]
  assert (
    float(decoder_eval.count_error(jnp.asarray(swap), jnp.asarray(real), 8, jnp.ones(4))[0]) == 0
  )


def test_decoder_metrics_match_numpy_on_random_sequences():
  from jaxlab.rl.itc import decoder_eval

  rng = np.random.default_rng(5)
  tokens, real = rng.integers(0, 3, (6, 5, 9)), rng.integers(0, 3, (6, 5, 9))
  first, mask = rng.integers(0, 3, (6, 9)), rng.random(9) < 0.7
  np.testing.assert_allclose(
    np.asarray(decoder_eval.flicker(jnp.asarray(tokens), jnp.asarray(first))),
    np_flicker(tokens, first),
  )
  got = decoder_eval.count_error(
    jnp.asarray(tokens), jnp.asarray(real), 3, jnp.asarray(mask, float)
  )
  np.testing.assert_allclose(np.asarray(got), np_count_error(tokens, real, 3, mask), rtol=1e-6)


def test_decode_by_traced_index_equals_decode_by_name(decoders):
  prev, nxt = _frames(1, num=4)
  logits, done, key = _uncertain_logits(nxt), jnp.zeros((4,), bool), jax.random.key(4)
  by_index = jax.jit(lambda i: D.decode(logits, jnp.asarray(prev), done, key, i, CFG))
  for m, f in decoders.items():
    want = f(logits, jnp.asarray(prev), done, key)
    np.testing.assert_array_equal(by_index(D.METHODS.index(m)), want)


def test_decode_by_index_into_choices_holds_only_those_decoders():
  # The rollout picture switches between its own two decoders: the program must hold no host
  # callback unless itc_hungarian is one of them (JAX's persistent cache skips such programs,
  # so every run would compile the picture again).
  prev, nxt = _frames(1, num=4)
  logits, done, key = _uncertain_logits(nxt), jnp.zeros((4,), bool), jax.random.key(4)
  by_index = lambda c: jax.jit(lambda i: D.decode(logits, jnp.asarray(prev), done, key, i, CFG, c))
  choices = ("argmax", "sample")  # the index counts in choices, not in METHODS
  for i, m in enumerate(choices):
    want = D.decode(logits, jnp.asarray(prev), done, key, m, CFG)
    np.testing.assert_array_equal(by_index(choices)(i), want)
  for choices in (("itc", "sample"), ("argmax", "itc_hungarian"), D.METHODS):
    text = by_index(choices).lower(0).as_text()
    assert ("callback" in text) == ("itc_hungarian" in choices), choices
  with pytest.raises(Exception, match="decode"):
    D.decode(logits, jnp.asarray(prev), done, key, jnp.int32(0), CFG, ("sample", "beam"))


def test_rollout_picture_program_has_no_host_callback():
  from jaxlab.rl.itc import agent, dyna

  cfg, policy = _tiny_dyna(0)
  state = jax.eval_shape(lambda k: dyna.init(_toy_env(2), policy, cfg, k), jax.random.key(0))
  choices = (cfg.decode, "sample")
  assert cfg.decode != "itc_hungarian"
  picture = agent._picture_fn(cfg, 2, choices)
  args = (state.wm, state.book, state.replay, jax.random.key(1), jnp.int32(0))
  assert "callback" not in picture.lower(*args).as_text()


def test_dyna_update_traces_the_imagination_once_and_keeps_the_state_structure(monkeypatch):
  # The update traces the imagination once (its metrics' shape probe and the cond share a jitted
  # trace) and runs the policy through a jitted apply that it swaps back before returning: the
  # state that comes out has the structure that went in (the runtime loops and checkpoints it).
  from jaxlab.rl.itc import dyna

  env = _toy_env(2)
  cfg, policy = _tiny_dyna(imag_updates=2)
  key = jax.random.key_data(jax.random.key(0))
  state = jax.eval_shape(lambda k: dyna.init(env, policy, cfg, k), key)
  calls = []
  rollout = imagine.rollout
  monkeypatch.setattr(imagine, "rollout", lambda *a, **k: calls.append(1) or rollout(*a, **k))
  new, metrics = jax.eval_shape(dyna.make_update(env, cfg), state, None, key)
  assert len(calls) == 1
  assert jax.tree.structure(new) == jax.tree.structure(state)
  assert metrics["imag_loss"].shape == () and metrics["imagining"].shape == ()
