#!/usr/bin/env python3
"""CDK entry point (cdk.json runs it; `python app.py` synthesizes without the CDK CLI).

Offline synth, no bundling: `npx cdk synth -c bundle=false`, or
`CDK_CONTEXT_JSON='{"bundle": false}' .venv/bin/python app.py`. See docs/DEPLOY.md.
A malformed configuration stops the synth with one message naming each bad field (exit 2), not a traceback.
"""

import sys

from infra.app import build_app
from infra.config import BadConfig

if __name__ == "__main__":
    try:
        app, _stack = build_app()
    except BadConfig as bad:
        print(f"gpuaudit: {bad}", file=sys.stderr)
        sys.exit(2)
    app.synth()
