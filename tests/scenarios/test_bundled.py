"""Bundled scenarios: load, convert to valid specs under every policy, round-trip, keep their shapes.

The static-confinement test reads the YAML itself (yaml.safe_load and its own range parser)
instead of trusting the loader, and checks what static must mean: no GPU outside the home.
"""

from __future__ import annotations

from importlib import resources
from typing import Any

import pytest
import yaml

from rlix.policy import POLICIES, ROLLOUT_CLUSTER
from rlix.scenarios import Scenario, bundled_scenarios, load_scenario, parse_scenario
from rlix.traces import bundled_names

NAMES = ["agentic-4x32", "blog-4on12", "cluster-1024", "cpu-demo", "cpu-queue", "lab-day", "lab-day-1024", "lab-day-256", "math-rlvr",
         "mixed-lora", "tiny"]
#: The scenarios of dedicated partitions: every pipeline's home is its own.
DEDICATED = ["agentic-4x32", "cluster-1024", "cpu-demo", "math-rlvr", "mixed-lora", "tiny"]


def _raw(name: str) -> dict[str, Any]:
    text = resources.files("rlix.scenarios").joinpath("data", f"{name}.yaml").read_text()
    data: dict[str, Any] = yaml.safe_load(text)
    return data


def _gpus(value: Any) -> list[int]:
    """GPU set spelling -> ids, written independently of rlix.scenarios.gpusets."""
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return list(value)
    out: list[int] = []
    for part in str(value).split(","):
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi or lo) + 1))
    return out


def test_bundled_names() -> None:
    assert bundled_scenarios() == NAMES


@pytest.mark.parametrize("name", NAMES)
def test_loads_and_converts_under_every_policy(name: str) -> None:
    scenario = load_scenario(name)
    assert scenario.name == name
    assert len(scenario.description) > 100  # says where the shape comes from
    topology = scenario.topology()
    for policy in POLICIES:
        specs = scenario.pipeline_specs(policy)
        assert list(specs) == [p.id for p in scenario.pipelines]
        for spec in specs.values():
            spec.validate(topology)
    assert scenario.policy_config() == scenario.with_policy("static").policy_config()


@pytest.mark.parametrize("name", NAMES)
def test_to_yaml_round_trips(name: str) -> None:
    scenario = load_scenario(name)
    text = scenario.to_yaml()
    again = parse_scenario(text)
    assert again == scenario
    assert again.to_yaml() == text
    for policy in POLICIES:
        assert again.pipeline_specs(policy) == scenario.pipeline_specs(policy)


@pytest.mark.parametrize("name", NAMES)
def test_uses_only_bundled_traces(name: str) -> None:
    """A bundled scenario must work after a plain install: no trace files outside the package."""
    for pipeline in load_scenario(name).pipelines:
        refs = [pipeline.trace, *(a.trace for a in pipeline.adapters)]
        assert all(ref.path is None and ref.bundled in bundled_names() for ref in refs)


def _pipelines(raw: dict[str, Any]) -> list[dict[str, Any]]:
    """The raw pipelines with YAML merge keys applied (safe_load already merges them)."""
    return list(raw.get("pipelines") or [])


def _written(cluster: dict[str, Any], home: list[int], per_node: int, num_gpus: int) -> list[int]:
    """A cluster's mapping as the YAML writes it: ids, or `home` (the home in order), or `pool`
    (the home, then every other GPU node by node in whole TP bundles)."""
    gpus, tp = cluster["gpus"], cluster.get("tp", 1)
    if gpus == "home":
        return sorted(home)
    if gpus == "pool":
        rest: list[int] = []
        for node in range(num_gpus // per_node):
            free = [g for g in range(node * per_node, (node + 1) * per_node) if g not in home]
            rest += free[: len(free) - len(free) % tp]
        return sorted(home) + rest
    return _gpus(gpus)


@pytest.mark.parametrize("name", DEDICATED)
def test_dedicated_partitions_do_not_overlap(name: str) -> None:
    homes: list[set[int]] = []
    for item in _pipelines(_raw(name)):
        home = set(_gpus(item["home"]))
        assert not any(home & other for other in homes), f"{item['id']}: homes overlap"
        homes.append(home)


@pytest.mark.parametrize("name", NAMES)
def test_static_confines_each_pipeline_to_its_home(name: str) -> None:
    raw = _raw(name)
    per_node = raw["topology"]["gpus_per_node"]
    num_gpus = per_node * raw["topology"]["num_nodes"]
    static = load_scenario(name).pipeline_specs("static")
    for item in _pipelines(raw):
        spec = static[item["id"]]
        if isinstance(item["home"], int):  # a size: placed by the core, every cluster follows it
            assert not spec.placed and spec.home_size == item["home"]
            assert all(c.scope for c in spec.clusters.values())
            continue
        home = _gpus(item["home"])
        used = {g for cluster in spec.clusters.values() for g in cluster.mapping}
        assert used <= set(home), f"{item['id']} uses {sorted(used - set(home))} outside its home under static"
        rollout = spec.clusters[ROLLOUT_CLUSTER]
        assert sorted(rollout.mapping) == sorted(home), "static rollout ranks cover the home"
        for rank in range(len(rollout.mapping) // rollout.tp):
            bundle = rollout.mapping[rank * rollout.tp : (rank + 1) * rollout.tp]
            assert len({g // per_node for g in bundle}) == 1
        for cluster_name, cluster in item["clusters"].items():
            if cluster_name != ROLLOUT_CLUSTER:
                assert list(spec.clusters[cluster_name].mapping) == _written(cluster, home, per_node, num_gpus)


@pytest.mark.parametrize("name", NAMES)
def test_sharing_policies_use_the_mappings_as_written(name: str) -> None:
    raw = _raw(name)
    per_node = raw["topology"]["gpus_per_node"]
    num_gpus = per_node * raw["topology"]["num_nodes"]
    scenario = load_scenario(name)
    for policy in {name for name, cls in POLICIES.items() if not cls.confines_to_home}:
        specs = scenario.pipeline_specs(policy)
        for item in _pipelines(raw):
            clusters = specs[item["id"]].clusters
            assert set(clusters) == set(item["clusters"])
            for cluster_name, cluster in item["clusters"].items():
                assert clusters[cluster_name].tp == cluster.get("tp", 1)
                if isinstance(item["home"], int):
                    assert clusters[cluster_name].mapping == ()  # until the core places the home
                else:
                    home = _gpus(item["home"])
                    assert list(clusters[cluster_name].mapping) == _written(cluster, home, per_node, num_gpus)


def test_blog_4on12_shape() -> None:
    s = load_scenario("blog-4on12")
    assert s.num_gpus == 12 and len(s.pipelines) == 4
    for p in s.pipelines:
        assert (p.model, p.kind, p.algorithm, p.home) == ("7b", "full_finetune", "grpo", 8)
        assert p.arrival_s == 0


def test_lab_day_shape() -> None:
    """An 8-hour stream of the four templates on 64 GPUs (the offered load it makes, about 1.3,
    is measured by bench/sharing.py)."""
    s = load_scenario("lab-day")
    assert s.num_gpus == 64
    kinds = {p.id.rsplit("-", 1)[0] for p in s.pipelines}
    assert kinds == {"grpo7b-math", "grpo7b-agentic", "lora1.5b", "ppo32b"}
    assert all(0 <= p.arrival_s < 8 * 3600 for p in s.pipelines)
    assert {p.home for p in s.pipelines} == {8, 16}
    assert 200 <= len(s.pipelines) <= 340  # 33 per hour over 8 hours: 264 expected


@pytest.mark.parametrize(("name", "scale", "min_jobs", "max_jobs"), [
    ("lab-day-256", 4, 200, 340),  # 132 per hour over 2 hours: 264 expected
    ("lab-day-1024", 16, 900, 1200),  # 528 per hour over 2 hours: 1,056 expected
])
def test_scaled_lab_days_are_lab_day_at_scale(name: str, scale: int, min_jobs: int, max_jobs: int) -> None:
    """The same templates and settings on `scale` x the GPUs, every rate `scale` x, for 2 hours:
    read from the two files, not from the loader's output. Drains are the one setting apart:
    off on lab-day's 64 GPUs only (measured worse at 256)."""
    day, scaled = _raw("lab-day"), _raw(name)
    day_config = dict(day["policy"]["config"])
    assert day_config.pop("max_drain_s") == 0 and "max_drain_s" not in scaled["policy"]["config"]
    assert scaled["templates"] == day["templates"] and scaled["policy"] == {**day["policy"], "config": day_config}
    assert scaled["trace"] == day["trace"] and scaled["seed"] == day["seed"]
    assert scaled["topology"] == {**day["topology"], "num_nodes": scale * day["topology"]["num_nodes"]}
    assert [(a["template"], a["per_hour"]) for a in scaled["stream"]["arrivals"]] == [
        (a["template"], scale * a["per_hour"]) for a in day["stream"]["arrivals"]]
    assert scaled["stream"]["duration_s"] == 2 * 3600
    s = load_scenario(name)
    assert s.num_gpus == 64 * scale
    assert all(0 <= p.arrival_s < 2 * 3600 for p in s.pipelines)
    assert min_jobs <= len(s.pipelines) <= max_jobs


def _rollout_beyond_home(scenario: Scenario) -> bool:
    return all(
        set(p.clusters.actor_infer.gpus) > set(p.home) for p in scenario.pipelines
    )


def test_agentic_4x32_shape() -> None:
    s = load_scenario("agentic-4x32")
    assert (s.topology_config.num_nodes, s.topology_config.gpus_per_node) == (4, 8)
    assert [p.arrival_s for p in s.pipelines] == [0, 300, 600, 900]
    assert sorted(p.max_staleness for p in s.pipelines) == [0, 0, 1, 1]
    for node, p in enumerate(s.pipelines):
        assert (p.kind, p.algorithm, p.model, p.steps) == ("full_finetune", "grpo", "7b", 20)
        assert (p.prompts_per_step, p.samples_per_prompt) == (64, 8)
        assert p.home == tuple(range(8 * node, 8 * node + 8)) == p.clusters.actor_train.gpus
        assert p.clusters.actor_infer.tp == 2
        assert sorted(p.clusters.actor_infer.gpus) == list(range(32))
        assert (p.trace.bundled, p.trace.max_response_tokens) == ("agentic_small", 32768)


def test_mixed_lora_shape() -> None:
    s = load_scenario("mixed-lora")
    assert s.num_gpus == 64
    kinds = [p.kind for p in s.pipelines]
    assert kinds.count("full_finetune") == 2 and kinds.count("multi_lora") == 2
    for p in s.pipelines:
        assert len(p.home) == 16
        if p.kind == "multi_lora":
            assert len(p.adapters) == 4
            assert {a.max_staleness for a in p.adapters} == {0, 1}
    assert {p.max_staleness for p in s.pipelines if p.kind == "full_finetune"} == {0, 1}
    assert _rollout_beyond_home(s)


def test_math_rlvr_shape() -> None:
    s = load_scenario("math-rlvr")
    assert s.num_gpus == 32 and len(s.pipelines) == 4
    assert {p.trace.bundled for p in s.pipelines} == {"math_16k"}
    assert {p.trace.max_response_tokens for p in s.pipelines} == {16384}
    assert {p.algorithm for p in s.pipelines} == {"grpo", "ppo"}
    assert any(p.kl for p in s.pipelines)


def test_math_16k_trace_is_capped_at_16k() -> None:
    frame = load_scenario("math-rlvr").pipelines[0].trace.load()
    assert frame["response_tokens"].max() <= 16384
    assert frame["response_tokens"].max() > 4096  # the longer cap is why it exists


def test_cluster_1024_shape() -> None:
    s = load_scenario("cluster-1024")
    assert s.num_gpus == 1024 and len(s.pipelines) == 32
    assert s.max_time_s == 86400
    for p in s.pipelines:
        assert len(p.home) == 32
        assert (p.prompts_per_step, p.samples_per_prompt) == (512, 16)
    assert _rollout_beyond_home(s)
    assert sorted(g for p in s.pipelines for g in p.home) == list(range(1024))


def test_tiny_and_cpu_demo_shape() -> None:
    for name in ("tiny", "cpu-demo"):
        s = load_scenario(name)
        assert s.num_gpus == 4
        assert sorted(p.kind for p in s.pipelines) == ["full_finetune", "multi_lora"]
        lora = next(p for p in s.pipelines if p.kind == "multi_lora")
        assert len(lora.adapters) == 2
    demo = load_scenario("cpu-demo")
    assert demo.executor is not None
    assert (demo.executor.model, demo.executor.backend) == ("tiny", "hf")
    assert all(p.samples_per_step <= 16 and 10 <= p.steps <= 20 for p in demo.pipelines)
    # Each pipeline's rollout may use the other's training GPUs.
    for p in demo.pipelines:
        for other in demo.pipelines:
            if other is not p:
                assert set(other.clusters.actor_train.gpus) & set(p.clusters.actor_infer.gpus)
