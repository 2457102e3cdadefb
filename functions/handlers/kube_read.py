"""KubeRead: reads an EKS cluster's private API endpoint from inside the cluster's VPC (issue #19, deployment).

The only function of the stack that runs in a VPC, and the only one that never calls AWS: the endpoint and CA
arrive in the event (the collectors read them with eks:DescribeCluster), the token is presigned locally from this
function's own role (the role its EKS access entry names, in group gpuaudit-readers), and the answer is one GET of the
node or event list, slimmed to the fields the rules read. Any other path or verb is refused before a connection
is opened: read-only by construction. Errors come back as data ({"error": {code, message}}) so the collector turns
them into the same named gap as a direct read."""

from __future__ import annotations

from typing import Any, Literal

from aws_lambda_powertools.utilities.typing import LambdaContext
from pydantic import BaseModel, ConfigDict, Field

from gpuaudit.collectors.aws import CallFailed
from gpuaudit.collectors.kubernetes import KubeApi, https_connector, slim_list
from handlers import runtime
from handlers.observability import logger, step_handler

QUERY_KEYS = Literal["limit", "continue", "fieldSelector"]


class KubeReadRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cluster: str = Field(pattern=r"^[0-9A-Za-z][A-Za-z0-9_-]{0,99}$")
    endpoint: str = Field(pattern=r"^https://[A-Za-z0-9.-]+(:[0-9]{1,5})?$", max_length=300)
    ca_data: str = Field(min_length=1, max_length=20_000)
    path: Literal["/api/v1/nodes", "/api/v1/events"]  # NODES_PATH, EVENTS_PATH: nothing else is served
    query: dict[QUERY_KEYS, str] = Field(default_factory=dict)


def connect(request: KubeReadRequest) -> KubeApi:
    """The cluster's endpoint over HTTPS, trusting only the cluster's CA, with a token of this function's role."""
    session = runtime.default_session()
    region = session.region_name or runtime.settings().required("AWS_REGION")
    return https_connector(session, region)(request.cluster, request.endpoint, request.ca_data)


@step_handler
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    try:
        request = runtime.parse_event(event, KubeReadRequest, "KubeRead expects a node or event list GET")
    except runtime.InvalidEvent as bad:
        return {"error": {"code": "InvalidRequest", "message": str(bad)}}
    function_name = runtime.settings().function_name or ""  # validated before the cluster is read
    try:
        document = connect(request).get(request.path, {str(k): v for k, v in request.query.items()})
    except CallFailed as failed:
        logger.info("kubernetes read failed", extra={"cluster": request.cluster, "path": request.path,
                                                     "code": failed.code})
        return {"error": {"code": failed.code, "message": failed.message[:500]}}
    except ValueError as bad:  # an unreadable CA or a non-JSON answer
        return {"error": {"code": "BadAnswer", "message": str(bad)[:500]}}
    slim = slim_list(request.path, document)
    logger.info("kubernetes read", extra={"cluster": request.cluster, "path": request.path,
                                          "items": len(slim["items"]), "function": function_name})
    return {"document": slim}
