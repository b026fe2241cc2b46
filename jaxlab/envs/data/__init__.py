"""The embedded OGBench data set (cube-single-play): a package so the wheel ships its files."""

__all__: list[str] = []
