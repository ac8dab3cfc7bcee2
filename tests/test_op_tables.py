"""The op tables (typing, lowering, interpreter) share exactly the keys of OP_NAMES."""
from numba_ws.interpreter.ops import INTERPRET
from numba_ws.language.core import OP_NAMES


def test_op_names_unique():
    assert len(OP_NAMES) == len(set(OP_NAMES))


def test_interpret_table_keys():
    assert set(INTERPRET) == set(OP_NAMES)


def test_interpret_table_callables():
    assert all(callable(rule) for rule in INTERPRET.values())


def test_typing_and_lowering_tables_have_the_same_keys():
    from numba_ws.codegen.lowering import LOWERING
    from numba_ws.language.typing import TYPING
    assert set(TYPING) == set(OP_NAMES)
    assert set(LOWERING) == set(OP_NAMES) == set(INTERPRET)
    assert all(callable(rule) for rule in list(TYPING.values()) + list(LOWERING.values()))


def test_every_stage_op_is_typed():
    from numba_ws.language.stage_ops import STAGE_STUBS, STAGE_TYPING
    assert set(STAGE_STUBS) == set(STAGE_TYPING)


def test_simulator_table_has_the_same_keys():
    """The schedule simulator runs language ops through its own table (INTERPRET with a
    fixed-order dot): the same keys, so no op can exist in one world only."""
    from numba_ws.interpreter.simulator import language_ops
    assert set(language_ops()) == set(OP_NAMES)
    assert set(language_ops(exact=False)) == set(OP_NAMES)
