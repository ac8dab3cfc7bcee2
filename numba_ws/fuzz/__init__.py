"""Differential fuzzing of the GPU backend against the interpreter (issue 19 item 1).

- :mod:`.program`: a fuzzed program as data, and its host arguments;
- :mod:`.generator`: random valid programs over every op the GPU lowers, per seed
  (expressions in :mod:`.exprs`, masks in :mod:`.masks`, the program families in
  :mod:`.families` and :mod:`.families_dot`);
- :mod:`.bounds`: the error model, an abstract run giving each output element's bound;
- :mod:`.check`: the interpreter's reference and the element-wise comparison;
- :mod:`.devices`: where a program runs (the GPU, the schedule simulator, PTX only, ...);
- :mod:`.pool`: worker processes with per-program timeouts that survive crashes;
- :mod:`.minimize`: shrinking a failing program while the failure persists;
- :mod:`.tags`: what each program exercises, for the summary by feature;
- :mod:`.cli`: ``python3 scripts/fuzz_gpu.py`` (or ``python3 -m numba_ws.fuzz``).
"""
