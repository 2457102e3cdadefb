"""NCCL transport per node (#15 item 2; RULES §8 D layer 1, §10 P12, §11 capability table).

Written from RULES, not from what the code prints. The operator's questions: "did NCCL use EFA on every node, or
did it silently fall back to TCP?" and "if it fell back, are the EFA preconditions AWS can see in place?".

Good: `NET/OFI Selected Provider is efa`, `Using network AWS Libfabric`, `via P2P/CUMEM`, `NVLS Creating Multicast
group`. Bad: `via NET/Socket/` on EFA instances, `via SHM/direct/direct` on an NVSwitch node, `Using network IB` on
EC2. Each is reported per node with the line, its log group and stream. D is Proven only with a layer 1–3 signal on
the affected nodes before the hang; a missing security-group self rule is a proven precondition failure.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gpuaudit.domain.nccl import NodeFabric, assess, line_host, transport_of
from gpuaudit.model.evidence import AuditRequest
from gpuaudit.model.result import Branch, Check, NodeResult, Result
from gpuaudit.model.timeutil import parse_time
from gpuaudit.pipeline import run_audit
from gpuaudit.report.html import render_html
from tests.helpers.worlds import Node, PClusterWorld, at, cli_audit, node_of

JOB_GROUP = "/aws/batch/job"  # a job's stdout: not found by the substring discovery
JOB_STREAM = "train-llm/default/run-42"  # names neither an instance nor a host
SG = "sg-0efa5e1f00000002"
SINCE, UNTIL = at(6), at(10)
TIMEOUT = ("[rank3]:[E1001 07:15:02.123 ProcessGroupNCCL.cpp:616] [Rank 3] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=1234, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for "
           "600023 milliseconds before timing out.")
SOCKET = "NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0"
OFI = "NCCL INFO NET/OFI Selected Provider is efa, fabric is efa-direct (found 32 nics)"
SHM = "NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"
IB = "NCCL INFO Using network IB"
P2P = "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"


def rule(to_self: bool) -> list[dict[str, Any]]:
    if to_self:
        return [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": SG}], "IpRanges": []}]
    return [{"IpProtocol": "tcp", "FromPort": 22, "ToPort": 22, "UserIdGroupPairs": [],
             "IpRanges": [{"CidrIp": "10.0.0.0/16"}]}]


def cluster(lines: list[str], *, efa: int = 32, self_in: bool = True, self_out: bool = True,
            hang: bool = True) -> PClusterWorld:
    """Two p5 nodes (NVSwitch, EFA up to 32 interfaces), each attached to SG with `efa` EFA interfaces; both
    nodes' kernel streams live; the job's stdout (a named group) holds every rank's NCCL lines at 05:30, each line
    naming its host in NCCL's `<host>:<pid>:<tid>` prefix, and the watchdog timeout at 07:15 when `hang`."""
    w = PClusterWorld(n_compute=2)
    for raw in w.section("ec2", "instances"):
        if raw["InstanceId"] in {n.instance_id for n in w.compute}:
            raw["SecurityGroups"] = [{"GroupId": SG, "GroupName": "pc-compute"}]
            raw["VpcId"] = "vpc-0abc"
            raw["NetworkInterfaces"] = [{"InterfaceType": "efa", "OwnerId": "111122223333",
                                         "Groups": [{"GroupId": SG}]} for _ in range(efa)]
    w.section("ec2", "security_groups").append({
        "GroupId": SG, "GroupName": "pc-compute", "VpcId": "vpc-0abc",
        "IpPermissions": rule(self_in), "IpPermissionsEgress": rule(self_out)})
    for n in w.compute:
        w.healthy(n, at(-48), at(12, 25))
    job = w.log_group(JOB_GROUP)
    events: list[tuple[str | int, str]] = [(at(5, 30), f"{n.hostname}:2211:2290 [0] {line}")
                                           for n in w.compute for line in lines]
    if hang:
        events.append((at(7, 15, 2), TIMEOUT))
    w.stream(job, JOB_STREAM, events=events)
    return w


def run(w: PClusterWorld, mode: str = "incident", named: bool = True) -> Result:
    request = AuditRequest(cluster=w.cluster, mode=mode, since=parse_time(SINCE),  # type: ignore[arg-type]
                           until=parse_time(UNTIL), log_groups=[JOB_GROUP] if named else [])
    return run_audit(w.aws(), request)


def branch(result: Result, letter: str) -> Branch:
    return next(b for b in result.branches if b.branch == letter)


def p12(result: Result) -> Check:
    return next(c for c in result.checks if c.id == "P12")


def transports(result: Result, node: Node) -> dict[str, str]:
    return {t.transport: t.assessment for t in node_of(result, node.instance_id).nccl_transports}


# -- the classification (RULES §8 D layer 1) -------------------------------------------------------------------
@pytest.mark.parametrize(("line", "transport"), [
    ("NCCL INFO NET/OFI Selected Provider is efa, fabric is efa-direct", "EFA/OFI"),
    ("NCCL INFO Using network AWS Libfabric", "EFA/OFI"),
    ("NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read", "P2P"),
    ("NCCL INFO NVLS Creating Multicast group nranks 8 size 1073741824 on rank 0", "NVLS"),
    ("NCCL INFO Channel 00/0 : 0[0] -> 8[0] [send] via NET/Socket/0", "Socket"),
    ("NCCL INFO Channel 00 : 0[0] -> 1[1] via SHM/direct/direct", "SHM"),
    ("NCCL INFO Using network IB", "IB"),
])
def test_each_rules_marker_names_its_transport(line: str, transport: str) -> None:
    assert transport_of(line) == (transport, next(m for t, m in [
        ("EFA/OFI", "NET/OFI Selected Provider is efa"), ("EFA/OFI", "Using network AWS Libfabric"),
        ("P2P", "via P2P/CUMEM"), ("NVLS", "NVLS Creating Multicast group"), ("Socket", "via NET/Socket/"),
        ("SHM", "via SHM/direct/direct"), ("IB", "Using network IB")] if t == transport and m in line))


def test_the_efa_provider_line_is_read_in_both_spellings_of_aws_ofi_nccl() -> None:
    # Given the provider line as older and newer aws-ofi-nccl releases print it (`Provider` / `provider, fabric is`)
    older = "ip-10-1-2-3:31542:31690 [0] NCCL INFO NET/OFI Selected Provider is efa (found 32 nics)"
    newer = ("ip-10-1-2-3:31542:31690 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct "
             "(found 32 nics)")
    # When classified; Then both are RULES' `NET/OFI Selected Provider is efa` marker, and another provider is not
    assert transport_of(older) == transport_of(newer) == ("EFA/OFI", "NET/OFI Selected Provider is efa")
    tcp = "ip-10-1-2-3:1:2 [0] NCCL INFO NET/OFI Selected provider is tcp, fabric is tcp (found 1 nics)"
    assert transport_of(tcp) is None


def test_a_line_without_nccl_info_names_no_transport() -> None:
    assert transport_of("sshd: accepted connection via NET/Socket/0") is None  # not an NCCL line


def test_good_and_bad_depend_on_the_node() -> None:
    p5 = NodeFabric(efa_capable=True, nvswitch=True)
    g5 = NodeFabric(efa_capable=False, nvswitch=False)
    unknown = NodeFabric(efa_capable=None, nvswitch=None)
    assert assess("Socket", p5)[0] == "bad" and assess("Socket", g5)[0] == "expected"
    assert assess("Socket", unknown)[0] == "unverified"  # never called fine on an unread type
    assert assess("SHM", p5)[0] == "bad" and assess("SHM", g5)[0] == "expected"
    assert assess("IB", g5)[0] == "bad"  # InfiniBand on EC2 is unexpected on any type
    assert {assess(t, p5)[0] for t in ("EFA/OFI", "P2P", "NVLS")} == {"good"}


def test_the_host_is_read_from_ncclss_own_prefix() -> None:
    assert line_host("ip-10-0-0-2:2211:2290 [0] NCCL INFO Using network IB") == "ip-10-0-0-2"
    assert line_host("ip-10-0-0-2.us-west-2.compute.internal:2211:2290 [7] NCCL WARN x") == "ip-10-0-0-2"
    assert line_host("NCCL INFO Using network IB") is None


# -- worlds ----------------------------------------------------------------------------------------------------
def test_socket_fallback_on_p5_with_preconditions_met_is_a_proven_d_before_the_hang() -> None:
    w = cluster([SOCKET, P2P])
    result = run(w)
    for n in w.compute:
        (sock,) = [t for t in node_of(result, n.instance_id).nccl_transports if t.transport == "Socket"]
        assert sock.assessment == "bad" and sock.log_group == JOB_GROUP and sock.log_stream == JOB_STREAM
        assert sock.message == f"{n.hostname}:2211:2290 [0] {SOCKET}"  # the line, verbatim
        assert transports(result, n)["P2P"] == "good"
    d = branch(result, "D")
    # the fallback (05:30) precedes the hang (07:15, the watchdog line) on the nodes: Proven
    assert d.status == "Root cause" and d.label == "Proven"
    assert "before the hang (2026-10-01T07:15:02Z, first NCCL timeout line" in d.evidence  # the watchdog's line
    for n in w.compute:
        assert f"{n.instance_id}: 32 of 32 EFA interfaces attached" in d.evidence
    assert "Cleared" in d.evidence and SG in d.evidence  # the self rules were read and found both ways
    assert "aws-ofi-nccl" in d.evidence  # preconditions met: the node's EFA software is what is left


def test_socket_fallback_with_a_missing_outbound_self_rule_is_a_proven_precondition_failure() -> None:
    w = cluster([SOCKET], self_out=False, hang=False)  # no hang line, no window to order by: still Proven
    request = AuditRequest(cluster=w.cluster, mode="incident", log_groups=[JOB_GROUP])  # type: ignore[arg-type]
    d = branch(run_audit(w.aws(), request), "D")
    assert d.status == "Root cause" and d.label == "Proven"
    assert "precondition failure" in d.evidence and "outbound" in d.evidence and SG in d.evidence


def test_socket_fallback_without_a_known_hang_time_is_a_hypothesis() -> None:
    w = cluster([SOCKET], hang=False)
    request = AuditRequest(cluster=w.cluster, mode="incident", log_groups=[JOB_GROUP])  # type: ignore[arg-type]
    d = branch(run_audit(w.aws(), request), "D")
    assert d.label == "Hypothesis (to validate)" and d.status != "Root cause"
    assert "onset is not known" in d.evidence and d.confirming_measurement


def test_socket_fallback_with_too_few_efa_interfaces_names_them() -> None:
    w = cluster([SOCKET], efa=1)
    d = branch(run(w), "D")
    assert all(f"{n.instance_id}: 1 of 32 EFA interfaces attached" in d.evidence for n in w.compute)
    assert "Fewer EFA interfaces than the type supports" in d.evidence


def test_unreadable_security_groups_leave_the_precondition_not_checked_never_fine() -> None:
    w = cluster([SOCKET])
    w.fault("ec2", "DescribeSecurityGroups", "UnauthorizedOperation", message="not authorized")
    d = branch(run(w), "D")
    assert "Not checked" in d.evidence and "Cleared" not in d.evidence
    assert "could not be checked" in d.evidence


def test_efa_ofi_selected_is_good_and_d_is_ruled_out_on_transport() -> None:
    w = cluster([OFI, P2P, "NCCL INFO NVLS Creating Multicast group nranks 8 size 1073741824"])
    result = run(w)
    for n in w.compute:
        assert transports(result, n) == {"EFA/OFI": "good", "P2P": "good", "NVLS": "good"}
    d = branch(result, "D")
    assert d.status == "Ruled out" and "EFA/OFI (good)" in d.evidence
    pre = run(w, mode="preflight")
    assert p12(pre).result == "PASS" and "NET/OFI Selected Provider is efa" in p12(pre).evidence


def test_shm_direct_on_an_nvswitch_node_is_bad() -> None:
    w = cluster([SHM], hang=False)
    result = run(w)
    assert all(transports(result, n) == {"SHM": "bad"} for n in w.compute)
    d = branch(result, "D")
    assert d.label == "Hypothesis (to validate)" and "SHM" in d.evidence and "peer access unused" in d.evidence
    pre = run(w, mode="preflight")
    assert p12(pre).result == "RISK" and "SHM" in p12(pre).evidence


def test_ib_on_ec2_is_bad() -> None:
    w = cluster([IB], hang=False)
    result = run(w)
    assert all(transports(result, n) == {"IB": "bad"} for n in w.compute)
    assert "IB" in branch(result, "D").evidence
    assert p12(run(w, mode="preflight")).result == "RISK"


def test_socket_fallback_fails_p12() -> None:
    w = cluster([SOCKET], hang=False)
    check = p12(run(w, mode="preflight"))
    assert check.result == "FAIL" and JOB_GROUP in check.evidence and JOB_STREAM in check.evidence


def test_nccl_lines_only_in_a_named_group_are_found_only_when_named() -> None:
    """Every marker is searched in all sources: the job's stdout holds the only NCCL lines, in a stream that names
    no node; NCCL's host prefix attributes each to its node."""
    w = cluster([SOCKET])
    unnamed = run(w, named=False)
    assert all(node_of(unnamed, n.instance_id).nccl_transports == [] for n in w.compute)
    assert all(node_of(unnamed, n.instance_id).signals.nccl == "Not observable" for n in w.compute)
    assert branch(unnamed, "D").status == "Not assessed"
    named = run(w)
    assert all(transports(named, n) == {"Socket": "bad"} for n in w.compute)


def test_the_reports_quote_the_line_escaped_with_its_group_and_stream(tmp_path: Path) -> None:
    hostile = SOCKET + " <script>alert(1)</script> | `x` \x1b[31m"
    w = cluster([hostile], hang=False)
    code, out = cli_audit(w.raw, tmp_path, "--cluster", w.cluster, "--mode", "incident", "--log-group", JOB_GROUP,
                          "--format", "md")
    assert code == 0
    table = out.split("## Node capability and fabric")[1].split("## GPU error log coverage")[0]
    assert "Socket (BAD)" in table
    assert "NCCL transport lines" in table and "/aws/batch/job" in table and "train-llm/default/run-42" in table
    assert "\x1b" not in out and "\\x1b[31m" in table  # controls shown, never emitted
    quoted = next(x for x in table.splitlines() if "<script>" in x)
    assert "``" in quoted and "\\|" in quoted  # inside a code span the text cannot close, table pipe escaped
    assert all("\\<script" in x for x in out.splitlines() if "<script>" in x and "``" not in x)  # prose: escaped
    html = render_html(run(w))
    assert "Socket (BAD)" in html and "&lt;script&gt;" in html and "<script>alert" not in html
    assert JOB_STREAM in html


def test_the_json_result_carries_each_transport(tmp_path: Path) -> None:
    w = cluster([SOCKET, P2P], hang=False)
    code, out = cli_audit(w.raw, tmp_path, "--cluster", w.cluster, "--log-group", JOB_GROUP, "--format", "json")
    assert code == 0
    node = next(n for n in json.loads(out)["nodes"] if n["instance_id"] == w.compute[0].instance_id)
    row = {t["transport"]: t for t in node["nccl_transports"]}
    assert row["Socket"]["assessment"] == "bad" and row["Socket"]["log_group"] == JOB_GROUP
    assert row["Socket"]["log_stream"] == JOB_STREAM and "via NET/Socket/" in row["Socket"]["message"]
    assert row["P2P"]["assessment"] == "good"
    NodeResult.model_validate(node)  # additive: the node still reads back into the typed model
