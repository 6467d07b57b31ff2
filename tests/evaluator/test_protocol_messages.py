"""The judge's requests are typed messages (`protocol.messages`): each one crosses the wire and comes
back equal, and the worker's strict parser refuses a request with a field of the wrong type, a
field missing, a field it does not know, or an op that does not exist, saying which. The last test
drives a real worker: a malformed request is an error reply (`ProtocolError`), and the worker goes
on serving."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import torch
from agentforge.evaluator.protocol import messages, wire
from agentforge.evaluator.protocol.messages import (
    Build,
    BuildReport,
    Call,
    CandidateRaised,
    Construct,
    DeviceProfile,
    Drive,
    Finish,
    Flush,
    Load,
    ProtocolError,
    Request,
    Seal,
    Setup,
    Shutdown,
    Time,
    parse_request,
)

ARENA = [{"__arena__": 0}, 3]
SLOTS = [{"dtype": "float32", "shape": [4, 5], "chunks": 1}]

# One of each request, every field set where the judge ever sets it.
EXAMPLES: list[Request] = [
    Setup(workdir="/w", cache_dir="/c", cpu_threads=1, device="cpu", torch_switches=True,
          limits={"file_size_bytes": 1 << 20}, drop_to_uid=1000, cuda_visible_devices="0", sampled=False,
          judge_builds=True),
    Load(source="class ModelNew: ...", backend="cpu", compile_only=False, arch="sm_90a", device="cpu",
         module_name="agentforge_candidate_x", interpret=True, emulate=False, drive_only=True),
    Drive(init=[3, 1.5], inputs=[{"__empty__": [[2, 3], "float32"]}, 7], arch="sm_90a", backend="cuda"),
    BuildReport(backend="cuda", arch="sm_80"),
    Construct(key="cand/default", init=[8], state={"weight": [1.0, 2.0]}),
    Call(key="cand/default", slot="cand/default", where="default", inputs=[1, 2.5], refill=None,
         landing_slots=SLOTS),
    Call(key="cand/default", slot="cand/default/dry", where="odd", empty_inputs=[{"__empty__": [[4], "int64"]}],
         dry=True),
    Flush(args=ARENA, arena_slots=SLOTS),
    Time(key="null", want_output=True, head_start=True, null_like=[[[4, 5], "float32"]], staged=True),
    Time(key="cand", want_output=False, args=ARENA, arena_slots=SLOTS, landing_slots=SLOTS),
    DeviceProfile(key="cand", reps=5, args=ARENA),
    Seal(),
    Build(kind="load_inline", name="relu_ext", sources=["torch::Tensor relu(torch::Tensor x);"], cuda_sources=[],
          functions=["relu"], extra_cflags=["-O3"], extra_ldflags=[], with_cuda=False, is_python_module=True),
    Finish(),
    Shutdown(),
]


def _over_the_wire(message: Request, ident: int = 7) -> dict[str, Any]:
    """The request as the worker receives it: through the wire's encoding, tensors and files included."""
    files: list[wire.SharedFile] = []
    structure, tensors = wire.encode({"id": ident, "op": message.op, **message.to_fields()}, files)
    return wire.decode(structure, tensors, files)


def test_every_op_has_one_message() -> None:
    assert sorted(messages.REQUESTS) == sorted(
        ["setup", "load", "drive", "build_report", "construct", "call", "flush", "time", "device_profile",
         "seal", "finish", "build", "shutdown"])
    assert {type(m) for m in EXAMPLES} == set(messages.REQUESTS.values())


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda m: f"{m.op}")
def test_every_message_round_trips(message: Request) -> None:
    assert parse_request(_over_the_wire(message)) == message
    assert type(message).parse(message.to_fields()) == message  # the envelope is optional to the class


def test_payloads_cross_as_they_are() -> None:
    """Tensors and shared files are the wire's business: the message holds what it was given."""
    weight = torch.randn(3, 2)
    parsed = parse_request(_over_the_wire(Construct(key="k", init=[], state={"weight": weight})))
    assert isinstance(parsed, Construct) and torch.equal(parsed.state["weight"], weight)
    fd = os.memfd_create("arena")
    try:
        sent = Time(key="k", args=ARENA, arena=[wire.SharedFile(fd)], arena_slots=SLOTS)
        assert Time.parse({"op": "time", **sent.to_fields()}).arena[0].fd == fd
        with pytest.raises(ProtocolError, match=r"'arena' must be list\[SharedFile\] \| None, not list"):
            Time.parse({"op": "time", **sent.to_fields(), "arena": [fd]})
    finally:
        os.close(fd)


@pytest.mark.parametrize(("raw", "said"), [
    ({"op": "load", "source": "s", "backend": 3, "compile_only": False, "arch": "a", "device": "cpu",
      "module_name": "m"}, "'load' request: field 'backend' must be str, not int 3"),
    ({"op": "time", "key": "k", "want_output": 1}, "field 'want_output' must be bool, not int 1"),
    ({"op": "device_profile", "key": "k", "reps": True}, "field 'reps' must be int, not bool True"),
    ({"op": "construct", "key": "k", "init": (1,), "state": {}}, "field 'init' must be list[Any], not tuple"),
    ({"op": "construct", "key": "k", "init": [], "state": {1: "x"}}, "field 'state' must be dict[str, Any]"),
    ({"op": "call", "key": "k", "slot": "s", "where": None}, "field 'where' must be str, not NoneType None"),
    ({"op": "setup", "workdir": "/w", "drop_to_uid": "1000"}, "field 'drop_to_uid' must be int | None"),
    ({"op": "finish", "id": "7"}, "'finish' request: its id must be an int, not str"),
])
def test_a_field_of_the_wrong_type_is_refused(raw: dict[str, Any], said: str) -> None:
    with pytest.raises(ProtocolError) as caught:
        parse_request(raw)
    assert said in str(caught.value)


def test_a_missing_field_is_refused_by_name() -> None:
    with pytest.raises(ProtocolError, match=r"^'call' request: missing field\(s\) slot$"):
        parse_request({"id": 1, "op": "call", "key": "k"})
    with pytest.raises(ProtocolError, match=r"'build_report' request: missing field\(s\) backend, arch"):
        parse_request({"op": "build_report"})


def test_an_unknown_field_is_refused_by_name() -> None:
    with pytest.raises(ProtocolError, match=r"'flush' request: unknown field\(s\) stagd; it takes args, arena"):
        parse_request({"op": "flush", "args": [], "stagd": True})
    with pytest.raises(ProtocolError, match=r"'seal' request: unknown field\(s\) now; it takes none"):
        parse_request({"op": "seal", "now": True})


def test_an_unknown_op_is_refused_with_the_ops_listed() -> None:
    with pytest.raises(ProtocolError, match=r"unknown request op 'launch'; the ops are setup, load, drive"):
        parse_request({"op": "launch"})
    with pytest.raises(ProtocolError, match="unknown request op None"):
        parse_request({"key": "k"})
    with pytest.raises(ProtocolError, match="a request must be an object, not list"):
        parse_request(["op", "time"])
    with pytest.raises(ProtocolError, match="a 'time' request is not a 'flush' request"):
        Flush.parse({"op": "time"})


def test_the_malformed_request_reply_is_an_error_record() -> None:
    reply = messages.protocol_error_reply(ProtocolError("'call' request: missing field(s) slot"))
    record = messages.error_record(reply["raised"])
    assert (record.type, record.message) == ("ProtocolError", "'call' request: missing field(s) slot")


RELU = '''
import torch
from torch import nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
'''


def test_a_worker_answers_a_malformed_request_and_stays_usable(tmp_path: Path) -> None:
    from agentforge.sandbox.worker import launch_worker

    client = launch_worker()
    try:
        client.setup(workdir=os.getcwd(), cache_dir=str(tmp_path / "cache"), cpu_threads=1, device="cpu",
                     torch_switches=True)
        load = Load(source=RELU, backend="cpu", compile_only=False, arch="sm_90a", device="cpu",
                    module_name="protocol_test_candidate")
        with pytest.raises(CandidateRaised) as caught:  # the low-level transport sends anything
            client.request("load", **{**load.to_fields(), "compile_only": "no"})
        assert caught.value.record.type == "ProtocolError"
        assert "'load' request: field 'compile_only' must be bool, not str 'no'" in caught.value.record.message
        for op, fields, said in [("load", {"sourc": RELU}, "unknown field(s) sourc"),
                                 ("launch", {}, "unknown request op 'launch'"),
                                 ("seal", {"now": True}, "'seal' request: unknown field(s) now")]:
            with pytest.raises(CandidateRaised) as caught:
                client.request(op, **fields)
            assert (caught.value.record.type, said in caught.value.record.message) == ("ProtocolError", True)
        assert client.send(load)["has_model"] is True  # nothing was loaded before: the worker goes on
        client.send(Construct(key="m", init=[], state={}))
        x = torch.randn(4, 5)
        reply = client.send(Call(key="m", slot="m", inputs=[x], where="default"))
        assert torch.equal(reply["output"], torch.relu(x))
        with pytest.raises(CandidateRaised) as caught:
            client.request("call", key="m", slot="m", inputs=[x], where=3)
        assert caught.value.record.type == "ProtocolError"
        assert isinstance(client.send(Finish())["evidence"], list)
    finally:
        client.close()
    assert client.reaped or client.closed


def test_a_build_report_is_read_typed_and_a_malformed_one_breaks_the_worker() -> None:
    from agentforge.evaluator.result import CompileRecord, to_plain

    plain = to_plain(CompileRecord(ok=True, backend="cpu"))
    loaded = messages.LoadReply.parse({"compile": plain, "error": None, "has_model": True}, "cpu")
    assert loaded.compile.backend == "cpu" and loaded.error is None
    with pytest.raises(messages.WorkerBroken, match="the build report names another backend"):
        messages.LoadReply.parse({"compile": plain}, "cuda")
    with pytest.raises(messages.WorkerBroken, match="the build report is malformed"):
        messages.LoadReply.parse({"error": None}, "cpu")


@pytest.mark.parametrize(("change", "said"), [
    ({"op_counts": {"aten::relu": 1.5}}, "the operator counts are malformed"),
    ({"evidence": "all fine"}, "evidence is not a list"),
    ({"launch_problems": None}, "launch_problems is malformed"),
])
def test_a_finish_reply_is_read_typed_and_a_malformed_one_breaks_the_worker(change: dict[str, Any],
                                                                             said: str) -> None:
    raw = {"op_counts": {"aten::relu": 2}, "evidence": [["monkey_patch", "x"], ["bad"]], "launch_specs": [],
           "launch_problems": [], "opened": []}
    final = messages.FinishReply.parse(raw)
    assert (final.op_counts, final.evidence) == ({"aten::relu": 2}, [("monkey_patch", "x")])
    with pytest.raises(messages.WorkerBroken, match=said):
        messages.FinishReply.parse({**raw, **change})


@pytest.mark.parametrize(("raw", "said"), [
    ({"device_us": -1.0, "closed_us": 2.0, "output": []}, "timing sample device_us=-1.0"),
    ({"device_us": 1.0, "closed_us": float("nan"), "output": []}, "timing sample closed_us=nan"),
    ({"device_us": 1.0, "closed_us": True, "output": []}, "timing sample closed_us=True"),
    ({"device_us": 1.0, "closed_us": 2.0}, "carries no output"),
    ({"device_us": 1.0, "closed_us": 2.0, "output": [], "timed_rules": {"a": 1}}, "evidence is not a list"),
])
def test_a_timed_reply_is_read_typed_and_a_malformed_one_breaks_the_worker(raw: dict[str, Any], said: str) -> None:
    good = messages.TimeReply.parse({"device_us": 3, "closed_us": 4.5, "output": [{"__arena__": 0}],
                                     "timed_rules": [["aliased_output", "out is x"], [1]]}, want_output=True)
    assert (good.device_us, good.closed_us, good.timed_rules) == (3.0, 4.5, [("aliased_output", "out is x")])
    assert messages.TimeReply.parse({"device_us": 1, "closed_us": 1}, want_output=False).output is None
    with pytest.raises(messages.WorkerBroken, match=said):
        messages.TimeReply.parse(raw, want_output=True)


def test_call_and_dry_call_replies_are_read_typed() -> None:
    call = messages.CallReply.parse({"output": 3, "evidence": [["input_mutation", "x changed"]]})
    assert (call.output, call.evidence) == (3, [("input_mutation", "x changed")])
    with pytest.raises(messages.WorkerBroken, match="carries no output"):
        messages.CallReply.parse({"evidence": []})
    dry = messages.DryCallReply.parse({"specs": [{"kernel": "k"}], "note": ""})
    assert dry.specs == [{"kernel": "k"}]
    for bad in ({"specs": "k", "note": ""}, {"specs": [], "note": None}, {"specs": [3], "note": ""}):
        with pytest.raises(messages.WorkerBroken, match="dry launch"):
            messages.DryCallReply.parse(bad)
