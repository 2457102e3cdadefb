#!/usr/bin/env python3
"""CDK entry point (cdk.json runs it; `python app.py` synthesizes without the CDK CLI).

Offline synth, no bundling: `npx cdk synth -c bundle=false`, or
`CDK_CONTEXT_JSON='{"bundle": false}' .venv/bin/python app.py`. See docs/DEPLOY.md.
"""

from infra.app import build_app

if __name__ == "__main__":
    app, _stack = build_app()
    app.synth()
