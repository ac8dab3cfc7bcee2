"""Launch binding: every way a launch can be wrong fails with an error naming the argument."""
import numpy as np
import pytest

import numba_ws as ws
from numba_ws.errors import WSUsageError
from numba_ws.runtime.binding import Bound, bind, is_constexpr, resolve_grid
from numba_ws.runtime.options import Options


def kern(a, b, c, BM: ws.constexpr, BN: ws.constexpr, BK: ws.constexpr = 32):
    pass


def test_bind_splits_args_constexprs_options_and_stream():
    stream = object()
    kwargs = dict(BM=128, BN=64, num_consumer_groups=1, reg_inc_consumer=240, stream=stream)
    bound = bind(kern, (1, 2, 3), kwargs)
    assert isinstance(bound, Bound)
    assert list(bound.args.items()) == [("a", 1), ("b", 2), ("c", 3), ("BM", 128),
                                        ("BN", 64), ("BK", 32)]
    assert bound.constexprs == {"BM": 128, "BN": 64, "BK": 32}
    assert bound.options == Options(num_consumer_groups=1, reg_inc_consumer=240)
    assert bound.stream is stream
    assert bound.meta == {"BM": 128, "BN": 64, "BK": 32, **bound.options.as_dict()}
    assert "stream" in kwargs  # the caller's dict is left alone


def test_bind_defaults_and_positional_constexprs():
    bound = bind(kern, (1, 2, 3, 16, 8, 4), {})
    assert bound.constexprs == {"BM": 16, "BN": 8, "BK": 4}
    assert bound.options == Options() and bound.stream is None
    assert bind(kern, (), dict(a=1, b=2, c=3, BM=1, BN=2)).args["c"] == 3


@pytest.mark.parametrize("annotation", [ws.constexpr, ws.constexpr(), "ws.constexpr",
                                        "constexpr", " numba_ws.constexpr"])
def test_constexpr_annotation_forms(annotation):
    assert is_constexpr(annotation)

    def k(x, BM):
        pass

    k.__annotations__["BM"] = annotation
    assert bind(k, (1,), {"BM": 64}).constexprs == {"BM": 64}


@pytest.mark.parametrize("annotation", [int, "int", None, "ws.float16"])
def test_other_annotations_are_not_constexpr(annotation):
    assert not is_constexpr(annotation)


def test_unknown_keyword_names_it_and_lists_valid_names():
    with pytest.raises(WSUsageError) as err:
        bind(kern, (1, 2, 3), dict(BM=1, BN=1, num_warps=4))
    msg = str(err.value)
    assert "'num_warps'" in msg
    for name in ("a", "BM", "BK", "num_consumer_groups", "reg_dec_producer", "stream"):
        assert name in msg


def test_missing_constexpr_and_missing_argument():
    with pytest.raises(WSUsageError, match=r"missing constexpr argument 'BN'.*BN="):
        bind(kern, (1, 2, 3), dict(BM=1))
    with pytest.raises(WSUsageError, match=r"missing argument 'c'"):
        bind(kern, (1, 2), dict(BM=1, BN=1))


def test_too_many_and_duplicate_arguments():
    with pytest.raises(WSUsageError, match="7 were given"):
        bind(kern, (1, 2, 3, 4, 5, 6, 7), {})
    with pytest.raises(WSUsageError, match="multiple values for argument 'BM'"):
        bind(kern, (1, 2, 3, 4), dict(BM=1, BN=1))


@pytest.mark.parametrize("value", [[64], (64,), np.ones(2), None, object(), 1 + 2j])
def test_constexpr_value_types_refused(value):
    with pytest.raises(WSUsageError, match="'BM'.*int, bool, float, str"):
        bind(kern, (1, 2, 3), dict(BM=value, BN=1))


def test_constexpr_value_types_accepted():
    bound = bind(kern, (1, 2, 3), dict(BM=np.int64(64), BN=True, BK=ws.constexpr(16)))
    assert bound.constexprs == {"BM": 64, "BN": True, "BK": 16}
    assert type(bound.constexprs["BM"]) is int
    for value in (0.5, np.float32(0.5), "row", ws.float16):
        assert bind(kern, (1, 2, 3), dict(BM=value, BN=1)).constexprs["BM"] == value


@pytest.mark.parametrize("option,value", [
    ("num_consumer_groups", 0), ("num_consumer_groups", 5), ("num_buffers_warp_spec", 9),
    ("reg_dec_producer", 41), ("reg_inc_consumer", 264), ("reg_dec_producer", 16),
    ("num_buffers_warp_spec", True), ("num_consumer_groups", 2.0)])
def test_out_of_range_options(option, value):
    with pytest.raises(WSUsageError, match=option):
        bind(kern, (1, 2, 3), {"BM": 1, "BN": 1, option: value})


def test_kernel_signatures_refused():
    def varargs(*xs):
        pass

    def reserved(x, stream):
        pass

    with pytest.raises(WSUsageError, match=r"\*args"):
        bind(varargs, (), {})
    with pytest.raises(WSUsageError, match="'stream' is reserved"):
        bind(reserved, (1, 2), {})


def test_resolve_grid_forms():
    assert resolve_grid((4,), {}) == (4,)
    assert resolve_grid(7, {}) == (7,)
    assert resolve_grid([2, 3], {}) == (2, 3)
    assert resolve_grid((np.int64(2), 1, 5), {}) == (2, 1, 5)
    meta = bind(kern, (1, 2, 3), dict(BM=64, BN=32, num_consumer_groups=1)).meta
    seen = {}

    def grid(m):
        seen.update(m)
        return (ws.cdiv(200, m["BM"]), ws.cdiv(100, m["BN"]))

    assert resolve_grid(grid, meta) == (4, 4)
    assert seen["BK"] == 32 and seen["num_consumer_groups"] == 1
    assert resolve_grid(lambda m: 3, meta) == (3,)


@pytest.mark.parametrize("grid", [(), (1, 2, 3, 4), 0, (-1,), (1.5,), "a", (4, 0),
                                  (True,), None, (1, 70000), lambda m: (0,),
                                  lambda m: "x", lambda m: (2, -2)])
def test_bad_grids(grid):
    with pytest.raises(WSUsageError, match="grid"):
        resolve_grid(grid, {})


@pytest.mark.parametrize("groups, dec, inc", [(1, 40, 232), (2, 40, 232), (3, 24, 160),
                                              (4, 24, 112)])
def test_default_register_split_fits_every_group_count(groups, dec, inc):
    """Unnamed setmaxnreg targets: 40 / 232 up to two groups; from three on the producer
    gets 24 and the consumers what is left of the 64K registers (512 threads start at 128,
    640 at 96 a thread)."""
    options = Options(num_consumer_groups=groups)
    assert (options.reg_dec_producer, options.reg_inc_consumer) == (dec, inc)
    threads = options.num_threads
    start = min(255, 65536 // threads) // 8 * 8
    assert 128 * dec + groups * 128 * inc <= threads * start
    assert Options(num_consumer_groups=groups, reg_dec_producer=56).reg_dec_producer == 56


def test_named_register_targets_are_kept():
    assert Options(num_consumer_groups=3, reg_dec_producer=32).reg_inc_consumer == 160
    assert Options(num_consumer_groups=3, reg_inc_consumer=152).reg_inc_consumer == 152
    assert Options(reg_dec_producer=56, reg_inc_consumer=224).as_dict()["reg_dec_producer"] == 56
