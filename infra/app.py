"""Build the CDK app: configuration from context (or cdk.json), the stack, cdk-nag as a validation plugin."""

from __future__ import annotations

import os
from typing import Any

from aws_cdk import App, Environment, Stack, Validations
from cdk_nag import AwsSolutionsChecks

from infra.config import BadConfig, DeployConfig, bundling_enabled, cdk_json_context, load_config
from infra.cross_account import ReadOnlyRoleStack
from infra.stack import GpuAuditStack
from infra.xid_watch_slots import groups_without_a_free_slot, with_found_groups

STACK_NAME = "GpuAudit"
READ_ONLY_ROLE_STACK = "GpuAuditReadOnlyRole"


def build_app(context: dict[str, Any] | None = None, outdir: str | None = None) -> tuple[App, Stack]:
    """`context` None: the CDK CLI's context when run by it, else cdk.json's (for `python app.py`).

    One stack per app, so `npx aws-cdk@2 deploy` needs no stack name: the auditor by default; with
    `-c member_account=true`, the read-only role deployed in each audited member account instead."""
    app = App(context=context, outdir=outdir) if context is not None else App(outdir=outdir)
    # The Distributed Map's ResultWriterV2 (scoped to its prefix) renders only under this feature flag.
    app.node.set_context("@aws-cdk/aws-stepfunctions:useDistributedMapResultWriterV2", True)
    resolved = {**cdk_json_context(), **_app_context(app)} if context is None else context
    env = Environment(account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION"))
    stack: Stack
    if str(resolved.get("member_account", "false")).lower() == "true":
        stack = ReadOnlyRoleStack(app, READ_ONLY_ROLE_STACK, env=env)
    else:
        check_watch = str(resolved.get("check_xid_watch", "false")).lower() == "true"
        config = load_config(resolved, _found_watch_groups if check_watch else None)
        if config.xid_watch is not None and check_watch:
            _check_watch_slots(config)
        stack = GpuAuditStack(app, STACK_NAME, config=config, bundle=bundling_enabled(resolved), env=env)
    Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return app, stack


def _found_watch_groups(raw: dict[str, Any]) -> dict[str, Any]:
    """`-c check_xid_watch=true`: a watched cluster named without log groups is watched on those whose name holds its
    own, read from the target account (DescribeLogGroups)."""
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        return with_found_groups(raw, boto3.client("logs"))
    except ClientError as err:
        raise BadConfig(f"`xid_watch`: the account's log groups could not be listed "
                        f"({err.response['Error']['Code']}); name each watched cluster's groups instead") from None
    except BotoCoreError as err:
        raise BadConfig(f"`xid_watch`: the account's log groups could not be listed ({type(err).__name__}); name "
                        "each watched cluster's groups instead") from None


def _check_watch_slots(config: DeployConfig) -> None:
    """`-c check_xid_watch=true`: read each watched group and its metric filters in the target account
    (DescribeLogGroups, DescribeMetricFilters) and stop the synth naming every group the watch cannot take a slot on."""
    import boto3

    problems = groups_without_a_free_slot(boto3.client("logs"), config.xid_watch_groups, f"{STACK_NAME}-xid-watch-")
    if problems:
        raise BadConfig("`xid_watch`: no filter can be added on " + "; ".join(problems))


def _app_context(app: App) -> dict[str, Any]:
    keys = ("gpuaudit", "config", "bundle", "member_account", "check_xid_watch")
    return {k: v for k in keys if (v := app.node.try_get_context(k)) is not None}
