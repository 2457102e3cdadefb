"""A long-lived `python app.py`: synthesizes the app once per request line, in one process (cdk_synth.py starts one
per test process), so the CDK's Node.js runtime starts, and cdk-nag loads, once per test process rather than once
per configuration (~10 s of CPU each time; a further configuration costs ~2 s).

Each request is one JSON line on stdin, `{"context": …, "outdir": …}`: what `python app.py` reads from
CDK_CONTEXT_JSON and CDK_OUTDIR (the Node.js runtime's environment is fixed when it starts, so both are handed to the
App itself, the context as app.py's run would resolve it). The reply is one JSON line, `{"ok": true}` or
`{"ok": false, "error": …}` (app.py's own message for a malformed configuration, else the traceback). The build is
infra/app.py's `build_app`, app.py's own call; tests/infra/test_stack_nag.py checks the template is the one
`python app.py` writes.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # anything else written to stdout (the CDK's or cdk-nag's messages) goes to stderr
    sys.stdout = sys.stderr
    sys.path.insert(0, str(ROOT))
    os.chdir(ROOT)
    from infra.app import build_app
    from infra.config import BadConfig

    for line in sys.stdin:
        request = json.loads(line)
        try:
            app, _stack = build_app(request["context"], outdir=request["outdir"])
            app.synth()
            reply = {"ok": True}
        except BadConfig as bad:
            reply = {"ok": False, "error": f"gpuaudit: {bad}"}
        except Exception:  # noqa: BLE001 - handed back to the test that asked
            reply = {"ok": False, "error": traceback.format_exc()}
        sys.stderr.flush()
        replies.write(json.dumps(reply) + "\n")
        replies.flush()


if __name__ == "__main__":
    main()
