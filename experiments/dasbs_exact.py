"""The exact Schrödinger-bridge controller of Discrete ASBS (constant source, Ising, h = 0) on
lattices up to 4 x 4, and a trained DASBS controller measured against it.

  # the sampler's discretisation floor: tau-leaping with the exact controller (5 s on 2 busy cores)
  python -m experiments.dasbs_exact
  # plus a trained run (its config.json sets L, beta, gamma, alpha and the tau-leaping steps;
  # 85 s on 2 busy cores, mostly the trained network on 8192 paths)
  python -m experiments.dasbs_exact --workdir=runs/dasbs/ising/L4_beta0.4407

Always printed: the signed energy error per spin (sampled mean - exact Ferdinand–Fisher U, + = too
disordered) of `--steps` tau-leaps with the exact controller
(`exact.constant_source_sb_log_phi`), mean and standard error over `--seeds` seeds of `--samples`
paths. The exact controller has no training error, so this is what the sampler cannot go below.

With --workdir (a run of `python -m experiments.dasbs`; its latest checkpoint's EMA controller),
three comparisons with the exact controller:
  * t = 0 at the ground states: the mean over sites of the rate ratio of leaving them;
  * along the trained sampler's own tau-leaping paths (one per sample), at t = 0, 0.1, ..., 0.9
    and the last grid time: summed leave rates, trained / exact, split by the site's spin. A site
    whose spin has the sign of the magnetisation m flips towards disorder (|m| falls); the others
    (every site when m = 0) flip towards order;
  * the ctrl-TM regression target at t = 0 with the exact corrector, exp(log phi_1 ratio of the
    jump at x1 with the same Z_2 increment) averaged over sites and the pairs (x0, x1), for the
    trained sampler's own pairs and for the exact controller's (seed 0). Fitted exactly on the
    sampler's own pairs (its replay buffer), the controller's site-mean ground-state leave rate
    at t = 0 would be the first of these; the exact SB's is about the second.

--steps is the shared flag reused as the number of tau-leaping steps (default 50). Nothing is
written unless --out=<path.json> is given; an --out that already holds this result is left as it
is, one that holds anything else is refused (choose a new --out), and while one run computes for an
--out, another writing into the same folder is refused (exit 2). The same from Python:
`jaxlab.sampling.exact_check` (docs/dasbs.md, "Use from Python").
"""

from __future__ import annotations

import pathlib

from absl import flags

from jaxlab.core import experiment, provenance
from jaxlab.core import seeds as seeds_lib
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import require
from jaxlab.core.metrics import write_json
from jaxlab.sampling import exact_check

_DEFAULTS = exact_check.get_config()  # the defaults of the flags below
flags.DEFINE_integer("L", _DEFAULTS.L, "Lattice side (3 or 4: 2^(L*L) states are enumerated).")
flags.DEFINE_float("beta", _DEFAULTS.beta, "Inverse temperature.")
flags.DEFINE_float("gamma", _DEFAULTS.gamma, "Reference rate scale of the log-linear schedule.")
flags.DEFINE_float("alpha", _DEFAULTS.alpha, "Log-linear offset: gamma(t) = gamma / (alpha + t).")
flags.DEFINE_integer("samples", _DEFAULTS.samples, "Paths per seed (and for the trained sampler).")
flags.DEFINE_string("out", None, "Optional JSON file for every printed number.")
FLAGS = flags.FLAGS

CONFIG_NOTE = (
  "the settings are the flags above (the fields of jaxlab.sampling.exact_check.get_config()); "
  "with --workdir, L, beta, gamma, alpha and --steps come from that run's config.json."
)
UNUSED_FLAGS = ("log_every", "ckpt_every", "keep", "mesh", "profile", "tracker", "videos")
_FROM_RUN = ("L", "beta", "gamma", "alpha", "steps")  # with --workdir: from its config.json


def _settings():
  """The flags as `exact_check.get_config()` fields, validated (errors name the flag)."""
  for name in UNUSED_FLAGS:
    require(not FLAGS[name].present, name, "is not used by dasbs_exact; remove it")
  if FLAGS.workdir:
    for name in _FROM_RUN:
      require(
        not FLAGS[name].present, name, "is taken from the --workdir run's config.json; remove it"
      )
  require(FLAGS.seed >= 0, "seed", f"must be >= 0, got {FLAGS.seed}")
  c = exact_check.get_config()
  c.update({k: FLAGS[k].value for k in ("L", "beta", "gamma", "alpha", "samples")})
  # the shared --seeds: the tau-leaping seeds --seed .. --seed+N-1 of the exact controller
  seeds = seeds_lib.parse_seeds(FLAGS.seeds or str(_DEFAULTS.seeds), FLAGS.seed)
  require(
    seeds == tuple(range(seeds[0], seeds[0] + len(seeds))),
    "seeds",
    "takes a count here (seeds --seed .. --seed+N-1), not a list",
  )
  c.seeds = len(seeds)
  c.steps = c.steps if FLAGS.steps is None else FLAGS.steps
  if FLAGS.out:
    out = pathlib.Path(FLAGS.out)
    require(out.parent.is_dir(), "out", f"the directory of {out} does not exist")
    require(not out.is_dir(), "out", f"{out} is a directory")
    workdir_lib.check_writable(out.parent, "out")
  return exact_check.validate_config(c)


def main(argv):
  del argv
  c = _settings()
  workdir = pathlib.Path(FLAGS.workdir) if FLAGS.workdir else None
  spec = exact_check.run_spec(workdir) if workdir else exact_check.flag_spec(c)
  ctrl, step = exact_check.restore_controller(workdir, spec) if workdir else (None, None)
  tgt, sched = spec.target, spec.sched
  print(
    f"[dasbs_exact] {tgt.kind} L={tgt.L} beta={tgt.beta:g} noise={sched.kind} "
    f"gamma={sched.gamma:g} alpha={sched.alpha:g} steps={spec.sampling_steps} "
    f"({f'from {workdir}/config.json' if workdir else 'from the flags'})",
    flush=True,
  )
  kw = {"samples": c.samples, "seeds": c.seeds, "seed": FLAGS.seed}
  record = exact_check.settings(spec, workdir=workdir, step=step, **kw)
  if not FLAGS.out:
    _check(spec, ctrl, step, record, kw)
    return
  out = pathlib.Path(FLAGS.out)
  # one writer of --out's folder from here to the rename: a second run started alongside is
  # refused instead of one result silently replacing the other
  with workdir_lib.output_lock(out.parent, "out"):
    if exact_check.previous_result(out, record) is not None:
      print(f"[dasbs_exact] {out} holds this result; nothing rewritten")
      return
    write_json(out, _check(spec, ctrl, step, record, kw))  # a tmp file, then a rename
  print(f"[dasbs_exact] -> {out}")


def _check(spec, ctrl, step, record: dict, kw: dict) -> dict:
  """The check itself; returns the result with its settings (and the --workdir it read)."""
  log = lambda line: print(line, flush=True)  # noqa: E731
  provenance.announce()
  result = exact_check.run(spec, ctrl=ctrl, step=step, log=log, **kw)
  result = {**result, "settings": record}
  if FLAGS.workdir:
    result = {**result, "workdir": str(pathlib.Path(FLAGS.workdir))}
  return result


if __name__ == "__main__":
  experiment.run(main)
