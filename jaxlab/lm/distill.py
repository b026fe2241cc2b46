"""Distillation: HPD (Hybrid Policy Distillation, arXiv 2604.20244) and the KL family it mixes.

`hpd_loss` is the per-token loss of the authors' code (``compute_hpd_loss`` in
zwhong714/Hybrid-Policy-Distillation, LlamaFactory/src/llamafactory/train/hpd.py), ported exactly:

    k1_gt   = (lt(y) - ls(y)) * ps(y)                 y: data token
    mask1   = k1_gt > 0
    adv1    = pt(y) + k1_gt  if mask1 else k1_gt
    k1_samp = (lt(yh) - ls(yh)) * ps(yh)             yh ~ ps(.|prefix) (or greedy)
    mask2   = k1_samp < 0;   adv2 = k1_samp if mask2 else 0
    adv1   += pt(y)  where mask1 & mask2
    loss_t  = -ls(y) sg(adv1) - sg(adv2) ls(yh) [yh != y];   loss = sum_t loss_t / #tokens

The paper's unified view writes KD as a reweighted log-likelihood ``-sum_v sg(w(v)) ls(v)``:
``w = pt`` gives the forward-KL gradient, ``w = ps (lt - ls)`` the reverse-KL gradient
(`reweighted_kd_loss` with ``alpha``/``beta``; exact at both limits, tested). HPD is a one-token
(data token + one student sample), sign-masked estimate of the sum of both weights.

`student_update` is the runtime's ``update(state, batch, key)`` for a student trained with one of
these objectives against a fixed teacher; `heldout_metrics` scores a student on held-out text.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxlab.core.errors import check_choice
from jaxlab.core.train_state import TrainState
from jaxlab.lm.train import next_token_loss

sg = jax.lax.stop_gradient


def _mean(x_BxL, mask_BxL):
  if mask_BxL is None:
    return jnp.mean(x_BxL)
  mask_BxL = mask_BxL.astype(x_BxL.dtype)
  return jnp.sum(x_BxL * mask_BxL) / (jnp.sum(mask_BxL) + 1e-8)


def _take(logp_BxLxV, idx_BxL):
  return jnp.take_along_axis(logp_BxLxV, idx_BxL[..., None], axis=-1)[..., 0]


def hpd_loss(
  student_logits_BxLxV,
  teacher_logits_BxLxV,
  labels_BxL,
  key,
  mask_BxL=None,
  sample: str = "multinomial",
  samples_BxL=None,
):
  """HPD loss (exact port). ``sample``: 'multinomial' (LlamaFactory) or 'greedy' (verl recipe).

  Logits and labels are already aligned (logits at t predict labels at t; the authors' function
  shifts them itself). Negative labels (the ``-100`` of PyTorch pipelines) are ignored, like the
  authors' padding. ``samples_BxL`` replaces the student draw (e.g. to replay the draws of the
  authors' code, tests/data/hpd_fixture.npz). Returns (loss, metrics).
  """
  ignored = labels_BxL < 0
  labels_BxL = jnp.where(ignored, 0, labels_BxL)
  mask_BxL = ~ignored if mask_BxL is None else (mask_BxL > 0) & ~ignored
  ls = jax.nn.log_softmax(student_logits_BxLxV.astype(jnp.float32), axis=-1)
  lt = jax.nn.log_softmax(sg(teacher_logits_BxLxV).astype(jnp.float32), axis=-1)
  ls_y, lt_y = _take(ls, labels_BxL), _take(lt, labels_BxL)
  k1_gt = (lt_y - ls_y) * jnp.exp(ls_y)
  mask1 = k1_gt > 0
  pt_y = jnp.exp(lt_y)
  adv1 = jnp.where(mask1, pt_y + k1_gt, k1_gt)
  if samples_BxL is not None:
    y_hat = jnp.asarray(samples_BxL, jnp.int32)
  elif sample == "multinomial":
    y_hat = jax.random.categorical(key, sg(ls), axis=-1)
  elif sample == "greedy":
    y_hat = jnp.argmax(ls, axis=-1)
  else:
    check_choice("sample", sample, ("multinomial", "greedy"))
  ls_s, lt_s = _take(ls, y_hat), _take(lt, y_hat)
  k1_s = (lt_s - ls_s) * jnp.exp(ls_s)
  mask2 = k1_s < 0
  adv2 = jnp.where(mask2, k1_s, 0.0)
  adv1 = adv1 + jnp.where(mask1 & mask2, pt_y, 0.0)
  differs = (y_hat != labels_BxL).astype(jnp.float32)
  per_tok = -ls_y * sg(adv1) - sg(adv2) * ls_s * differs
  loss = _mean(per_tok, mask_BxL)
  metrics = {
    "hpd_loss": loss,
    "ce_loss": _mean(-ls_y, mask_BxL),
    "sampled_diff_frac": _mean(differs, mask_BxL),
    "adv2_active_frac": _mean(differs * mask2, mask_BxL),
  }
  return loss, metrics


def forward_kl(student_logits, teacher_logits, mask=None):
  """Token-mean KL(p_t || p_s) (mode covering)."""
  ls = jax.nn.log_softmax(student_logits.astype(jnp.float32), -1)
  lt = jax.nn.log_softmax(teacher_logits.astype(jnp.float32), -1)
  return _mean(jnp.sum(jnp.exp(lt) * (lt - ls), -1), mask)


def reverse_kl(student_logits, teacher_logits, mask=None):
  """Token-mean KL(p_s || p_t) (mode seeking)."""
  ls = jax.nn.log_softmax(student_logits.astype(jnp.float32), -1)
  lt = jax.nn.log_softmax(teacher_logits.astype(jnp.float32), -1)
  return _mean(jnp.sum(jnp.exp(ls) * (ls - lt), -1), mask)


def reweighted_kd_loss(
  student_logits, teacher_logits, alpha: float = 1.0, beta: float = 1.0, mask=None
):
  """Unified reweighted log-likelihood surrogate: grad = alpha*grad FKL + beta*grad RKL exactly.

  ``-sum_v sg(alpha pt(v) + beta ps(v) (lt(v) - ls(v))) ls(v)``; (1, 0) is forward KL, (0, 1)
  reverse KL (their gradients, not their values; the surrogate's value is not a divergence).
  """
  ls = jax.nn.log_softmax(student_logits.astype(jnp.float32), -1)
  lt = jax.nn.log_softmax(sg(teacher_logits).astype(jnp.float32), -1)
  w = alpha * jnp.exp(lt) + beta * jnp.exp(ls) * (lt - ls)
  return _mean(-jnp.sum(sg(w) * ls, -1), mask)


LOSSES = ("nll", "hpd", "forward_kl", "reverse_kl")


def distill_loss(kind: str, student_logits, teacher_logits, labels, key, mask=None):
  """Dispatch by name (`LOSSES`); returns (loss, metrics)."""
  check_choice("kind", kind, LOSSES)
  if kind == "nll":
    ls = jax.nn.log_softmax(student_logits.astype(jnp.float32), -1)
    loss = _mean(-_take(ls, labels), mask)
    return loss, {"ce_loss": loss}
  if kind == "hpd":
    return hpd_loss(student_logits, teacher_logits, labels, key, mask)
  if kind == "forward_kl":
    loss = forward_kl(student_logits, sg(teacher_logits), mask)
    return loss, {"forward_kl": loss}
  loss = reverse_kl(student_logits, sg(teacher_logits), mask)
  return loss, {"reverse_kl": loss}


def student_update(kind: str, teacher: TrainState):
  """``update(state, batch, key) -> (state, metrics)``: one step of objective ``kind``.

  ``batch = {"tokens": int[B, L + 1], "teacher": teacher params}``: the teacher's parameters
  travel as data, not as constants baked into the compiled step (they can be large).
  """
  check_choice("kind", kind, LOSSES)

  def update(state: TrainState, batch, key):
    tokens = batch["tokens"]
    t_logits = teacher(tokens[:, :-1], params=batch["teacher"])

    def loss_fn(params):
      s_logits = state(tokens[:, :-1], params=params)
      loss, metrics = distill_loss(kind, s_logits, t_logits, tokens[:, 1:], key)
      return loss, {"loss": loss, **metrics}

    return state.apply_loss(loss_fn)

  return update


def heldout_metrics(student: TrainState, teacher: TrainState, tokens_NxBxL1) -> dict:
  """Student NLL and forward/reverse KL to the teacher, averaged over N held-out batches."""

  def one(tokens):
    s, t = student(tokens[:, :-1]), teacher(tokens[:, :-1])
    nll, _ = next_token_loss(s, tokens[:, 1:])
    return {"heldout_nll": nll, "heldout_fkl": forward_kl(s, t), "heldout_rkl": reverse_kl(s, t)}

  return jax.tree.map(jnp.mean, jax.lax.map(one, tokens_NxBxL1))
