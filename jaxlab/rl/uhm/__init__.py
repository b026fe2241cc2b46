"""UHM (universal horizon models, arXiv 2605.15603): offline RL on OGBench, and its ablations.

``from jaxlab.rl import uhm`` gives the agent (:mod:`jaxlab.rl.uhm.agent`: ``get_config``,
``create``, ``update``, ``make_sample_fn``, ``policy``) and the OGBench task workflow that
``experiments.uhm`` runs (:mod:`jaxlab.rl.uhm.task`: ``load_task``, ``train``, ``evaluate_seeds``,
``write_report``, ``evaluate_checkpoint``); the parts are submodules: ``horizon`` (the n-step flow
model), ``networks``, ``offline_data`` (OGBench sets as device arrays), ``diagnostics`` (held-out
horizon-model and critic errors). Its studies are ``uhm/pilot`` and ``uhm/size`` of
:mod:`jaxlab.studies`. See docs/uhm.md.
"""

from jaxlab.rl.uhm.agent import *  # noqa: F403
from jaxlab.rl.uhm.task import *  # noqa: F403
