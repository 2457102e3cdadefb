"""Lambda handlers of the deployed auditor, one module per function of the state machine.

Plan → (per cluster) Inventory → CollectLogs (per log batch) → Finish → Verdict. Each handler
parses its event into a model, calls the same gpuaudit.pipeline function the CLI calls, and
returns JSON. Sessions and the clock come from module-level hooks (`session_factory`,
`clock`) so tests can serve a world; Lambda code never imports gpuaudit.embedded.
"""
