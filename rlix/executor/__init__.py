"""The Ray runtime that drives rlix.policy with real pipelines (`rlix-exec`).

- `session`: start Ray locally with declared GPUs, every listener on loopback, or join a cluster;
- `placement`: core GPU ids -> Ray nodes; one placement group per node, one bundle per GPU;
- `orchestrator` (+ `actuator`, `external`, `records`): the named async actor hosting the core,
  its one `rlix.runs.Loop` and the run's `Recorder`; program pipelines' hosts; the API calls;
- `pipeline` (+ `ranks`, `trajectories`): the pipeline actor running the shared program, its
  rollout queue and ranks (expand, shrink with re-queue, weight sync);
- `workers`: the GPU actors (one rollout worker per rank, one trainer per training cluster);
- `workload`, `ml_workload`, `synthetic`: what the stages compute (real models, or timed
  synthetic work for runtime tests and benchmarks);
- `api` (`rlix.init()`), `run`, `progress`, `cli` (`rlix-exec run | kill`).

Importing `rlix` does not import Ray; `rlix.init()` does.
"""
