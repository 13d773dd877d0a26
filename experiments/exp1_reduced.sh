#!/bin/sh
# Experiment 1 in priority order, so that a run cut short still leaves whole comparisons:
# the ALBERT-tiny layer-1 settings over 3 seeds, then the random 1-layer encoder (seed 0), then
# the full 4-layer encoder at fine-tuning rates (seed 0), then everything else.
# Background use:  nohup sh experiments/exp1_reduced.sh > runs/exp1.log 2>&1 &
# Rerunning continues where it stopped (finished runs are skipped, interrupted ones resume).
set -e
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
DATA=${CRF_LR_DATA:-/work/shared/data}
$PY experiments/run.py exp1 --data-dir "$DATA" --only albert-L1/ --seeds 0,1,2
$PY experiments/run.py exp1 --data-dir "$DATA" --only random-L1/ --seeds 0
$PY experiments/run.py exp1 --data-dir "$DATA" --only albert-L4/ --seeds 0
$PY experiments/run.py exp1 --data-dir "$DATA" --seeds 0,1,2
