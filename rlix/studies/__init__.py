"""Studies: many simulator runs at once (`rlix-sim sweep`), on Ray, one row per point.

Above both drivers in the layering: a sweep runs `rlix.sim.simulate` for each point of a grid
as Ray tasks, locally (started the executor's way: every listener on loopback) or on an
existing cluster.
"""

from rlix.studies.grid import Grid, Point, parse_grid
from rlix.studies.sweep import SweepResult, run_sweep

__all__ = ["Grid", "Point", "SweepResult", "parse_grid", "run_sweep"]
