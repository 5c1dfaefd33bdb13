"""PyTorch memory snapshots read without torch: numbers, phase and component per layout; hostile and
cut files refused in one line (issue 19)."""

import json
import pickle
import re

import pytest

import snapfix
from snapfix import GIB, MIB
from test_cli import run
from test_zh import prose, theirs, typography_faults, vocabulary_faults

from advisor.pipeline import diagnose_path, diagnose_text


def _diag(tmp_path, build, name="s.pickle", **kw):
    return diagnose_path(str(build.write(tmp_path / name)), **kw)


@pytest.mark.parametrize("legacy", [False, True], ids=["2.1+", "2.0-history"])
def test_activations_of_the_first_step(tmp_path, legacy):
    d = _diag(tmp_path, snapfix.activations_first_step(legacy), gpu="24GiB")
    assert (d.verdict, d.phase, d.component) == ("device_oom", "first_step", "activations")
    m = d.memory
    assert m["tried_gib"] == 2.0 and m["allocated_by_pytorch_gib"] == 22.0
    assert m["reserved_gib"] == pytest.approx(22 + 20 / 1024, abs=1e-4)
    assert m["free_gib"] == pytest.approx(700 / 1024, abs=1e-4) and m["total_gib"] == 24.0
    assert d.snapshot["live_by_component_gib"] == {"weights": 14.0, "activations": 8.0}
    assert d.snapshot["layout"] == ("2.0" if legacy else "2.1+")
    assert "no optimizer state live yet" in d.basis["phase"]
    assert d.plan and d.plan[0]["action"] in ("reduce_batch", "grad_checkpointing")
    assert d.facts["step"] is None


def test_fragmentation_is_measured(tmp_path):
    d = _diag(tmp_path, snapfix.fragmentation())
    assert (d.rule, d.component, d.phase) == ("OOM501", "fragmentation", "mid_training")
    assert d.memory["largest_free_block_gib"] == pytest.approx(400 / 1024, abs=1e-4)
    assert d.snapshot["fragmented"] is True and d.snapshot["inactive_gib"] == pytest.approx(3600 / 1024, abs=1e-4)
    assert d.memory["pending_free_gib"] == pytest.approx(100 / 1024, abs=1e-4)
    live = d.snapshot["live_by_component_gib"]
    assert live["optimizer_states"] == 6.0 and live["gradients"] == pytest.approx(924 / 1024, abs=1e-4)
    assert d.plan[0]["action"] == "expandable_segments"


def test_optimizer_states_at_the_first_step(tmp_path):
    d = _diag(tmp_path, snapfix.optimizer_first_step(), gpu="A100-40G")
    assert (d.verdict, d.phase, d.component) == ("device_oom", "first_step", "optimizer_states")
    assert d.snapshot["live_by_component_gib"] == {"weights": 14.0, "gradients": 14.0, "optimizer_states": 10.0}
    sites = {t["site"]: t["component"] for t in d.snapshot["top_allocations"]}
    assert sites["adamw.py:_init_group"] == "optimizer_states"
    assert any(s.startswith("torch::autograd::Engine") for s in sites), "backward: C++ frames named"


def test_detected_by_content_on_stdin_and_json_keys_are_added(tmp_path):
    data = pickle.dumps(snapfix.activations_first_step().data())
    d = diagnose_text(data)
    assert d.component == "activations"
    rc, out, err = run("diagnose", "--format", "json", stdin=data)
    assert rc == 1, err
    j = json.loads(out)
    for key in ("verdict", "phase", "component", "memory", "basis", "plan", "evidence", "snapshot"):
        assert key in j
    assert j["memory"]["tried_gib"] == 2.0


def test_a_snapshot_without_an_oom_is_no_failure(tmp_path):
    b = snapfix.Builder().segment([(2 * GIB, "active_allocated", snapfix.WEIGHTS)])
    d = _diag(tmp_path, b)
    assert d.verdict == "no_failure" and d.snapshot["live_by_component_gib"] == {"weights": 2.0}


class _Evil:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        import os
        return (os.system, (f"touch {self.path}",))


@pytest.mark.parametrize("protocol", [2, 4])
def test_a_pickle_that_asks_for_a_global_is_refused_and_nothing_runs(tmp_path, protocol):
    marker = tmp_path / "ran"
    path = tmp_path / "evil.pickle"
    path.write_bytes(pickle.dumps({"segments": [], "x": _Evil(marker)}, protocol=protocol))
    rc, out, err = run("diagnose", str(path))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "refused" in err and "system" in err
    assert not marker.exists()


def test_hand_written_global_opcode_is_refused(tmp_path):
    marker = tmp_path / "ran2"
    path = tmp_path / "evil0.pickle"
    path.write_bytes(b"\x80\x02cos\nsystem\nq\x00X" + len(f"touch {marker}").to_bytes(4, "little")
                     + f"touch {marker}".encode() + b"\x85R.")
    rc, _, err = run("diagnose", str(path))
    assert rc == 2 and "refused" in err and not marker.exists()


def test_a_truncated_snapshot_is_one_line_and_exit_2(tmp_path):
    data = pickle.dumps(snapfix.fragmentation().data())
    path = tmp_path / "cut.pickle"
    path.write_bytes(data[: len(data) // 2])
    rc, out, err = run("diagnose", str(path))
    assert rc == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and "truncated" in err


def test_a_pickle_that_is_not_a_snapshot(tmp_path):
    path = tmp_path / "other.pickle"
    path.write_bytes(pickle.dumps({"weights": [1, 2, 3]}))
    rc, _, err = run("diagnose", str(path))
    assert rc == 2 and "not a memory snapshot" in err


@pytest.mark.parametrize("fmt", ["text", "markdown", "html"])
def test_reports_show_the_snapshot_in_both_languages(tmp_path, fmt):
    from advisor.render import render
    for lang, word in (("en", "Memory snapshot"), ("zh", "显存快照")):
        d = _diag(tmp_path, snapfix.fragmentation(), lang=lang)
        out = render(d, fmt, lang)
        if fmt != "html":
            assert word in out
        if lang == "zh":
            text = prose(out, fmt, theirs(d) + [t["site"] for t in d.snapshot["top_allocations"]])
            faults = typography_faults(text) + vocabulary_faults(text)
            assert faults == [], faults


def test_pytorch_pool_rule_small_holes_do_not_serve_a_large_request(tmp_path):
    """A request above 1 MiB is served by the large pool only: small-pool holes are not counted."""
    b = snapfix.Builder()
    b.segment([(2 * GIB, "active_allocated", snapfix.ACTS), (600 * MIB, "inactive", [])])
    b.segment([(1 * MIB, "active_allocated", snapfix.ACTS), (1 * MIB, "inactive", [])], kind="small")
    d = _diag(tmp_path, b.oom(512 * MIB, 10 * MIB, snapfix.ACTS))
    assert d.memory["largest_free_block_gib"] == pytest.approx(600 / 1024, abs=1e-4)
    assert d.component != "fragmentation"


def test_the_oom_device_is_measured_not_the_first(tmp_path):
    quiet = snapfix.Builder().segment([(8 * GIB, "active_allocated", snapfix.WEIGHTS)]).data()
    busy = snapfix.activations_first_step().data()
    for seg in busy["segments"]:
        seg["device"] = 1
    data = {"segments": quiet["segments"] + busy["segments"], "device_traces": [quiet["device_traces"][0],
                                                                                 busy["device_traces"][0]]}
    d = diagnose_text(pickle.dumps(data))
    assert d.memory["device_index"] == 1 and d.memory["allocated_by_pytorch_gib"] == 22.0
    assert d.snapshot["device"] == 1


def test_a_bare_segment_list_and_pre_state_flags_are_read(tmp_path):
    """torch.cuda.memory_snapshot() pickled: a list of segments; old blocks say allocated/active."""
    segs = snapfix.activations_first_step().data()["segments"]
    for seg in segs:
        for b in seg["blocks"]:
            b["allocated"] = b.pop("state") == "active_allocated"
    d = diagnose_text(pickle.dumps(segs))
    assert d.verdict == "no_failure" and d.memory["reserved_gib"] == pytest.approx(22 + 20 / 1024, abs=1e-4)
    assert d.snapshot["live_by_component_gib"] == {"weights": 14.0, "activations": 8.0}


def _memory_viz():
    """PyTorch's own reader (torch/cuda/_memory_viz.py imports only the standard library), loaded by
    path so that torch itself is not imported; None where torch is not installed."""
    import importlib.util
    from pathlib import Path
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.origin:
        return None
    path = Path(spec.origin).parent / "cuda" / "_memory_viz.py"
    if not path.is_file():
        return None
    mod_spec = importlib.util.spec_from_file_location("_oom_doctor_memory_viz", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return mod


@pytest.mark.parametrize("build", [snapfix.activations_first_step, snapfix.fragmentation, snapfix.optimizer_first_step])
def test_pytorchs_own_reader_agrees_with_the_fixtures(build):
    """Run once where torch is installed (checked with PyTorch 2.14.1); skipped elsewhere."""
    mv = _memory_viz()
    if mv is None:
        pytest.skip("torch is not installed")
    data = build().data()
    summary, trace = mv.segsum(data), mv.trace(data)     # segsum asserts every segment adds up
    d = diagnose_text(pickle.dumps(data))
    reserved = float(re.search(r"total_reserved: ([\d.]+)GiB", summary).group(1))
    assert reserved == pytest.approx(d.memory["reserved_gib"], rel=0.02)
    assert "raise OutOfMemoryError" in trace


@pytest.mark.parametrize("via_stdin", [False, True])
def test_a_snapshot_over_the_cap_is_refused_in_one_line(tmp_path, via_stdin):
    path = snapfix.fragmentation().write(tmp_path / "big.pickle")
    env = {"OOM_DOCTOR_SNAPSHOT_MAX_GB": "0.0000001"}
    rc, out, err = run("diagnose", "-", stdin=path.read_bytes(), env=env) if via_stdin else \
        run("diagnose", str(path), env=env)
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "OOM_DOCTOR_SNAPSHOT_MAX_GB" in err
