"""ITC's study (docs/itc.md): decoders on a fixed world model (`jaxlab.rl.itc.decoder_eval`).

An arm is a decoder. Per world-model seed, 16 Craftax-Classic environments play 256 random steps,
the `cpu` preset's world model trains 250 steps on them, and every decoder decodes its open-loop
imagination of the same 16 held-out windows of 6 steps with the same random key (common random
numbers: ``itc`` corrects the very samples ``sample`` returns), all in one compiled program, once
per seed: the arms share the result through ``<workdir>/../world_models``. Metrics per horizon
h = 1 .. 6 against the real tokens: ``token_acc/h<h>``, ``count_error/h<h>`` (map token
histogram) and ``flicker/h<h>`` (a change undone one step later; h = 1 .. 5), and the real
trajectories' own ``real_flicker/h<h>``.
"""

from __future__ import annotations

import dataclasses
import functools
import pathlib

from jaxlab.core import stats
from jaxlab.studies import runner
from jaxlab.studies.spec import Study, with_fields

CLAIM = (
  "Decoding a token world model's imagined frames by identifiable token correspondence (ITC) "
  "instead of independent sampling keeps objects consistent: fewer objects appear, vanish or "
  "flicker (Kim, Sun, Kim, Park, Song, Identifiable Token Correspondence for World Models, "
  "arXiv 2605.16457)."
)
ARMS = ("sample", "argmax", "itc", "itc_hungarian")
HORIZON = 6
# The `cpu` preset of experiments/configs/itc.py (the `itc` arm at tiny sizes): its world model,
# tokenizer and ITC costs are what the decoders run on; its agent fields are recorded, not used.
CPU = {
  "burn_in": 2,
  "decode": "itc",
  "env_steps": 50_000,
  "horizon": 6,
  "imag_batch": 8,
  "imag_minibatches": 2,
  "imag_updates": 1,
  "picture_steps": 6,
  "policy.channels": (8, 16, 16),
  "policy.embed": 32,
  "policy.head_hidden": 64,
  "policy.hidden": 32,
  "ppo.epochs": 2,
  "ppo.minibatches": 2,
  "ppo.num_envs": 20,
  "ppo.num_steps": 50,
  "ppo.reset_ratio": 4,
  "replay_size": 4000,
  "tok_passes": 2,
  "tokenizer.codebook_size": 512,
  "tokenizer.max_candidates": 256,
  "warmup_steps": 5000,
  "wm.absolute_embedding": True,
  "wm.embed": 48,
  "wm.heads": 4,
  "wm.layers": 1,
  "wm.max_blocks": 8,
  "wm.rope": "spatiotemporal",
  "wm_batch": 4,
  "wm_updates": 10,
}


def setting():
  from jaxlab.rl.itc import decoder_eval

  return decoder_eval.Setting(horizon=HORIZON)


def config():
  from jaxlab.rl import itc

  return with_fields(itc.get_config(), CPU)


def flat(res: dict, decoder: str) -> dict:
  """One decoder's per-horizon lists (and the real flicker) as flat metrics; NaN left out."""
  out = {}
  for k, v in [*res[decoder].items(), *(("real_" + k, v) for k, v in res["real"].items())]:
    out |= {f"{k}/h{h}": x for h, x in enumerate(v, 1) if x is not None}
  return {**out, "codebook_size": res["codebook_size"], "world_model": res["world_model"]}


def cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """The decoder ``arm`` on each seed's world model. The first arm to reach a seed evaluates every
  decoder there in one compiled program and keeps the result beside the world model
  (``<workdir>/../world_models/seed_<s>/decoders.json``); the other arms read it.

  The seeds run one after another through the same compiled stages (`decoder_eval.Evaluator`),
  not vmapped: this study trains world models on random play, not the Dyna agent that
  ``experiments.itc --seeds`` vmaps, and each seed's world model is kept on disk as it finishes."""
  from jaxlab.rl.itc import decoder_eval

  c, s = config(), setting()
  make = functools.partial(decoder_eval.Evaluator, c, s, ARMS)  # (shared folder) -> evaluator
  return _shared_cell(arm, seeds, workdir, c, s, "decoders.json", make, flat)


def _shared_cell(arm, seeds, workdir, c, s, name: str, make_evaluator, flatten) -> dict[int, dict]:
  """Per seed, ``flatten(result, arm)`` of the result every decoder shares, kept as
  ``<workdir>/../world_models/seed_<s>/<name>``: the first arm to reach a seed runs the evaluator
  (built once, at the first seed not evaluated yet: its compiles take minutes) and writes it."""
  from jaxlab.core import metrics

  workdir = pathlib.Path(workdir)
  shared = workdir.parent / "world_models"
  rec = {"itc": c.to_dict(), "setting": dataclasses.asdict(s), "decoder": arm}
  evaluator = []

  def compute(seed):
    path = shared / f"seed_{seed}" / name
    if not path.exists():
      if not evaluator:
        evaluator.append(make_evaluator(shared))
      res = evaluator[0].seed(seed)
      path.parent.mkdir(parents=True, exist_ok=True)
      metrics.write_json(path, res)
    return flatten(metrics.read_json(path), arm)

  return {
    seed: runner.once(workdir / f"seed{seed}", {**rec, "seed": seed}, lambda q=seed: compute(q))
    for seed in seeds
  }


def _h(metric: str, horizons=(1, HORIZON)) -> tuple[str, ...]:
  return tuple(f"{metric}/h{h}" for h in horizons)


STUDIES = (
  Study(
    name="itc/decoders",
    claim=CLAIM,
    arms=ARMS,
    control="sample",
    pairs=(("itc", "sample"), ("itc_hungarian", "sample")),
    seeds=(0, 1, 2),
    tuning_seeds=(),
    budget={"wm_updates": 250, "random_play_steps": 16 * 256, "horizon": HORIZON},
    tests=(
      stats.Test("superiority", "token_acc/h1"),
      stats.Test("superiority", "flicker/h1", higher_is_better=False),
      stats.Test("superiority", "count_error/h1", higher_is_better=False),
    ),
    metrics=(
      *_h("token_acc"),
      *_h("count_error"),
      *_h("flicker", (1, HORIZON - 1)),
    ),
    cell=cell,
    note=(
      "Seeds are world-model seeds (random play, tokenizer growth and world-model training); "
      "every decoder runs on the same world model of a seed, the same 16 held-out windows and the "
      "same random key, so arm - control is paired. Horizons 1 and 6 here (flicker: 1 and 5; "
      "it is undefined at the last); every horizon is in the raw files, with the real "
      "trajectories' own flicker (`real_flicker/h<h>`, the same for every decoder). Settings: "
      "the `cpu` preset's world model (width 48, 1 layer, 8 frames of context, codebook <= "
      "512), 250 world-model updates on 16 x 256 random-play steps; nothing tuned."
    ),
  ),
)


# --- itc/objects: object-level consistency of long rollouts (`jaxlab.rl.itc.objects`) ---

OBJ_ARMS = ("sample", "argmax", "itc", "itc_authors", "keep_prev")
OBJ_HORIZON = 20
OBJ_UPDATES = 1000
OBJ_CLASSES = ("player", "cow", "zombie", "tree", "water", "stone")


def obj_setting():
  from jaxlab.rl.itc import objects

  return objects.Setting(horizon=OBJ_HORIZON, wm_updates=OBJ_UPDATES)


def obj_flat(res: dict, decoder: str) -> dict:
  """One decoder's rates per horizon as flat metrics (``objects/<event>/h<h>``, ``mobile/...``,
  ``class/<name>/<event>/h<h>``, ``token_acc/h<h>``) and the world model's record; a rate
  without real objects is left out."""
  r, out = res[decoder], {}
  groups = {"objects": r["objects"], "mobile": r["mobile"]}
  groups |= {f"class/{k}": v for k, v in r["class"].items()}
  for g, ev in groups.items():
    for e, v in ev.items():
      out |= {f"{g}/{e}/h{h}": x for h, x in enumerate(v, 1) if x is not None}
  out |= {f"token_acc/h{h}": x for h, x in enumerate(r["token_acc"], 1)}
  wm = res["world_model"]
  return {
    **out,
    "real_objects": r["real_objects"],
    "wm_heldout_token_acc": wm["heldout_token_acc"],
    "code_class_purity": wm["code_class_purity"],
    "codebook_size": wm["codebook_size"],
    "windows": wm["windows"],
    "world_model": wm,
    "real_tokens_objects_error": res["real_tokens"]["objects"]["error"],
  }


def obj_cell(arm: str, seeds: tuple[int, ...], workdir: pathlib.Path) -> dict[int, dict]:
  """The decoder ``arm`` on each seed's world model; as :func:`cell`, the first arm to reach a
  seed runs every decoder there (one `objects.Evaluator`, compiled once for all seeds) and keeps
  the result in ``<workdir>/../world_models/seed_<s>/objects.json``."""
  from jaxlab.rl.itc import objects

  c, s = config(), obj_setting()
  make = functools.partial(objects.Evaluator, c, s)
  return _shared_cell(arm, seeds, workdir, c, s, "objects.json", make, obj_flat)


_OBJ_PAIRS = (("itc", "sample"), ("itc", "argmax"), ("keep_prev", "itc"))
_OBJ_TESTS = tuple(
  stats.Test("superiority", f"objects/error/h{h}", higher_is_better=False, comparisons=6)
  for h in (10, OBJ_HORIZON)
)

STUDIES = (
  *STUDIES,
  Study(
    name="itc/objects",
    claim=(
      "Decoding a token world model's imagined frames by identifiable token correspondence (ITC) "
      "keeps long rollouts temporally consistent: fewer objects are duplicated, vanish or turn "
      "into other objects than under independent sampling (Kim, Sun, Kim, Park, Song, "
      "Identifiable Token Correspondence for World Models, arXiv 2605.16457)."
    ),
    arms=OBJ_ARMS,
    control="sample",
    pairs=_OBJ_PAIRS,
    seeds=(0, 1, 2),
    tuning_seeds=(100,),  # a timing probe (50 updates) sized the budget; no setting chosen
    budget={"wm_updates": OBJ_UPDATES, "random_play_steps": 16 * 256, "horizon": OBJ_HORIZON},
    tests=_OBJ_TESTS,
    metrics=(
      *(f"objects/error/h{h}" for h in (1, 5, 10, OBJ_HORIZON)),
      *(f"objects/{e}/h{OBJ_HORIZON}" for e in ("disappeared", "transmuted", "duplicated")),
      f"mobile/error/h{OBJ_HORIZON}",
      *(f"class/{k}/error/h{OBJ_HORIZON}" for k in ("player", "cow", "tree")),
      f"token_acc/h{OBJ_HORIZON}",
    ),
    cell=obj_cell,
    note=(
      "Seeds are world-model seeds (random play, tokenizer growth, 1000 world-model updates); "
      "every decoder runs on the same world model, the same held-out windows (16 x 256 "
      "random-play steps of a fixed key, windows of 21 frames without an episode reset) and the "
      "same random key, so arm - control is paired. Object classes: real frames from the "
      "environment state, imagined ones through each code's majority class on the training "
      "frames (`jaxlab.rl.itc.objects`). `objects/<event>/h<h>`: events per real object over "
      "every non-ground class at horizon h (error = disappeared + transmuted + duplicated); "
      "`mobile`: player, zombie, cow, skeleton, arrow; per class, every horizon and the world "
      "models' held-out token accuracy are in the raw files. ITC is exact (Hungarian); `itc`: "
      "alpha_d = 0.1, tau_trash = 0.3 (copies across one cell can win); `itc_authors`: 0.6, 0.3; "
      "`keep_prev`: tau = 0.3 on every map cell. Nothing tuned."
    ),
  ),
)
