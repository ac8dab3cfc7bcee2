"""``partition()`` returns a printable PlanView and ``explain()`` an Explanation (issue 20
item 4). The printed facts are checked against the plan and the partitioned IR they come
from; the old state attributes (``.ws``, ``.func_ir``, ``.typemap``, ...) keep working."""
import re

import numpy as np
import pytest

import numba_ws as ws
from numba_ws import knobs
from numba_ws.interpreter.ir_exec import stage_calls
from numba_ws.passes.explain import report
from numba_ws.plan_view import Explanation, PlanView, RegisterSplit, target_name
import kernels
import kernels_tiles as kt


def f16(*shape):
    return np.zeros(shape, np.float16)


GEMM = (f16(512, 256), f16(256, 512), f16(512, 512))
GEMM_META = dict(BM=128, BN=256, BK=64)


@pytest.fixture(scope="module")
def gemm():
    return ws.jit(kernels.matmul).partition(*GEMM, **GEMM_META)


def section(text, title):
    """The lines of one section of a PlanView repr (without its title line)."""
    lines = text.splitlines()
    start = lines.index(f"{title}:") + 1
    end = next((i for i in range(start, len(lines)) if not lines[i].startswith(" ")),
               len(lines))
    return lines[start:end]


def test_partition_returns_a_plan_view_that_keeps_the_state(gemm):
    assert isinstance(gemm, PlanView)
    assert gemm.ws is gemm.state.ws and gemm.func_ir is gemm.state.func_ir
    assert gemm.typemap is gemm.state.typemap        # any state attribute reads through
    assert gemm.calltypes is gemm.state.calltypes
    with pytest.raises(AttributeError):
        gemm.no_such_attribute


def test_repr_is_a_short_summary(gemm):
    text = repr(gemm)
    assert str(gemm) == text
    assert 15 <= len(text.splitlines()) <= 60 and len(text) < 4000
    assert len(repr(gemm.state)) > 10 * len(text)   # what partition() printed before
    assert text.splitlines()[0] == "numba_ws plan: matmul for sm_90a, 3 warp groups x 128 threads"
    assert "constexprs: BM=128, BN=256, BK=64" in text
    assert "split along M, 64 rows per consumer group" in text


def test_tasks_read_the_setmaxnreg_of_each_branch(gemm):
    rows = section(repr(gemm), "tasks")
    assert rows[0].split() == ["warp", "group", "role", "block", "registers", "anchor", "ops"]
    assert re.fullmatch(r"\s*0\s+producer\s+1000\s+40 \(setmaxnreg\.dec\)\s+load x, load y",
                        rows[1])
    for g, row in ((1, rows[2]), (2, rows[3])):
        assert re.fullmatch(rf"\s*{g}\s+consumer {g}\s+\d+\s+232 \(setmaxnreg\.inc\)\s+"
                            r"dot acc\.1, store c", row)
    blocks = [t.block for t in gemm.tasks]
    assert blocks == [gemm.ws.branches[t] for t in (0, 1, 2)]


def test_register_split_follows_the_options():
    view = ws.jit(kernels.matmul).partition(*GEMM, **GEMM_META, reg_dec_producer=24,
                                            reg_inc_consumer=240)
    assert [(t.registers, t.setmaxnreg) for t in view.tasks] == \
        [(24, "dec"), (240, "inc"), (240, "inc")]
    assert view.registers == RegisterSplit(entry=168, producer=24, consumers=240,
                                           threads=384, used=128 * 24 + 2 * 128 * 240,
                                           available=384 * 168)
    assert section(repr(view), "registers") == [
        "  168 per thread at entry; producer 24, consumers 240: 64512 of the CTA's 64512 "
        "(384 threads x 168)"]


def test_channels_show_slots_lowering_and_parts(gemm):
    rows = section(repr(gemm), "channels")
    ch, = gemm.ws.channels
    assert rows[0].split(None, 2)[2] == (
        f"-> consumers 1, 2; in the loop; 3 slots x {ch.slot_bytes} B; TMA; "
        "empty barrier expects 2 arrivals")
    x, y = ch.members
    assert rows[1].split()[0] == "x" and "a[128x64] float16" in rows[1]
    assert "split along dim 0: 2 parts of 64x64 (8192 B) at slot bytes 0, 8192" in rows[1]
    assert rows[2].split()[0] == "y" and "b[64x256] float16" in rows[2]
    assert f"whole: 1 part of 64x256 (32768 B) at slot byte {y['parts'][0]['slot_offset']}" \
        in rows[2]
    assert "4 TMA boxes, 128 B swizzle; read by ws.dot" in rows[2]


def test_shared_memory_regions_tile_the_allocation(gemm):
    plan = gemm.ws
    regions = gemm.shared_memory
    ch, = plan.channels
    assert [(r.offset, r.bytes) for r in regions] == [
        (ch.smem_offset, 3 * ch.slot_bytes), (ch.bar_offset, 3 * 16),
        (plan.staging_offset, 2 * plan.staging_bytes)]     # tma_store=3 stages c
    for a, b in zip(regions, regions[1:]):
        assert a.offset + a.bytes <= b.offset
    assert regions[-1].offset + regions[-1].bytes <= plan.smem_bytes
    rows = section(repr(gemm), "shared memory")
    assert rows[-1].split()[:3] == ["total", str(plan.smem_bytes), "B"]
    assert f"[{ch.bar_offset}, {ch.bar_offset + 48})" in rows[2] and "3 full, 3 empty" in rows[2]


def test_layouts_group_the_register_tiles_by_layout(gemm):
    assert set(gemm.layouts) == set(gemm.ws.layouts) and gemm.layouts
    rows = section(repr(gemm), "layouts")
    assert rows[1].split()[0] == "acc[64x256]" and rows[1].rstrip().endswith("1, 2")
    assert "acc, " in rows[1] and "acc.1" in rows[1]


def test_scratch_of_a_column_reduction_is_shown():
    x = np.zeros((256, 256), np.float32)
    view = ws.jit(kt.mul_col_sum).partition(x, x, BM=64, BN=128, num_consumer_groups=1)
    plan = view.ws
    assert plan.scratch_bytes > 0
    scratch, = [r for r in view.shared_memory if "scratch" in r.what]
    assert (scratch.offset, scratch.bytes) == (plan.scratch_offset,
                                               plan.scratch_bytes * plan.scratch_regions)
    rows = section(repr(view), "layouts")
    assert any(r.split()[0] == "slice0(blocked4)[1x128]" for r in rows)
    assert "task 1: setmaxnreg left out (entry limit is 248)" in repr(view)


def test_sm80_cp_async_and_no_setmaxnreg():
    view = ws.jit(kernels.matmul).partition(*GEMM, cc=(8, 0), BM=128, BN=128, BK=64)
    text = repr(view)
    assert text.startswith("numba_ws plan: matmul for sm_80,")
    assert "CP.ASYNC" in text and "sm_80 has no TMA" in text
    assert all(t.registers == 168 and t.setmaxnreg == "" for t in view.tasks)
    assert section(text, "registers") == ["  168 per thread at entry, kept by every warp group"]


def test_ping_pong_turns_and_fused_plans():
    a, b, c = f16(256, 128), f16(128, 256), f16(256, 256)
    pp = ws.jit(kernels.matmul_persistent).partition(
        a, b, c, BM=128, BN=128, BK=64, GROUP_M=8, ping_pong=1)
    text = repr(pp)
    assert "taking turns (ping-pong)" in text and "empty barrier expects 1 arrival" in text
    turns, = [r for r in pp.shared_memory if "ping-pong" in r.what]
    assert turns.offset == pp.ws.turn_offset and turns.bytes == 2 * 8 * 2
    with knobs.scope(NUMBA_WS_DISABLE="1"):
        fused = ws.jit(kernels.matmul).partition(*GEMM, BM=128, BN=128, BK=64)
    task, = fused.tasks
    assert task.role == "every task in turn"
    assert task.anchors == ("load x", "load y", "dot acc.1", "store c")
    assert "1 warp group x 128 threads" in repr(fused)


@pytest.mark.parametrize("stop_after", ["ws_data_partition", "ws_code_partition"])
def test_early_stops_print_what_exists(stop_after):
    view = ws.jit(kernels.matmul).partition(*GEMM, **GEMM_META, stop_after=stop_after)
    text = repr(view)
    assert section(text, "layouts") == ["  (none)"]          # the layouts pass has not run
    if stop_after == "ws_data_partition":
        assert section(text, "channels") == ["  (none)"]


def test_html_has_the_same_tables(gemm):
    page = gemm._repr_html_()
    assert page.count("<table>") == 4                # tasks, channels, layouts, shared memory
    assert "-&gt; consumers 1, 2" in page and "->" not in page
    tasks = page.split("<h4")[1]
    assert tasks.count("<tr>") == 1 + 3              # header + three warp groups
    assert "40 (setmaxnreg.dec)" in tasks


def test_ipython_pretty_prints_the_summary(gemm):
    pretty = pytest.importorskip("IPython.lib.pretty")
    assert pretty.pretty(gemm) == repr(gemm)


def test_jupyter_display_has_html_and_text(gemm):
    """What a notebook cell ending in the plan shows (IPython's display formatter)."""
    formatters = pytest.importorskip("IPython.core.formatters")
    data, _ = formatters.DisplayFormatter().format(gemm)
    assert data["text/plain"] == repr(gemm) and data["text/html"] == gemm._repr_html_()
    text = ws.jit(kernels.matmul).explain(*GEMM, **GEMM_META)
    data, _ = formatters.DisplayFormatter().format(text)
    assert data["text/plain"] == str(text) and data["text/html"].startswith("<pre")


def test_explain_returns_printable_text(gemm):
    k = ws.jit(kernels.matmul)
    text = k.explain(*GEMM, **GEMM_META)
    assert isinstance(text, Explanation) and isinstance(text, str)
    assert str(text) == repr(text) == report(kernels.matmul, gemm)
    assert "# async_task" in text and text.splitlines()[0].startswith("# async tasks")
    page = text._repr_html_()
    assert page.startswith("<pre") and "&lt;" not in str(text) and "-&gt;" in page
    pretty = pytest.importorskip("IPython.lib.pretty")
    assert pretty.pretty(text) == str(text)


def test_target_names():
    assert target_name((9, 0, "a")) == "sm_90a" and target_name((8, 0)) == "sm_80"


def test_stage_calls_back_the_register_column(gemm):
    """The registers column is the constant of the ws_reg_* call in each branch (the
    two consumer groups share one clone, hence one inc)."""
    found = {}
    for label, _, stmt, op in stage_calls(gemm.func_ir):
        if op in ("ws_reg_alloc", "ws_reg_dealloc"):
            found[label] = gemm.func_ir.get_definition(stmt.value.args[0]).value
    assert sorted(found.values()) == [40, 232]
    assert [t.registers for t in gemm.tasks] == [40, 232, 232]


def test_attributes_are_written_through_to_the_state():
    """Passes take a PlanView where they took the state (ir_build.retype sets
    ``state.func_ir``): writes go to the state."""
    from numba_ws.passes.ir_build import retype
    view = ws.jit(kernels.matmul).partition(*GEMM, **GEMM_META, stop_after="ws_registers")
    before = {n: str(t) for n, t in view.typemap.items()}
    retype(view, view.func_ir)
    assert view.func_ir is view.state.func_ir and view.typemap is view.state.typemap
    assert {n: str(t) for n, t in view.state.typemap.items()} == before
    view.extra = 1
    assert view.state.extra == 1 and "extra" not in vars(view)
