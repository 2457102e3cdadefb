"""How the CLI and the developer tools reach an account or a world: the same AWS access rules everywhere
(--profile/AWS_PROFILE, the region order of collectors/session.py, an organization member's role), and the one
error a user can act on (`UserError`, with its exit code)."""

from __future__ import annotations

import os
from pathlib import Path

from gpuaudit.collectors.aws import Aws, CallFailed, assumed_session

EXIT_OK, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_GATE, EXIT_INTERRUPTED = 0, 2, 3, 4, 130


class UserError(Exception):
    def __init__(self, message: str, code: int = EXIT_BAD_INPUT) -> None:
        super().__init__(message)
        self.code = code


def aws_for(world: Path | None, region: str | None, role_arn: str | None = None,
             external_id: str | None = None, profile: str | None = None) -> Aws:
    if world is not None:
        from gpuaudit.embedded.backend import WorldBackend
        from gpuaudit.embedded.world import load_world

        if profile is not None:
            raise UserError("--profile applies to AWS accounts, not to --world")
        loaded = load_world(world)
        backend = WorldBackend(loaded)
        if region and region != loaded.region:
            raise UserError(f"--region {region} does not match the world's region {loaded.region}")
        return Aws(session=backend.session(), region=loaded.region, clock=lambda: loaded.now,
                   sleep=backend.sleep, monotonic=backend.monotonic)
    from gpuaudit.collectors.session import AccessProblem, open_session

    try:
        access = open_session(profile, region, os.environ)
    except AccessProblem as exc:
        raise UserError(str(exc), EXIT_BAD_INPUT if exc.flag else EXIT_UNREACHABLE) from None
    session = access.session
    if role_arn:  # another account of the organization: its GpuAuditReadOnlyRole (infra/cross_account.py)
        try:
            session = assumed_session(session, role_arn, external_id)
        except CallFailed as exc:
            raise UserError(f"cannot assume the audit role: {exc}", EXIT_UNREACHABLE) from None
    return Aws(session=session, region=access.region)


def did_you_mean(aws: Aws, wanted: str) -> str:
    """After an unknown cluster: the region's HyperPod clusters (one ListClusters call), closest first."""
    from difflib import get_close_matches

    from gpuaudit.collectors.inventory import cluster_names

    names = cluster_names(aws)
    if not names:
        return ""
    close = get_close_matches(wanted, names, n=3, cutoff=0.5)
    listed = ", ".join(names[:20]) + (f" … ({len(names) - 20} more)" if len(names) > 20 else "")
    return (f"; did you mean {' or '.join(close)}?" if close else "") + \
        f" HyperPod clusters in {aws.region}: {listed}"
