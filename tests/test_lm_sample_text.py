"""A sampled LM text is printed as text: no control characters, no U+FFFD (bytes that are not
UTF-8: a byte-level model samples bytes), and it says how many characters it left out."""

import unicodedata

import numpy as np

from jaxlab.lm import generate, tokenizer


def _printable(text: str) -> bool:
  return all(ch in "\n\t" or unicodedata.category(ch)[0] != "C" for ch in text) and (
    "\ufffd" not in text
  )


def test_printable_keeps_text_and_line_breaks_and_counts_the_rest():
  text, dropped = generate.printable("ROMEO:\nBut\x1a soft\ufffd\t!\x1b[0m\u200b")
  assert text == "ROMEO:\nBut soft\t![0m" and dropped == 4
  assert generate.printable("plain text\n") == ("plain text\n", 0)


def test_byte_level_samples_print_as_text():
  tok = tokenizer.ByteTokenizer()
  raw = b"ROMEO:\nBut" + b"\x1a\xef\xbf soft\xff\n"  # a control byte, broken UTF-8
  assert not _printable(tok.decode(np.frombuffer(raw, np.uint8)))  # what the sample was
  out = generate.sample_as_text(tok, np.frombuffer(raw, np.uint8).astype(np.int32))
  assert _printable(out), repr(out)
  assert out.startswith("ROMEO:\nBut soft\n") and "character(s) left out" in out, repr(out)
  clean = generate.sample_as_text(tok, tok.encode("ROMEO:\nBut soft"))
  assert clean == "ROMEO:\nBut soft"  # nothing left out, nothing added


def test_bpe_samples_print_as_text():
  tok = tokenizer.train_bpe(["ROMEO: but soft, what light"] * 20, vocab_size=300)
  first_byte = tok.encode("\u0436")[:1]  # one byte of a two-byte character the BPE never merged
  ids = np.concatenate([tok.encode("ROMEO: but"), first_byte]).astype(np.int32)
  assert "\ufffd" in tok.decode(ids)  # what the sample was
  out = generate.sample_as_text(tok, ids)
  assert _printable(out) and out.startswith("ROMEO: but\n["), repr(out)
