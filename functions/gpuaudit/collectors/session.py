"""AWS access as the SDKs and aws-cli resolve it, with a next step when it fails.

Profile: `--profile`, else AWS_PROFILE, else the default chain. Region: `--region`, else AWS_REGION, else
AWS_DEFAULT_REGION, else the profile's `region`. Credentials are resolved once before the first call, so a
missing profile, an expired SSO session or no credentials at all is one line naming the next step, not a
traceback and not a run of failed calls.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import boto3
from botocore.exceptions import BotoCoreError, ClientError, ProfileNotFound

# botocore's errors when an SSO session is missing, expired or was never started (aws sso login fixes them)
SSO_ERRORS = ("SSOTokenLoadError", "UnauthorizedSSOTokenError", "TokenRetrievalError", "SSOError",
              "PendingAuthorizationExpiredError", "InvalidSSOConfigError")
# API error codes that mean the credentials themselves are no longer good
EXPIRED_CODES = ("ExpiredToken", "ExpiredTokenException", "InvalidClientTokenId", "UnrecognizedClientException",
                 "RequestExpired", "NoCredentialsError", "UnauthorizedSSOTokenError", "TokenRetrievalError")


class AccessProblem(Exception):
    """The account cannot be reached with these settings; `flag` when a flag the user typed is the cause."""

    def __init__(self, message: str, flag: bool = False) -> None:
        super().__init__(message)
        self.flag = flag


@dataclass(frozen=True)
class Access:
    session: boto3.Session
    region: str
    profile: str | None  # as named (flag or AWS_PROFILE); None: the default chain


def _login_hint(profile: str | None) -> str:
    named = f" --profile {profile}" if profile else ""
    return f"run `aws sso login{named}` (SSO) or refresh the profile's credentials"


def next_step(code: str, profile: str | None) -> str | None:
    """What to do about an AWS error code that means the credentials are bad or gone (None: not that)."""
    if code in EXPIRED_CODES:
        return f"the AWS credentials are expired or invalid: {_login_hint(profile)}, then re-run"
    return None


def open_session(profile: str | None, region: str | None, env: Mapping[str, str]) -> Access:
    """A session with credentials and a region, resolved as aws-cli does, or AccessProblem with the next step."""
    from_flag = profile is not None
    named = profile or env.get("AWS_PROFILE") or None
    source = "--profile" if from_flag else "AWS_PROFILE"
    try:
        session = boto3.Session(profile_name=named)
    except ProfileNotFound:
        raise AccessProblem(
            f"{source} {named}: no such profile in the AWS config ({env.get('AWS_CONFIG_FILE', '~/.aws/config')}) "
            f"or credentials file; list yours with `aws configure list-profiles`, or create it with "
            f"`aws configure sso --profile {named}`", flag=from_flag) from None
    chosen = region or env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or session.region_name
    if not chosen:
        raise AccessProblem("no AWS region: pass --region, set AWS_REGION, or set `region` in the profile "
                            f"({'profile ' + named if named else 'default profile'})")
    try:
        credentials = session.get_credentials()
        frozen = credentials.get_frozen_credentials() if credentials is not None else None
    except ProfileNotFound as exc:  # a source_profile that does not exist
        raise AccessProblem(f"{exc}; fix the profile chain in the AWS config", flag=from_flag) from None
    except (BotoCoreError, ClientError) as exc:
        if type(exc).__name__ in SSO_ERRORS:
            raise AccessProblem(f"the AWS SSO session of {'profile ' + named if named else 'the default profile'} "
                                f"has expired or was never started: {_login_hint(named)}") from None
        raise AccessProblem(f"AWS credentials could not be loaded ({type(exc).__name__}: {exc}): "
                            f"{_login_hint(named)}") from None
    if frozen is None or not frozen.access_key:
        raise AccessProblem("no AWS credentials found: run `aws configure sso` then `aws sso login`, set "
                            "AWS_PROFILE to a configured profile, or export AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY; "
                            "to audit offline, pass --world FILE")
    # the session keeps its resolved credentials; every client is made for `region` (collectors/aws.py)
    return Access(session=session, region=chosen, profile=named)
