"""Per-device memory of a full LM training step against sequence length, per attention variant.

  python -m benchmarks.lm_memory            # measure what is missing, then write the tables
  python -m benchmarks.lm_memory --table    # rebuild table.md / table.csv from measurements.json

Full step: each cell compiles `jaxlab.lm.train.update` (forward, backward, AdamW update; the state
donated and sharded ZeRO-3 style over the 8 context devices) on ``context:8`` (8 simulated CPU
devices) and reads XLA's compiled memory analysis (`jaxlab.lm.memory.step_memory`: ``argument +
output - alias + temp``; nothing is executed). Per variant it fits ``peak = slope * L +
intercept`` by least squares over the lengths, solves the longest ``L`` under ``--cap_gib`` from the
fit and confirms it by compiling there, stepping 1024 tokens down while the compiled peak exceeds
the cap, or up while the next length still fits. Attention layer: the same variants' temp bytes of
one attention layer's forward and backward alone (`jaxlab.lm.memory.attention_layer_memory`),
where UPipe's head chunking acts.
Measurements go to ``<out>/measurements.json`` after every compile (a killed run resumes);
``table.md`` and ``table.csv`` are generated from that file only.
"""

from __future__ import annotations

import csv
import io
import json
import os
import pathlib
import time

from absl import flags

from jaxlab.core import experiment
from jaxlab.core.errors import require

flags.DEFINE_string("lengths", "8192,16384,32768,65536", "Sequence lengths of the curve.")
flags.DEFINE_float("cap_gib", 8.0, "Per-device memory cap (GiB) for the longest sequence.")
flags.DEFINE_string("out", "docs/results/lm/memory_curve", "Folder of measurements and tables.")
flags.DEFINE_bool("table", False, "Only rebuild table.md / table.csv from measurements.json.")
FLAGS = flags.FLAGS

CONTEXT = 8
STEP = 1024  # granularity of the longest length (a multiple of 2 x context for the zigzag layout)
# A 7B-like layer (d_model 4096, 64 heads of 64, GQA with 8 KV heads, SwiGLU 11008, vocabulary
# 32000), two layers, full rematerialisation per block (the long-context setting), float32. The
# state (parameters, gradients, Adam moments) is sharded over the context devices (ZeRO-3 over the
# context-parallel group): replicated, its 7 GB per device would set the peak at every length.
MODEL = dict(
  vocab_size=32000,
  d_model=4096,
  n_layers=2,
  n_heads=64,
  n_kv_heads=8,
  head_dim=64,
  mlp_dim=11008,
  remat="full",
  dtype="float32",
)
# (label, attention, upipe_chunks): UPipe's default is heads / context = 8 chunks.
VARIANTS = (
  ("all-gather", "allgather", 0),
  ("ring", "ring", 0),
  ("Ulysses", "ulysses", 0),
  ("UPipe, 8 chunks", "upipe", 8),
  ("UPipe, 2 chunks", "upipe", 2),
)
MIB = 2**20
STATE_RULES = (("embed", "context"),)  # merged into the default rules for the state only


def _key(impl: str, chunks: int) -> str:
  return impl if impl != "upipe" else f"upipe{chunks}"


def _model(impl: str, chunks: int):
  from jaxlab.lm import config
  from jaxlab.lm.model import LMConfig

  return LMConfig.from_config(config.get_config(), attention=impl, upipe_chunks=chunks, **MODEL)


def _load(path: pathlib.Path) -> dict:
  if path.exists():
    return json.loads(path.read_text())
  return {"model": MODEL, "mesh": f"context:{CONTEXT}", "batch": 1, "cells": {}, "cap": {}}


def _save(path: pathlib.Path, rec: dict) -> None:
  path.parent.mkdir(parents=True, exist_ok=True)
  tmp = path.with_suffix(".tmp")
  tmp.write_text(json.dumps(rec, indent=1, sort_keys=True) + "\n")
  os.replace(tmp, path)


def measure(path: pathlib.Path, lengths: list[int], cap: int) -> dict:
  import jax

  from jaxlab.core import sharding
  from jaxlab.core.mesh import make_mesh
  from jaxlab.lm import memory

  mesh = make_mesh({"context": CONTEXT}, devices=jax.devices()[:CONTEXT])
  rules = tuple(dict(sharding.DEFAULT_RULES, **dict(STATE_RULES)).items())
  rec = _load(path)
  rec.setdefault("attention", {})
  if rec["model"] != MODEL:
    raise SystemExit(f"{path} holds another model; move it away to measure this one")

  def cell(key, impl, chunks, n):
    name = f"{key}/{n}"
    if name not in rec["cells"]:
      t = time.perf_counter()
      model = _model(impl, chunks)
      rec["cells"][name] = memory.step_memory(model, n, 1, mesh, state_rules=rules)
      _save(path, rec)
      peak = rec["cells"][name]["peak"] / MIB
      print(f"  {name:16s} peak {peak:10.1f} MiB  ({time.perf_counter() - t:.0f} s)", flush=True)
    return rec["cells"][name]

  m = MODEL
  for _, impl, chunks in VARIANTS:
    for n in lengths:
      name = f"{_key(impl, chunks)}/{n}"
      if name not in rec["attention"]:
        shape = (m["n_heads"], m["n_kv_heads"], m["head_dim"], m["d_model"])
        rec["attention"][name] = memory.attention_layer_memory(impl, mesh, n, *shape, chunks)
        _save(path, rec)
        print(f"  attention {name:16s} temp {rec['attention'][name] / MIB:9.1f} MiB", flush=True)
  for _, impl, chunks in VARIANTS:
    for n in lengths:
      cell(_key(impl, chunks), impl, chunks, n)
  for _, impl, chunks in VARIANTS:
    key = _key(impl, chunks)
    slope, icpt = memory.fit_line(lengths, [rec["cells"][f"{key}/{n}"]["peak"] for n in lengths])
    n = memory.longest_under(cap, slope, icpt, STEP)
    fits = lambda n: cell(key, impl, chunks, n)["peak"] <= cap
    if n > 0 and fits(n):
      while fits(n + STEP):
        n += STEP
    else:
      while n > 0 and not fits(n):
        n -= STEP
    rec["cap"][key] = {"cap": cap, "fit": memory.longest_under(cap, slope, icpt, STEP), "length": n}
    _save(path, rec)
  return rec


def tables(rec: dict, lengths: list[int]) -> tuple[str, str]:
  """table.md and table.csv of ``rec`` (measurements.json): both curves, their fits, the cap."""
  from jaxlab.lm import memory

  cap = next(iter(rec["cap"].values()))["cap"]
  header = (
    ["part", "variant"]
    + [f"MiB at L={n}" for n in lengths]
    + ["slope KiB/token", "intercept MiB", "max residual MiB", "slope / Ulysses'"]
    + [f"longest L under {cap / 2**30:g} GiB", "peak MiB there", "longest L / Ulysses'"]
  )
  fits = {}
  for part, values in (("full step", rec["cells"]), ("attention layer", rec["attention"])):
    for _, impl, chunks in VARIANTS:
      key = _key(impl, chunks)
      ys = [
        values[f"{key}/{n}"] if part != "full step" else values[f"{key}/{n}"]["peak"]
        for n in lengths
      ]
      fits[part, key] = (ys, *memory.fit_line(lengths, ys))
  rows = []
  for part in ("full step", "attention layer"):
    ref_slope = fits[part, "ulysses"][1]
    for label, impl, chunks in VARIANTS:
      key = _key(impl, chunks)
      ys, slope, icpt = fits[part, key]
      row = [part, label] + [f"{y / MIB:.0f}" for y in ys]
      resid = max(abs(y - (slope * n + icpt)) for y, n in zip(ys, lengths, strict=True))
      row += [f"{slope / 1024:.2f}", f"{icpt / MIB:.0f}", f"{resid / MIB:.0f}"]
      row += [f"{slope / ref_slope:.2f}"]
      if part == "full step":
        best, ref = rec["cap"][key]["length"], rec["cap"]["ulysses"]["length"]
        there = rec["cells"][f"{key}/{best}"]["peak"] / MIB if best else float("nan")
        row += [str(best), f"{there:.0f}", f"{best / ref:.2f}"]
      else:
        row += ["", "", ""]
      rows.append(row)
  md = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  md += ["| " + " | ".join(r) + " |" for r in rows]
  buf = io.StringIO()
  writer = csv.writer(buf, lineterminator="\n")
  writer.writerow(header)
  writer.writerows(rows)
  return "\n".join(md) + "\n", buf.getvalue()


UNUSED_FLAGS = experiment.RUN_FLAGS  # a compile-only measurement: no run to shape


def main(argv) -> None:
  del argv
  for name in UNUSED_FLAGS:
    require(not FLAGS[name].present, name, "is not used by benchmarks.lm_memory; remove it")
  try:
    lengths = sorted({int(v) for v in FLAGS.lengths.split(",") if v.strip()})
  except ValueError:
    lengths = []
  require(len(lengths) >= 2, "lengths", f"needs >= 2 distinct integers, got {FLAGS.lengths!r}")
  require(
    all(n > 0 and n % (2 * CONTEXT) == 0 for n in lengths),
    "lengths",
    f"each must be a positive multiple of {2 * CONTEXT} (2 x context), got {FLAGS.lengths!r}",
  )
  require(FLAGS.cap_gib > 0, "cap_gib", f"must be > 0, got {FLAGS.cap_gib}")
  out = pathlib.Path(FLAGS.out)
  path = out / "measurements.json"
  if FLAGS.table:
    require(path.exists(), "table", f"{path} does not exist: measure first (without --table)")
    rec = _load(path)
  else:
    import jax

    if "--xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
      jax.config.update("jax_num_cpu_devices", CONTEXT)  # before the backend starts
    require(jax.device_count() >= CONTEXT, "XLA_FLAGS", f"needs {CONTEXT} devices")
    rec = measure(path, lengths, int(FLAGS.cap_gib * 2**30))
  md, table_csv = tables(rec, lengths)
  (out / "table.md").write_text(md)
  (out / "table.csv").write_text(table_csv)
  print(md, end="")


if __name__ == "__main__":
  experiment.run(main)
