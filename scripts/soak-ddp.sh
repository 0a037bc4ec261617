#!/usr/bin/env bash
# Runs the main job (examples/train_ddp.py through tests/launcher/ddp_training.py) many times in a
# row under ddprun and counts the runs that hung: the proof that its teardown cannot deadlock.
#
#   scripts/soak-ddp.sh PYTHON SCENARIO RUNS
#     PYTHON    /usr/bin/python3 (torch 1.13) or scripts/torch2-python (torch 2.6)
#     SCENARIO  standalone (4 workers) or 2nodes (two agents x 2 workers)
#   e.g. scripts/soak-ddp.sh /usr/bin/python3 standalone 50
# Needs build/launcher/ddprun (scripts/build.sh). A hung or failed run's output is kept under
# $TMPDIR/ddprun-soak-<scenario>-<run>.log.
set -euo pipefail
cd "$(dirname "$0")/.."
python=$1
scenario=$2
runs=$3
ok=0 failed=0 hung=0
start=$SECONDS
for ((i = 1; i <= runs; i++)); do
  log="${TMPDIR:-/tmp}/ddprun-soak-$scenario-$i.log"
  if timeout -k 5 150 /usr/bin/python3 tests/launcher/ddp_training.py --ddprun build/launcher/ddprun \
      --python "$python" --scenario "$scenario" --epochs 2 --timeout 120 > "$log" 2>&1; then
    ok=$((ok + 1))
    rm -f "$log"
  elif grep -q "did not finish" "$log"; then
    hung=$((hung + 1))
  else
    failed=$((failed + 1))
  fi
done
echo "soak $python $scenario: $runs runs: $ok ok, $failed failed, $hung hung, $((SECONDS - start)) s"
[[ $failed -eq 0 && $hung -eq 0 ]]
