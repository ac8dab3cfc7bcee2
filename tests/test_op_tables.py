"""The op tables (typing, lowering, interpreter) share exactly the keys of OP_NAMES."""
from numba_ws.interpreter.ops import INTERPRET
from numba_ws.language.core import OP_NAMES


def test_op_names_unique():
    assert len(OP_NAMES) == len(set(OP_NAMES))


def test_interpret_table_keys():
    assert set(INTERPRET) == set(OP_NAMES)


def test_interpret_table_callables():
    assert all(callable(rule) for rule in INTERPRET.values())
