"""The training loop every long jaxlab run goes through.

A run is a sequence of jitted chunks (a loop over K update steps; one compiled program serves every
chunk length of a run). Between chunks the host logs metrics (CSV + TensorBoard,
:mod:`jaxlab.core.metrics`), advances a tqdm bar with steps/s, evaluates, and saves an orbax
checkpoint (:mod:`jaxlab.core.checkpoint`; written in the background while the evaluation and the
next chunk run, and waited for before the boundary after). Step ``i`` always uses
``fold_in(key, i)`` and chunk boundaries are global multiples of
``log_every``/``ckpt_every``/``eval_every``, so a run killed and restarted from its workdir ends
bit-for-bit where an uninterrupted run would (on CPU). Without a
workdir the same loop runs in memory (no files), which is how library code (``dasbs.train``,
``lm.capacity``) runs its inner loops::

    state, result = train(state, update_fn, Loop(num_steps=1000, log_every=100), key=key,
                          workdir="runs/x", data=dataset, sample_fn=sample)
    result.summary["train/loss"], result.evals[1000], result.history["loss"]  # per-step (opt-in)
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import pathlib
import time
from collections.abc import Callable, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging
from jax.sharding import NamedSharding, PartitionSpec

from jaxlab.core import checkpoint, metrics, plots, provenance, resources, tracking, videos
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.checkpoint import CKPT_DIR, SIGTERM_EXIT_CODE, Preempted, restore  # noqa: F401
from jaxlab.core.errors import ConfigError
from jaxlab.core.metrics import read_csv, write_json  # noqa: F401  (public re-exports)

PyTree = Any
UpdateFn = Callable[[PyTree, PyTree, jax.Array], tuple[PyTree, Mapping[str, jax.Array]]]


class NonFiniteError(RuntimeError):
  """Training produced NaN/inf metrics; the last good checkpoint is kept, nothing newer saved.

  ``resumed_from``: the checkpoint (step, folder) the run had just resumed from, when the metrics
  turned non-finite in the first chunk after it. That checkpoint is then the suspect, not a good
  one, and the message says so (it is kept; the user decides).
  """

  def __init__(self, step: int, names: list[str], resumed_from: tuple[int, str] | None = None):
    what = f"non-finite {', '.join(names)} in the chunk ending at step {step}"
    if resumed_from is None:
      message = f"{what}; stopped, the last good checkpoint is kept"
    else:
      at, folder = resumed_from
      message = (
        f"{what}, the first after resuming from the checkpoint at step {at}: that checkpoint is "
        f"suspect, it may be corrupt (it is kept): move {folder}/{at} aside to resume from the "
        "one before it"
      )
    super().__init__(message)
    self.step, self.resumed_from = step, resumed_from


@dataclasses.dataclass(frozen=True)
class Loop:
  """How a run is cut into chunks and what happens between them.

  num_steps: total updates of the run (a resumed run continues up to it).
  log_every, ckpt_every, eval_every: chunk boundaries; 0 disables checkpoints / evaluation (the last
    step always saves and evaluates).
  keep: checkpoints kept.  history: keep every step's metrics in ``Result.history``.
  progress / progress_keys: tqdm bar and the metrics it shows (default: the first three).
  tensorboard, plot: TensorBoard scalars and ``curves.png`` (with a workdir).
  profile: write a ``jax.profiler`` trace of the second chunk to ``<workdir>/profile``.
  stop_on_nonfinite: raise :class:`NonFiniteError` when a chunk's metrics hold NaN/inf.
  units_per_step, units_name: when ``units_per_step > 0`` (e.g. environment steps per PPO
    iteration), each chunk's metrics also hold ``units_name`` = steps/s x units_per_step (the wall
    time of the chunk).
  memory_field: the flag or config field a :class:`ConfigError` names when one chunk's compiled
    program needs more memory than a device has (XLA's memory analysis, checked before the
    workdir is created); a program sets the field that sizes its batch or model.
  log_first_step: a fresh run's first chunk is one step, shown on the progress bar and checked for
    non-finite metrics: the user sees that the program compiled and runs right after the compile
    instead of ``log_every`` steps later. metrics.csv keeps its rows (the next row covers that
    step too). The chunk program serves every length, so this compiles nothing more, and the
    numbers do not change (each step's key is folded from its index).
  tracker: ``tensorboard`` or ``wandb`` (:mod:`jaxlab.core.tracking`); CSV files either way.
  video_every: with ``train(..., video_fn=...)``, an evaluation video (:mod:`jaxlab.core.videos`)
    at the first chunk end past each multiple of it and at the last step (0: the last step only).
  """

  num_steps: int
  log_every: int = 100
  ckpt_every: int = 1000
  eval_every: int = 0
  keep: int = 3
  history: bool = False
  progress: bool = True
  progress_keys: tuple[str, ...] | None = None
  tensorboard: bool = True
  plot: bool = True
  profile: bool = False
  stop_on_nonfinite: bool = True
  units_per_step: int = 0
  units_name: str = "units_per_sec"
  memory_field: str = "config.batch_size"
  log_first_step: bool = True
  tracker: str = "tensorboard"
  video_every: int = 0

  def __post_init__(self):
    tracking.check(self.tracker)
    if self.video_every < 0:
      raise ConfigError("videos", f"video_every must be >= 0, got {self.video_every}")
    if self.num_steps < 0:
      raise ConfigError("steps", f"must be >= 0, got {self.num_steps}")
    if self.log_every <= 0:
      raise ConfigError("log_every", f"must be >= 1, got {self.log_every}")
    if self.ckpt_every < 0 or self.eval_every < 0:
      raise ConfigError("ckpt_every", "ckpt_every and eval_every must be >= 0")
    if self.keep < 1:
      raise ConfigError("keep", f"must be >= 1, got {self.keep}")


@dataclasses.dataclass
class Result:
  """What a run returns: summary (also ``summary.json``), evaluations by step, per-step metrics.

  A run with a seed axis (``train(..., seeds=...)``) reports means over seeds in ``summary`` and
  ``evals``, each seed's own summary in ``per_seed[seed]`` (also ``summary["per_seed"]``) and its
  evaluations in ``evals_per_seed[step][seed]``; ``history`` arrays are then ``[steps, seeds]``.
  """

  summary: dict
  evals: dict[int, dict[str, float]] = dataclasses.field(default_factory=dict)
  history: dict[str, np.ndarray] | None = None
  per_seed: dict[int, dict] = dataclasses.field(default_factory=dict)
  evals_per_seed: dict[int, dict[int, dict[str, float]]] = dataclasses.field(default_factory=dict)


COMPILE_LOG_ENV = "JAXLAB_COMPILE_LOG"
# jax.monitoring events -> the words of the compile log (a backend compile is timed around the
# persistent-cache lookup too, so fresh compilations = compiles - hits).
_COMPILE_EVENTS = {
  "/jax/compilation_cache/cache_hits": "hit",
  "/jax/compilation_cache/cache_misses": "write",
  "/jax/core/compile/backend_compile_duration": "compile",
  "/jax/core/compile/jaxpr_trace_duration": "trace",
  "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
}
_compile_log: dict = {"file": None, "first_step": False}


def watch_compiles() -> str | None:
  """With ``$JAXLAB_COMPILE_LOG`` set, appends one line per compilation event to that file.

  ``hit``/``write`` (persistent-cache reads and writes), ``compile|trace|lower <seconds>``, and
  ``first_step <unix time>`` when the process's first chunk has run. Each line is written as it
  happens, so a run killed by a timeout still reports what it did (``benchmarks/compile.py``).
  """
  path = os.environ.get(COMPILE_LOG_ENV)
  if not path or _compile_log["file"] is not None:
    return path
  _compile_log["file"] = open(path, "a", buffering=1)  # noqa: SIM115  (open for the process)

  def on_event(event, **_):
    if event in _COMPILE_EVENTS:
      _compile_log["file"].write(f"{_COMPILE_EVENTS[event]} 0\n")

  def on_duration(event, seconds, **_):
    if event in _COMPILE_EVENTS:
      _compile_log["file"].write(f"{_COMPILE_EVENTS[event]} {seconds:.6f}\n")

  jax.monitoring.register_event_listener(on_event)
  jax.monitoring.register_event_duration_secs_listener(on_duration)
  return path


def _note_first_step() -> None:
  if _compile_log["file"] is not None and not _compile_log["first_step"]:
    _compile_log["first_step"] = True
    _compile_log["file"].write(f"first_step {time.time():.6f}\n")


_CHUNK_FNS: dict = {}
_CHUNK_FNS_KEPT = 8  # the newest few: closures may hold large arrays (data sets, environments)


def make_chunk_fn(
  update_fn: UpdateFn,
  sample_fn: Callable | None = None,
  state_sharding: PyTree | None = None,
  seed_vmap: Callable | None = None,
  seed_data: bool = False,
) -> ChunkProgram:
  """Returns ``chunk(state, data, key, start, length, max_len=None) -> (state, per_step)``, the
  metrics ``per_step`` as host (NumPy) arrays ``[length, ...]``.

  ``length`` steps from global step ``start``; ``max_len`` (default ``length``) is the longest
  chunk the caller will ask for: every length up to it runs in one compiled program (a loop with a
  traced trip count), so a run whose chunks differ in length (a remainder before an evaluation
  or the last step) compiles once. One jitted function per ``(update_fn, sample_fn,
  state_sharding)``: a notebook that calls :func:`train` again with the same functions reuses the
  compiled chunks instead of compiling anew.

  ``seed_vmap`` (e.g. :func:`jaxlab.core.seeds.vmap`) makes it a chunk over a leading seed axis:
  the state and ``key`` are stacked per seed, the data is shared, and each step runs
  ``seed_vmap(one)(states, keys)`` where ``one(state, key)`` is the single-seed step; the metrics
  are then ``[length, seeds, ...]``. With ``seed_data`` every seed has its own data too (a leading
  seed axis on ``data``): ``seed_vmap(one)(states, keys, data)``, ``one(state, key, data)``.
  """
  leaves, treedef = jax.tree.flatten(state_sharding)
  cache_key = (update_fn, sample_fn, treedef, tuple(leaves), seed_vmap, seed_data)
  try:
    return _CHUNK_FNS[cache_key]
  except TypeError:  # an unhashable function object: build without caching
    return ChunkProgram(update_fn, sample_fn, state_sharding, seed_vmap, seed_data)
  except KeyError:
    while len(_CHUNK_FNS) >= _CHUNK_FNS_KEPT:
      _CHUNK_FNS.pop(next(iter(_CHUNK_FNS)))
    fn = ChunkProgram(update_fn, sample_fn, state_sharding, seed_vmap, seed_data)
    _CHUNK_FNS[cache_key] = fn
    return fn


class ChunkProgram:
  """``program(state, data, key, start, length, max_len=None) -> (state, per_step)``: the chunk
  of :func:`make_chunk_fn`, compiled ahead of time per argument types and ``max_len``.

  ``compile`` gives that executable (``train`` reads its memory analysis before it runs or writes
  anything), ``memory`` its :func:`chunk_bytes`, ``jitted`` the jitted chunk (for lowering and
  inspection) and ``cache_size`` how many executables exist so far.
  """

  def __init__(self, update_fn, sample_fn, state_sharding, seed_vmap=None, seed_data=False):
    self._update_fn, self._sample_fn = update_fn, sample_fn
    self._state_sharding, self._seed_vmap, self._seed_data = state_sharding, seed_vmap, seed_data
    # jitted so that the shape probe and the loop share one trace of update_fn (jax caches the
    # trace by argument types); XLA inlines the nested call
    self._body = jax.jit(self._one if seed_vmap is None else self._seeds)
    donate = (0,) if jax.default_backend() != "cpu" else ()
    # traced under the name ``chunk`` (what jax.monitoring's compile events report)
    self.jitted = jax.jit(self.chunk, static_argnums=(5,), donate_argnums=donate)
    self._executables: dict = {}
    self._sizes: dict = {}

  def _one(self, state, data, key, step):
    k_sample, k_update = jax.random.split(jax.random.fold_in(key, step))
    batch = data if self._sample_fn is None else self._sample_fn(data, k_sample)
    state, metrics = self._update_fn(state, batch, k_update)
    return state, jax.tree.map(lambda m: jnp.asarray(m).astype(jnp.float32), metrics)

  def _seeds(self, states, data, keys, step):
    # every seed folds the same step into its own key: seed k draws what its solo run draws
    if self._seed_data:
      return self._seed_vmap(lambda s, k, d: self._one(s, d, k, step))(states, keys, data)
    return self._seed_vmap(lambda s, k: self._one(s, data, k, step))(states, keys)

  def chunk(self, state, data, key, start, length, max_len):
    """The traced chunk: ``length`` steps from ``start`` in a loop of at most ``max_len``."""
    body = self._body
    if max_len == 1:  # no loop: XLA:CPU runs convolutions inside loops slowly (jax-ml/jax#12868)
      state, metrics = body(state, data, key, start)
      per_step = jax.tree.map(lambda m: m[None], metrics)
    else:
      shapes = jax.eval_shape(body, state, data, key, start)[1]
      buf = jax.tree.map(lambda m: jnp.zeros((max_len, *m.shape), m.dtype), shapes)

      def step(i, carry):
        state, buf = carry
        state, metrics = body(state, data, key, start + i)
        return state, jax.tree.map(lambda b, m: b.at[i].set(m), buf, metrics)

      # a traced trip count: every chunk length <= max_len is this one program
      state, per_step = jax.lax.fori_loop(0, length, step, (state, buf))
    if self._state_sharding is not None:
      state = jax.lax.with_sharding_constraint(state, self._state_sharding)
    return state, per_step

  def compile(self, state, data, key, max_len: int):
    """The compiled chunk for these arguments' types and ``max_len``, compiled on first use
    (ahead of time, not by calling ``jitted``); every chunk then runs this same executable."""
    cache_key = (max_len, _arg_types((state, data, key)))
    exe = self._executables.get(cache_key)
    if exe is None:
      i32 = jax.ShapeDtypeStruct((), jnp.int32)
      exe = self.jitted.lower(state, data, key, i32, i32, max_len).compile()
      self._executables[cache_key] = exe
    return exe

  def memory(self, state, data, key, max_len: int, arguments: bool = True) -> int | None:
    """:func:`chunk_bytes` of that compiled chunk, read once: XLA's analysis serialises the
    whole buffer assignment (0.15 s for a DASBS chunk), too slow to repeat on every train call."""
    exe = self.compile(state, data, key, max_len)
    at = (id(exe), arguments)  # the executables are kept, so their ids are not reused
    if at not in self._sizes:  # only the figure asked for: each analysis takes up to 0.6 s
      self._sizes[at] = chunk_bytes(exe, arguments)
    return self._sizes[at]

  def cache_size(self) -> int:
    return len(self._executables)

  def __call__(self, state, data, key, start, length: int, max_len: int | None = None):
    max_len = length if max_len is None else max_len
    if not 1 <= length <= max_len:
      raise ValueError(f"chunk length {length} must be in [1, max_len={max_len}]")
    exe = self.compile(state, data, key, max_len)
    state, per_step = exe(state, data, key, np.int32(start), np.int32(length))
    # the metrics go to the host (they are logged there), cut there: an eager slice per metric
    # on the device cost ~0.1 ms each, about 1 ms per chunk call for PPO's ten metrics
    per_step = jax.device_get(per_step)
    if length < max_len:
      per_step = jax.tree.map(lambda m: m[:length], per_step)
    return state, per_step


def _arg_types(args) -> tuple:
  """What a compiled chunk is specific to: the pytree structure, each leaf's abstract type (shape,
  dtype, weak type) and, for committed arrays, its sharding (as ``jax.jit`` keys its cache)."""
  leaves, treedef = jax.tree.flatten(args)
  types = tuple(
    (x.aval, _sharding_key(x.sharding) if x.committed else None)
    if isinstance(x, jax.Array)
    else (jax.typeof(x), None)
    for x in leaves
  )
  return treedef, types


def _sharding_key(s):
  """A sharding up to trailing unsharded dimensions: a chunk's output ``P(None, 'fsdp')`` is the
  placed input's ``P(None, 'fsdp', None, None)``, and must not compile the chunk a second time."""
  if isinstance(s, NamedSharding):
    spec = tuple(s.spec)
    while spec and spec[-1] is None:
      spec = spec[:-1]
    return ("named", s.mesh, spec, s.memory_kind)
  return s


def chunk_bytes(compiled, arguments: bool = True) -> int | None:
  """Bytes a compiled program holds while it runs (XLA's memory analysis: its arguments unless
  ``arguments=False``, outputs and temporaries, less the outputs that alias donated arguments);
  None where XLA does not say."""
  try:
    m = compiled.memory_analysis()
    nbytes = m.temp_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
    nbytes += m.argument_size_in_bytes if arguments else 0
  except Exception:  # not every backend (or jax version) implements it
    return None
  return int(nbytes) if nbytes > 0 else None


def _max_len(start: int, ends: list[int]) -> int:
  return max(b - a for a, b in zip([start, *ends], ends, strict=False)) if ends else 1


def chunk_length(loop: Loop, start: int = 0) -> int:
  """The ``max_len`` of the one chunk program a run of ``loop`` from ``start`` compiles: its
  longest chunk. A caller that runs steps through that program itself (e.g. an evaluation in
  parts) passes it to reuse the compiled chunk."""
  return _max_len(start, _chunk_ends(start, loop))


def _chunk_ends(start: int, loop: Loop) -> list[int]:
  ends = chunk_boundaries(start, loop.num_steps, loop.log_every, loop.ckpt_every, loop.eval_every)
  if loop.log_first_step and start == 0 and ends and ends[0] > 1:
    return [1, *ends]
  return ends


def check_chunk_memory(
  chunk_fn,
  loop: Loop,
  state,
  data,
  key,
  start: int,
  seeds: tuple[int, ...] | None = None,
  seed_data: bool = False,
) -> list[slice] | None:
  """Compiles the chunk a run from ``start`` uses and refuses it (``ConfigError`` naming
  ``loop.memory_field``) when XLA's memory analysis says it needs more than one device has.

  A run over a seed axis that does not fit falls back to sequential groups of seeds (one line says
  so): returns the groups (slices of the seed axis), or None when every seed runs at once.
  """
  ends = _chunk_ends(start, loop)
  if not ends or not hasattr(chunk_fn, "memory"):
    return None
  # On a CPU the limit is the host's available memory, which no longer counts the arguments (the
  # state and data are already in this process); an accelerator's limit is its whole memory.
  resident = jax.devices()[0].platform == "cpu"
  max_len = _max_len(start, ends)
  nbytes = chunk_fn.memory(state, data, key, max_len, arguments=not resident)
  limit = resources.device_memory()
  if nbytes is None or nbytes <= limit:
    return None
  what = f"about {resources.human(nbytes)} for one training chunk (XLA's memory analysis)"
  have = f"this machine has {resources.human(limit)}"
  if seeds is None or len(seeds) == 1:
    raise ConfigError(loop.memory_field, f"needs {what}; {have}")
  n = len(seeds)
  known = {n: nbytes}  # bytes by group size: a program's memory grows about linearly in seeds
  size = min(n - 1, max(1, int(limit // (nbytes / n))))
  while True:
    groups = _seed_groups(n, size)
    g = groups[0].stop - groups[0].start  # the largest group
    part = jax.tree.map(lambda x: x[groups[0]], (state, key))
    part_data = jax.tree.map(lambda x: x[groups[0]], data) if seed_data else data
    known[g] = chunk_fn.memory(part[0], part_data, part[1], max_len, arguments=not resident)
    if known[g] is None or known[g] <= limit:
      break
    if g == 1:
      raise ConfigError(
        loop.memory_field,
        f"one seed needs about {resources.human(known[g])} for one training chunk; {have}",
      )
    (s1, b1), (s2, b2) = sorted(known.items())[:2]
    slope = (b2 - b1) / (s2 - s1)
    guess = int((limit - (b1 - slope * s1)) // slope) if slope > 0 else g - 1
    size = max(1, min(g - 1, guess))
  if jax.process_index() == 0:
    print(
      f"[jaxlab] {n} seeds need {what}; {have}: training them in {len(groups)} sequential "
      f"groups of <= {groups[0].stop - groups[0].start} seeds",
      flush=True,
    )
  return groups


def _seed_groups(n: int, size: int) -> list[slice]:
  """``n`` seeds in ``ceil(n / size)`` consecutive groups of near-equal size (at most two sizes,
  so at most two compiled programs)."""
  k = -(-n // size)
  sizes = [n // k + (1 if i < n % k else 0) for i in range(k)]
  bounds = np.cumsum([0, *sizes])
  return [slice(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _call_chunk(chunk_fn, state, run: _Run, step: int, length: int, max_len: int):
  """One chunk over every seed at once, or group by group (the seeds' results concatenated)."""
  if not run.groups:
    return chunk_fn(state, run.data, run.key, step, length, max_len)
  parts = [
    chunk_fn(
      jax.tree.map(lambda x: x[g], state),
      jax.tree.map(lambda x: x[g], run.data) if run.seed_data else run.data,
      run.key[g],
      step,
      length,
      max_len,
    )
    for g in run.groups
  ]
  state = jax.tree.map(lambda *xs: jnp.concatenate(xs), *[p[0] for p in parts])
  per_step = jax.tree.map(lambda *xs: np.concatenate(xs, axis=1), *[p[1] for p in parts])
  return state, per_step


def chunk_boundaries(start: int, num_steps: int, *everies: int) -> list[int]:
  """Chunk ends after ``start``: every multiple of each positive ``every``, and ``num_steps``."""
  ends = {num_steps}
  for every in everies:
    if every and every > 0:
      ends.update(range((start // every + 1) * every, num_steps, every))
  return sorted(e for e in ends if start < e <= num_steps)


class _Host:
  """Host-side side effects between chunks (only process 0 writes; none without a workdir)."""

  def __init__(self, loop: Loop, workdir: pathlib.Path | None, start: int, config=None):
    main = jax.process_index() == 0
    self.loop, self.workdir = loop, workdir
    on = workdir is not None and main
    tb = loop.tensorboard and loop.tracker == "tensorboard"
    self.writer = metrics.MetricsWriter(workdir, start, tb) if on else None
    self.tracker = tracking.Tracker()
    if on and (loop.tracker != "tensorboard" or tb):
      identity = workdir_lib.with_identity({})  # the seeds: another seed set is another run
      self.tracker = tracking.start(loop.tracker, workdir, config, identity)
    self.bar = None
    if loop.progress and main:
      from tqdm.auto import tqdm

      self.bar = tqdm(
        total=loop.num_steps,
        initial=start,
        unit="step",
        dynamic_ncols=True,
        desc=workdir.name if workdir is not None else "train",
      )

  def log(self, step: int, mean: dict[str, float], sps: float, rows: dict | None = None) -> None:
    """One metrics row, or with a seed axis one row per seed (``rows``: seed -> means)."""
    loop = self.loop
    if self.writer is not None and (step % loop.log_every == 0 or step == loop.num_steps):
      if rows is None:
        self.writer.write("metrics", step, {**mean, "steps_per_sec": sps})
      for seed, row in (rows or {}).items():
        self.writer.write("metrics", step, {**row, "steps_per_sec": sps}, seed=seed)
      self.tracker.scalars("metrics", step, {**mean, "steps_per_sec": sps})
      for seed, row in (rows or {}).items():
        self.tracker.scalars("metrics", step, row, seed=seed)
    if self.bar is not None:
      self.bar.update(step - self.bar.n)
      keys = [k for k in (loop.progress_keys or list(mean)[:3]) if k in mean]
      self.bar.set_postfix(**{k: f"{mean[k]:.3g}" for k in keys}, sps=f"{sps:.1f}")

  def log_eval(self, step: int, result: dict[str, float], rows: dict | None = None) -> None:
    if self.writer is not None:
      if rows is None:
        self.writer.write("eval", step, result)
      for seed, row in (rows or {}).items():
        self.writer.write("eval", step, row, seed=seed)
      self.tracker.scalars("eval", step, result)
      for seed, row in (rows or {}).items():
        self.tracker.scalars("eval", step, row, seed=seed)
    if self.bar is not None:
      mean = " (mean over seeds)" if rows else ""
      self.bar.write(
        f"[eval @ {step}{mean}] " + " ".join(f"{k}={v:.4g}" for k, v in result.items())
      )

  def video(self, step: int, frames) -> None:
    """``<workdir>/videos/eval_<step>.gif`` from ``[T, H, W, 3]`` frames, and the tracker's."""
    if self.writer is None or frames is None:
      return
    frames = videos.to_uint8(frames)
    path = videos.write_gif(videos.path_for(self.workdir, step), frames)
    self.tracker.video(step, videos.TAG, path, frames.shape, videos.FPS)

  def close(self, failed: bool = False) -> None:
    if self.bar is not None:
      self.bar.close()
    if self.writer is not None:
      self.writer.close()
    self.tracker.close(failed)


def _check_finite(step: int, mean: Mapping[str, float], rows: dict | None = None, resumed=None):
  bad = [k for k, v in mean.items() if not math.isfinite(v)]
  if bad and rows:
    seeds = [s for s, row in rows.items() if not all(math.isfinite(row[k]) for k in bad)]
    bad = [f"{', '.join(bad)} (seed {', '.join(map(str, seeds))})"]
  if bad:
    raise NonFiniteError(step, bad, resumed)


def _profiled(loop: Loop, workdir, index: int):
  if loop.profile and workdir is not None and index == 1:  # chunk 0 compiles; trace chunk 1
    return jax.profiler.trace(str(workdir / "profile"))
  return contextlib.nullcontext()


@dataclasses.dataclass
class _Run:
  """One ``train`` call: what its chunks share and what they accumulate for the summary."""

  loop: Loop
  eval_fn: Callable | None
  workdir: pathlib.Path | None
  data: PyTree
  key: jax.Array
  seeds: tuple[int, ...] | None
  seed_data: bool
  video_fn: Callable | None
  host: _Host | None = None
  mngr: Any = None  # the checkpoint manager (None without a workdir)
  saving: bool = False  # an asynchronous checkpoint write is under way
  compiled_before: int | None = None  # the chunk program's executables when train began
  groups: list[slice] | None = None  # sequential seed groups (None: all seeds in one chunk)
  groups_checked: bool = False
  step: int = 0
  mean: dict = dataclasses.field(default_factory=dict)
  rows: dict | None = None  # the last logged metrics, per seed
  evals: dict = dataclasses.field(default_factory=dict)
  evals_per_seed: dict = dataclasses.field(default_factory=dict)
  history: list = dataclasses.field(default_factory=list)
  steady: float = float("nan")  # steps/s over the chunks that did not compile


def _run_chunks(state, chunk_fn, run: _Run, start: int):
  """The loop proper: runs every chunk from ``start``, accumulating into ``run``; -> state.

  ``run.steady`` = steps per second over the chunks that did not compile (evaluation and
  checkpoints excluded), NaN when every chunk compiled; the average over the whole wall time is
  the caller's.
  """
  loop = run.loop
  run.step, steady_steps, steady_s = start, 0, 0.0
  first = None  # (per-step metrics, steps, seconds) of a one-step first chunk not yet logged
  ends = _chunk_ends(start, loop)
  max_len = _max_len(start, ends)
  if not run.groups_checked:
    # a resumed run's chunk is compiled (and its memory checked) here; a fresh run's already was
    run.groups = check_chunk_memory(
      chunk_fn, loop, state, run.data, run.key, start, run.seeds, run.seed_data
    )
  with checkpoint.sigterm_flag() as sigterm:
    for i, end in enumerate(ends):
      # the first chunk's program is compiled before it runs (check_chunk_memory), by this call
      # when the count went up since train() began: that chunk still counts as one that compiled
      compiled = run.compiled_before if i == 0 else _cache_size(chunk_fn)
      t0 = time.perf_counter()
      with _profiled(loop, run.workdir, i):
        # returns host metrics, so it blocks until the chunk is done
        state, per_step = _call_chunk(chunk_fn, state, run, run.step, end - run.step, max_len)
      _note_first_step()
      seconds = time.perf_counter() - t0
      if run.saving:
        # the previous chunk's checkpoint was written while this chunk trained; it is on disk
        # before anything else happens (an evaluation, a kill), so a killed run resumes from it
        checkpoint.wait(run.mngr)
        run.saving = False
      if compiled is not None and _cache_size(chunk_fn) == compiled:  # no compilation inside
        steady_steps, steady_s = steady_steps + end - run.step, steady_s + seconds
      if loop.history:
        run.history.append(per_step)
      n, logged = end - run.step, per_step
      if first is not None:  # the row after the one-step first chunk covers it too, as without it
        n, seconds = n + first[1], seconds + first[2]
        logged = {k: np.concatenate([first[0][k], v]) for k, v in per_step.items()}
        first = None
      elif loop.log_first_step and i == 0 and start == 0 and end == 1 and loop.log_every > 1:
        first = (per_step, 1, seconds)
      run.step = end
      save = run.mngr is not None and (
        (loop.ckpt_every and end % loop.ckpt_every == 0) or end == loop.num_steps or sigterm["set"]
      )
      _after_chunk(state, run, logged, n, n / seconds, start if i == 0 else 0, save, sigterm["set"])
      if sigterm["set"] and run.mngr is not None:  # (also one that arrived during the evaluation)
        if save:
          checkpoint.wait(run.mngr)
        else:
          checkpoint.save(run.mngr, end, state)
        run.saving = False
      if sigterm["set"] and end < loop.num_steps:
        raise Preempted(end)
  run.steady = steady_steps / steady_s if steady_s > 0 else float("nan")
  return state


def _after_chunk(
  state, run: _Run, logged: dict, n: int, sps: float, resumed: int, save=False, wait=False
) -> None:
  """Between chunks: the finiteness check, the checkpoint (``save``), metrics, evaluation and
  video at ``run.step``, the last ``n`` steps' metrics ``logged``."""
  loop, step, seeds = run.loop, run.step, run.seeds
  mean = {k: float(np.mean(v)) for k, v in logged.items()}
  if seeds is not None:
    run.rows = dict(zip(seeds, seeds_lib.per_seed_rows(logged, seeds)))
  if loop.stop_on_nonfinite:
    # the first chunk after a restore tests the checkpoint it started from
    suspect = (resumed, str(run.mngr.directory)) if resumed and run.mngr is not None else None
    _check_finite(step, mean, run.rows, suspect)
  if save:
    # asynchronous: the files are written during the evaluation and the next chunk (waited for
    # after it, see _run_chunks); a SIGTERM's checkpoint is on disk before the run exits
    checkpoint.save(run.mngr, step, state, wait=wait)
    run.saving = not wait
  if loop.units_per_step > 0:
    # every seed's environment steps count: the throughput of the whole program
    mean[loop.units_name] = sps * loop.units_per_step * (len(seeds) if seeds else 1)
  run.mean = mean
  run.host.log(step, mean, sps, run.rows)
  if run.eval_fn is not None and (
    (loop.eval_every and step % loop.eval_every == 0) or step == loop.num_steps
  ):
    run.evals[step], per_seed = _evaluate(run.eval_fn, state, step, seeds)
    if per_seed is not None:
      run.evals_per_seed[step] = per_seed
    run.host.log_eval(step, run.evals[step], per_seed)
  if run.video_fn is not None and run.host.writer is not None and _video_due(loop, step - n, step):
    run.host.video(step, run.video_fn(state, step))


def _video_due(loop: Loop, before: int, step: int) -> bool:
  """A video at the last step and at the first chunk end past each multiple of video_every."""
  every = loop.video_every
  return step == loop.num_steps or bool(every and step // every > before // every)


def _evaluate(eval_fn, state, step: int, seeds):
  """``eval_fn``'s result as floats; with a seed axis its arrays ``[seeds]`` become one row per
  seed and the means over seeds."""
  out = eval_fn(state, step)
  if seeds is None:
    return {k: float(v) for k, v in out.items()}, None
  arrays = {k: np.broadcast_to(np.asarray(v, np.float64), (len(seeds),)) for k, v in out.items()}
  rows = {s: {k: float(v[i]) for k, v in arrays.items()} for i, s in enumerate(seeds)}
  return {k: float(np.mean(v)) for k, v in arrays.items()}, rows


def _cache_size(fn) -> int | None:
  """Compiled variants of a chunk program so far (None for a callable that does not say)."""
  size = getattr(fn, "cache_size", None)
  return None if size is None else size()


def _stack(hist: list[dict], seeds=None) -> dict[str, np.ndarray]:
  if not hist:
    return {}
  shape = (-1,) if seeds is None else (-1, len(seeds))
  return {k: np.concatenate([np.asarray(h[k]).reshape(shape) for h in hist]) for k in hist[0]}


def _recorded_summary(workdir: pathlib.Path) -> dict:
  """A finished run's record: summary.json, else rebuilt from the last CSV rows."""
  path = workdir / "summary.json"
  if path.exists():
    return metrics.read_json(path)
  summary = {}
  for name, prefix in (("metrics", "train/"), ("eval", "eval/")):
    if (workdir / f"{name}.csv").exists():
      cols = read_csv(workdir / f"{name}.csv")
      summary.update(
        {
          f"{prefix}{k}": float(v[-1])
          for k, v in cols.items()
          if k not in ("step", "steps_per_sec") and len(v)
        }
      )
  return summary


def _summary(run: _Run, start: int, wall: float) -> dict:
  loop, step, workdir, seeds = run.loop, run.step, run.workdir, run.seeds
  if step == start and workdir is not None and start > 0:  # nothing ran: report the record
    return _recorded_summary(workdir)
  last_eval = run.evals[max(run.evals)] if run.evals else {}
  average = (step - start) / wall if wall > 0 else float("nan")
  units = loop.units_per_step * (len(seeds) if seeds else 1)
  summary = {
    "step": step,
    "num_steps": loop.num_steps,
    "wall_s": wall,
    # steady: chunks that did not compile, evaluation and checkpoints excluded (NaN if every chunk
    # compiled); average: the steps of this process over its whole wall time, all included.
    "steps_per_sec": run.steady,
    "steps_per_sec_average": average,
    "resumed_from": start,
  }
  if loop.units_per_step > 0:
    summary[loop.units_name] = run.steady * units
    summary[f"{loop.units_name}_average"] = average * units
  summary.update({f"train/{k}": v for k, v in run.mean.items()})
  summary.update({f"eval/{k}": v for k, v in last_eval.items()})
  if seeds:
    # the top-level train/ and eval/ figures are means over seeds; each seed's own are here
    rows, per_eval = run.rows or {}, run.evals_per_seed
    last = per_eval[max(per_eval)] if per_eval else {}
    summary["seeds"] = list(seeds)
    summary["per_seed"] = {
      str(seed): {
        **{f"train/{k}": v for k, v in rows.get(seed, {}).items()},
        **{f"eval/{k}": v for k, v in last.get(seed, {}).items()},
      }
      for seed in seeds
    }
  return summary


def _place(state, data, mesh, state_sharding, data_sharding):
  if mesh is not None and state_sharding is None:
    # Replicated by default: a restored checkpoint is then placed on the mesh (all processes),
    # not committed to one device.
    state_sharding = jax.tree.map(lambda _: NamedSharding(mesh, PartitionSpec()), state)
  if state_sharding is not None:
    state = jax.device_put(state, state_sharding)
  if data is not None and data_sharding is not None:
    data = jax.device_put(data, data_sharding)
  return state, data, state_sharding


def _resume(state, mngr, workdir: pathlib.Path, loop: Loop):
  """The newest checkpoint that verifies (:func:`checkpoint.restore_latest`: newer corrupt ones
  are set aside with one warning line), or ``state`` at step 0 when there is none."""
  restored = None if mngr is None else checkpoint.restore_latest(mngr, state, set_aside=True)
  if restored is None:
    return state, 0
  state, latest = restored
  logging.info("resumed from %s at step %d", workdir / CKPT_DIR, latest)
  if loop.progress and jax.process_index() == 0:
    print(f"[jaxlab] resuming from checkpoint at step {latest} in {workdir}", flush=True)
  return state, int(latest)


def train(
  state: PyTree,
  update_fn: UpdateFn,
  loop: Loop,
  *,
  key: jax.Array,
  workdir: str | os.PathLike | None = None,
  data: PyTree = None,
  sample_fn: Callable[[PyTree, jax.Array], PyTree] | None = None,
  eval_fn: Callable[[PyTree, int], Mapping[str, float]] | None = None,
  mesh: jax.sharding.Mesh | None = None,
  state_sharding: PyTree | None = None,
  data_sharding: PyTree | None = None,
  config: Any = None,
  seeds: tuple[int, ...] | None = None,
  seed_vmap: Callable | None = None,
  seed_data: bool = False,
  video_fn: Callable[[PyTree, int], Any] | None = None,
) -> tuple[PyTree, Result]:
  """Runs ``loop.num_steps`` updates in jitted chunks (module docstring) -> ``(state, Result)``.

  ``update_fn(state, batch, key) -> (state, metrics)``; ``sample_fn(data, key) -> batch`` runs
  inside jit (``None``: ``data`` is the batch); ``eval_fn(state, step) -> dict`` and
  ``video_fn(state, step) -> frames`` (:mod:`jaxlab.core.videos`) run on the host between chunks.
  ``config`` goes to ``config.json`` (a differing record or a locked workdir: ConfigError). The
  chunk is compiled before the workdir exists; one whose XLA memory analysis exceeds a device is
  refused (ConfigError naming ``loop.memory_field``) with nothing written.

  ``seeds`` (docs/seeds.md): state and key carry a leading seed axis, vmapped in one chunk by
  ``seed_vmap`` (default ``seeds.vmap``); data shared, or per seed with ``seed_data``; ``eval_fn``
  returns ``[seeds]`` arrays; one CSV row and TensorBoard run per seed, one checkpoint for all.
  Seeds that do not fit together train in sequential groups (one line says so)."""
  wd = None if workdir is None else pathlib.Path(workdir).absolute()
  t0 = time.perf_counter()
  seeds, seed_vmap = _check_seeds(seeds, state, key, seed_vmap, seed_data)
  state, data, state_sharding = _place(state, data, mesh, state_sharding, data_sharding)
  in_mesh = lambda: jax.set_mesh(mesh) if mesh is not None else contextlib.nullcontext()
  if loop.progress:
    provenance.announce(mesh)
  run = _Run(loop, eval_fn, wd, data, key, seeds, seed_data, video_fn)
  with in_mesh():
    chunk_fn = make_chunk_fn(update_fn, sample_fn, state_sharding, seed_vmap, seed_data)
    run.compiled_before = _cache_size(chunk_fn)
    if wd is None or not (wd / CKPT_DIR).exists():
      # A run without checkpoints starts at step 0: its chunk is compiled and its memory checked
      # before the workdir is created, so one that cannot fit leaves nothing behind.
      run.groups = check_chunk_memory(chunk_fn, loop, state, data, key, 0, seeds, seed_data)
      run.groups_checked = True
  with workdir_lib.session(wd, config) as wd:
    run.workdir = wd
    with _side_effects(run, state, config) as (state, start):
      run.groups_checked = run.groups_checked and start == 0
      with in_mesh():
        state = _run_chunks(state, chunk_fn, run, start)
    summary = _summary(run, start, time.perf_counter() - t0)
    if run.step > start or start == 0:  # a finished run re-run keeps its record untouched
      _finish(wd, loop, summary)
  history = _stack(run.history, seeds) if loop.history else None
  per_seed = {int(k): v for k, v in summary.get("per_seed", {}).items()}
  return state, Result(summary, run.evals, history, per_seed, run.evals_per_seed)


@contextlib.contextmanager
def _side_effects(run: _Run, state, config):
  """The run's checkpoint manager and host writers, closed however it ends -> ``(state, start)``
  (restored from the newest checkpoint, or as given at step 0)."""
  loop, wd = run.loop, run.workdir
  run.mngr = checkpoint.manager(wd, loop.keep, async_save=True) if wd is not None else None
  failed = True
  try:
    state, start = _resume(state, run.mngr, wd, loop)
    # A finished run re-run writes nothing (no new TensorBoard file): its record is reported.
    run.host = _Host(loop, wd if start < loop.num_steps else None, start, config)
    yield state, start
    failed = False
  finally:
    if run.host is not None:
      run.host.close(failed)
    if run.mngr is not None:
      run.mngr.close()


def _check_seeds(seeds, state, key, seed_vmap, seed_data) -> tuple[tuple[int, ...] | None, Any]:
  """The seed axis a run was given, checked against its state and keys (a caller's error), and
  the transform over it -> ``(seeds, seed_vmap)``."""
  if seeds is None:
    if seed_data:
      raise ValueError("seed_data=True needs seeds= (the data's leading axis is the seed axis)")
    return None, seed_vmap
  seeds = tuple(int(s) for s in seeds)
  lead = {int(np.shape(x)[0]) if np.ndim(x) else None for x in jax.tree.leaves((state, key))}
  if lead != {len(seeds)}:
    raise ValueError(
      f"a run over {len(seeds)} seeds needs a leading axis of {len(seeds)} on every leaf of its "
      f"state and key (seeds.stream / seeds.init); got leading sizes {sorted(map(str, lead))}"
    )
  return seeds, seed_vmap or seeds_lib.vmap


def write_summary(workdir: str | os.PathLike, summary: Mapping[str, Any]) -> pathlib.Path:
  """The one writer of ``<workdir>/summary.json`` (adds the provenance record when absent).

  ``train`` calls it when a run finishes; a program adds its own results (evaluation over seeds,
  environment versions) by passing the whole summary again. Only process 0 writes.
  """
  path = pathlib.Path(workdir) / "summary.json"
  if jax.process_index() == 0:
    write_json(
      path, {**dict(summary), "provenance": summary.get("provenance") or provenance.collect()}
    )
  return path


def _finish(wd: pathlib.Path | None, loop: Loop, summary: dict) -> None:
  if wd is None or jax.process_index() != 0:
    return
  summary.setdefault("provenance", provenance.collect())
  write_summary(wd, summary)
  if loop.plot:
    try:
      plots.learning_curves(wd)
    except Exception as e:  # a plot never fails a finished run
      logging.warning("plotting failed: %s", e)
