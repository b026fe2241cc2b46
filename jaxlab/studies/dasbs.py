"""dasbs's studies (docs/dasbs.md): each a claim of its paper, declared before it runs."""

from __future__ import annotations

STUDIES = ()
