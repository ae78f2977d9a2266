"""ALX: sharded implicit alternating least squares in JAX."""

__version__ = "0.1.0"
