"""Dev-only tools: the demo, the world generator, the benchmark and the Insights conformance check.

They import the embedded backend; none of them is shipped to Lambda (infra/packaging.py excludes the folder)."""
