"""rlix: one GPU pool shared by several LLM RL post-training pipelines.

`rlix.policy` is the pure scheduling core; `rlix.traces` knows rollout-length trace formats;
`rlix.sim` (SimPy) and `rlix.executor` (Ray) are the two drivers of the core.
"""

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # `rlix.init()` starts or reaches the executor's orchestrator; Ray is imported only then.
    if name == "init":
        from rlix.executor.api import init

        return init
    raise AttributeError(f"module 'rlix' has no attribute {name!r}")
