"""DiCode ("Dreaming in Code", Mitsides, Faldor, Cully; arXiv 2602.08194): model-written Craftax
task programs, a multitask environment over them, and a learnability-driven curriculum.

``get_config()`` holds the defaults (the CPU budget); ``runner.run(workdir, config, curriculum,
runner.proposer_settings("offline"))`` is a whole run of ``python -m experiments.dicode``.
See docs/dicode.md.
"""

from jaxlab.rl.dicode.config import get_config, validate_config  # noqa: F401
