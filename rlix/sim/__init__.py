"""The SimPy cluster model that drives rlix.policy offline (`rlix-sim`).

`simulate(scenario, policy=..., trace=..., out=...)` replays a scenario and returns its summary
and tables (`rlix.sim.api`).
"""

from typing import Any


def simulate(*args: Any, **kwargs: Any) -> Any:
    """See `rlix.sim.api.simulate` (imported lazily: SimPy is the `sim` extra)."""
    from rlix.sim.api import simulate as run

    return run(*args, **kwargs)


__all__ = ["simulate"]
