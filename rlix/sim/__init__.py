"""The SimPy cluster model that drives rlix.policy offline (`rlix-sim`)."""
