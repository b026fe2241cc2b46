"""Training seeds as a leading batch axis: many seeds, one compiled program.

A run with ``seeds=(0, 1, 2)`` stacks one state per seed on a leading axis and
:func:`jaxlab.core.runtime.train` runs ``update`` under ``jax.vmap`` inside its one compiled chunk,
the way PureJaxRL vmaps ``train`` over seeds. Seed ``k`` of such a run draws exactly the keys the
run of seed ``k`` alone draws (every stream is ``fold_in(key(seed), i)``), so its numbers equal the
solo run's up to the floating-point order of batched kernels (tests/test_core_seeds.py)::

    seeds = parse_seeds("4", base=0)                    # (0, 1, 2, 3); "0,3,7" -> (0, 3, 7)
    keys = seed_keys(seeds)                             # uint32[4, 2]
    states = jax.jit(jax.vmap(init))(stream(keys, 0))   # one state per seed
    states, result = runtime.train(states, update, loop, key=stream(keys, 1), seeds=seeds)
    result.per_seed[3]["train/loss"]; one_state = take(states, 3 - seeds[0])
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from jaxlab.core.errors import ConfigError

MAX_SEEDS = 4096  # far above what fits one program; a typo such as --seeds=100000 is refused
MAX_SEED = 2**31 - 1  # jax.random.key takes a signed 32-bit seed on every backend


def parse_seeds(value: str | int | Sequence[int] | None, base: int = 0, field: str = "seeds"):
  """``--seeds``: a count ``N`` (seeds ``base`` … ``base + N - 1``) or a comma list of seeds.

  ``None`` gives ``(base,)``. Raises :class:`ConfigError` naming ``field`` for anything else:
  duplicates, negative or too large seeds, more than :data:`MAX_SEEDS`.
  """
  if value is None:
    return (int(base),)
  if isinstance(value, int):
    items: list[Any] = [value]
    count = True
  elif isinstance(value, str):
    items = [v.strip() for v in value.split(",") if v.strip()]
    count = len(items) == 1 and "," not in value
  else:
    items, count = list(value), False
  if not items:
    raise ConfigError(field, "got nothing; a count (--seeds=5) or a list (--seeds=0,3,7)")
  try:
    numbers = [int(v) for v in items]
  except (TypeError, ValueError):
    raise ConfigError(
      field, f"got {value!r}; a count (--seeds=5) or a comma list of integers (--seeds=0,3,7)"
    ) from None
  if count:
    n = numbers[0]
    if not 1 <= n <= MAX_SEEDS:
      raise ConfigError(field, f"a count of seeds must be in [1, {MAX_SEEDS}], got {n}")
    numbers = list(range(base, base + n))
  if len(numbers) > MAX_SEEDS:
    raise ConfigError(field, f"at most {MAX_SEEDS} seeds, got {len(numbers)}")
  bad = [s for s in numbers if not 0 <= s <= MAX_SEED]
  if bad:
    raise ConfigError(field, f"seeds must be in [0, {MAX_SEED}], got {bad[0]}")
  if len(set(numbers)) != len(numbers):
    raise ConfigError(field, f"repeats a seed: {','.join(map(str, numbers))}")
  return tuple(numbers)


def seed_keys(seeds: Sequence[int]) -> jax.Array:
  """Raw keys ``uint32[len(seeds), 2]``: row ``i`` is ``key_data(key(seeds[i]))``, what a program
  run with ``--seed=seeds[i]`` starts from."""
  return jnp.stack([jax.random.key_data(jax.random.key(int(s))) for s in seeds])


def stream(keys: jax.Array, i: int) -> jax.Array:
  """``fold_in(key, i)`` of every seed's raw key (the key stream ``i`` of each seed)."""
  return jax.vmap(lambda k: jax.random.fold_in(k, i))(keys)


def take(tree: Any, i: int) -> Any:
  """Seed ``i`` (a position on the seed axis) of a stacked pytree."""
  return jax.tree.map(lambda x: x[i], tree)


def stack(trees: Sequence[Any]) -> Any:
  """Pytrees of equal structure stacked on a new leading seed axis."""
  return jax.tree.map(lambda *xs: jnp.stack(xs), *trees)


def init(fn: Callable[[jax.Array], Any], keys: jax.Array) -> Any:
  """``fn(key)`` for every seed's key as ONE compiled program (a stacked pytree)."""
  return jax.jit(jax.vmap(fn))(keys)


def vmap(fn: Callable) -> Callable:
  """The default seed transform of the runtime's chunk: ``fn(state, key)`` over the seed axis.

  A method whose update branches on the step (``lax.cond`` on ``state.step``) passes its own
  transform that keeps the step unbatched, so the branch stays a branch (vmap turns a cond on a
  batched predicate into both branches and a select); see ``jaxlab.rl.uhm.agent.seed_vmap``.
  """
  return jax.vmap(fn)


def per_seed_rows(per_step: dict[str, np.ndarray], seeds: Sequence[int]) -> list[dict]:
  """Means over a chunk's steps for each seed: ``per_step[k]`` is ``[steps, seeds, ...]``."""
  out = [{} for _ in seeds]
  for k, v in per_step.items():
    v = np.asarray(v)
    means = v.reshape(v.shape[0], len(seeds), -1).mean(axis=(0, 2))
    for i in range(len(seeds)):
      out[i][k] = float(means[i])
  return out
