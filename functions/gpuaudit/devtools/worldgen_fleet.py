"""The generated account's fleet: where it lives (account, Region), its nodes as planned (launch, role,
when the kernel stream goes silent, the Xids it logs), and the seeded AWS-style identifiers it is given."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime

ACCOUNT = "111122223333"  # the documented example account
REGION = "us-west-2"


@dataclass
class Node:
    index: int
    instance_id: str
    ip: str
    launch: datetime
    role: str  # head | compute | controller
    group: str | None
    instance_type: str
    silent_at: datetime | None = None
    xids: list[tuple[datetime, int, str]] | None = None  # (time, code, message without host prefix)

    @property
    def host(self) -> str:
        return "ip-" + self.ip.replace(".", "-")

    @property
    def dns(self) -> str:
        return f"{self.host}.{REGION}.compute.internal"


class Ids:
    """Unique AWS-style identifiers from one seeded generator."""

    def __init__(self, rng: random.Random) -> None:
        self.rng, self.seen = rng, set[str]()

    def hex(self, prefix: str, digits: int = 17) -> str:
        while True:
            value = f"{prefix}{self.rng.getrandbits(4 * digits):0{digits}x}"
            if value not in self.seen:
                self.seen.add(value)
                return value

    def alnum(self, n: int) -> str:
        return "".join(self.rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(n))
