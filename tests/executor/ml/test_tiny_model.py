"""The byte tokenizer and the tiny model: built locally, round-tripped through from_pretrained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from rlix.executor.ml.tiny_model import (  # noqa: E402
    ModelSpecError,
    build_tiny_model,
    load_causal_lm,
    prepare_model,
)
from rlix.executor.ml.tokenizer import EOS_TOKEN_ID, PAD_TOKEN_ID  # noqa: E402
from tests.executor.child_env import printed_by_a_fresh_interpreter  # noqa: E402


def test_tokenizer_round_trip_through_auto_tokenizer(tiny_model_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_path))
    text = "say a: héllo\n\x00~"
    ids = tokenizer.encode(text)
    assert ids == list(text.encode("utf-8"))  # one token per byte, id = byte value
    assert tokenizer.decode(ids) == text
    assert tokenizer.eos_token_id == EOS_TOKEN_ID
    assert tokenizer.pad_token_id == PAD_TOKEN_ID
    assert tokenizer.padding_side == "left"
    assert tokenizer.decode([97, EOS_TOKEN_ID], skip_special_tokens=True) == "a"


def test_model_round_trip_through_from_pretrained(tiny_model_path: Path, tmp_path: Path) -> None:
    config = json.loads((tiny_model_path / "config.json").read_text())
    assert config["model_type"] == "qwen2"
    assert config["num_hidden_layers"] == 2 and config["num_key_value_heads"] == 2
    loaded = AutoModelForCausalLM.from_pretrained(str(tiny_model_path))
    assert type(loaded).__name__ == "Qwen2ForCausalLM"
    # The build is deterministic: a second build has bit-identical weights.
    again = load_causal_lm(build_tiny_model(tmp_path / "again"))
    for (name, a), (_, b) in zip(
        loaded.state_dict().items(), again.state_dict().items(), strict=True
    ):
        assert torch.equal(a, b), name
    # And saving a loaded model and loading it back gives the same logits.
    loaded.save_pretrained(str(tmp_path / "resaved"))
    resaved = AutoModelForCausalLM.from_pretrained(str(tmp_path / "resaved"))
    ids = torch.tensor([[115, 97, 121, 32, 97, 58]])
    with torch.no_grad():
        assert torch.equal(loaded(ids).logits, resaved(ids).logits)


def test_prepare_model_reuses_tiny_and_accepts_a_real_folder(tiny_model_path: Path) -> None:
    assert prepare_model("tiny", tiny_model_path.parent) == tiny_model_path
    assert prepare_model(str(tiny_model_path), "/unused") == tiny_model_path


def test_prepare_model_rejects_bad_specs(tmp_path: Path, tiny_model_path: Path) -> None:
    with pytest.raises(ModelSpecError, match="not 'tiny' and not an existing local folder"):
        prepare_model(str(tmp_path / "missing"), tmp_path)
    with pytest.raises(ModelSpecError, match="config does not load"):
        prepare_model(str(tmp_path), tmp_path)
    no_weights = tmp_path / "no_weights"
    no_weights.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (no_weights / name).write_bytes((tiny_model_path / name).read_bytes())
    with pytest.raises(ModelSpecError, match="no weight files"):
        prepare_model(str(no_weights), tmp_path)
    no_tokenizer = tmp_path / "no_tokenizer"
    no_tokenizer.mkdir()
    (no_tokenizer / "config.json").write_bytes((tiny_model_path / "config.json").read_bytes())
    with pytest.raises(ModelSpecError, match="tokenizer does not load"):
        prepare_model(str(no_tokenizer), tmp_path)
    # Messages are one line.
    try:
        prepare_model(str(tmp_path), tmp_path)
    except ModelSpecError as exc:
        assert "\n" not in str(exc)


def test_the_model_check_and_a_pipelines_driver_never_import_the_model_code(tiny_model_path: Path) -> None:
    """Every run checks its model before Ray starts, and each pipeline's driver process loads the
    tokenizer: neither imports transformers' modeling code (seconds of CPU in each process on a
    CPU machine); loading the model does. A fresh interpreter, so nothing the test session
    imported counts."""
    script = (
        "import sys\n"
        "from rlix.executor.ml.tiny_model import load_causal_lm, prepare_model\n"
        "from rlix.executor.ml.tokenizer import load_tokenizer\n"
        "from rlix.executor.ml_workload import MlWorkload\n"
        f"folder = prepare_model({str(tiny_model_path)!r}, '.')\n"
        "load_tokenizer(folder)\n"
        "print('transformers.modeling_utils' in sys.modules)\n"
        "load_causal_lm(folder)\n"
        "print('transformers.modeling_utils' in sys.modules)\n"
    )
    assert printed_by_a_fresh_interpreter(script) == ["False", "True"]
