"""Task and reward registries, and the toy task's rewards by hand."""

from __future__ import annotations

import random

import pytest

from rlix.executor.ml.registry import (
    Prompt,
    UnknownNameError,
    get_reward,
    get_task,
    known_rewards,
    known_tasks,
    register_reward,
    register_task,
)
from rlix.executor.ml.toy_tasks import letter_closeness, letter_share


def test_custom_task_and_reward_plug_in() -> None:
    @register_task("test_echo")
    class EchoTask:
        default_reward = "test_length"

        def sample_prompts(self, num_prompts: int, rng: random.Random) -> list[Prompt]:
            return [Prompt(f"echo {rng.randint(0, 9)}") for _ in range(num_prompts)]

    @register_reward("test_length")
    def length_reward(prompt: Prompt, response: str) -> float:
        return float(len(response))

    task = get_task("test_echo")
    prompts = task.sample_prompts(3, random.Random(0))
    assert len(prompts) == 3 and all(p.text.startswith("echo ") for p in prompts)
    assert get_reward(task.default_reward)(prompts[0], "abc") == 3.0
    assert "test_echo" in known_tasks() and "test_length" in known_rewards()


def test_unknown_names_list_the_known_ones() -> None:
    with pytest.raises(UnknownNameError) as excinfo:
        get_task("nope")
    message = str(excinfo.value)
    assert message.startswith("unknown task 'nope'; known tasks: ")
    assert "say_letter" in message and "\n" not in message
    with pytest.raises(
        UnknownNameError, match="unknown reward 'nope'; known rewards: .*letter_closeness"
    ):
        get_reward("nope")


def test_a_name_cannot_be_taken_twice() -> None:
    @register_reward("test_taken")
    def first(prompt: Prompt, response: str) -> float:
        return 0.0

    with pytest.raises(ValueError, match="already registered"):

        @register_reward("test_taken")
        def second(prompt: Prompt, response: str) -> float:
            return 1.0


def test_toy_task_prompts_and_rewards_by_hand() -> None:
    prompts = get_task("say_letter").sample_prompts(20, random.Random(3))
    assert {p.text for p in prompts} <= {"say a:", "say b:", "say c:", "say d:"}
    assert all(p.text == f"say {p.metadata['letter']}:" for p in prompts)
    prompt = Prompt("say b:", {"letter": "b"})
    assert letter_closeness(prompt, "bbbb") == 1.0
    # 'a' and 'c' are 1 away (63/64 each), 'B' is 32 away (1/2), '\x02' 96 away (0),
    # '\ufffd' far away (0).
    assert letter_closeness(prompt, "acB\x02\ufffd") == pytest.approx((63 / 64 * 2 + 0.5) / 5)
    assert letter_closeness(prompt, "") == 0.0
    assert letter_share(prompt, "bxbx") == 0.5
    assert letter_share(prompt, "") == 0.0
