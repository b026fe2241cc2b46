"""Generate an OGBench data set locally (the program lives in the library,
:mod:`jaxlab.envs.ogbench_generate`, so an installed wheel runs it as
``python -m jaxlab.envs.ogbench_generate``; this name is kept for commands typed in a clone).

    python -m jaxlab.envs.ogbench_generate --env_name=cube-single-play-v0 \\
        --dataset_dir=~/.ogbench/data
    python -m jaxlab.envs.ogbench_generate --env_name=cube-single-play-v0 --episodes=60 \\
        --dataset_dir=/tmp
"""

from jaxlab.envs.ogbench_generate import UNUSED_FLAGS, cli  # noqa: F401 (UNUSED_FLAGS: --help)

if __name__ == "__main__":
  cli()
