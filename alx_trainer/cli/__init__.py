"""Command lines of `python -m alx_trainer`: one module per group of commands."""
