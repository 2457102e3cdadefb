"""Shared test setup.

- `helpers` (tiny world builders) is importable from every test module.
- One botocore data loader for the whole run: every audit builds fresh boto3 sessions (one per
  world, as the CLI does), and each would otherwise re-read the same service-model JSON files
  (~0.1 s per service). The loader only caches botocore's own read-only model data.
- The API methods botocore builds for a client class, once per service model the shared loader read (every new
  session builds a client class of its own; building its ~100-400 methods was ~15 % of an audit test's time). Each
  client class is still made per session, through the session's own `creating-client-class` handlers.
- One factory of the modeled exception classes (client.exceptions) for every session: botocore builds them per
  session on a service's first error answer, walking every shape of its model (~45 ms for EC2; ~25 % of a small
  world audit's CPU). The classes are made from the shared loader's models, so they are the ones a session would make.
- botocore's User-Agent component sanitizer, a pure function of its two arguments, remembered: it runs a generator
  over every character of every component of every request's User-Agent (~10 % of a world audit's CPU).
- Which operation of a service model is its endpoint-discovery operation (none, for most), once per service model:
  every client creation asks, and botocore answers by building the model of every operation of the service (~13 %
  of a small world audit's CPU). Where there is one, its model is still built by the client's own service model.
- botocore's event-name aliasing (a pure function of the name and botocore's own alias table), remembered across
  sessions: each new session's emitter otherwise re-derives it for each of the ~60 handlers it registers (~7 %).
- The copy of the event emitter every client makes of its session's (~400 trie nodes), made without copy.copy's
  dispatch per node: the same nodes, the same handler lists copied, the handlers themselves shared, as botocore's.
- Whether an event handler accepts **kwargs (botocore checks each handler it registers, reading its signature with
  inspect: ~60 per session and ~25 per client), remembered per function (a bound method by its function: the
  same parameters after the bound one); any other callable is checked as botocore checks it.
- The embedded backend's Logs Insights parser (a pure function of the query text and the length limit, its Query
  frozen and never changed by the evaluator), remembered: StartQuery parses each query three times (~15 % of the
  fault matrix's CPU). A query it refuses is parsed (and refused) anew every time. The parser's own unit tests
  import it before this runs, so they call it as it is.
- The same evaluator's formatting of a timestamp as GetQueryResults shows it (a pure function of the milliseconds,
  ~3 us through datetime and strftime), remembered: the query-heavy files format ~420,000 timestamps, ~15,000
  distinct.
- The Click command typer builds from the CLI's Typer app, built once per app (CliRunner.invoke otherwise rebuilds
  it, reading every command's signature, ~40 ms an invocation); Click commands are made to be invoked many times.
"""

from __future__ import annotations

import copy
import functools
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import botocore.client
import botocore.errorfactory
import botocore.hooks
import botocore.loaders
import botocore.model
import botocore.session
import botocore.useragent
import botocore.utils
import pytest
import typer.main
import typer.testing

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:
    sys.path.insert(0, str(TESTS))


@pytest.fixture(autouse=True, scope="session")
def _shared_botocore_loader() -> Iterator[None]:
    shared = botocore.loaders.create_loader()
    original = botocore.session.create_loader

    def create_loader(search_path_string: str | None = None) -> botocore.loaders.Loader:
        return shared if search_path_string is None else original(search_path_string)

    built = botocore.client.ClientCreator._create_methods
    methods: dict[int, tuple[Any, dict[str, Any]]] = {}

    def create_methods(self: botocore.client.ClientCreator, service_model: Any) -> dict[str, Any]:
        # keyed by the model's own description (the shared loader's one dict per service and version), held so
        # its id stays its own; a copy each time, as creating-client-class handlers add to it
        description = service_model._service_description
        if id(description) not in methods:
            methods[id(description)] = (description, built(self, service_model))
        return dict(methods[id(description)][1])

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(botocore.session, "create_loader", create_loader)
        patch.setattr(botocore.client.ClientCreator, "_create_methods", create_methods)
        exceptions = botocore.errorfactory.ClientExceptionsFactory()
        patch.setattr(botocore.session, "ClientExceptionsFactory", lambda: exceptions)
        patch.setattr(botocore.useragent, "sanitize_user_agent_string_component",
                      functools.lru_cache(maxsize=4096)(botocore.useragent.sanitize_user_agent_string_component))
        patch.setattr(botocore.model.ServiceModel, "endpoint_discovery_operation", _endpoint_discovery_operation())
        _share_event_alias_names(patch)
        patch.setattr(botocore.hooks, "accepts_kwargs", _accepts_kwargs_per_function(botocore.hooks.accepts_kwargs))
        patch.setattr(botocore.hooks._PrefixTrie, "_recursive_copy", _trie_copy)
        patch.setattr(typer.testing, "_get_command", _command_once_per_app())
        from gpuaudit.embedded import insights
        from gpuaudit.embedded.insights import execution

        parse_query = functools.lru_cache(maxsize=1024)(insights.parse_query)
        patch.setattr(insights, "parse_query", parse_query)
        patch.setattr(execution, "parse_query", parse_query)
        from gpuaudit.embedded.insights import evaluate

        patch.setattr(evaluate, "_format_ts", functools.lru_cache(maxsize=1 << 16)(evaluate._format_ts))
        yield


def _endpoint_discovery_operation() -> Any:
    """ServiceModel.endpoint_discovery_operation, the operation's name remembered per service description (held, so
    its id stays its own); the property stays cached per ServiceModel instance, as botocore's CachedProperty is."""
    found = botocore.model.ServiceModel.__dict__["endpoint_discovery_operation"]
    names: dict[int, tuple[Any, str | None]] = {}

    def endpoint_discovery_operation(self: botocore.model.ServiceModel) -> Any:
        description = self._service_description
        if id(description) not in names:
            model = found.__get__(self, type(self))
            names[id(description)] = (description, None if model is None else model.name)
            return model
        name = names[id(description)][1]
        return None if name is None else self.operation_model(name)

    return botocore.utils.CachedProperty(endpoint_discovery_operation)


def _accepts_kwargs_per_function(accepts_kwargs: Any) -> Any:
    seen: dict[int, tuple[Any, Any]] = {}  # id -> (the function, held so its id stays its own; the answer)

    def remembered(func: Any) -> Any:
        kind = type(func)
        if kind is types.MethodType:
            key = func.__func__
            if type(key) is not types.FunctionType:
                return accepts_kwargs(func)
        elif kind is types.FunctionType:
            key = func
        else:
            return accepts_kwargs(func)
        held = seen.get(id(key))
        if held is None or held[0] is not key:
            held = seen[id(key)] = (key, accepts_kwargs(key))
        return held[1]

    return remembered


def _share_event_alias_names(patch: pytest.MonkeyPatch) -> None:
    """Every EventAliaser with botocore's own alias table (by content: a client's emitter holds a copy) shares one
    memo of aliased names; one given another table keeps its own, as in botocore."""
    built = botocore.hooks.EventAliaser.__init__
    shared: dict[str, str] = {}

    def init(self: botocore.hooks.EventAliaser, event_emitter: Any, event_aliases: Any = None) -> None:
        built(self, event_emitter, event_aliases)
        if self._event_aliases is botocore.hooks.EVENT_ALIASES or self._event_aliases == botocore.hooks.EVENT_ALIASES:
            self._alias_name_cache = shared

    patch.setattr(botocore.hooks.EventAliaser, "__init__", init)


def _trie_copy(self: Any, node: dict[str, Any]) -> dict[str, Any]:
    """botocore.hooks._PrefixTrie._recursive_copy: dicts copied recursively, each NodeList copied as its own __copy__
    does (its three lists copied), anything else shared."""
    node_list = botocore.hooks.NodeList
    copied: dict[str, Any] = {}
    for key, value in node.items():
        kind = type(value)
        if kind is node_list and type(value.first) is type(value.middle) is type(value.last) is list:
            copied[key] = node_list(value.first.copy(), value.middle.copy(), value.last.copy())
        elif kind is dict:
            copied[key] = _trie_copy(self, value)
        elif isinstance(value, node_list):
            copied[key] = copy.copy(value)
        elif isinstance(value, dict):
            copied[key] = _trie_copy(self, value)
        else:
            copied[key] = value
    return copied


def _command_once_per_app() -> Any:
    """typer.main.get_command, remembered per Typer app while its registered commands, groups and callback stay the
    same (a test that registers one more gets a command built anew)."""
    built: dict[int, tuple[Any, tuple[Any, ...], Any]] = {}

    def get_command(app: Any) -> Any:
        shape = (tuple(map(id, app.registered_commands)), tuple(map(id, app.registered_groups)),
                 id(app.registered_callback), id(app.info.callback))
        held = built.get(id(app))
        if held is None or held[0] is not app or held[1] != shape:
            held = built[id(app)] = (app, shape, typer.main.get_command(app))
        return held[2]

    return get_command


@pytest.fixture(autouse=True)
def _broken_invariants_fail_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every Result any test builds through `judge` keeps every invariant of rules/consistency.py: a broken one
    fails the test that produced it (tests of the invariants themselves call check_consistency directly)."""
    from gpuaudit.rules import consistency, judge

    def strict(result, evidence):  # type: ignore[no-untyped-def]
        checked = consistency.check_consistency(result, evidence)
        assert not checked.invariants_broken, checked.self_check
        return checked

    monkeypatch.setattr(judge, "check_consistency", strict)


# The files that take longest (wall seconds with `make test` on 2 cores), marked `slow` and collected first in this
# order, so the workers start on them and finish together: `make test` hands out files in collection order
# (--no-loadscope-reorder; xdist's own order is by number of tests, which put the one-test fault matrix last).
SLOW_FIRST = (
    # every read failing, on every shipped world and mode: ~450 audits, 2 processes
    "tests/scenarios/test_fault_matrix.py",
    # a headless Chromium per report (~2.5 s each; skipped where Chromium is absent)
    "tests/report/test_html_browser.py",
    "tests/collectors/test_stream_partitions.py",
    "tests/collectors/test_collectors.py",
    "tests/cli/test_cli_operator.py",  # each a `python -m gpuaudit` on a terminal
    "tests/infra/test_config_scale.py",  # the first CDK synthesis of its worker, and five `python app.py`
    "tests/cli/test_fuzz_inputs.py",
    "tests/benchmarks/test_history_bench.py",  # its history page in Chromium too
    "tests/writes/test_sinks.py",
    "tests/agent/test_mcp_server.py",
    "tests/handlers/test_query_budget.py",
    "tests/deployed/test_state_machine.py",
    "tests/infra/test_stack_nag.py",  # one `python app.py`, checked against the shared synthesis
    "tests/writes/test_alert_actions.py",
    "tests/writes/test_history_open.py",
    "tests/infra/test_stack_template.py",
    "tests/embedded/test_world_schema.py",
    "tests/deployed/test_deployed_iam.py",
)


# The files that synthesize the CDK app (tests/infra/cdk_synth.py): one scope for pytest-xdist, so one worker runs them
# all and the synthesis process starts once (~10 s of CPU for Node.js and cdk-nag) instead of once per worker. A file
# missing here still works: its worker starts a synthesis process of its own.
CDK_SYNTH_FILES = ("tests/infra/", "tests/deployed/")


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`--dist loadfile` with the CDK_SYNTH_FILES as one unit; any other --dist is xdist's own."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class SynthesisTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = nodeid.split("::", 1)[0]
            return "cdk-synthesis" if path.startswith(CDK_SYNTH_FILES) else path

    return SynthesisTogether(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {path: i for i, path in enumerate(SLOW_FIRST)}

    def order(item: pytest.Item) -> int:
        return rank.get(item.nodeid.split("::", 1)[0], len(SLOW_FIRST))

    for item in items:
        if order(item) < len(SLOW_FIRST):
            item.add_marker(pytest.mark.slow)
    items.sort(key=order)  # stable: each file's tests, and the other files, keep their order


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The fuzz suites' figures (how many inputs were tried), printed once at the end of the run."""
    fuzz = sys.modules.get("tests.cli.test_fuzz_inputs") or sys.modules.get("test_fuzz_inputs")
    tried = getattr(fuzz, "TRIED", None)
    if tried and sum(tried.values()):
        terminalreporter.write_line(f"fuzz: {tried['worlds']} hostile worlds (x3 formats), {tried['args']} CLI "
                                    "argument sets tried")
