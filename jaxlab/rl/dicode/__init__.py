"""DiCode ("Dreaming in Code", Mitsides, Faldor, Cully; arXiv 2602.08194): model-written Craftax
task programs, a multitask environment over them, and a learnability-driven curriculum.

``get_config()`` holds the defaults (the CPU budget); ``runner.run(workdir, config, curriculum,
runner.proposer_settings("offline"))`` is a whole run of ``python -m experiments.dicode``.
Modules: ``runner`` (a whole run), ``loop`` (the session loop), ``training`` (the agent and its
one compiled program: PPO's gated update), ``counters`` (per-task episode counts), ``pools``
(starting worlds and the session environment), ``evolution`` (admission, evolution rounds),
``reporting`` (held-out evaluation, summary, comparison), and the task side: ``task``, ``world``,
``multitask``, ``sandbox``, ``proposers``, ``archive``, ``curriculum``, ``scoring``, ``seeds``.
See docs/dicode.md.
"""

from jaxlab.rl.dicode.config import get_config, validate_config

__all__ = ["get_config", "validate_config"]
