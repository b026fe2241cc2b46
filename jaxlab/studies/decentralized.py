"""Decentralized SGD studies (docs/decentralized.md): each a claim of its paper, declared first."""

from __future__ import annotations

STUDIES = ()
