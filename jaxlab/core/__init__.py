"""jaxlab's foundation, one concern per module.

- ``mesh``: named axes and ``make_mesh("data:2,fsdp:-1")``; ``sharding``: logical-axis rules.
- ``distributed``: multi-host start (TPU pods, SLURM, explicit coordinator).
- ``train_state``: the one ``TrainState`` (optimizer step, EMA/target params, module-bound call).
- ``runtime``: the chunked training loop; ``checkpoint`` (orbax, resume, SIGTERM), ``metrics``
  (CSV, TensorBoard, JSON), ``plots`` (every PNG), ``workdir`` (lock, config check),
  ``provenance`` (commit, versions, devices).
- ``errors``: ``ConfigError``, the typed validation error every library raises.
- ``stats``: a study's statistics (IQM and bootstrap intervals by rliable; paired t, Wilcoxon,
  TOST and non-inferiority tests by scipy) and its verdicts in words.

``experiment`` (absl flags) is not imported here so that notebooks can use the core without flags;
nor is ``stats`` (``from jaxlab.core import stats`` loads it), which no training run needs.
"""

from jaxlab.core import (
  checkpoint,
  distributed,
  errors,
  mesh,
  metrics,
  plots,
  provenance,
  runtime,
  sharding,
  train_state,
  workdir,
)
from jaxlab.core.errors import ConfigError
from jaxlab.core.mesh import make_mesh
from jaxlab.core.train_state import TrainState

__all__ = [
  "ConfigError",
  "TrainState",
  "checkpoint",
  "distributed",
  "errors",
  "make_mesh",
  "mesh",
  "metrics",
  "plots",
  "provenance",
  "runtime",
  "sharding",
  "train_state",
  "workdir",
]
