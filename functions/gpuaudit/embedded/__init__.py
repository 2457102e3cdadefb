"""Embedded backend: serve a world file (a frozen AWS account) to the real boto3 clients.

Never imported by Lambda code: it exists for the demo, the tests and offline replay.
"""
