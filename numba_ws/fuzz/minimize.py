"""Shrinking a failing program while the failure persists (greedy, in passes).

:func:`candidates` lists smaller variants of a :class:`~numba_ws.fuzz.program.Program`,
biggest cuts first; after every source edit dead code is dropped (assignments nothing else
reads, loops left empty: a dead ``ws.load`` is a compile error of its own, which would
hide the failure being chased):

1. delete a statement (a whole loop first, then single statements, innermost last);
2. unroll a loop once (``for k in range(a, ...)`` becomes ``k = a`` and the body);
3. replace an expression by one of its operands (``ws.exp(x) -> x``, ``a + b -> a``,
   ``x.astype(d) -> x``);
4. drop parameters nothing reads (arrays and scalars);
5. simpler configuration: one consumer group, one buffer, no ``dot_in_flight``, cc
   9.0a, a smaller grid, contiguous views, halved array extents, halved tile sizes.

:func:`minimize` takes the first candidate (in that order) for which ``still_fails``
holds and starts over from it, until no candidate holds, ``max_tests`` candidates were
tried or the deadline passed. ``still_fails`` receives a list of programs (a batch the
caller may run in parallel) and returns one bool per program; ``valid`` (optional) weeds
out candidates cheaply first (the runner: the interpreter and the error model accept it).
"""
import ast
import time

from .program import Program


def _func(tree):
    return next(n for n in tree.body if isinstance(n, ast.FunctionDef))


def _bodies(node):
    """Every statement list under ``node`` (the function body, loop bodies), outer first."""
    out = [node.body]
    for stmt in node.body:
        if isinstance(stmt, (ast.For, ast.While, ast.If, ast.With)):
            out += _bodies(stmt)
            if getattr(stmt, "orelse", None):
                out.append(stmt.orelse)
    return out


def _target(stmt):
    if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and \
            isinstance(stmt.targets[0], ast.Name):
        return stmt.targets[0].id
    return None


def drop_dead(tree):
    """Remove assignments whose variable is read only by its own updates, and loops left
    empty, until nothing changes. ``tree`` is edited in place and returned."""
    fn = _func(tree)
    while True:
        reads = {}
        for body in _bodies(fn):
            for stmt in body:
                own = _target(stmt)
                parts = [stmt.value] if own else [stmt] if not isinstance(
                    stmt, (ast.For,)) else [stmt.iter]
                for part in parts:
                    for n in ast.walk(part):
                        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) \
                                and n.id != own:
                            reads[n.id] = True
        changed = False
        for body in _bodies(fn):
            keep = []
            for stmt in body:
                t = _target(stmt)
                if t is not None and t not in reads:
                    changed = True
                    continue
                if isinstance(stmt, ast.For) and (not stmt.body or all(
                        isinstance(s, ast.Pass) for s in stmt.body)):
                    changed = True
                    continue
                keep.append(stmt)
            body[:] = keep
        if not changed:
            if not fn.body:
                fn.body.append(ast.Pass())
            return tree


def _with_source(program, tree):
    drop_dead(tree)
    ast.fix_missing_locations(tree)
    return program.replace(source=ast.unparse(tree) + "\n")


def _statement_cuts(program):
    tree = ast.parse(program.source)
    fn = _func(tree)
    spots = [(bi, si) for bi, body in enumerate(_bodies(fn)) for si in range(len(body))]
    # loops first (the biggest cuts), then the rest
    spots.sort(key=lambda s: not isinstance(_bodies(fn)[s[0]][s[1]], ast.For))
    for bi, si in spots:
        t = ast.parse(program.source)
        body = _bodies(_func(t))[bi]
        del body[si]
        if not body:
            body.append(ast.Pass())
        yield _with_source(program, t)


def _unrolls(program):
    fn = _func(ast.parse(program.source))
    for bi, body in enumerate(_bodies(fn)):
        for si, stmt in enumerate(body):
            if isinstance(stmt, ast.For) and isinstance(stmt.target, ast.Name) and \
                    isinstance(stmt.iter, ast.Call) and getattr(stmt.iter.func, "id", "") == "range":
                t = ast.parse(program.source)
                tbody = _bodies(_func(t))[bi]
                loop = tbody[si]
                args = loop.iter.args
                start = args[0] if len(args) >= 2 else ast.Constant(0)
                init = ast.Assign(targets=[ast.Name(loop.target.id, ast.Store())], value=start)
                tbody[si:si + 1] = [init] + loop.body
                yield _with_source(program, t)


def _operands(node):
    """Sub-expressions ``node`` could be replaced by."""
    if isinstance(node, ast.BinOp):
        return [node.left, node.right]
    if isinstance(node, ast.UnaryOp):
        return [node.operand]
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if node.func.attr == "astype" and not (isinstance(node.func.value, ast.Name)
                                               and node.func.value.id == "ws"):
            return [node.func.value]
        if isinstance(node.func.value, ast.Name) and node.func.value.id == "ws" and \
                node.func.attr not in ("load", "store", "zeros", "full", "program_id",
                                       "num_programs", "cdiv"):
            return [a for a in node.args if not isinstance(a, (ast.Constant, ast.Tuple))
                    and not (isinstance(a, ast.Attribute) and getattr(a.value, "id", "") == "ws")]
    return []


def _expression_cuts(program):
    tree = ast.parse(program.source)
    nodes = [n for n in ast.walk(_func(tree)) if _operands(n)]
    for i, node in enumerate(nodes):
        for j in range(len(_operands(node))):
            t = ast.parse(program.source)
            tnodes = [n for n in ast.walk(_func(t)) if _operands(n)]
            target, repl = tnodes[i], _operands(tnodes[i])[j]
            parent = next(p for p in ast.walk(_func(t)) for f, v in ast.iter_fields(p)
                          if v is target or (isinstance(v, list) and any(x is target for x in v)))
            for field, value in ast.iter_fields(parent):
                if value is target:
                    setattr(parent, field, repl)
                elif isinstance(value, list):
                    value[:] = [repl if x is target else x for x in value]
            yield _with_source(program, t)


def _unused_params(program):
    tree = ast.parse(program.source)
    fn = _func(tree)
    used = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    names = [a.name for a in program.arrays] + list(program.scalars)
    dead = [n for n in names if n not in used]
    if not dead:
        return
    fn.args.args = [a for a in fn.args.args if a.arg not in dead]
    yield program.replace(source=ast.unparse(tree) + "\n",
                          arrays=[a for a in program.to_dict()["arrays"] if a["name"] not in dead],
                          scalars={k: v for k, v in program.scalars.items() if k not in dead})


def _config_cuts(program):
    opts = program.options
    if opts.get("num_consumer_groups", 1) > 1:
        yield program.replace(options={**opts, "num_consumer_groups": 1})
    if opts.get("num_buffers_warp_spec", 1) > 1:
        yield program.replace(options={**opts, "num_buffers_warp_spec": 1})
    if opts.get("dot_in_flight"):
        yield program.replace(options={k: v for k, v in opts.items() if k != "dot_in_flight"})
    if program.cc != "9.0a":
        yield program.replace(cc="9.0a")
    for i, g in enumerate(program.grid):
        for smaller in sorted({1, g // 2} - {0}):
            if smaller < g:
                yield program.replace(grid=list(program.grid[:i]) + [smaller] +
                                      list(program.grid[i + 1:]))
    arrays = program.to_dict()["arrays"]
    for k, a in enumerate(arrays):
        if a["view"] != "contig":
            yield program.replace(arrays=arrays[:k] + [{**a, "view": "contig"}] + arrays[k + 1:])
        for d, n in enumerate(a["shape"]):
            if n > 1:
                shape = list(a["shape"])
                shape[d] = -(-n // 2)
                yield program.replace(arrays=arrays[:k] + [{**a, "shape": shape}] + arrays[k + 1:])
    for name, v in program.constexprs.items():
        if isinstance(v, int) and v >= 32:
            yield program.replace(constexprs={**program.constexprs, name: v // 2})
    for name, v in program.scalars.items():
        if v not in (1, 1.0):
            yield program.replace(scalars={**program.scalars, name: type(v)(1)})


def candidates(program):
    """Smaller variants of ``program``, biggest cuts first (see the module doc)."""
    yield from _statement_cuts(program)
    yield from _unrolls(program)
    yield from _expression_cuts(program)
    yield from _unused_params(program)
    yield from _config_cuts(program)


def size(program):
    """What minimizing reduces, in this order: AST nodes of the kernel, array elements,
    programs in the grid, tile sizes, then how far the configuration is from the plain
    one (groups, buffers, dot_in_flight, cc, views, scalars)."""
    import math
    nodes = sum(1 for _ in ast.walk(_func(ast.parse(program.source))))
    elements = sum(math.prod(a.shape) for a in program.arrays)
    tiles = math.prod(v for v in program.constexprs.values() if isinstance(v, int))
    opts = program.options
    config = (opts.get("num_consumer_groups", 1) - 1 + opts.get("num_buffers_warp_spec", 1) - 1
              + int(bool(opts.get("dot_in_flight"))) + int(program.cc != "9.0a")
              + sum(a.view != "contig" for a in program.arrays)
              + sum(v not in (1, 1.0) for v in program.scalars.values()))
    return (nodes, elements, math.prod(program.grid), tiles, config)


def minimize(program, still_fails, valid=None, deadline=None, max_tests=300, batch=1):
    """(smallest failing program found, stats) -- see the module doc."""
    current, tests, accepted = program, 0, 0
    start = time.monotonic()
    out_of_time = lambda: deadline is not None and time.monotonic() > deadline  # noqa: E731
    progress = True
    while progress and tests < max_tests and not out_of_time():
        progress = False
        pending = []
        for cand in candidates(current):
            if out_of_time() or tests >= max_tests:
                break
            if size(cand) >= size(current) or (valid is not None and not valid(cand)):
                continue
            pending.append(cand)
            if len(pending) < batch:
                continue
            tests += len(pending)
            winner = next((c for c, ok in zip(pending, still_fails(pending)) if ok), None)
            pending = []
            if winner is not None:
                current, progress = winner, True
                accepted += 1
                break
        if not progress and pending and tests < max_tests and not out_of_time():
            tests += len(pending)
            winner = next((c for c, ok in zip(pending, still_fails(pending)) if ok), None)
            if winner is not None:
                current, progress = winner, True
                accepted += 1
    return current, {"tests": tests, "accepted": accepted,
                     "seconds": round(time.monotonic() - start, 1),
                     "size_before": size(program), "size_after": size(current)}


__all__ = ["candidates", "minimize", "drop_dead", "size", "Program"]
