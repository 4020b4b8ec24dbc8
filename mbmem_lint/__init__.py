"""mbmem-lint: static linter and per-rank memory estimator for Megatron Bridge recipes."""

__version__ = "0.1.0"
