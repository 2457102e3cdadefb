"""Rules: pure functions of Evidence. No boto3, no clock, no I/O (ARCHITECTURE.md)."""
