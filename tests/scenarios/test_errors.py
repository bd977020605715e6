"""Bad scenarios: each is one ScenarioError naming the file, the line, the field path and the problem.

Each case edits the valid base scenario (conftest.BASE) and marks the line the error must name
with ``# <-``; the expected line is found by looking for the marker, not computed by the loader.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlix.scenarios import ScenarioError, load_scenario, parse_scenario
from tests.scenarios.conftest import BASE

MARK = "# <-"
P0_ITEM = ("  - id: p0\n", f"  - id: p0  {MARK}\n")
P1_ITEM = ("  - id: p1\n", f"  - id: p1  {MARK}\n")

# (case id, edits (old -> new, old None = append), expected field path, words the problem must contain)
CASES: list[tuple[str, list[tuple[str | None, str]], str, str]] = [
    ("unknown field", [("    steps: 2\n    arrival_s", f"    stepz: 2  {MARK}\n    steps: 2\n    arrival_s")],
     "pipelines[0].stepz", "did you mean 'steps'"),
    ("unknown top-level field", [(None, f"polcy: {{name: rlix}}  {MARK}\n")], "polcy", "did you mean 'policy'"),
    ("unknown cluster", [("      actor_infer: {tp: 2, gpus: 0-7}\n",
                          f"      actor_infer: {{tp: 2, gpus: 0-7}}\n      rollout: {{gpus: 0-1}}  {MARK}\n")],
     "pipelines[0].clusters.rollout", "unknown field"),
    ("GPU id out of range", [("{tp: 2, gpus: 0-7}", f"{{tp: 2, gpus: 0-9}}  {MARK}")],
     "pipelines[0].clusters.actor_infer.gpus=8", "outside the cluster"),
    ("TP does not divide the mapping", [("{tp: 2, gpus: 0-7}", f"{{tp: 3, gpus: 0-7}}  {MARK}")],
     "pipelines[0].clusters.actor_infer.tp=3", "does not divide"),
    ("TP bundle across nodes", [("{tp: 2, gpus: 0-7}", f"{{tp: 2, gpus: 1-6}}  {MARK}")],
     "pipelines[0].clusters.actor_infer.gpus=(3, 4)", "spans nodes"),
    ("missing home", [P0_ITEM, ("    home: 0-3\n", "")], "pipelines[0].home", "needs a home"),
    # A misspelt required field is both unknown and missing: the misspelling is the news.
    ("misspelt home", [("    home: 0-3\n", f"    homee: 0-3  {MARK}\n")], "pipelines[0].homee", "did you mean 'home'"),
    ("empty home", [("    home: 0-3\n", f"    home: []  {MARK}\n")], "pipelines[0].home", "names no GPU"),
    ("home size past the pool", [("    home: 0-3\n", f"    home: 12  {MARK}\n"),
                                 ("actor_train: {tp: 1, gpus: 0-3}", "actor_train: {tp: 1, gpus: home}"),
                                 ("actor_infer: {tp: 2, gpus: 0-7}", "actor_infer: {tp: 2, gpus: pool}")],
     "pipelines[0].home", "larger than the pool (8 GPUs)"),
    ("home size not in whole TP bundles", [("    home: 0-3\n", f"    home: 3  {MARK}\n"),
                                           ("actor_train: {tp: 1, gpus: 0-3}", "actor_train: {tp: 1, gpus: home}"),
                                           ("actor_infer: {tp: 2, gpus: 0-7}", "actor_infer: {tp: 2, gpus: pool}")],
     "pipelines[0].home", "cannot be placed in whole TP bundles of 2 GPU(s)"),
    ("home size with a GPU list", [("    home: 0-3\n", "    home: 4\n"),
                                   ("actor_train: {tp: 1, gpus: 0-3}", f"actor_train: {{tp: 1, gpus: 0-3}}  {MARK}")],
     "pipelines[0].clusters.actor_train.gpus", "every cluster says `gpus: home` or `gpus: pool`"),
    ("home size zero", [("    home: 0-3\n", f"    home: 0  {MARK}\n")],
     "pipelines[0].home", "positive number of GPUs"),
    ("unknown cluster scope", [("actor_train: {tp: 1, gpus: 0-3}", f"actor_train: {{tp: 1, gpus: house}}  {MARK}")],
     "pipelines[0].clusters.actor_train.gpus", "neither a GPU id nor a range"),
    ("home not in whole TP bundles", [("    home: 0-3\n", f"    home: 0-2  {MARK}\n"),
                                      ("actor_train: {tp: 1, gpus: 0-3}", "actor_train: {tp: 1, gpus: 0-2}")],
     "pipelines[0].home", "whole rollout TP bundles"),
    ("home GPU out of range", [("    home: 4-7\n", f"    home: 4-8  {MARK}\n")], "pipelines[1].home=8", "outside"),
    ("training outside home", [("actor_train: {tp: 1, gpus: 0-3}", f"actor_train: {{tp: 1, gpus: 0-4}}  {MARK}")],
     "pipelines[0].clusters.actor_train.gpus", "outside the pipeline's home"),
    ("unknown bundled trace", [("trace: {bundled: math_small}", f"trace: {{bundled: chat}}  {MARK}")],
     "trace.bundled='chat'", "no bundled trace"),
    ("missing trace file", [("trace: {bundled: math_small}", f"trace: {{path: gone.csv}}  {MARK}")],
     "trace.path='gone.csv'", "no such trace file"),
    ("trace with two sources", [("trace: {bundled: math_small}", f"trace: {{bundled: math_small, path: x.csv}}  {MARK}")],
     "trace", "exactly one"),
    ("column map on a bundled trace", [("trace: {bundled: math_small}",
                                        f"trace: {{bundled: math_small, columns: {{response_tokens: n}}}}  {MARK}")],
     "trace.columns", "needs a file trace"),
    ("no trace anywhere", [("trace: {bundled: math_small}\n", ""), P0_ITEM], "pipelines[0].trace", "no trace"),
    ("unknown model size", [("    model: 7b\n    home: 0-3", f"    model: 9b  {MARK}\n    home: 0-3")],
     "pipelines[0].model='9b'", "unknown model size class"),
    ("zero steps", [("    steps: 2\n    arrival_s", f"    steps: 0  {MARK}\n    arrival_s")],
     "pipelines[0].steps=0", "greater than 0"),
    ("zero prompts", [("    prompts_per_step: 4\n    samples_per_prompt: 2\n    steps: 2\n    arrival_s",
                       f"    prompts_per_step: 0  {MARK}\n    samples_per_prompt: 2\n    steps: 2\n    arrival_s")],
     "pipelines[0].prompts_per_step=0", "greater than 0"),
    ("negative samples", [("    samples_per_prompt: 2\n    steps: 2\n    arrival_s",
                           f"    samples_per_prompt: -2  {MARK}\n    steps: 2\n    arrival_s")],
     "pipelines[0].samples_per_prompt=-2", "greater than 0"),
    ("zero adapter steps", [("      - {name: a0}", f"      - {{name: a0, steps: 0}}  {MARK}")],
     "pipelines[1].adapters[0].steps=0", "greater than 0"),
    ("YAML syntax error", [("    model: 7b\n    home: 0-3", f"    model: 7b: x  {MARK}\n    home: 0-3")],
     "", "YAML syntax error"),
    ("duplicate YAML key", [("    steps: 2\n    arrival_s", f"    steps: 2\n    steps: 3  {MARK}\n    arrival_s")],
     "pipelines[0].steps", "key given twice"),
    ("fault at a negative time", [(None, f"faults:\n  events:\n    - {{at_s: -1, kill: p1}}  {MARK}\n")],
     "faults.events[0].at_s=-1", "greater than or equal to 0"),
    ("fault naming an unknown pipeline", [(None, f"faults:\n  events:\n    - {{at_s: 60, kill: p9}}  {MARK}\n")],
     "faults.events[0].kill='p9'", "no such pipeline"),
    ("fault naming an unknown GPU", [(None, f"faults:\n  events:\n    - {{at_s: 60, lose_gpu: 8}}  {MARK}\n")],
     "faults.events[0].lose_gpu=8", "outside the cluster"),
    ("restore before loss", [(None, f"faults:\n  events:\n    - {{at_s: 60, lose_gpu: 2, restore_at_s: 30}}  {MARK}\n")],
     "faults.events[0].restore_at_s=30", "after the loss"),
    ("kill before arrival", [(None, f"faults:\n  events:\n    - {{at_s: 5, kill: p0}}  {MARK}\n")],
     "faults.events[0].at_s=5", "before pipeline 'p0' arrives"),
    ("GPU lost twice at once", [(None, "faults:\n  events:\n    - {at_s: 60, lose_gpu: 0-3, restore_at_s: 120}\n"
                                       f"    - {{at_s: 90, lose_gpu: 3}}  {MARK}\n")],
     "faults.events[1].at_s=90", "GPU 3 is still lost"),
    ("fault of no kind", [(None, f"faults:\n  events:\n    - {{at_s: 60}}  {MARK}\n")], "faults.events[0]", "either"),
    ("adapters on full_finetune", [("    arrival_s: 10\n", f"    arrival_s: 10\n    adapters: [{{name: x}}]  {MARK}\n")],
     "pipelines[0].adapters", "only multi_lora"),
    ("multi_lora without adapters", [P1_ITEM, ("    adapters:\n      - {name: a0}\n      - {name: a1, max_staleness: 1}\n", "")],
     "pipelines[1].adapters", "needs at least one adapter"),
    ("duplicate adapter names", [("      - {name: a1, max_staleness: 1}", f"      - {{name: a0, max_staleness: 1}}  {MARK}")],
     "pipelines[1].adapters[1].name='a0'", "duplicate adapter"),
    ("ppo without critic", [("    kind: full_finetune\n", "    kind: full_finetune\n    algorithm: ppo\n"),
                            ("    clusters:\n      actor_train: {tp: 1, gpus: 0-3}", f"    clusters:  {MARK}\n      actor_train: {{tp: 1, gpus: 0-3}}")],
     "pipelines[0].clusters", "ppo needs a critic"),
    ("ppo on multi_lora", [("    kind: multi_lora\n", f"    kind: multi_lora\n    algorithm: ppo  {MARK}\n")],
     "pipelines[1].algorithm='ppo'", "full_finetune pipelines only"),
    ("critic without ppo", [("      actor_infer: {tp: 2, gpus: 0-7}\n",
                             f"      actor_infer: {{tp: 2, gpus: 0-7}}\n      critic: {{gpus: 0-3}}  {MARK}\n")],
     "pipelines[0].clusters.critic", "grpo has no critic"),
    ("kl without reference", [("    kind: full_finetune\n", "    kind: full_finetune\n    kl: true\n"),
                              ("    clusters:\n      actor_train: {tp: 1, gpus: 0-3}", f"    clusters:  {MARK}\n      actor_train: {{tp: 1, gpus: 0-3}}")],
     "pipelines[0].clusters", "needs a reference"),
    ("duplicate pipeline ids", [("  - id: p1\n", f"  - id: p0  {MARK}\n")], "pipelines[1].id='p0'", "duplicate pipeline id"),
    ("unknown policy", [(None, f"policy: {{name: fifo}}  {MARK}\n")], "policy.name='fifo'", "unknown policy"),
    ("negative policy tunable", [(None, f"policy: {{config: {{retry_backoff_s: -1}}}}  {MARK}\n")],
     "policy.config.retry_backoff_s=-1", "greater than or equal to 0"),
    ("string where an int belongs", [("{tp: 2, gpus: 0-7}", f"{{tp: '2', gpus: 0-7}}  {MARK}")],
     "pipelines[0].clusters.actor_infer.tp='2'", "valid integer"),
    ("bad GPU range", [("{tp: 2, gpus: 0-7}", f"{{tp: 2, gpus: 0-x}}  {MARK}")],
     "pipelines[0].clusters.actor_infer.gpus='0-x'", "neither a GPU id nor a range"),
    ("backwards GPU range", [("{tp: 2, gpus: 0-7}", f"{{tp: 2, gpus: 7-0}}  {MARK}")],
     "pipelines[0].clusters.actor_infer.gpus='7-0'", "runs backwards"),
    ("duplicate GPU in a mapping", [("{tp: 2, gpus: 0-7}", f"{{tp: 2, gpus: '0-7,2-3'}}  {MARK}")],
     "pipelines[0].clusters.actor_infer.gpus=2", "duplicate GPU"),
    ("non-positive weight", [("    arrival_s: 10\n", f"    arrival_s: 10\n    weight: 0  {MARK}\n")],
     "pipelines[0].weight=0", "greater than 0"),
    ("negative adapter staleness", [("      - {name: a0}", f"      - {{name: a0, max_staleness: -1}}  {MARK}")],
     "pipelines[1].adapters[0].max_staleness=-1", "greater than or equal to 0"),
    ("bad pipeline id", [("  - id: p1\n", f"  - id: 'p 1'  {MARK}\n")], "pipelines[1].id='p 1'", "match pattern"),
    ("decision failure rate of 1", [(None, f"faults: {{decision_failure_rate: 1.0}}  {MARK}\n")],
     "faults.decision_failure_rate=1.0", "less than 1"),
]


def _edit(edits: list[tuple[str | None, str]]) -> tuple[str, int]:
    text = BASE
    for old, new in edits:
        if old is None:
            text += new
        else:
            assert text.count(old) == 1, f"edit target not unique: {old!r}"
            text = text.replace(old, new)
    marked = [n for n, line in enumerate(text.splitlines(), start=1) if MARK in line]
    assert len(marked) == 1, "each case marks exactly one line"
    return text, marked[0]


@pytest.mark.parametrize(("edits", "path", "words"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_scenario_names_file_line_path_and_problem(
    edits: list[tuple[str | None, str]], path: str, words: str, tmp_path: Path
) -> None:
    text, line = _edit(edits)
    (tmp_path / "x.csv").write_text("response_tokens\n5\n")  # a trace file that exists
    with pytest.raises(ScenarioError) as info:
        parse_scenario(text, file="bad.yaml", base_dir=tmp_path)
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"bad.yaml:{line}: "), message
    assert f": {path}" in message if path else True, message
    assert words in message, message
    assert info.value.line == line


def test_base_scenario_is_valid(base_yaml: str) -> None:
    scenario = parse_scenario(base_yaml)
    assert [p.id for p in scenario.pipelines] == ["p0", "p1"]


def test_errors_from_a_file_name_the_file(tmp_path: Path) -> None:
    text, line = _edit([("{tp: 2, gpus: 0-7}", f"{{tp: 3, gpus: 0-7}}  {MARK}")])
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=rf"^{path}:{line}: pipelines\[0\]\.clusters\.actor_infer\.tp=3: "):
        load_scenario(path)


@pytest.mark.parametrize(
    ("text", "words"),
    [("", "empty"), ("- just\n- a list\n", "a scenario is a YAML mapping"), ("name: x\n", "topology")],
)
def test_documents_that_are_not_scenarios(text: str, words: str) -> None:
    with pytest.raises(ScenarioError, match=words):
        parse_scenario(text, file="x.yaml")


def test_unknown_bundled_name_and_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no bundled scenario 'nope'.*bundled: .*tiny"):
        load_scenario("nope")
    with pytest.raises(ScenarioError, match="cannot read the scenario file"):
        load_scenario(tmp_path / "absent.yaml")


def test_field_error_for_drivers_names_the_line(tmp_path: Path) -> None:
    text = BASE + "costs: {decode_floor_s: 0.001}\n"
    scenario = parse_scenario(text, file="s.yaml")
    line = text.splitlines().index("costs: {decode_floor_s: 0.001}") + 1
    error = scenario.field_error(("costs", "decode_floor_s"), 0.001, "unknown cost constant")
    assert str(error) == f"s.yaml:{line}: costs.decode_floor_s=0.001: unknown cost constant"


def test_unknown_policy_in_pipeline_specs(base_yaml: str) -> None:
    with pytest.raises(ScenarioError, match="policy.name='fifo'"):
        parse_scenario(base_yaml).pipeline_specs("fifo")
    with pytest.raises(ScenarioError, match="policy.name='fifo'"):
        parse_scenario(base_yaml).with_policy("fifo")
