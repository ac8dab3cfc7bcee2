#!/usr/bin/env bash
# The one script for the lent H200: install what the image lacks, run tests/gpu, the demo
# and the benchmark, and print a short table last. Usage (from the repo root, on the GPU
# machine, with .whl/ carried): bash scripts/gpu_check.sh [quick|full]
set -u
MODE=${1:-quick}
OUT=${OUT:-/tmp/numba_ws_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/numpy-*.whl && export PYTHONPATH=/tmp/site:$PWD || {
    echo "no numpy 2.4 wheel in .whl/ (numba-cuda 0.30.4 needs numpy < 2.5): see README"; exit 2; }
python3 -c "import numpy, numba, numba.cuda as c; print('numpy', numpy.__version__, 'numba', numba.__version__, 'gpu', c.get_current_device().name)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
status=()
run() {  # name timeout command...
    local name=$1 t=$2; shift 2
    timeout "$t" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    status+=("$name rc=$rc")
    tail -n 25 "$OUT/$name.log"
}
if [ "$MODE" = min ]; then   # a couple of minutes: the newest GPU tests first
    run gpu_tests 110 python3 -m pytest -q -p no:cacheprovider -rf --timeout=40 \
        tests/gpu/test_gemm_sm80.py tests/gpu/test_attention.py \
        tests/gpu/test_device_functions_gpu.py tests/gpu/test_interop_gpu.py tests/gpu/test_gemm.py
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    exit 0
fi
if [ "$MODE" = tests ]; then   # the shortest lease: tests/gpu, then the quick GEMM table
    run gpu_tests 170 python3 -m pytest tests/gpu -q -p no:cacheprovider -rf --timeout=60
    run bench 60 python3 benchmarks/gemm.py --quick --no-triton --json "$OUT/gemm.json"
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "TFLOP\|ratio\|geomean\|passed\|failed\|error" "$OUT"/*.log | tail -n 40
    exit 0
fi
if [ "$MODE" = last ]; then   # the newest GPU tests, then the tables (a short lease)
    run gpu_tests 120 python3 -m pytest -q -p no:cacheprovider -rf --timeout=60 \
        tests/gpu/test_interop_gpu.py tests/gpu/test_gemm.py -k "interop or dlpack or module or column or bk128 or host or float64 or numba or torch or cupy"
    run bench 240 python3 benchmarks/gemm.py --json "$OUT/gemm.json"
    run demo 60 python3 -m numba_ws
    run attention 60 python3 benchmarks/attention.py --quick --json "$OUT/attention.json"
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "TFLOP\|ratio\|geomean\|passed\|failed\|FAILED\|error" "$OUT"/*.log | tail -n 45
    exit 0
fi
if [ "$MODE" = pp ]; then   # ping-pong: its GPU tests, then the GEMM table with every config
    run gpu_tests 150 python3 -m pytest -q -p no:cacheprovider -rf --timeout=60 \
        tests/gpu/test_gemm.py -k "ping_pong"
    run bench 360 python3 benchmarks/gemm.py --json "$OUT/gemm.json"
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "TFLOP\|ratio\|geomean\|passed\|failed\|FAILED\|error" "$OUT"/*.log | tail -n 45
    exit 0
fi
if [ "$MODE" = profile ]; then   # Nsight Compute: numba_ws cooperative vs ping-pong vs cuBLAS
    for w in ws cublas pp; do
        run "ncu_$w" 150 ncu --clock-control none --print-details all \
            --section SpeedOfLight --section ComputeWorkloadAnalysis \
            --section MemoryWorkloadAnalysis_Tables --section WarpStateStats \
            --metrics sm__cycles_elapsed.avg.per_second,sm__ops_path_tensor_src_fp16_dst_fp32.sum \
            -k regex:'matmul|gemm|xmma|cutlass|nvjet' -s 2 -c 1 \
            python3 benchmarks/profile_compare.py $w 4096 4096 4096
    done
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    for w in ws cublas pp; do
        echo "== $w"; grep -E "^  [a-z_0-9]+|Duration|Frequency|Throughput|Busy|Ipc|sm__|Shared|Bank|Stall|Tensor|Warp Cycles" "$OUT/ncu_$w.log" | head -40
    done
    exit 0
fi
if [ "$MODE" = probe ]; then   # cuBLAS under ncu, then 256x128 tiles beside the best config
    run ncu_cublas 120 ncu --clock-control none --section SpeedOfLight \
        --section ComputeWorkloadAnalysis --section WarpStateStats \
        -k regex:'nvjet|gemm|xmma|cutlass' -s 2 -c 1 \
        python3 benchmarks/profile_compare.py cublas 4096 4096 4096
    run bench 200 python3 benchmarks/gemm.py --no-triton --match "256x128|persistent 128x256 BK=128" \
        --json "$OUT/gemm.json"
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -E "^  [a-z_0-9]+|Duration|Frequency|Throughput|Busy|Ipc|Tensor" "$OUT/ncu_cublas.log" | head -30
    grep -h "TFLOP\|ratio\|geomean\|:  " "$OUT/bench.log" | tail -n 45
    exit 0
fi
if [ "$MODE" = colmajor ]; then   # column-major B on the cp.async path (sm_80, unaligned sm_90)
    run gpu_tests 200 python3 -m pytest -q -p no:cacheprovider -rf --timeout=90 \
        tests/gpu/test_gemm_sm80.py tests/gpu/test_gemm.py -k "sm80 or column"
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "passed\|failed\|FAILED\|rror" "$OUT"/*.log | tail -n 20
    exit 0
fi
if [ "$MODE" = tiles ]; then   # issue 14: register tiles, loads, casts, constexprs, sm_80 attention; then the rest
    NEW="tests/gpu/test_tiles_gpu.py tests/gpu/test_convert_gpu.py tests/gpu/test_loads_gpu.py \
         tests/gpu/test_attention_sm80.py tests/gpu/test_constexpr_branches_gpu.py"
    run gpu_new 300 python3 -m pytest -q -p no:cacheprovider -rf --timeout=150 -n 8 $NEW
    run gpu_rest 200 python3 -m pytest -q -p no:cacheprovider -rf --timeout=120 -n 8 tests/gpu \
        $(for f in $NEW; do echo --ignore="$f"; done)
    run bench 80 python3 benchmarks/gemm.py --quick --no-triton --json "$OUT/gemm.json"
    run attention 60 python3 benchmarks/attention.py --quick --json "$OUT/attention.json"
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "FAILED\|passed\|failed" "$OUT"/gpu_new.log "$OUT"/gpu_rest.log | tail -n 40
    grep -h "TFLOP\|ratio\|geomean" "$OUT"/bench.log "$OUT"/attention.log | tail -n 14
    exit 0
fi
if [ "$MODE" = cluster ]; then   # hand-written 2-CTA GEMM: TMA multicast or not, vs cuBLAS
    run cluster 150 python3 tests/gpu/test_hand_gemm_cluster.py
    run hand 60 python3 tests/gpu/test_hand_gemm.py
    run overhead 60 python3 benchmarks/overhead.py
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    exit 0
fi
if [ "$MODE" = explore ]; then   # candidate GEMM configs beside the benchmark's (3 shapes)
    run explore 300 python3 benchmarks/gemm.py --explore --no-triton
    run overhead 80 python3 benchmarks/overhead.py
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "TFLOP\|ratio\|geomean\|launch\|cold\|    " "$OUT"/explore.log | tail -n 60
    exit 0
fi
if [ "$MODE" = stall ]; then   # per-SASS-instruction warp-stall sampling: numba_ws vs cuBLAS
    for w in ws cublas; do
        run "ncu_$w" 150 ncu --clock-control none --section SourceCounters --section WarpStateStats \
            -k regex:'matmul|nvjet' -s 2 -c 1 -f -o "$OUT/src_$w" \
            python3 benchmarks/profile_compare.py $w 4096 4096 4096
        ncu -i "$OUT/src_$w.ncu-rep" --page source --csv --print-source sass > "$OUT/sass_$w.csv"
    done
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    exit 0
fi
if [ "$MODE" = verify ]; then   # tests/gpu and the launch overhead (no benchmark tables)
    run gpu_tests 200 python3 -m pytest tests/gpu -q -p no:cacheprovider -rf --timeout=90
    run overhead 60 python3 benchmarks/overhead.py
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "passed\|failed\|error\|launch\|import" "$OUT"/*.log | tail -n 20
    exit 0
fi
if [ "$MODE" = perf ]; then   # tests, SASS of the main loop, GEMM + attention tables, overhead
    run sass 60 bash -c "bash scripts/sass_check.sh 0; bash scripts/sass_check.sh 1"
    run demo 60 python3 -m numba_ws
    run gpu_tests 200 python3 -m pytest tests/gpu -q -p no:cacheprovider -rf --timeout=90
    run bench 200 python3 benchmarks/gemm.py --json "$OUT/gemm.json"
    run attention 60 python3 benchmarks/attention.py --quick --json "$OUT/attention.json"
    run overhead 40 python3 benchmarks/overhead.py
    run ncu 120 ncu --clock-control none --section SpeedOfLight --section WarpStateStats \
        --section SchedulerStats --section MemoryWorkloadAnalysis -k regex:matmul -s 1 -c 1 \
        python3 benchmarks/profile_gemm.py 8192 8192 1024
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    cat "$OUT/sass.log" | grep -v "^HGMMA\|^WARPGROUP" | head
    grep -h "TFLOP\|ratio\|geomean\|passed\|failed\|error\|launch\|import" "$OUT"/*.log | tail -n 45
    exit 0
fi
lean_steps() {   # the new GPU tests, the GEMM table, the GEMM and attention GPU tests
    run gpu_tests_new 60 python3 -m pytest -q -p no:cacheprovider -rf --timeout=60 \
        tests/gpu/test_gemm.py -k "narrow"
    run bench 200 python3 benchmarks/gemm.py --json "$OUT/gemm.json"
    run gpu_tests 120 python3 -m pytest -q -p no:cacheprovider -rf --timeout=60 \
        tests/gpu/test_gemm.py tests/gpu/test_attention.py -k "not narrow"
}
if [ "$MODE" = lean ] || [ "$MODE" = final ]; then   # lean: for a short device budget;
    # final: one 10-minute call, most important first, then the rest of tests/gpu, the
    # demo, launch overhead and attention (what the 2026-12-03 05:24 lease ran in two calls)
    lean_steps
    if [ "$MODE" = final ]; then
        run gpu_tests_rest 110 python3 -m pytest -q -p no:cacheprovider -rf --timeout=60 \
            tests/gpu --ignore=tests/gpu/test_gemm.py --ignore=tests/gpu/test_attention.py
        run demo 30 python3 -m numba_ws
        run overhead 40 python3 benchmarks/overhead.py
        run attention 45 python3 benchmarks/attention.py --quick --json "$OUT/attention.json"
    fi
    echo "==== summary ===="; printf '%s\n' "${status[@]}"
    grep -h "TFLOP\|ratio\|geomean\|passed\|failed\|error\|launch\|import" "$OUT"/*.log | tail -n 40
    exit 0
fi
[ "$MODE" = quick ] && run hand_gemm 120 python3 tests/gpu/test_hand_gemm.py
run demo 180 python3 -m numba_ws
run gpu_tests 360 python3 -m pytest tests/gpu -q -p no:cacheprovider -rf
run overhead 200 python3 benchmarks/overhead.py
if [ "$MODE" = full ]; then
    run bench 300 python3 benchmarks/gemm.py --json "$OUT/gemm.json"
    run attention 200 python3 benchmarks/attention.py --json "$OUT/attention.json"
else
    run bench 300 python3 benchmarks/gemm.py --quick --json "$OUT/gemm.json"
fi
echo "==== summary ===="
printf '%s\n' "${status[@]}"
grep -h "TFLOP\|ratio\|geomean\|passed\|failed\|error\|launch\|import" "$OUT"/*.log | tail -n 40
