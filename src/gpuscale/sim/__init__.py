"""A trace-driven model of a GPU inference cluster, the proving ground for scaling policies."""
