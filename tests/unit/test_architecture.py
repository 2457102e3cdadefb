"""The one-way arrows of docs/ARCHITECTURE.md, read from the source: every import of every module, including
those inside functions and `if TYPE_CHECKING:` blocks, which hide a dependency but not the coupling."""

from __future__ import annotations

import ast
import functools
import re
import shutil
import sys
from pathlib import Path

import pytest

from gpuaudit.collectors.log_queries import GPU_QUERY
from gpuaudit.domain import markers
from gpuaudit.rules.memory_signals import MEMORY_SIGNALS
from gpuaudit.rules.node_signals import NCCL
from gpuaudit.rules.timeline import LIFECYCLE

PACKAGE = Path(__file__).resolve().parents[2] / "functions" / "gpuaudit"
THIRD_PARTY_OF_MODEL = {"pydantic"}
# unit -> units it must never import (a unit is a subpackage, or a top-level module of gpuaudit)
FORBIDDEN = {
    "model": {"*"},  # the standard library and pydantic only
    "domain": {"*"},  # the model, the standard library
    "collectors": {"rules", "pipeline", "report", "embedded", "devtools", "cli", "writes", "agent"},
    "rules": {"collectors", "pipeline", "report", "embedded", "devtools", "cli", "writes", "agent"},
    "report": {"collectors", "rules", "pipeline", "embedded", "devtools", "cli", "writes", "agent"},
    # the floors above: the pipeline composes, the CLI, handlers and developer tools call it, never the reverse
    "pipeline": {"cli", "devtools", "embedded", "agent"},
    "writes": {"cli", "devtools", "embedded", "pipeline", "agent"},  # the product's writes, called from above
    "access": {"cli", "devtools"},
    "devtools": {"cli"},
    "agent": {"cli"},  # the MCP server is called by the CLI (`gpuaudit mcp`), never the reverse
}
HANDLERS = PACKAGE.parent / "handlers"
HANDLERS_NEVER = {"cli", "devtools", "embedded"}  # the Lambda asset ships neither (infra/packaging.py DEV_ONLY)

# The floors inside rules/ (docs/ARCHITECTURE.md): a module imports only its own floor or the ones below, so each
# concern can be read and changed alone; `judge` alone composes the questions. A new module takes a floor here.
RULES_FLOORS: dict[str, int] = {
    # 1: readers of one kind of signal
    "xid_lines": 1,
    "xid_catalog": 1,
    "xid_routing": 1,
    "xid_watch": 1,  # what the Xid watch matches: its filter pattern and the audit's locate query (issue #51)
    "hma": 1,
    "coverage": 1,
    "history": 1,
    "storage": 1,
    "bootstrap": 1,
    "control_plane": 1,
    "nodes": 1,  # one node's result, composed from the readers of its signals below
    "node_lines": 1,
    "node_signals": 1,
    "node_verdict": 1,
    "memory_signals": 1,
    "service_word": 1,
    "kube_labels": 1,
    "reboots": 1,
    "acted": 1,
    "actions": 1,
    "host_events": 1,
    "straggler": 1,
    "fabric_manager": 1,
    "node_state": 1,
    "signal_verdict": 1,
    "gpu_count": 1,
    "efa_counters": 1,
    "what_changed": 1,  # what changed since the last audit (a Result against the recorded state), so what alerts
    # 2: what every judging rule shares (the judge's configuration, Judged, Context) and how a step is shown
    "context": 2,
    "steps": 2,
    # 3: readers of a concern the incident questions and the pre-flight checks both ask
    "capacity": 3,
    "fabric": 3,
    "onset": 3,
    "timeline": 3,
    "storage_decision": 3,
    # 4: the questions, side by side: incident branches and findings, pre-flight checks, the self-check
    "branches": 4,
    "findings": 4,
    "preflight": 4,
    "consistency": 4,
    "summary": 4,  # the answer's summary prose: the headline and its confidence, the cluster-state lines
    # 5: the composition
    "judge": 5,
}
ALLOWED_INSIDE = {"model": {"model"}, "domain": {"model", "domain"}}


@functools.cache
def _parse(source: str) -> ast.Module:
    return ast.parse(source)


def parsed(path: Path) -> ast.Module:
    """The file's syntax tree, parsed once per distinct source text (every check walks every module: each re-parsed
    the whole package); read-only, as the checks only walk it. A copy changed by a test is new text, parsed anew."""
    return _parse(path.read_text(encoding="utf-8"))


def unit_of(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return parts[0]


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) of every import in one file; relative imports are resolved."""
    tree = parsed(path)
    package = ".".join(("gpuaudit", *path.relative_to(PACKAGE).parent.parts))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            out += [(node.lineno, f"{base}.{a.name}" if base == "gpuaudit" else base) for a in node.names]
    return out


def gpuaudit_unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "gpuaudit" and len(parts) > 1 else None


def violations() -> list[str]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        unit = unit_of(path)
        if unit not in FORBIDDEN:
            continue
        for line, module in imports_of(path):
            target = gpuaudit_unit(module)
            where = f"{path.relative_to(PACKAGE)}:{line} imports {module}"
            if unit in ALLOWED_INSIDE:
                top = module.split(".")[0]
                outside = top not in sys.stdlib_module_names and top not in THIRD_PARTY_OF_MODEL
                if (target not in ALLOWED_INSIDE[unit]) if target is not None else (top != "gpuaudit" and outside):
                    found.append(where)
            elif target in FORBIDDEN[unit]:
                found.append(where)
    return found


def unit_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        unit = unit_of(path)
        for _, module in imports_of(path):
            target = gpuaudit_unit(module)
            if target and target != unit and (PACKAGE / target).is_dir() and (PACKAGE / unit).is_dir():
                graph.setdefault(unit, set()).add(target)
    return graph


def test_imports_go_one_way() -> None:
    assert violations() == []


def test_handlers_never_import_what_the_lambda_asset_does_not_ship() -> None:
    found = [f"{path.name}:{node.lineno} imports {node.module}" for path in sorted(HANDLERS.glob("*.py"))
             for node in ast.walk(parsed(path))
             if isinstance(node, ast.ImportFrom) and gpuaudit_unit(node.module or "") in HANDLERS_NEVER]
    assert found == []


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(("gpuaudit", *(parts[:-1] if parts[-1] == "__init__" else parts)))


def module_graph() -> dict[str, set[str]]:
    """Module → the gpuaudit modules it imports; `from gpuaudit.rules import branches` counts as the module
    `gpuaudit.rules.branches`, not the package, so a circle through a package's submodules is seen."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        for node in ast.walk(parsed(path)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import) else
                     [f"{node.module}.{a.name}" for a in node.names] if isinstance(node, ast.ImportFrom)
                     and node.module and not node.level else [])
            for target in names:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.setdefault(name, set()).add(target)
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circle_between_modules() -> None:
    assert circles(module_graph()) == []


def package_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the package for the probes below: the checks walk it instead of the real tree, which other
    tests (and parallel workers) read at the same time."""
    copy = tmp_path / "gpuaudit"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.json"))
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", copy)
    return copy


def test_the_circle_check_sees_a_circle_through_a_type_checking_import(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    copy = package_copy(tmp_path, monkeypatch)
    (copy / "rules" / "_circle_probe.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gpuaudit.rules.judge import judge\n",
        encoding="utf-8")
    with (copy / "rules" / "judge.py").open("a", encoding="utf-8") as judge:
        judge.write("from gpuaudit.rules import _circle_probe\n")  # a package-relative import, as judge.py writes them
    assert circles(module_graph()) == [["gpuaudit.rules._circle_probe", "gpuaudit.rules.judge"]]


def rules_floor_violations(graph: dict[str, set[str]]) -> list[str]:
    def floor(module: str) -> int | None:
        return RULES_FLOORS.get(module.removeprefix("gpuaudit.rules.").split(".")[0])

    found = []
    for module, targets in sorted(graph.items()):
        if not module.startswith("gpuaudit.rules.") or module == "gpuaudit.rules":
            continue
        if floor(module) is None:
            found.append(f"{module} has no floor in RULES_FLOORS")
            continue
        found += [f"{module} (floor {floor(module)}) imports {t} (floor {floor(t)})" for t in sorted(targets)
                  if t.startswith("gpuaudit.rules.") and (floor(t) or 0) > (floor(module) or 0)]
    return found


def test_rules_import_only_their_floor_or_below() -> None:
    assert rules_floor_violations(module_graph()) == []


def test_the_floor_check_sees_an_import_up_and_a_module_without_a_floor() -> None:
    graph = {"gpuaudit.rules.xid_catalog": {"gpuaudit.rules.judge"}, "gpuaudit.rules.newcomer": set()}
    assert rules_floor_violations(graph) == [
        "gpuaudit.rules.newcomer has no floor in RULES_FLOORS",
        "gpuaudit.rules.xid_catalog (floor 1) imports gpuaudit.rules.judge (floor 5)"]


# Each question family's entry point (rules/branches.py, findings.py, preflight/), called as `<family>.assess` by judge.
SHARED_RULES_NAMES = {"assess"}


def names_defined_twice_in_rules() -> dict[str, list[str]]:
    """Public module-level names (functions, classes, constants) of rules/ defined in more than one module."""
    where: dict[str, list[str]] = {}
    for path in sorted((PACKAGE / "rules").rglob("*.py")):
        for node in parsed(path).body:
            names = ([node.name] if isinstance(node, ast.FunctionDef | ast.ClassDef) else
                     [t.id for t in node.targets if isinstance(t, ast.Name)] if isinstance(node, ast.Assign) else
                     [node.target.id] if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) else [])
            for name in names:
                if not name.startswith("_") and name not in SHARED_RULES_NAMES:
                    where.setdefault(name, []).append(str(path.relative_to(PACKAGE)))
    return {name: paths for name, paths in where.items() if len(paths) > 1}


def test_one_name_means_one_thing_in_rules() -> None:
    """Issue #52 item 6: a rule's name is defined once (two verdict-strength orders or two `Memory`s drift apart)."""
    assert names_defined_twice_in_rules() == {}


def test_the_name_check_sees_a_name_defined_in_two_rules_modules(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    copy = package_copy(tmp_path, monkeypatch)
    (copy / "rules" / "_name_probe.py").write_text("def parse_xid(message: str) -> None:\n    return None\n",
                                                   encoding="utf-8")
    assert names_defined_twice_in_rules() == {"parse_xid": ["rules/_name_probe.py", "rules/xid_lines.py"]}


def test_no_module_only_re_exports_another() -> None:
    """Issue #52 item 6: callers import a name from its one home; a module of imports alone is a second address (a
    package's `__init__` presenting its own submodules is its front door, not a second address)."""
    found = []
    for path in sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py"):
        body = [n for n in parsed(path).body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        imports = [n for n in body if isinstance(n, ast.Import)
                   or isinstance(n, ast.ImportFrom) and n.module != "__future__"]
        rest = [n for n in body if not isinstance(n, ast.Import | ast.ImportFrom)
                and not (isinstance(n, ast.Assign) and [getattr(t, "id", "") for t in n.targets] == ["__all__"])]
        if imports and not rest:
            found.append(str(path.relative_to(PACKAGE)))
    assert found == []


def test_the_check_sees_a_wrong_way_import(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The walk above is what decides: a collector importing a rule is found (guards against a vacuous pass)."""
    copy = package_copy(tmp_path, monkeypatch)
    (copy / "collectors" / "_wrong_way_probe.py").write_text("from gpuaudit.rules.judge import judge\n",
                                                             encoding="utf-8")
    assert violations() == ["collectors/_wrong_way_probe.py:1 imports gpuaudit.rules.judge"]


def test_no_cycle_between_packages() -> None:
    graph = unit_graph()
    assert {"collectors", "rules", "model", "domain"} <= set(graph) | {"model"}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in graph.get(start, ()))

    cycles = sorted(u for u in graph if reaches(u, u, {u}))
    assert cycles == []


def test_the_gpu_query_is_built_from_every_marker_the_rules_match() -> None:
    selected = re.search(r"filter @message like /(?P<re>[^/]+)/", GPU_QUERY)
    assert selected is not None
    wanted = re.compile(selected["re"])
    samples = [*(signal.marker for signal in MEMORY_SIGNALS), markers.HMA_MARKER,
               "kernel: Linux version 6.8.0-1024-aws", "kernel: [    0.000000] Linux version 6.8.0-1024-aws",
               "NVRM: GPU at PCI:0000:1a:00 has fallen off the bus", "NVRM: The NVIDIA GPU 0000:01:00.0",
               "NVRM: Xid (PCI:0000:53:00): 48, pid=1, DBE", "NCCL INFO NET/OFI Selected Provider is efa",
               "NCCL WARN Call to connect returned Connection refused", "nvidia-fabricmanager.service failed",
               *(m for m in markers.LIFECYCLE_MARKERS if m != markers.BOOT_LINE)]
    assert [s for s in samples if not wanted.search(s)] == []
    # and the rules match with the same strings: a marker in a rule comes from the one list
    assert LIFECYCLE.pattern == "|".join(markers.LIFECYCLE_MARKERS)
    assert NCCL.pattern == markers.NCCL_MARKER
    assert all(m in markers.GPU_LINE_MARKERS for m in markers.LIFECYCLE_MARKERS)


def test_rules_collectors_and_domain_are_typed_through() -> None:
    """The model's Literal types flow into the judgement: no type check is switched off there."""
    offenders = [f"{p.relative_to(PACKAGE)}:{i}" for unit in ("rules", "collectors", "domain")
                 for p in sorted((PACKAGE / unit).rglob("*.py"))
                 for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if "type: ignore" in line]
    assert offenders == []


def _literal_strings(node: ast.AST) -> set[str]:
    items = node.keys if isinstance(node, ast.Dict) else getattr(node, "elts", [])
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _is_order_or_name_table(node: ast.AST) -> bool:
    """A sequence (an order), or a dict whose values are positions or names (not styling: tuples)."""
    if isinstance(node, ast.Tuple | ast.List):
        return True
    return isinstance(node, ast.Dict) and all(isinstance(v, ast.Constant) for v in node.values)


def definitions_of(wanted: set[str], kinds: tuple[type, ...] = (ast.Tuple, ast.List, ast.Dict)) -> list[str]:
    """Every order or name table in the package that spells out all of `wanted` (Literal[...] types excepted)."""
    found = []
    for p in sorted(PACKAGE.rglob("*.py")):
        tree = parsed(p)
        type_args = {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
        found += [f"{p.relative_to(PACKAGE)}:{n.lineno}" for n in ast.walk(tree)
                  if isinstance(n, kinds) and id(n) not in type_args and _is_order_or_name_table(n)
                  and wanted <= _literal_strings(n)]
    return found


def test_check_order_and_branch_names_are_defined_once() -> None:
    """One order of check results and one name per branch (model/result.py); reports and rules use them."""
    results = {"PASS", "RISK", "FAIL", "UNVERIFIED", "Needs input", "Not checked"}
    assert definitions_of(results) == [f"model/result.py:{_line_of('CHECK_SEVERITY')}"]
    # branch names: one letter -> name table (rules/branches.py HEADLINE_ORDER is an order, not names)
    assert definitions_of(set("ABCDEF"), (ast.Dict,)) == [f"model/result.py:{_line_of('BRANCH_NAMES')}"]


def _line_of(name: str) -> int:
    text = (PACKAGE / "model" / "result.py").read_text(encoding="utf-8").splitlines()
    return next(i for i, line in enumerate(text, 1) if line.startswith(name))


# --------------------------------------------------------------------------- one verdict path, one change rule

VERDICT_SEQUENCE = {"read_history", "judge", "record_history", "finalize"}  # pipeline.judge_with_history's steps
CHANGE_RULE = PACKAGE / "rules" / "what_changed.py"


def callee(call: ast.Call) -> str | None:
    """The name a call calls: `f` of `f(...)` and of `module.f(...)`."""
    return call.func.id if isinstance(call.func, ast.Name) else call.func.attr if isinstance(call.func, ast.Attribute) \
        else None


def called_names(tree: ast.AST) -> list[str]:
    """The name of every function called in `tree`, in source order."""
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)]
    calls.sort(key=lambda c: (c.lineno, c.col_offset))
    return [name for c in calls if (name := callee(c)) is not None]


def function(path: Path, name: str) -> ast.FunctionDef:
    return next(n for n in ast.walk(parsed(path)) if isinstance(n, ast.FunctionDef) and n.name == name)


def sequence_spelled_outside(paths: list[Path]) -> list[str]:
    """Where a step of the verdict sequence is called other than inside pipeline.judge_with_history."""
    found = []
    for path in paths:
        owner = {id(n) for n in ast.walk(function(path, "judge_with_history"))} if path.name == "pipeline.py" else set()
        found += [f"{path.name}:{c.lineno} calls {callee(c)}" for c in ast.walk(parsed(path))
                  if isinstance(c, ast.Call) and id(c) not in owner and callee(c) in VERDICT_SEQUENCE]
    return found


def test_the_verdict_sequence_is_written_once_and_both_paths_call_it() -> None:
    """Issue #52 item 1: the CLI (pipeline.run_audit) and the deployed Verdict step (handlers/verdict.py) call one
    sequence; neither spells out its steps, and the handler leaves the S3 report writes to the sinks."""
    pipeline, handler = PACKAGE / "pipeline.py", HANDLERS / "verdict.py"
    assert sequence_spelled_outside([pipeline, *sorted(HANDLERS.glob("*.py"))]) == []
    assert "judge_with_history" in called_names(function(pipeline, "run_audit"))
    assert "judge_with_history" in called_names(function(handler, "handler"))
    assert [n for n in called_names(function(pipeline, "judge_with_history")) if n in VERDICT_SEQUENCE] == [
        "read_history", "judge", "record_history", "finalize"]
    assert "put_object" not in called_names(parsed(handler))


def test_the_sequence_check_sees_a_step_spelled_out_in_a_handler(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from gpuaudit import pipeline\n\ndef handler():\n    return pipeline.judge(1, 2)\n", encoding="utf-8"
    )
    assert sequence_spelled_outside([probe]) == ["probe.py:4 calls judge"]


def test_what_changed_is_judged_only_in_its_pure_rule() -> None:
    """Issue #52 item 2: the change list is built in rules/what_changed.py alone (a Change record made anywhere
    else would be a second change rule); the sinks and the event bus call it."""
    built = [
        f"{p.relative_to(PACKAGE.parent)}:{c.lineno}"
        for p in sorted([*PACKAGE.rglob("*.py"), *HANDLERS.glob("*.py")])
        if p != CHANGE_RULE
        for c in ast.walk(parsed(p))
        if isinstance(c, ast.Call) and callee(c) == "Change"
    ]
    assert built == []
    for path in (PACKAGE / "writes" / "sinks.py", PACKAGE / "writes" / "eventbus.py"):
        assert ("compare" in called_names(parsed(path))
                and any(m == "gpuaudit.rules.what_changed" for _, m in imports_of(path))), path.name


# --------------------------------------------------------------------------- the product's writes, one package

WRITES = PACKAGE / "writes"
# Every AWS call that changes something, by its boto3 method name.
MUTATING_CALLS = frozenset({
    "put_item", "batch_write_item", "update_item", "delete_item", "transact_write_items", "batch_execute_statement",
    "execute_statement", "publish", "publish_batch", "put_events", "put_object", "delete_object", "delete_objects",
    "copy_object", "upload_file", "upload_fileobj", "create_multipart_upload", "complete_multipart_upload",
    "put_metric_data", "put_log_events", "send_message", "send_message_batch", "start_execution",
})
# Writes that are no finding, report or history: the state machine's working state, each kept by the one handler
# module that owns it, and the MCP tool that starts an audit (whose writes are then the Verdict step's, in writes/).
STEP_STATE_WRITERS = {
    "handlers/payload.py": {"put_object"},  # step payloads passed by reference (Step Functions' 256 KB)
    "handlers/coverage_cache.py": {"put_object"},  # proven hourly bins per log group
    "handlers/trail_share.py": {"put_object"},  # one CloudTrail read shared by an account's clusters
    "handlers/query_leases.py": {"update_item"},  # the account-wide Logs Insights query budget
    "handlers/execution_share.py": {"update_item"},  # claims: no cluster audited by two executions at once
    "handlers/coalesce.py": {"put_item"},  # a burst of events audits a cluster once
    "handlers/discovery_cache.py": {"put_item"},  # discovery at most once per period
    "gpuaudit/agent/deployed.py": {"start_execution"},  # the start_audit tool
}


def gpuaudit_module_names(tree: ast.AST) -> set[str]:
    """Names bound to a gpuaudit module in a file (`from gpuaudit.writes import eventbus`): `eventbus.publish(...)`
    calls the write package, it is not a boto3 call."""
    return {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)
            and (n.module or "").startswith("gpuaudit") for a in n.names}


def writes_outside(root: Path, handlers: Path) -> list[str]:
    """Every mutating AWS call and every sqlite3 import outside the write package, that no step-state entry names."""
    found = []
    for path in sorted([*root.rglob("*.py"), *handlers.glob("*.py")]):
        if path.is_relative_to(root / "writes") or path.is_relative_to(root / "embedded"):
            continue  # the write package itself; the stand-in AWS that answers these calls for worlds
        named = f"handlers/{path.name}" if path.parent == handlers else f"gpuaudit/{path.relative_to(root)}"
        tree = parsed(path)
        ours, allowed = gpuaudit_module_names(tree), STEP_STATE_WRITERS.get(named, set())
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                    and node.func.attr in MUTATING_CALLS - allowed \
                    and not (isinstance(node.func.value, ast.Name) and node.func.value.id in ours):
                found.append(f"{named}:{node.lineno} calls {node.func.attr}")
            elif isinstance(node, ast.Import | ast.ImportFrom) and "sqlite3" in (
                    [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]):
                found.append(f"{named}:{node.lineno} imports sqlite3")
    return found


def test_the_product_writes_only_through_its_write_package() -> None:
    """Issue #52 item 3: "where does gpuaudit write?" has one answer, gpuaudit/writes/ (the history stores, the S3
    reports, the findings table, SNS, EventBridge), beside the step state the handlers keep, each named above."""
    assert writes_outside(PACKAGE, HANDLERS) == []
    assert {p.name for p in WRITES.glob("*.py")} >= {"history.py", "sinks.py", "eventbus.py", "dynamo_batch.py"}
    assert not [name for name in ("history.py", "sinks.py", "eventbus.py", "dynamo_batch.py")
                if (PACKAGE / name).exists()], "a module left at the top level beside its home in writes/"


def test_the_write_check_sees_a_put_outside_the_package_and_sqlite_opened(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    copy = package_copy(tmp_path, monkeypatch)
    handlers = tmp_path / "handlers"
    shutil.copytree(HANDLERS, handlers, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "report" / "_write_probe.py").write_text(
        "import sqlite3\n\ndef save(s3, ddb):\n    s3.put_object(Bucket='b', Key='k', Body=b'')\n"
        "    ddb.put_item(TableName='t', Item={})\n", encoding="utf-8")
    (handlers / "_write_probe.py").write_text("def mark(sns):\n    sns.publish(TopicArn='t', Message='m')\n",
                                              encoding="utf-8")
    (handlers / "payload.py").write_text("def wipe(ddb):\n    ddb.delete_item(TableName='t', Key={})\n",
                                         encoding="utf-8")  # a step-state writer making a write it is not named for
    assert writes_outside(copy, handlers) == [
        "gpuaudit/report/_write_probe.py:1 imports sqlite3", "gpuaudit/report/_write_probe.py:4 calls put_object",
        "gpuaudit/report/_write_probe.py:5 calls put_item", "handlers/_write_probe.py:2 calls publish",
        "handlers/payload.py:2 calls delete_item"]


# --------------------------------------------------------------------------- configuration read one way

ENVIRONMENT_READER = "runtime.py"  # handlers/runtime.settings: the one reader, validated once (issue #52 item 8)


def environment_reads(handlers: Path) -> list[str]:
    """Every direct read of the process environment in a handler module (os.environ, os.getenv, `from os import
    environ`), the settings reader excepted: a handler reads its configuration from the validated settings."""
    found = []
    for path in sorted(handlers.glob("*.py")):
        if path.name == ENVIRONMENT_READER:
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "os" \
                    and node.attr in ("environ", "getenv", "environb", "getenvb"):
                found.append(f"{path.name}:{node.lineno} reads os.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "os" \
                    and {a.name for a in node.names} & {"environ", "getenv", "environb", "getenvb"}:
                found.append(f"{path.name}:{node.lineno} imports the environment from os")
    return found


def test_no_handler_reads_the_environment_but_through_the_settings() -> None:
    assert environment_reads(HANDLERS) == []
    assert any(isinstance(n, ast.Attribute) and n.attr == "environ" for n in ast.walk(parsed(HANDLERS /
                                                                                               ENVIRONMENT_READER)))


def test_the_environment_check_sees_a_handler_reading_os_environ(tmp_path: Path) -> None:
    (tmp_path / "probe.py").write_text("import os\nfrom os import getenv\n\ndef handler():\n"
                                       "    return os.environ['FINDINGS_TABLE'], os.getenv('X')\n", encoding="utf-8")
    assert environment_reads(tmp_path) == ["probe.py:2 imports the environment from os",
                                           "probe.py:5 reads os.environ", "probe.py:5 reads os.getenv"]


# Collectors of one shape (issue #52 item 4): a collector reads the Evidence it is given and returns the typed part it
# read (model/evidence_parts.py); `merged` alone turns a part into Evidence.
MUTATORS = {"append", "extend", "insert", "update", "pop", "clear", "remove", "setdefault", "add", "discard", "sort"}
READ_ONLY_CALLS = {"list", "tuple", "len", "sorted", "set", "any", "all", "iter", "enumerate", "reversed"}  # a copy


def _rooted_at(node: ast.AST, names: set[str]) -> bool:
    """`node` is an attribute or item of one of `names` (`evidence.gaps`, `evidence.x[0].y`), not the name alone."""
    if not isinstance(node, ast.Attribute | ast.Subscript):
        return False
    while isinstance(node, ast.Attribute | ast.Subscript):
        node = node.value
    return isinstance(node, ast.Name) and node.id in names


def _evidence_parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    arguments = [*function.args.posonlyargs, *function.args.args, *function.args.kwonlyargs]
    return {a.arg for a in arguments if a.annotation is not None and "Evidence" in {
        n.id for n in ast.walk(a.annotation) if isinstance(n, ast.Name)} | {
        n.value for n in ast.walk(a.annotation) if isinstance(n, ast.Constant) and n.value == "Evidence"}}


def evidence_writes(tree: ast.Module, where: str) -> list[str]:
    """Where a function writes into an Evidence it was given: assigns to one of its attributes or items, calls a
    mutating method of one (`evidence.gaps.append`), or hands its `gaps` list to a callee that appends to it."""
    found = []
    for function in ast.walk(tree):
        if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        names = _evidence_parameters(function)
        if not names:
            continue
        for node in ast.walk(function):
            targets: list[ast.AST] = []
            if isinstance(node, ast.Assign):
                targets = list(node.targets)
            elif isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            elif isinstance(node, ast.Delete):
                targets = list(node.targets)
            written = [t for t in targets if _rooted_at(t, names)]
            if isinstance(node, ast.Call):
                func = node.func
                if isinstance(func, ast.Attribute) and func.attr in MUTATORS and _rooted_at(func.value, names):
                    written.append(func)
                copies = isinstance(func, ast.Name) and func.id in READ_ONLY_CALLS
                written += [a for a in [*node.args, *(k.value for k in node.keywords)] if not copies
                            and isinstance(a, ast.Attribute) and a.attr == "gaps" and _rooted_at(a, names)]
            found += [f"{where}:{getattr(w, 'lineno', node.lineno)} {function.name}" for w in written]
    return found


def test_no_collector_writes_into_the_evidence_it_is_given() -> None:
    paths = [*sorted((PACKAGE / "collectors").glob("*.py")), PACKAGE / "pipeline.py"]  # pipeline: it merges parts
    offenders = [hit for path in paths for hit in evidence_writes(parsed(path), str(path.relative_to(PACKAGE)))]
    assert offenders == []


def test_the_write_check_sees_each_way_of_writing_into_evidence() -> None:
    probe = ast.parse(
        "def a(aws, evidence: Evidence, read):\n"
        "    evidence.cloudtrail = []\n"
        "def b(aws, evidence: 'Evidence'):\n"
        "    evidence.gaps.append(gap)\n"
        "def c(aws, evidence: Evidence | None):\n"
        "    aws.read_all(evidence.gaps, 'x')\n"
        "def d(aws, evidence: Evidence):\n"
        "    evidence.profiles['p5'] += 1\n"
        "def e(aws, evidence: Evidence):\n"
        "    return Part(gaps=[*evidence.gaps, *list(evidence.gaps)], nodes=len(evidence.nodes))\n")
    assert evidence_writes(probe, "probe.py") == ["probe.py:2 a", "probe.py:4 b", "probe.py:6 c", "probe.py:8 d"]


def test_every_part_field_is_an_evidence_field_of_the_same_type() -> None:
    from gpuaudit.model.evidence import Evidence
    from gpuaudit.model.evidence_parts import Part

    def subclasses(cls: type[Part]) -> list[type[Part]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *subclasses(sub))]

    parts = subclasses(Part)
    assert len(parts) > 20  # every part is seen (the read plan's sources alone have 20)
    mismatched = [f"{part.__name__}.{name}" for part in parts for name, info in part.model_fields.items()
                  if name not in Evidence.model_fields or info.annotation != Evidence.model_fields[name].annotation]
    assert mismatched == []


def test_every_planned_source_has_a_reader_that_returns_its_part() -> None:
    import typing

    from gpuaudit.collectors.source_reads import READERS
    from gpuaudit.model.evidence_parts import Part
    from gpuaudit.model.planned_reads import ReadSource

    assert set(READERS) == set(typing.get_args(ReadSource))
    returns = {source: typing.get_type_hints(reader).get("return") for source, reader in READERS.items()}
    assert [s for s, r in returns.items() if not (isinstance(r, type) and issubclass(r, Part) and r is not Part)] == []
