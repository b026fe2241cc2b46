"""Writes hpd_fixture.npz: the authors' HPD loss (PyTorch) on small random inputs.

Runs ``compute_hpd_loss`` from github.com/zwhong714/Hybrid-Policy-Distillation
(``LlamaFactory/src/llamafactory/train/hpd.py``, with its helper module ``akl.py``) unchanged, in a
scratch environment with CPU PyTorch (never a jaxlab dependency)::

    python tests/data/make_hpd_fixture.py --repo=/path/to/Hybrid-Policy-Distillation \\
      --out=tests/data/hpd_fixture.npz

``torch.multinomial`` is wrapped only to *record* the student draws the function makes, so the
JAX port can replay them (`jaxlab.lm.distill.hpd_loss(..., samples_BxL=...)`). Each case stores
the inputs, the draws, the loss, its gradient w.r.t. the student logits and the metrics.
"""

from __future__ import annotations

import argparse
import importlib
import pathlib
import subprocess
import sys
import types

import numpy as np
import torch

# (batch, length, vocab, logit scale, seed, fraction of -100 labels)
CASES = {
  "padded": (2, 7, 11, 2.0, 0, 0.25),
  "dense": (3, 5, 17, 3.0, 1, 0.0),
  "peaky": (2, 6, 5, 6.0, 2, 0.2),
}


def load_hpd(repo: pathlib.Path):
  """Imports hpd.py and akl.py as a package of their own (LlamaFactory's __init__ not run)."""
  train_dir = repo / "LlamaFactory" / "src" / "llamafactory" / "train"
  pkg = types.ModuleType("hpd_authors")
  pkg.__path__ = [str(train_dir)]
  sys.modules["hpd_authors"] = pkg
  return importlib.import_module("hpd_authors.hpd")


def run_case(hpd, b, t, v, scale, seed, frac_ignored):
  g = torch.Generator().manual_seed(seed)
  student = (torch.randn(b, t, v, generator=g) * scale).requires_grad_(True)
  teacher = torch.randn(b, t, v, generator=g) * scale
  labels = torch.randint(0, v, (b, t), generator=g)
  ignored = torch.rand(b, t, generator=g) < frac_ignored
  labels = labels.masked_fill(ignored, -100)
  drawn = []
  original = torch.multinomial

  def recording(*args, **kwargs):
    out = original(*args, **kwargs)
    drawn.append(out.detach().clone())
    return out

  torch.manual_seed(seed)
  torch.multinomial = recording
  try:
    loss, metrics = hpd.compute_hpd_loss(student, teacher, labels)
  finally:
    torch.multinomial = original
  loss.backward()
  (samples,) = drawn
  return {
    "student": student.detach().numpy(),
    "teacher": teacher.numpy(),
    "labels": labels.numpy(),
    "samples": samples.view(b, t - 1).numpy(),  # draws for the shifted positions 0..t-2
    "loss": np.float64(loss.item()),
    "grad": student.grad.numpy(),
    **{f"metric_{k}": np.float64(metrics[k]) for k in ("ce_loss", "hpd_loss")},
    **{f"metric_{k}": np.float64(metrics[k]) for k in ("sampled_diff_pct", "adv2_active_pct")},
  }


def main():
  ap = argparse.ArgumentParser()
  ap.add_argument("--repo", required=True, type=pathlib.Path)
  ap.add_argument("--out", default="tests/data/hpd_fixture.npz")
  args = ap.parse_args()
  commit = subprocess.run(
    ["git", "-C", str(args.repo), "rev-parse", "HEAD"], capture_output=True, text=True
  ).stdout.strip()
  hpd = load_hpd(args.repo)
  arrays = {"source_commit": np.asarray(commit), "torch_version": np.asarray(torch.__version__)}
  for name, spec in CASES.items():
    for k, val in run_case(hpd, *spec).items():
      arrays[f"{name}/{k}"] = val
  np.savez_compressed(args.out, **arrays)
  print(f"wrote {args.out} from commit {commit or '?'} with torch {torch.__version__}")


if __name__ == "__main__":
  main()
