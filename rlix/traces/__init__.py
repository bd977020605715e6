"""Rollout-length traces: schema, readers and writers, validation, generators, bundled traces."""
