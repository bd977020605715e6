"""Studies: what puts the two drivers side by side, above both in the layering.

A sweep (`rlix-sim sweep`) runs `rlix.sim.simulate` for each point of a grid as Ray tasks,
locally (started the executor's way: every listener on loopback) or on an existing cluster.
The fidelity check (`fidelity`, `fidelity_configs`, `fidelity_report`; `bench/fidelity.py`)
calibrates the simulator on live executor runs and predicts others, and `repeatability` runs
one config live again and again for the floor under its errors.
"""

from rlix.studies.grid import Grid, Point, parse_grid
from rlix.studies.sweep import SweepResult, run_sweep

__all__ = ["Grid", "Point", "SweepResult", "parse_grid", "run_sweep"]
