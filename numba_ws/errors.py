"""Errors numba_ws raises. Compile errors carry the user's source location and the pass."""


class WSError(Exception):
    """Base class of every numba_ws error."""


class WSUsageError(WSError, TypeError):
    """A kernel or launch was called with arguments it cannot take (names the argument)."""


class WSCompileError(WSError):
    """A pass refused the kernel. ``loc`` is the user's file:line, ``pass_name`` the pass;
    ``details`` keeps numba-cuda's full report when the message was taken from it."""

    def __init__(self, message, loc=None, pass_name=None):
        self.loc = loc
        self.pass_name = pass_name
        self.details = None
        where = ""
        if loc is not None:
            line = ""
            try:
                line = loc.strformat().rstrip()
            except Exception:
                line = f"{getattr(loc, 'filename', '?')}:{getattr(loc, 'line', '?')}"
            where = f"\n{line}"
        who = f"[{pass_name}] " if pass_name else ""
        super().__init__(f"{who}{message}{where}")


class WSResourceError(WSCompileError):
    """Shared memory, registers or another hardware budget would be exceeded."""


class WSScheduleError(WSError):
    """The schedule simulator found a deadlock, race or barrier misuse."""
