"""LM experiments on the core runtime: train, generate, distill (HPD vs baselines), capacity probe.

Commands (from the repository root; presets: experiments/configs/lm.py, fields:
jaxlab.lm.config.get_config):

  python -m experiments.lm                                          # tiny, BPE on embedded text
  python -m experiments.lm --mode=generate                          # sample from its checkpoint
  python -m experiments.lm --config.text=path/to/folder             # every .txt file in a folder
  python -m experiments.lm --config.tokenizer=path/to/tokenizer.json  # a saved tokenizer
  python -m experiments.lm --config.text=synthetic --config.vocab_size=256  # Markov corpus
  python -m experiments.lm --config=experiments/configs/lm.py:small  # ~126M params (GPU)
  XLA_FLAGS=--xla_force_host_platform_device_count=8 JAX_PLATFORMS=cpu \\
    python -m experiments.lm --mesh=data:2,fsdp:2,context:2 --config.attention=ring
  python -m experiments.lm --mode=distill --config.distill.losses=nll,hpd,forward_kl
  python -m experiments.lm --mode=capacity
  python -m experiments.lm --seeds=3        # seeds 0-2 vmapped in one program (train, one device)
  python -m experiments.lm --mode=capacity --seeds=3  # every probe over seeds 0-2, vmapped

The default workdir is runs/lm/<mode>/<config.name> (--mode=generate reads runs/lm/train/<name>);
re-running with the same --workdir resumes from its latest checkpoint, data position included.
Text is tokenized once into shards under <workdir>/data (or --config.data_dir). Each mode is a
library function of jaxlab.lm.modes (train, generate, distill, capacity), callable from Python.
"""

from __future__ import annotations

from absl import flags

from jaxlab.core import experiment
from jaxlab.core import workdir as workdir_lib
from jaxlab.core.errors import ConfigError
from jaxlab.lm import config as lm_config
from jaxlab.lm import modes

_CONFIG = experiment.define_config_file(experiment.config_path(__file__))
flags.DEFINE_enum(
  "mode",
  "train",
  lm_config.MODES,
  "train: LM training; generate: sample text from a train run's checkpoint; distill: a "
  "teacher, then students (HPD vs baselines); capacity: bits/parameter probe on random bitstrings.",
)
FLAGS = flags.FLAGS


UNUSED_FLAGS = ("videos",)  # no evaluation video (also out of --help)


def main(argv):
  del argv
  c, mode = _CONFIG.value, FLAGS.mode
  lm_config.validate_config(c, mode)  # the config's own fields first, before the shared flags
  if mode == "capacity":  # in-memory single-device probes: no loop or mesh flags apply
    for name in ("mesh", "steps", "log_every", "ckpt_every", "keep", "profile"):
      if FLAGS[name].present:
        raise ConfigError(name, "is not used by --mode=capacity (see config.capacity.*)")
  run = experiment.common(
    "lm",
    default_steps=c.steps,
    variant=("train" if mode == "generate" else mode, c.name),
    mesh_axes=("data", "fsdp", "context", "tensor"),
    seeds=True,
    unused=UNUSED_FLAGS,
  )
  if len(run.seeds) > 1:  # train and capacity vmap seeds, on one device
    experiment.require(
      mode in modes.SEEDED_MODES, "seeds", f"--mode={mode} runs one seed; use --seed"
    )
    experiment.require(
      run.mesh is None,
      "seeds",
      "several seeds train vmapped on one device; drop --mesh (or run one seed per mesh)",
    )
  setup = modes.prepare(c, mode, run.workdir, run.mesh)  # every check, before anything is written
  with workdir_lib.identity(run.seeds):  # another seed never continues or replaces this run
    modes.run(mode, c, run.workdir, run.loop(), run.seed, run.mesh, setup, run.seeds)


if __name__ == "__main__":
  experiment.run(main)
