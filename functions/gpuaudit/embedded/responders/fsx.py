"""FSx: the file systems (FSx for Lustre) a cluster mounts."""

from __future__ import annotations

from typing import Any

from gpuaudit.embedded.responders.registry import Backend, by_id, page, responds


@responds("fsx", "DescribeFileSystems")
def _describe_file_systems(b: Backend, p: dict[str, Any]) -> dict[str, Any]:
    items = by_id(b.world.section("fsx", "file_systems"), "FileSystemId", p.get("FileSystemIds"),
                   "FileSystemNotFound", "file system")
    return page(items, p, "FileSystems", default=2147483647)
