"""tools/bench/zoo.py, tools/bench/scale.py and tools/bench/ort_pattern.py: the parts that need
no peers."""
from __future__ import annotations

import pytest

import graphmem
from graphmem.frontend.zoo import zoo_path
from tools.bench import ort_pattern, scale
from tools.bench import zoo as bench
from tools.docs.sections import write_doc


def test_write_section_keeps_other_sections(tmp_path):
    doc = tmp_path / "benchmarks.md"
    doc.write_text("# Benchmarks\n\nintro\n\n<!-- other:tool -->\nkeep me\n<!-- /other:tool -->\n")
    write_doc(doc, "bench:zoo", "first")
    write_doc(doc, "bench:scale", "S")
    write_doc(doc, "bench:zoo", "second $1 \\g<0>")  # replacement text is literal
    text = doc.read_text()
    assert "keep me" in text and "intro" in text and "first" not in text
    assert "<!-- bench:zoo -->\nsecond $1 \\g<0>\n<!-- /bench:zoo -->" in text
    assert text.count("<!-- bench:zoo -->") == 1 and "<!-- bench:scale -->\nS\n" in text
    assert text.index("other:tool") < text.index("bench:zoo") < text.index("bench:scale")


@pytest.mark.parametrize("family", scale.FAMILIES)
def test_synthetic_graphs_plan_and_validate(family):
    graph = scale.BUILD[family](300)
    assert len(graph.nodes) == 300
    result = graphmem.plan_graph(graph)  # validates the plan
    stats = result.plan.stats
    assert stats["aliased_peak_bytes"] <= stats["arena_bytes"] <= stats["naive_bytes"]
    assert scale.BUILD[family](300) == graph  # deterministic


def test_loglog_svg_is_an_svg_with_every_family():
    rows = [{"family": f, "nodes": n, "plan_s": n / 1e5 * (k + 1)}
            for k, f in enumerate(scale.FAMILIES) for n in (1000, 10000)]
    svg = scale.loglog_svg(rows)
    assert svg.startswith("<svg") and svg.rstrip().endswith("</svg>")
    assert all(f in svg for f in scale.FAMILIES) and svg.count("<polyline") == len(scale.FAMILIES)


def test_ort_log_parse_takes_the_repeated_first_extension_of_run_one():
    line = ("2026-01-01 [I:onnxruntime:Default, bfc_arena.cc:335 AllocateRawInternal] Extending "
            "BFCArena for Cpu. bin_num:13 (requested) num_bytes: {} (actual) rounded_bytes:{}")
    log = "\n".join(["@@graphmem-run 0", line.format(100, 100), "@@graphmem-run 1",
                     line.format(4096, 4096), line.format(64, 64), "@@graphmem-run 2",
                     line.format(4096, 4096), "@@graphmem-run end"])
    got = ort_pattern.parse(log)
    assert got["pattern_bytes"] == 4096 and got["other_bytes"] == 64
    # run 2 differs from run 1: refused
    bad = log.rsplit(line.format(4096, 4096), 1)[0] + line.format(8192, 8192)
    assert ort_pattern.parse(bad)["pattern_bytes"] is None
    assert ort_pattern.parse("@@graphmem-run 0\n")["pattern_bytes"] is None


def test_zoo_tables_say_where_graphmem_is_not_smallest():
    row = {"model": "m", "nodes": 3, "naive": 10, "unaliased": 5, "aliased": 4, "graphmem": 6,
           "optimal": 4, "optimal_proven": True, "optimal_gap": 0.0, "share": 7, "onnx_tool": 8,
           "graphmem_io": 5, "ort_off": 6, "ort_on": 4, "load_s": 0.1}
    row.update({s: 6 for s in bench.STRATEGIES})
    text, notes = bench.zoo_tables([row])
    assert any("graphmem" in n and "not the smallest" in n for n in notes)
    assert any("optimizations on" in n for n in notes)
    assert "| m | 3 |" in text


def test_intermediates_arena_leaves_inputs_and_outputs_out():
    graph = graphmem.load(zoo_path("squeezenet"))
    full = graphmem.plan_graph(graph).plan.arena_bytes
    assert 0 < bench.intermediates_arena(graph) <= full


def test_scale_report_names_the_machine_check_and_the_best_fit_loop(capsys):
    import types
    rows = [{"family": f, "nodes": n, "tensors": n, "plan_s": n / 1e5, "passes_s": {"place": 0.0},
             "peak_rss_mib": 50.0, "rss_before_mib": 40.0, "arena_over_peak": 1.0,
             "strategy": "greedy_by_size", "reordered": False, "check_s": 1.375}
            for f in scale.FAMILIES for n in (1000, 100_000)]
    args = types.SimpleNamespace(no_write=True, check_before=1.25, check_after=1.5)
    scale._report(args, rows, "")
    out = capsys.readouterr().out
    assert "took 1.25 s before the measurements and 1.50 s after them" in out
    assert "| check s |" in out and out.count("| 1.38 |") == len(rows)  # per row
    assert "run compiled" in out
    assert "- 100,000 nodes: slowest family" in out and "met" in out


def test_reference_workload_runs_and_takes_time():
    assert scale.reference_workload(10_000) > 0


@pytest.mark.slow
def test_macs_match_pytorch_flop_counter(capsys):
    """tools/training/macs_vs_pytorch.py: graphmem's MACs of resnet18's training step equal
    PyTorch's FlopCounterMode FLOPs / 2 (needs torch; slow: it exports resnet18)."""
    pytest.importorskip("torch")
    from tools.training import macs_vs_pytorch

    assert macs_vs_pytorch.main(["resnet18", "--batch", "1"]) == 0
    out = capsys.readouterr().out
    assert "per-layer MACs identical" in out and "backward: equal." in out


def test_whole_files_interleaves_the_two_processes_and_keeps_each_fastest(monkeypatch, tmp_path):
    """tools/bench/whole.py --files: every round runs each file's graphmem and ORT processes
    one after the other, which goes first alternating; each keeps its fastest."""
    from tools.bench import whole
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    for p in (a, b):
        p.write_bytes(b"x")
    (tmp_path / "notes.txt").write_text("")
    assert whole.file_list([tmp_path]) == [a, b] and whole.file_list([b]) == [b]
    calls, times = [], iter([3.0, 2.0, 1.0, 4.0, 1.5, 2.5, 0.5, 5.0])

    def fake(kind, path, out, repeats):
        calls.append((path.name, kind))
        return {"s": next(times), "peak_mib": 1.0}
    monkeypatch.setattr(whole, "timed", fake)
    rows = whole.interleaved([a, b], tmp_path / "p.json", 2)
    assert calls == [("a.onnx", "graphmem"), ("a.onnx", "ort"), ("b.onnx", "graphmem"),
                     ("b.onnx", "ort"), ("a.onnx", "ort"), ("a.onnx", "graphmem"),
                     ("b.onnx", "ort"), ("b.onnx", "graphmem")]
    assert [(r["file"], r["graphmem"]["s"], r["ort"]["s"]) for r in rows] == [
        ("a.onnx", 2.5, 1.5), ("b.onnx", 1.0, 0.5)]


def test_speed_files_bind_the_corpus_dims_then_the_given_then_one(tmp_path):
    from tools.corpus import speed_files
    from onnx import TensorProto, helper, save
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", "other"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", "other"])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                                [x], [y]))
    for name in ("encoder-fp16.onnx", "mine.onnx"):
        save(model, str(tmp_path / name))
    assert speed_files.source_dims(tmp_path / "encoder-fp16.onnx", {}) == {
        "batch": 1, "seq": 128, "other": 1}
    assert speed_files.source_dims(tmp_path / "mine.onnx", {"seq": 7}) == {
        "seq": 7, "batch": 1, "other": 1}


def test_placement_scale_validator_and_section():
    """tools/bench/placement_scale.py: its validator agrees with check_placement on
    random placements, the generators make valid columns, and the section names every
    instance with a verdict line."""
    import numpy as np
    from graphmem.passes.placement.buffers import check_placement
    from tools.bench import placement_scale as ps
    rng = np.random.default_rng(3)
    for _ in range(200):
        n = int(rng.integers(1, 12))
        lo = rng.integers(0, 6, n)
        cols = {"size": rng.integers(0, 4, n), "lower": lo, "upper": lo + rng.integers(1, 4, n)}
        off = rng.integers(0, 8, n)
        assert (ps.clash(cols, off) is None) == (not check_placement(
            cols["size"], cols["lower"], cols["upper"], off))
    cols = ps.training(6, 0)
    assert (cols["upper"] > cols["lower"]).all() and (cols["size"] > 0).all()
    row = ps.measure("training 6 layers", cols)
    assert all(row[k]["valid"] for k in ("forward", "sweep", "place"))
    text = ps.section([row], "env")
    assert "| training 6 layers |" in text and "within 1 % of the floor" in text
