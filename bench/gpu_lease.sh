#!/usr/bin/env bash
# A GPU lease in one script (issue 34): what the device machine's image lacks, the data, and
# bench/gpu.py's two parts -- 500 teachers as one vmapped program against the same teachers one
# after another, then `pate run --config configs/fashion_mnist_gpu.toml` end to end -- with
# progress on stderr and the JSON and logs in $OUT (default runs/gpu-lease).
#
#   bash bench/gpu_lease.sh prepare   # here, once: wheels into .whl/, Fashion-MNIST into data/
#   bash bench/gpu_lease.sh           # on the GPU machine (carry .whl and data): < 10 min on one H200
#   bash bench/gpu_lease.sh --smoke   # anywhere: the same flow on tiny synthetic data, in a minute
#   bash bench/gpu_lease.sh scale     # on the GPU machine instead: issue 43's figures (teachers with
#       conv_impl xla and patches, vmapped vs sequential; train-teachers --distributed on the GPU)
#   bash bench/gpu_lease.sh encoder   # on the GPU machine instead: issue 45's learned map trained long
#       (ENC_EPOCHS, default 300; ENC_WIDTHS, default 64,128,128), then its ceilings
#   (add --smoke after scale or encoder to run the same flow on tiny data, anywhere)
#   bash bench/gpu_lease.sh compare ARGS...   # on the GPU machine instead: bench/compare.py ARGS
#       (e.g. --fine-grained --fine-config configs/fashion_mnist_fine_gpu.toml --eps 2 --draws 3),
#       stopped in time; then the rows it finished, read again, and their result files into $OUT
#
# Environment: OUT (results folder), PY (python; default .venv/bin/python when present, else
# python3), LEASE_S (seconds the whole script may take, default 540: the end-to-end part is
# stopped in time to copy what it finished into $OUT), RUN_SET (space-separated
# section.key=value overrides of the end-to-end part, e.g. "student.steps=15000").
set -uo pipefail
cd "$(dirname "$0")/.."
mode=${1:-run}
start=$SECONDS

if [ "$mode" = prepare ]; then
  # The device image has Python 3.12 with jax, flax, optax, orbax, click, rich, matplotlib,
  # scipy, filelock and absl; these are pate's other dependencies (constraints.txt's versions).
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d .whl tomli-w==1.2.0 dp-accounting==0.6.0 dm-tree==0.1.10 kymatio==0.3.0 appdirs==1.4.4 || exit 1
  src=${PATE_DATA_DIR:-/usr/share/datasets/fashion-mnist}
  [ -f "$src/train-images-idx3-ubyte.gz" ] || { echo "no Fashion-MNIST in $src: make data first" >&2; exit 1; }
  mkdir -p data/fashion-mnist && cp "$src"/*.gz data/fashion-mnist/ || exit 1
  echo "ready: carry .whl and data (both git-ignored)"
  exit 0
fi

OUT=${OUT:-runs/gpu-lease}
mkdir -p "$OUT"
smoke=()
{ [ "$mode" = --smoke ] || [ "${2:-}" = --smoke ]; } && smoke=(--smoke)
if [ -z "${PY:-}" ]; then
  if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
if [ -z "${smoke[*]}" ] && compgen -G ".whl/*.whl" >/dev/null && ! "$PY" -c "import kymatio, dp_accounting, tomli_w" 2>/dev/null; then
  "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/pate-site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/pate-site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
work=$(mktemp -d /tmp/pate-gpu-XXXXXX)
say() { echo "[lease $((SECONDS - start)) s] $*" >&2; }

if [ "$mode" = scale ]; then
  # Issue 43's GPU figures: the 500 vmapped teachers against the same teachers one after another,
  # with XLA's grouped convolution and as batched matmuls over patches (teachers.conv_impl), side
  # by side in one lease; then train-teachers --distributed as a one-process cluster on the GPU.
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"; } \
    > "$OUT/scale.log"
  for impl in xla patches; do
    say "teachers: conv_impl $impl, vmapped vs sequential"
    timeout 220 "$PY" bench/gpu.py "${smoke[@]}" --skip-run --set "teachers.conv_impl=\"$impl\"" \
      --out "$OUT/teachers-$impl.json" 2>>"$OUT/scale.log" >/dev/null || say "$impl failed (rc $?): see $OUT/scale.log"
  done
  say "train-teachers --distributed, one process on this machine's devices"
  port=$(( 20000 + RANDOM % 20000 ))
  config=configs/fashion_mnist_gpu.toml
  [ -n "${smoke[*]}" ] && config=configs/tiny.toml
  [ -d data/fashion-mnist ] && export PATE_DATA_DIR=$PWD/data/fashion-mnist
  dist_start=$SECONDS
  PATE_LEDGER_DIR="$work/ledger" timeout 150 "$PY" cli.py train-teachers --config "$config" --workdir "$work/dist" \
    --distributed --coordinator "127.0.0.1:$port" --num-processes 1 --process-id 0 --no-progress \
    >>"$OUT/scale.log" 2>&1
  dist_rc=$?
  "$PY" - "$OUT" "$dist_rc" "$((SECONDS - dist_start))" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
rows = {}
for impl in ("xla", "patches"):
    p = out / f"teachers-{impl}.json"
    t = json.loads(p.read_text()).get("teachers", {}) if p.exists() else {}
    rows[impl] = {k: t.get(k) for k in ("teachers", "vmapped_s", "sequential_s", "speedup_over_sequential")}
x, q = rows["xla"].get("vmapped_s"), rows["patches"].get("vmapped_s")
print(json.dumps({"teachers": rows, "patches_over_xla": round(x / q, 2) if x and q else None,
                  "distributed_one_process": {"rc": int(sys.argv[2]), "wall_s": int(sys.argv[3])}}, indent=1))
PY
  say "done"
  exit 0
fi

if [ "$mode" = encoder ]; then
  # Issue 45's GPU lever: the learned map (`pate features`, the public pool's images alone) trained
  # longer and wider than 2 CPU cores allow, then its ceilings on the public proxy; the weights are
  # public (made from the pool alone: copy $OUT/encoder back and ship them if they pass ScatterNet).
  [ -d data/fashion-mnist ] && export PATE_DATA_DIR=$PWD/data/fashion-mnist
  config=configs/fashion_mnist_fine.toml
  epochs=${ENC_EPOCHS:-300}
  widths=${ENC_WIDTHS:-64,128,128}
  ceiling_sets=()
  if [ -n "${smoke[*]}" ]; then config=configs/tiny.toml; epochs=1; widths=8,8,8; ceiling_sets=(--set fine_grained.pca=16); fi
  left=$(( ${LEASE_S:-540} - (SECONDS - start) - 150 ))
  say "pate features: $epochs epochs, widths $widths (stopped after $left s)"
  timeout "$left" "$PY" cli.py features --config "$config" --out "$OUT/encoder" --epochs "$epochs" \
    --widths "$widths" --no-progress > "$OUT/encoder.log" 2>&1 || say "features rc $?: see $OUT/encoder.log"
  for map in learned learned+scattering; do
    [ -f "$OUT/encoder/recipe.json" ] || break
    say "pate ceiling: $map"
    timeout 120 "$PY" cli.py ceiling --config "$config" --set "features.map=\"$map\"" \
      --set "features.weights=\"$OUT/encoder\"" "${ceiling_sets[@]}" --json > "$OUT/ceiling-$map.json" \
      2>>"$OUT/encoder.log"
  done
  say "done"
  exit 0
fi

if [ "$mode" = compare ]; then
  shift
  [ -d data/fashion-mnist ] && export PATE_DATA_DIR=$PWD/data/fashion-mnist
  { nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"; } \
    > "$OUT/compare.log"
  left=$(( ${LEASE_S:-540} - (SECONDS - start) - 20 ))
  say "bench/compare.py $* (stopped after $left s)"
  timeout "$left" "$PY" bench/compare.py "$@" --root "$work" > "$OUT/compare.jsonl" 2>> "$OUT/compare.log"
  say "compare rc $?; the rows it finished:"
  "$PY" bench/compare.py "$@" --root "$work" --no-train > "$OUT/compare-finished.jsonl" 2>> "$OUT/compare.log"
  for f in "$work"/*/student.json "$work"/*/release.json "$work"/*/dpsgd.json; do  # public files only
    [ -f "$f" ] && cp "$f" "$OUT/$(basename "$(dirname "$f")")-$(basename "$f")"
  done
  tail -n 12 "$OUT/compare.log" >&2
  exit 0
fi

{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>/dev/null || echo "no nvidia-smi"; } \
  > "$OUT/teachers.log"
say "part 1: vmapped vs sequential teachers"
timeout 200 "$PY" bench/gpu.py "${smoke[@]}" --skip-run --out "$OUT/teachers.json" 2>>"$OUT/teachers.log" \
  >/dev/null || say "part 1 failed (rc $?): see $OUT/teachers.log"
tail -n 3 "$OUT/teachers.log" >&2

left=$(( ${LEASE_S:-540} - (SECONDS - start) - 15 ))
say "part 2: pate run end to end (stopped after $left s)"
sets=()
for item in ${RUN_SET:-}; do sets+=(--set "$item"); done
timeout "$left" "$PY" bench/gpu.py "${smoke[@]}" "${sets[@]}" --skip-teachers --progress --workdir "$work" \
  --out "$OUT/run.json" 2>&1 >/dev/null | tee "$OUT/run.log" >&2
say "part 2 rc ${PIPESTATUS[0]}"
for f in teachers.json student.json release.json; do  # what the run finished, even if stopped
  [ -f "$work/run/$f" ] && cp "$work/run/$f" "$OUT/run-$f"
done
"$PY" - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
def load(name):
    p = out / name
    return json.loads(p.read_text()) if p.exists() else {}
t, r = load("teachers.json"), load("run.json")
env = (t or r).get("environment", {})
print(json.dumps({"card": env.get("device_kind"), "jax": env.get("jax"),
                  "teachers": t.get("teachers", {}).get("teachers"),
                  "vmapped_s": t.get("teachers", {}).get("vmapped_s"),
                  "sequential_s": t.get("teachers", {}).get("sequential_s"),
                  "speedup": t.get("teachers", {}).get("speedup_over_sequential"),
                  **{k: r.get("run", {}).get(k) for k in ("wall_s", "steps", "teachers_train_s",
                     "ensemble_accuracy", "label_accuracy", "student_accuracy", "student_ms_per_step",
                     "headline_eps", "answered", "queries")}}, indent=1))
PY
say "done"
