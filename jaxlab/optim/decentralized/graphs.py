"""Communication graphs and mixing matrices for decentralized SGD.

Everything here is host-side numpy (float64): matrices are built once per run and then handed to
the jitted loop. Which constructions are the paper's (arXiv 2511.19513)?  **None is confirmed**:
the paper's full text was not public. What is implemented are standard, mathematically checked
constructions (docs/decentralized.md, "Mixing matrices"):

* `metropolis` — Metropolis–Hastings doubly stochastic W, w_ij = 1/(1 + max(d_i, d_j))
  (standard; Xiao & Boyd 2004). Strategy (I).
* `lambda_metropolis` — λ-Metropolis–Hastings row-stochastic A,
  a_ij = min{1/(d_i+1), λ_j/(λ_i(d_j+1))}, reversible w.r.t. λ (standard MCMC construction;
  **a substitute** for the paper's unpublished λ-induced matrix). Strategy (II).
* `degree_average` — a_ij = 1/(d_i+1): λ-reversible exactly when λ ∝ degree+1 (the
  "degree-proportional" guideline the paper's summary mentions).
* `scaled_kernel` — a_ij = c·w_ij·λ_j (j≠i), another λ-reversible family (λ_i a_ij = c w_ij λ_i λ_j
  is symmetric).

Directed static exponential graphs (Ying et al. 2021, arXiv 2110.13363) have a doubly stochastic W
but admit no λ-reversible A; `exponential` therefore defaults to the symmetrised graph, and the
directed one is accepted only by Strategy (I).

Bad arguments raise :class:`jaxlab.core.errors.ConfigError` naming the argument.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxlab.core.errors import ConfigError, require

TOPOLOGIES = (
  "ring",
  "torus",
  "star",
  "complete",
  "hypercube",
  "exponential",
  "exponential_directed",
  "erdos_renyi",
  "path",
  "grid",
  "barabasi_albert",
)
# Degrees differ across nodes: degree λ is not uniform there, so (I) and (II) are different
# algorithms for every λ except the uniform one.
IRREGULAR = ("star", "erdos_renyi", "path", "grid", "barabasi_albert")


@dataclasses.dataclass(frozen=True, eq=False)
class Graph:
  """A graph on n nodes: ``adj[i, j]`` is True when node i receives from node j (no self-loops)."""

  name: str
  adj: np.ndarray

  @property
  def n(self) -> int:
    return int(self.adj.shape[0])

  @property
  def directed(self) -> bool:
    return not np.array_equal(self.adj, self.adj.T)

  @property
  def degrees(self) -> np.ndarray:
    """In-degrees (= degrees for undirected graphs)."""
    return self.adj.sum(1).astype(np.int64)

  def is_connected(self) -> bool:
    reach = np.eye(self.n, dtype=bool)
    sym = self.adj | self.adj.T
    for _ in range(self.n):
      new = reach | (reach.astype(np.int64) @ sym.astype(np.int64) > 0)
      if np.array_equal(new, reach):
        break
      reach = new
    return bool(reach.all())

  def __repr__(self):
    return f"Graph({self.name}, n={self.n}, edges={int(self.adj.sum())})"


def _from_edges(name: str, n: int, edges, directed: bool = False) -> Graph:
  adj = np.zeros((n, n), dtype=bool)
  for i, j in edges:
    if i != j:
      adj[i, j] = True
      if not directed:
        adj[j, i] = True
  return Graph(name, adj)


def ring(n: int) -> Graph:
  return _from_edges("ring", n, [(i, (i + 1) % n) for i in range(n)])


def _torus_rows(n: int) -> int:
  return max(d for d in range(1, math.isqrt(n) + 1) if n % d == 0)


def torus(n: int) -> Graph:
  """2-D torus on an r×c grid with r·c = n and r the largest divisor ≤ √n (r ≥ 2 required)."""
  r = _torus_rows(n)
  c = n // r
  require(r >= 2, "n", f"torus needs n = r*c with r, c >= 2; n={n} is prime or too small")
  idx = lambda a, b: (a % r) * c + (b % c)
  edges = [(idx(a, b), idx(a + 1, b)) for a in range(r) for b in range(c)]
  edges += [(idx(a, b), idx(a, b + 1)) for a in range(r) for b in range(c)]
  return _from_edges("torus", n, edges)


def star(n: int) -> Graph:
  return _from_edges("star", n, [(0, i) for i in range(1, n)])


def complete(n: int) -> Graph:
  return _from_edges("complete", n, [(i, j) for i in range(n) for j in range(i + 1, n)])


def hypercube(n: int) -> Graph:
  require(n >= 2 and not n & (n - 1), "n", f"hypercube needs n a power of two, got n={n}")
  k = n.bit_length() - 1
  return _from_edges("hypercube", n, [(i, i ^ (1 << b)) for i in range(n) for b in range(k)])


def exponential(n: int, directed: bool = False) -> Graph:
  """Static exponential graph: i receives from i − 2^k (mod n), k = 0..⌊log2(n−1)⌋ (Ying et al.
  2021).

  ``directed=False`` (default) symmetrises it so that a λ-reversible A exists.
  """
  tau = int(math.floor(math.log2(n - 1))) if n > 2 else 0
  edges = sorted({(i, (i - 2**k) % n) for i in range(n) for k in range(tau + 1)})
  return _from_edges(
    "exponential_directed" if directed else "exponential", n, edges, directed=directed
  )


def path(n: int) -> Graph:
  """A line 0 - 1 - ... - n-1 (end degrees 1, inner 2)."""
  return _from_edges("path", n, [(i, i + 1) for i in range(n - 1)])


def grid(n: int) -> Graph:
  """2-D grid without wrap-around on r×c = n, r the largest divisor ≤ √n (degrees 2, 3, 4)."""
  r = _torus_rows(n)
  c = n // r
  require(r >= 2, "n", f"grid needs n = r*c with r, c >= 2; n={n} is prime or too small")
  edges = [(a * c + b, (a + 1) * c + b) for a in range(r - 1) for b in range(c)]
  edges += [(a * c + b, a * c + b + 1) for a in range(r) for b in range(c - 1)]
  return _from_edges("grid", n, edges)


def barabasi_albert(n: int, m: int = 2, seed: int = 0) -> Graph:
  """Preferential attachment (Barabási & Albert 1999): start from a clique on m + 1 nodes; each new
  node links to m distinct earlier nodes drawn with probability ∝ degree. Heavy-tailed degrees."""
  rng = np.random.default_rng(seed)
  m = min(m, n - 1)
  edges = [(i, j) for i in range(m + 1) for j in range(i + 1, m + 1)]
  deg = np.zeros(n)
  for i, j in edges:
    deg[i] += 1
    deg[j] += 1
  for v in range(m + 1, n):
    targets = rng.choice(v, size=m, replace=False, p=deg[:v] / deg[:v].sum())
    for t in targets:
      edges.append((v, int(t)))
      deg[v] += 1
      deg[t] += 1
  return _from_edges("barabasi_albert", n, edges)


def erdos_renyi(n: int, p: float, seed: int = 0, max_tries: int = 1000) -> Graph:
  """G(n, p), resampled (same seed stream) until connected."""
  require(math.isfinite(p) and 0.0 < p <= 1.0, "p", f"erdos_renyi: must be in (0, 1], got {p}")
  g = _connected_er(n, p, seed, max_tries)
  require(
    g is not None, "p", f"erdos_renyi: no connected G({n}, {p}) in {max_tries} tries; raise p"
  )
  return g


def _connected_er(n, p, seed, max_tries=1000) -> Graph | None:
  rng = np.random.default_rng(seed)
  for _ in range(max_tries):
    upper = np.triu(rng.random((n, n)) < p, 1)
    g = Graph("erdos_renyi", upper | upper.T)
    if g.is_connected():
      return g
  return None


def _shape_error(name: str, n) -> str | None:
  if name not in TOPOLOGIES:
    return f"unknown topology {name!r}; allowed: {', '.join(TOPOLOGIES)}"
  if not isinstance(n, (int, np.integer)) or n < 2:
    return f"{name} needs an int n >= 2 nodes, got n={n!r}"
  if name == "hypercube" and n & (n - 1):
    return f"hypercube needs n a power of two, got n={n}"
  if name in ("torus", "grid") and _torus_rows(n) < 2:
    return f"{name} needs n = r*c with r, c >= 2; n={n} is prime or too small"
  return None


def topology_error(name: str, n: int, *, p: float = 0.25, seed: int = 0) -> str | None:
  """Why ``make_graph(name, n, p=p, seed=seed)`` cannot build its graph, or None when it can (a
  validation predicate for configs: hypercube needs 2^k nodes, torus a composite n, ...)."""
  msg = _shape_error(name, n)
  if msg is None and name == "erdos_renyi":
    if not (math.isfinite(p) and 0.0 < p <= 1.0):
      return f"erdos_renyi: p must be in (0, 1], got {p}"
    if _connected_er(n, p, seed) is None:
      return f"erdos_renyi: no connected G({n}, {p}) in 1000 tries; raise p"
  return msg


def make_graph(name: str, n: int, *, p: float = 0.25, seed: int = 0) -> Graph:
  """Builds a topology by name (one of `TOPOLOGIES`); see `topology_error` for what is allowed.
  Raises ConfigError("topology", ...) (or "p" for an Erdős–Rényi probability)."""
  msg = _shape_error(name, n)
  require(msg is None, "topology", msg)
  builders = {
    "ring": lambda: ring(n),
    "torus": lambda: torus(n),
    "star": lambda: star(n),
    "complete": lambda: complete(n),
    "hypercube": lambda: hypercube(n),
    "exponential": lambda: exponential(n),
    "exponential_directed": lambda: exponential(n, directed=True),
    "erdos_renyi": lambda: erdos_renyi(n, p, seed),
    "path": lambda: path(n),
    "grid": lambda: grid(n),
    "barabasi_albert": lambda: barabasi_albert(n, 2, seed),
  }
  return builders[name]()


# ------------------------------------------------------------------------------------------------
# Mixing matrices.


def _check_lam(lam, n: int) -> np.ndarray:
  lam = np.asarray(lam, dtype=np.float64)
  require(lam.shape == (n,), "lam", f"must have shape ({n},), got {lam.shape}")
  ok = np.all(np.isfinite(lam)) and np.all(lam > 0) and np.isclose(lam.sum(), 1.0, atol=1e-6)
  require(bool(ok), "lam", f"must be {n} finite positive weights summing to 1")
  return lam / lam.sum()


def metropolis(graph: Graph) -> np.ndarray:
  """Doubly stochastic W. Undirected: Metropolis weights. Directed regular graphs (the directed
  exponential graph): uniform 1/(d+1) over in-neighbours and self, which is doubly stochastic."""
  adj, d = graph.adj, graph.degrees
  if graph.directed:
    out_d = adj.sum(0)
    regular = np.all(d == d[0]) and np.all(out_d == d[0])
    msg = f"{graph.name}: directed graph is not regular; no simple doubly stochastic W"
    require(bool(regular), "graph", msg)
    return (adj + np.eye(graph.n)) / (d[0] + 1.0)
  w = np.where(adj, 1.0 / (1.0 + np.maximum(d[:, None], d[None, :])), 0.0)
  return w + np.diag(1.0 - w.sum(1))


def _require_undirected(graph: Graph, what: str):
  require(
    not graph.directed,
    "graph",
    f"{what}: graph {graph.name!r} is directed; a λ-reversible row-stochastic matrix needs an "
    "undirected graph (use topology 'exponential', the symmetrised one, for Strategy II)",
  )


def lambda_metropolis(graph: Graph, lam) -> np.ndarray:
  """λ-Metropolis–Hastings row-stochastic A with λᵀA = λᵀ and ΛA symmetric (standard substitute)."""
  _require_undirected(graph, "lambda_metropolis")
  lam = _check_lam(lam, graph.n)
  d = graph.degrees.astype(np.float64)
  prop = 1.0 / (d[:, None] + 1.0)  # proposal i -> j
  acc = (lam[None, :] / lam[:, None]) * (d[:, None] + 1.0) / (d[None, :] + 1.0)
  a = np.where(graph.adj, prop * np.minimum(1.0, acc), 0.0)
  return a + np.diag(np.maximum(1.0 - a.sum(1), 0.0))  # clip -1e-16 round-off


def degree_average(graph: Graph) -> np.ndarray:
  """a_ij = 1/(d_i+1) on N(i) ∪ {i}: λ-reversible for λ ∝ degree + 1 (see `degree_lambda`)."""
  _require_undirected(graph, "degree_average")
  return (graph.adj + np.eye(graph.n)) / (graph.degrees[:, None] + 1.0)


def scaled_kernel(graph: Graph, lam, weights: np.ndarray | None = None) -> np.ndarray:
  """a_ij = c·w_ij·λ_j on edges, c = 1/max_i Σ_j w_ij λ_j (largest c keeping a_ii ≥ 0)."""
  _require_undirected(graph, "scaled_kernel")
  lam = _check_lam(lam, graph.n)
  w = graph.adj.astype(np.float64) if weights is None else np.where(graph.adj, weights, 0.0)
  k = w * lam[None, :]
  a = k / k.sum(1).max()
  return a + np.diag(np.maximum(1.0 - a.sum(1), 0.0))  # clip -1e-16 round-off


def degree_lambda(graph: Graph) -> np.ndarray:
  """λ_i ∝ d_i + 1, the stationary distribution of `degree_average`."""
  lam = graph.degrees + 1.0
  return lam / lam.sum()


ROW_MIXINGS = ("lambda_metropolis", "degree_average", "scaled_kernel", "auto")


def row_stochastic(graph: Graph, lam, kind: str = "auto") -> np.ndarray:
  """λ-induced row-stochastic A. ``auto``: `degree_average` when it is already λ-reversible for this
  λ (λ ∝ degree+1), otherwise `lambda_metropolis`."""
  lam = _check_lam(lam, graph.n)
  if kind == "auto":
    kind = (
      "degree_average"
      if not graph.directed and np.allclose(lam, degree_lambda(graph), rtol=1e-9, atol=1e-12)
      else "lambda_metropolis"
    )
  if kind == "lambda_metropolis":
    return lambda_metropolis(graph, lam)
  if kind == "degree_average":
    a = degree_average(graph)
    require(
      np.allclose(lam @ a, lam, atol=1e-9),
      "row_kind",
      "degree_average is λ-reversible only for λ ∝ degree+1; use lambda_metropolis or "
      "scaled_kernel for this λ",
    )
    return a
  if kind == "scaled_kernel":
    return scaled_kernel(graph, lam)
  raise ConfigError("row_kind", f"got {kind!r}; allowed: {', '.join(ROW_MIXINGS)}")


# ------------------------------------------------------------------------------------------------
# Property checks: return the residuals so tests and the diagnostic can print them.


def doubly_stochastic_residuals(w: np.ndarray, graph: Graph) -> dict[str, float]:
  n = graph.n
  off_pattern = ~(graph.adj | np.eye(n, dtype=bool))
  return {
    "row_sum": float(np.abs(w.sum(1) - 1).max()),
    "col_sum": float(np.abs(w.sum(0) - 1).max()),
    "min_entry": float(w.min()),
    "off_graph": float(np.abs(w[off_pattern]).max(initial=0.0)),
  }


def row_stochastic_residuals(a: np.ndarray, graph: Graph, lam) -> dict[str, float]:
  lam = np.asarray(lam, dtype=np.float64)
  n = graph.n
  off_pattern = ~(graph.adj | np.eye(n, dtype=bool))
  la = lam[:, None] * a
  return {
    "row_sum": float(np.abs(a.sum(1) - 1).max()),
    "stationary": float(np.abs(lam @ a - lam).max()),  # λᵀA = λᵀ
    "reversible": float(np.abs(la - la.T).max()),  # ΛA symmetric
    "min_entry": float(a.min()),
    "off_graph": float(np.abs(a[off_pattern]).max(initial=0.0)),
  }


def check_mixing(b: np.ndarray, graph: Graph, lam=None, atol: float = 1e-10) -> None:
  """Raises ConfigError("mixing", ...) naming the violated property (doubly stochastic if lam is
  None, else λ-reversible row-stochastic)."""
  res = (
    doubly_stochastic_residuals(b, graph)
    if lam is None
    else row_stochastic_residuals(b, graph, lam)
  )
  bad = {k: v for k, v in res.items() if (v < -atol if k == "min_entry" else v > atol)}
  if bad:
    kind = "doubly stochastic" if lam is None else "λ-reversible row-stochastic"
    raise ConfigError("mixing", f"is not {kind}: {bad}")
