"""The LM's embedded text corpus: a package so the wheel ships its files."""

__all__: list[str] = []
