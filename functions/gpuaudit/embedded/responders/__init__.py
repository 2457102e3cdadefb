"""The embedded backend's answers, one module per AWS service; importing the package registers every responder
in `registry.RESPONDERS`, which embedded/backend.py dispatches a call through."""

from gpuaudit.embedded.responders import (
    cloudtrail,
    cloudwatch,
    ec2,
    eks,
    events,
    fsx,
    health,
    logs,
    sagemaker,
    service_quotas,
)

__all__ = ["cloudtrail", "cloudwatch", "ec2", "eks", "events", "fsx", "health", "logs", "sagemaker",
           "service_quotas"]
