"""Programs for the environments' data: ``python -m envs.ogbench_generate`` writes an OGBench data
set locally. The environments themselves (the vectorised interface, gymnax, Craftax, the OGBench
loader and the embedded set) are library code in :mod:`jaxlab.envs`."""
