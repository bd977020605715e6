"""A cluster manager of its own driving the core from the README and DESIGN.md alone.

Each test is a mistake such a driver plausibly makes, or a contract it relies on, that the
core once got wrong: a bad argument must be a `SpecError` / `EventError` naming the field, and
nothing a driver hands in may change the core's state behind its back.
"""

from __future__ import annotations

import pytest

from rlix.policy import Scheduler, SpecError


@pytest.mark.parametrize("topology", [None, {"num_nodes": 1, "gpus_per_node": 8}, (1, 8)])
def test_scheduler_names_a_topology_that_is_not_one(topology: object) -> None:
    # It was an AttributeError ('dict' object has no attribute 'validate'), while a bad policy
    # or config was a SpecError naming its argument.
    with pytest.raises(SpecError) as caught:
        Scheduler(topology)  # type: ignore[arg-type]
    assert caught.value.field == "topology"
    assert "Topology" in caught.value.problem
