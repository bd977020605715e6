"""Run-output tables: written and read back in both formats; rollouts replay as a trace."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pandas.testing as pdt
import pytest

from rlix.traces import TABLE_COLUMNS, TraceError, read_table, read_trace, write_table


def allocations() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pipeline_id": ["p1", "p1", "p2"],
            "cluster": ["actor_train", "rollout", "rollout"],
            "priority": [1, 6, 6],
            "dp_rank": [-1, 0, 1],
            "gpu": [0, 1, 2],
            "t_start": [0.0, 1.5, 2.0],
            "t_end": [10.0, 12.0, 13.25],
        }
    )


def steps() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pipeline_id": ["p1", "p2"],
            "adapter": ["", "lora-a"],
            "step": [0, 0],
            "t_start": [0.0, 0.5],
            "t_end": [30.0, 31.0],
            "rollout_s": [20.0, 21.0],
        }
    )


def rollouts() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "pipeline_id": ["p1", "p1", "p1", "p2"],
            "adapter": [None, None, None, "lora-a"],
            "trajectory_id": [0, 1, 1, 2],
            "step_consumed": [0, 0, 0, 3],
            "weight_version": [0, 0, 0, 2],
            "prompt_tokens": [100, 120, 120, 90],
            "response_tokens": [500, 0, 800, 40],
            "t_start": [0.0, 0.0, 5.0, 1.0],
            "t_end": [4.0, 5.0, 9.0, 2.0],
            "preemptions": [0, 1, 0, 0],
            "status": ["completed", "requeued", "completed", "completed"],
        }
    )


TABLES = {"allocations": allocations, "steps": steps, "rollouts": rollouts}


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
@pytest.mark.parametrize("name", list(TABLES))
def test_round_trip(tmp_path: Path, name: str, fmt: str) -> None:
    frame = TABLES[name]()
    path = write_table(frame, tmp_path, name, fmt)  # type: ignore[arg-type]
    assert path == tmp_path / f"{name}.{fmt}"
    back = read_table(path)
    assert list(back.columns)[: len(TABLE_COLUMNS[name])] == list(TABLE_COLUMNS[name])
    pdt.assert_frame_equal(back, read_table(tmp_path, name))  # type: ignore[arg-type]
    for column, dtype in TABLE_COLUMNS[name].items():
        assert str(back[column].dtype) == dtype, column
    expected = frame.copy()
    for column in expected.columns:
        if column in TABLE_COLUMNS[name] and TABLE_COLUMNS[name][column] == "string":
            text = expected[column].astype("string")
            expected[column] = text.mask(text == "", pd.NA)
    pdt.assert_frame_equal(back, expected, check_dtype=False)


def test_recorded_rollouts_replay_as_trace(tmp_path: Path) -> None:
    path = write_table(rollouts(), tmp_path, "rollouts")
    trace = read_trace(path)
    # Only completed rollouts; the requeued attempt (0 tokens so far) is not replayed twice.
    assert trace["response_tokens"].tolist() == [500, 800, 40]
    assert trace["pipeline"].tolist() == ["p1", "p1", "p2"]
    assert trace["step"].tolist() == [0, 0, 3]


def test_rollouts_trace_errors_use_file_lines(tmp_path: Path) -> None:
    frame = rollouts()
    frame.loc[3, "prompt_tokens"] = -1
    path = tmp_path / "rollouts.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    # Data row 4 is line 5 (the header is line 1), past the filtered-out requeued row.
    assert (caught.value.line, caught.value.column) == (5, "prompt_tokens")
    frame.loc[3, "status"] = "done"
    frame.to_csv(path, index=False)
    path.write_text(path.read_text().replace("\n", "\n\n", 2))  # blank lines 2 and 4
    with pytest.raises(TraceError, match="'done' is not one of") as caught:
        read_table(path)
    assert (caught.value.line, caught.value.column) == (7, "status")


@pytest.mark.parametrize("bad", ["done", None])
def test_bad_status_in_a_categorical_column(tmp_path: Path, bad: str | None) -> None:
    """A simulator's table keeps statuses as a Categorical: checked by category, same error."""
    frame = rollouts()
    frame["status"] = frame["status"].astype("category")
    write_table(frame, tmp_path, "rollouts")  # good statuses pass
    values = frame["status"].astype(object)
    values[2] = bad
    frame["status"] = pd.Categorical(values)
    with pytest.raises(TraceError, match="is not one of") as caught:
        write_table(frame, tmp_path, "rollouts")
    assert caught.value.row == 3


def test_missing_required_column(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="lacks required column"):
        write_table(allocations().drop(columns="gpu"), tmp_path, "allocations")


def test_bad_status_and_completed_without_tokens(tmp_path: Path) -> None:
    frame = rollouts()
    frame.loc[2, "status"] = "done"
    with pytest.raises(TraceError, match="'done' is not one of") as caught:
        write_table(frame, tmp_path, "rollouts")
    assert caught.value.row == 3
    frame = rollouts()
    frame.loc[0, "response_tokens"] = 0
    with pytest.raises(TraceError, match="completed rollout"):
        write_table(frame, tmp_path, "rollouts")


def test_bad_value_and_unknown_table(tmp_path: Path) -> None:
    frame = allocations()
    frame["gpu"] = frame["gpu"].astype(object)
    frame.loc[1, "gpu"] = "x"
    with pytest.raises(TraceError, match="'x' is not a number"):
        write_table(frame, tmp_path, "allocations")
    with pytest.raises(TraceError, match="unknown run table"):
        read_table(tmp_path / "summary.parquet")


def typed_rollouts() -> pd.DataFrame:
    """The rollouts of `rollouts()` as a driver hands them over: text as Categoricals (empty
    text for "no adapter"), numbers as 32-bit numpy columns."""
    frame = rollouts()
    typed = {}
    for column, values in frame.items():
        if column in ("pipeline_id", "adapter", "status"):
            typed[column] = pd.Categorical(values.fillna(""))
        elif column in ("t_start", "t_end"):
            typed[column] = values.to_numpy("float64")
        else:
            typed[column] = values.to_numpy("int32")
    return pd.DataFrame(typed)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_typed_columns_conform_to_the_same_values(tmp_path: Path, fmt: str) -> None:
    from rlix.traces.tables import conform_table

    plain = conform_table(rollouts(), "rollouts", "plain")
    typed = conform_table(typed_rollouts(), "rollouts", "typed")
    for column in plain.columns:
        assert typed[column].tolist() == plain[column].tolist() or (
            typed[column].isna().tolist() == plain[column].isna().tolist()
        ), column
    assert typed["adapter"].isna().tolist() == [True, True, True, False]
    # A narrower signed integer keeps its width (half the memory of 10^8 rows); plain is int64.
    assert str(typed["trajectory_id"].dtype) == "int32"
    assert str(plain["trajectory_id"].dtype) == "int64"
    back = read_table(write_table(typed, tmp_path, "rollouts", fmt))  # type: ignore[arg-type]
    assert back["trajectory_id"].tolist() == plain["trajectory_id"].tolist()
    assert str(back["trajectory_id"].dtype) == ("int32" if fmt == "parquet" else "int64")
    assert back["status"].tolist() == plain["status"].tolist()
    assert back["adapter"].isna().tolist() == [True, True, True, False]


@pytest.mark.parametrize(
    "column, value, message",
    [
        ("t_end", -1.0, "negative"),
        ("t_start", float("inf"), "not a finite number"),
        ("response_tokens", 0, "not positive"),
        ("status", "lost", "not one of"),
    ],
)
def test_typed_columns_are_still_checked(column: str, value: object, message: str) -> None:
    from rlix.traces.tables import conform_table

    frame = typed_rollouts()
    if column == "status":
        frame[column] = pd.Categorical(["completed", "requeued", value, "completed"])
    else:
        values = frame[column].to_numpy().copy()
        values[2] = value
        frame[column] = values
    with pytest.raises(TraceError, match=message):
        conform_table(frame, "rollouts", "typed")


def test_unsigned_and_float_integers_become_int64() -> None:
    from rlix.traces.tables import conform_table

    frame = typed_rollouts()
    frame["trajectory_id"] = frame["trajectory_id"].astype("uint32")
    frame["prompt_tokens"] = frame["prompt_tokens"].astype("float64")
    out = conform_table(frame, "rollouts", "typed")
    assert str(out["trajectory_id"].dtype) == "int64"
    assert str(out["prompt_tokens"].dtype) == "int64"
    assert str(out["response_tokens"].dtype) == "int32"


LABELS_LIKE_NUMBERS = ["01", "2.0", "NA", "null", "nan", "1e3"]


def test_csv_labels_that_look_like_numbers_or_missing_read_back_as_written(tmp_path: Path) -> None:
    n = len(LABELS_LIKE_NUMBERS)
    frame = steps().iloc[[0] * n].reset_index(drop=True)
    frame["pipeline_id"] = LABELS_LIKE_NUMBERS
    frame["adapter"] = [*LABELS_LIKE_NUMBERS[1:], ""]
    frame["step"] = range(n)
    frame["rollout_s"] = [1.5, None, 3.0, None, 5.0, 6.0]  # other columns: pandas' missing values
    back = read_table(write_table(frame, tmp_path, "steps", "csv"))
    assert back["pipeline_id"].tolist() == LABELS_LIKE_NUMBERS
    assert back["adapter"].tolist()[:-1] == LABELS_LIKE_NUMBERS[1:]
    assert back["adapter"].isna().tolist() == [False] * (n - 1) + [True]  # empty: no adapter
    assert back["rollout_s"].isna().tolist() == [False, True, False, True, False, False]


def test_csv_trace_pipeline_labels_read_as_written(tmp_path: Path) -> None:
    path = tmp_path / "trace.csv"
    path.write_text("pipeline,adapter,response_tokens\n01,NA,5\n2.0,,7\nNA,n/a,9\n")
    trace = read_trace(path)
    assert trace["pipeline"].tolist() == ["01", "2.0", "NA"]
    assert trace["adapter"].tolist()[0] == "NA" and trace["adapter"].tolist()[2] == "n/a"
    assert trace["adapter"].isna().tolist() == [False, True, False]


@pytest.mark.parametrize(("value", "shown"), [(-7.62, "-7.62"), ("soon", "'soon'")])
def test_a_bad_optional_time_is_shown_as_written(tmp_path: Path, value: object, shown: str) -> None:
    """A job's start_s may be empty, never negative; numpy's repr showed np.float64(-7.62)."""
    frame = pd.DataFrame({"pipeline_id": ["a"], "arrival_s": [0.0], "start_s": [value], "queueing_s": [None],
                          "finish_s": [None], "jct_s": [None], "alone_s": [None], "slowdown": [None]})
    path = tmp_path / "jobs.csv"
    frame.to_csv(path, index=False)
    with pytest.raises(TraceError) as error:
        read_table(path, "jobs")
    assert f"column 'start_s': {shown} is not a number >= 0 or empty" in str(error.value)
    if isinstance(value, float):
        frame.astype({"start_s": "float64"}).to_parquet(tmp_path / "jobs.parquet")
        with pytest.raises(TraceError, match=r"'start_s': -7\.62 is not"):
            read_table(tmp_path / "jobs.parquet", "jobs")


def test_a_parquet_table_cut_short_says_so(tmp_path: Path) -> None:
    path = tmp_path / "steps.parquet"
    pd.DataFrame({"x": range(1000)}).to_parquet(path)
    path.write_bytes(path.read_bytes()[:300])  # begins with PAR1, its footer gone
    with pytest.raises(TraceError, match="not a whole Parquet file: its end is missing"):
        read_table(path, "steps")
