"""Rollout-length traces: schema, readers and writers, validation, generators, bundled traces."""

from rlix.traces.bundled import bundled_names, load_bundled
from rlix.traces.columns import parse_column_map
from rlix.traces.errors import TraceError
from rlix.traces.fit import (
    FitWarning,
    capped_clip,
    capped_mean,
    fit_summary,
    fit_trace,
    read_summary,
)
from rlix.traces.generate import KINDS, generate
from rlix.traces.io import read_trace, write_trace
from rlix.traces.schema import (
    INPUT_COLUMNS,
    OPTIONAL_COLUMNS,
    REQUIRED_COLUMNS,
    ROLLOUT_STATUSES,
    TABLE_COLUMNS,
    TABLE_NAMES,
)
from rlix.traces.stats import TraceStats, trace_stats
from rlix.traces.tables import read_table, table_path, write_table
from rlix.traces.validate import validate_trace

__all__ = [
    "INPUT_COLUMNS",
    "KINDS",
    "OPTIONAL_COLUMNS",
    "REQUIRED_COLUMNS",
    "ROLLOUT_STATUSES",
    "TABLE_COLUMNS",
    "TABLE_NAMES",
    "FitWarning",
    "TraceError",
    "TraceStats",
    "bundled_names",
    "capped_clip",
    "capped_mean",
    "fit_summary",
    "fit_trace",
    "generate",
    "load_bundled",
    "parse_column_map",
    "read_summary",
    "read_table",
    "read_trace",
    "table_path",
    "trace_stats",
    "validate_trace",
    "write_table",
    "write_trace",
]
