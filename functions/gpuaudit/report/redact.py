"""Account IDs never leave the auditor (RULES §0.7, OUTPUT-CONTRACT privacy).

Redact account IDs, not every 12-digit number: ParallelCluster log groups end in a
12-digit timestamp (`/aws/parallelcluster/<cluster>-202608261551`) and are quoted intact.
"""

from __future__ import annotations

import re

# An ARN's account field, an owner/account JSON field, or the `<account>:` prefix of `@log`.
ARN_ACCOUNT = re.compile(r"(arn:aws[\w-]*:[\w-]*:[\w-]*:)(\d{12})(?=[:/])")
FIELD_ACCOUNT = re.compile(r'((?:"?(?:OwnerId|AccountId|accountId|account|recipientAccountId|'
                           r'UnusedReservationBillingOwnerId)"?\s*[:=]\s*"?))(\d{12})')
BARE = re.compile(r"(?<![\w-])\d{12}(?![\w])")
MASK = "<account>"


def redact(text: str, account_ids: set[str] | frozenset[str] = frozenset()) -> str:
    text = ARN_ACCOUNT.sub(lambda m: m.group(1) + MASK, text)
    text = FIELD_ACCOUNT.sub(lambda m: m.group(1) + MASK, text)
    for account in account_ids:  # a known account ID is masked wherever it stands (`sagemaker-…-<account>`)
        text = re.sub(rf"(?<!\d){re.escape(account)}(?!\d)", MASK, text)
    # A bare 12-digit number standing alone (not a log-group timestamp suffix) reads as an account ID.
    return BARE.sub(MASK, text)
