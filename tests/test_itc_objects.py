"""Object-level metrics of long imagined rollouts (jaxlab.rl.itc.objects; study itc/objects)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxlab.rl import itc
from jaxlab.rl.itc import decode as D
from jaxlab.rl.itc import objects as O

C = O.C
G, COW, ZOMBIE, TREE = C["grass"], C["cow"], C["zombie"], C["tree"]
BASE = itc.get_config()
CFG = D.ITCConfig.from_config(BASE.itc, grid=tuple(BASE.tokenizer.grid))


def frame(cells: dict, shape=(3, 4)) -> np.ndarray:
  """A row-major frame of grass with ``{cell: class}``."""
  x = np.full(shape[0] * shape[1], G)
  for i, k in cells.items():
    x[i] = k
  return x


def events(real: dict, imagined: dict) -> dict:
  """``{(class name, event): count}`` of the non-zero events on a 3 x 4 grid."""
  out = O.object_events(frame(real), frame(imagined), cols=4)
  names = ("real", *O.EVENTS)
  return {(O.CLASSES[k], names[e]): int(out[k, e]) for k, e in zip(*np.nonzero(out))}


def test_identical_frames_have_no_events():
  assert events({0: COW, 5: TREE}, {0: COW, 5: TREE}) == {("cow", "real"): 1, ("tree", "real"): 1}


def test_a_move_of_one_cell_is_no_event_and_two_cells_is_a_loss_and_a_copy():
  assert events({5: COW}, {10: COW}) == {("cow", "real"): 1}  # diagonal: Chebyshev 1
  assert events({4: COW}, {6: COW}) == {
    ("cow", "real"): 1,
    ("cow", "disappeared"): 1,
    ("cow", "duplicated"): 1,
  }


def test_duplicated_vanished_and_transmuted_objects():
  assert events({5: COW}, {5: COW, 6: COW}) == {("cow", "real"): 1, ("cow", "duplicated"): 1}
  assert events({5: TREE}, {}) == {("tree", "real"): 1, ("tree", "disappeared"): 1}
  # a cow turns into a zombie in place: one transmuted cow, no extra zombie
  assert events({5: COW}, {5: ZOMBIE}) == {("cow", "real"): 1, ("cow", "transmuted"): 1}
  # a tree becomes a cow: the tree is transmuted; but where a real cow moved onto the tree's
  # cell the cow is matched and the tree has disappeared
  assert events({5: TREE}, {5: COW}) == {("tree", "real"): 1, ("tree", "transmuted"): 1}
  assert events({5: TREE, 6: COW}, {5: COW}) == {
    ("tree", "real"): 1,
    ("cow", "real"): 1,
    ("tree", "disappeared"): 1,
  }


def test_matching_is_maximal_not_greedy_in_place():
  # real cows at 0 and 1, imagined at 1 and 2: both moved right (greedy in place would lose one)
  assert events({0: COW, 1: COW}, {1: COW, 2: COW}) == {("cow", "real"): 2}


def test_rates_pool_classes_and_leave_out_horizons_without_objects():
  real = np.stack([frame({5: COW, 0: TREE}), frame({})])[None]  # [W=1, H=2, 12]
  imag = np.stack([frame({5: ZOMBIE, 0: TREE, 11: TREE}), frame({3: COW})])[None]
  counts = np.zeros((2, len(O.CLASSES), 4), np.int64)
  for t in range(2):
    counts[t] = O.object_events(real[0, t], imag[0, t], cols=4)
  r = O.rates(counts)
  assert r["transmuted"] == [0.5, None] and r["duplicated"] == [0.5, None]
  assert r["disappeared"] == [0.0, None] and r["error"] == [1.0, None]
  assert O.rates(counts, (COW,))["transmuted"] == [1.0, None]
  assert O.rates(counts, (TREE,))["duplicated"] == [1.0, None]


def test_code_classes_take_the_majority_and_report_purity():
  tokens = np.array([0, 0, 0, 1, 1, 2])
  classes = np.array([COW, COW, TREE, TREE, G, G])  # code 1 ties: the lower class index
  table, purity = O.code_classes(tokens, classes, vocab=4)
  assert table.tolist() == [COW, G, G, C["out_of_bounds"]]
  assert purity == 4 / 6


@struct.dataclass
class Mobs:
  position: jax.Array
  mask: jax.Array


@struct.dataclass
class State:
  map: jax.Array
  player_position: jax.Array
  zombies: Mobs
  cows: Mobs
  skeletons: Mobs
  arrows: Mobs


def test_cell_classes_follow_the_renderer_view():
  grid = jnp.full((16, 16), G).at[2, 3].set(TREE)
  none = Mobs(jnp.zeros((1, 2), jnp.int32), jnp.zeros((1,), bool))
  cows = Mobs(jnp.array([[4, 6], [15, 15]]), jnp.array([True, True]))  # the second off screen
  s = State(grid, jnp.array([3, 5]), none, cows, none, none)
  out = np.asarray(O.cell_classes(jax.tree.map(lambda x: x[None], s)))[0].reshape(9, 9)
  # view rows 0..6 = map rows 0..6 (3 - 3), cols 1..9 (5 - 4)
  assert out[3, 4] == C["player"] and out[2, 2] == TREE and out[4, 5] == COW
  assert (out[7:] == C["inventory"]).all()
  assert (out == COW).sum() == 1 and (out == C["out_of_bounds"]).sum() == 0


def test_keep_prev_equals_authors_itc_on_interior_cells():
  """With tau = the authors' tau_trash, exact ITC with their costs keeps exactly the tokens
  keep_prev keeps on interior cells (docs/itc.md's derivation)."""
  key = jax.random.key(0)
  logits = 2.0 * jax.random.normal(key, (4, 81, 6))
  prev = jax.random.randint(jax.random.fold_in(key, 1), (4, 81), 0, 6)
  done = jnp.zeros((4,), bool)
  k = jax.random.fold_in(key, 2)
  mask = jnp.asarray(D.interior_mask(CFG.grid, CFG.inventory_rows))
  a = O.keep_prev(logits, prev, done, k, CFG.trash_cost, mask)
  b = D.decode(logits, prev, done, k, "itc_hungarian", CFG)
  assert (np.asarray(a) == np.asarray(b)).mean() == 1.0
  sample = D.decode(logits, prev, done, k, "sample", CFG)
  assert (np.asarray(a) != np.asarray(sample)).any()  # it did keep something


def test_motion_costs_let_itc_copy_across_a_cell():
  """An object one cell from where the model half expects it: exact ITC copies it there under
  alpha_d < tau_trash and generates the sample under the authors' costs."""
  n, v = 81, 4
  prev = jnp.zeros((n,), jnp.int32).at[40].set(3)  # an object at the centre cell
  probs = jnp.zeros((n, v)).at[:, 0].set(1.0)
  probs = probs.at[41].set(jnp.array([0.55, 0.0, 0.0, 0.45]))  # it may have moved right
  proposal = jnp.zeros((n,), jnp.int32)
  done = jnp.bool_(False)
  moved = D.itc_tokens(probs, proposal, prev, done, O.motion_itc(CFG, 0.1), exact=True)
  authors = D.itc_tokens(probs, proposal, prev, done, CFG, exact=True)
  assert int(moved[41]) == 3 and int(moved[40]) == 0
  assert int(authors[41]) == 0 and int(authors[40]) == 0


def test_objects_cell_evaluates_every_decoder_once_per_seed(tmp_path, monkeypatch):
  from jaxlab.studies import itc as study

  built = []
  ev = {e: [0.1, None] for e in (*O.EVENTS, "error")}

  class FakeEvaluator:
    def __init__(self, config, setting, wm_dir):
      built.append(setting.horizon)

    def seed(self, seed):
      one = lambda i: {  # noqa: E731
        "objects": {**ev, "error": [0.1 * i, None]},
        "mobile": ev,
        "class": {"cow": ev},
        "real_objects": [3, 0],
        "token_acc": [0.5, 0.4],
      }
      res = {m: one(i) for i, m in enumerate((*O.DECODERS, "real_tokens"))}
      wm = {"heldout_token_acc": 0.7, "code_class_purity": 0.9, "codebook_size": 9, "windows": 64}
      return {**res, "world_model": wm}

  monkeypatch.setattr(O, "Evaluator", FakeEvaluator)
  runs = tmp_path / "itc" / "objects"
  out = study.obj_cell("itc", (0,), runs / "itc")
  again = study.obj_cell("sample", (0,), runs / "sample")  # reads the shared result
  assert built == [study.OBJ_HORIZON]
  assert out[0]["objects/error/h1"] == 0.2 and again[0]["objects/error/h1"] == 0.0
  assert "objects/error/h2" not in out[0] and out[0]["class/cow/duplicated/h1"] == 0.1
  assert out[0]["wm_heldout_token_acc"] == 0.7 and out[0]["config"]["decoder"] == "itc"


def test_a_seeds_world_model_is_trained_once_then_restored(tmp_path, monkeypatch):
  from jaxlab.rl.itc import decoder_eval as E

  saved = {}
  monkeypatch.setattr(E, "_save", lambda path, wm, book: saved.update({path: (wm, book)}))
  monkeypatch.setattr(E, "_load", lambda path, init, book: saved[path])
  monkeypatch.setattr(E, "init_world_model", lambda cfg, key: None)

  class Fake:
    cfg, calls, lines = None, [], []
    log = lines.append

    def train(self, data, book, key):
      self.calls.append(key)
      (tmp_path / "world_model.msgpack").touch()  # what _save leaves on disk
      return "wm", {"loss": np.float32(0.5)}

  ev, codebook = Fake(), type("Book", (), {"size": 3})()
  wm, book, m = E.trained_world_model(ev, tmp_path, 0, None, codebook, 7)
  assert (wm, book, m["loss"]) == ("wm", codebook, 0.5) and m["train_seconds"] >= 0
  again = E.trained_world_model(ev, tmp_path, 0, None, codebook, 7)
  assert ev.calls == [7] and again == ("wm", codebook, m)


def test_collect_records_the_state_each_action_was_taken_in():
  from jaxlab.rl.itc import decoder_eval as E

  class Counter:  # obs and state: the step count per environment
    num_envs, num_actions = 2, 3

    def reset(self, key):
      return jnp.zeros((2, 1, 1, 1)), jnp.zeros((2,), jnp.int32)

    def step(self, state, action, key):
      nxt = state + 1
      obs = jnp.broadcast_to(nxt[:, None, None, None], (2, 1, 1, 1)).astype(jnp.float32)
      return obs, nxt, jnp.zeros((2,)), jnp.zeros((2,), bool), {}

  out = E.collect(Counter(), jax.random.key(0), 4, record=lambda s: {"count": s})
  assert out["count"].shape == (2, 4) and out["action"].shape == (2, 4)
  np.testing.assert_array_equal(out["count"], [[0, 1, 2, 3]] * 2)
  assert set(out) == {"obs", "reset", "action", "reward", "done", "count"}
