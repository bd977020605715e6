"""The Ray runtime that drives rlix.policy with real pipelines (`rlix-exec`)."""
