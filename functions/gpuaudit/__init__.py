"""gpuaudit: read-only auditor for GPU training clusters on AWS."""

__version__ = "0.1.0"
