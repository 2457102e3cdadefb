"""Where gpuaudit writes (issue #52 item 3): every write of the product's own results, in this one package.

* `history.py` — fleet memory: the CLI's SQLite file (`--history DIR`) and the findings table's history spans.
* `sinks.py` — the deployed Verdict step's results: the result JSON and reports to S3 (`write_reports`), the audit's
  summary and changed latest state to DynamoDB, the alert to SNS (`write_and_alert`); RecordFailure's failure item.
* `eventbus.py` — the changes as EventBridge events.
* `dynamo_batch.py` — BatchWriteItem as DynamoDB takes it (batches, retries, what still fails named).

What is not here, by design: the state machine's working state (payloads, caches, leases, claims), kept by the
handler that owns it, and the CLI's own output files. tests/unit/test_architecture.py
(`test_the_product_writes_only_through_its_write_package`) fails on any other mutating AWS call or sqlite3 import.
"""
