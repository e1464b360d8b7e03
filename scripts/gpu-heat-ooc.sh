#!/usr/bin/env bash
# Out-of-core with several-step box passes: `bench heat` twice (in-core and out-of-core),
# the model sweep and the 90.9 GB run. Logs land in $OUT.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
export KEISAN_BIN=$PWD/gpu/keisan
date -u
for i in 1 2; do
  echo "== bench heat $i"; date -u
  timeout 300 gpu/keisan bench heat --json > "$OUT/bench-heat-$i.json" && python3 -c "
import json,sys; r=json.load(open(sys.argv[1])); print('copy %.1f GB/s'%(r['ceilings']['copy_bandwidth']/1e9))
for c in r['cases']: print('  %-36s %-16s %4d steps %8.4f s %7.1f Gcell/s %6.1f%%'%(c['name'], 'x'.join(map(str,c['shape'])), c['steps'], c['seconds'], c['gcells_per_s'], 100*c['fraction_of_floor']), {k: c['layout'].get(k) for k in ['decomposition','pyramid_height','tasks','predicted_s','bound']} if 'out-of-core' in c['name'] else '')
" "$OUT/bench-heat-$i.json"
done
echo "== model"
timeout 240 gpu/keisan model heat examples/heat-ooc-1024.toml --heights 8,16,24,32,48,64 2>&1 | tail -10
echo "== huge"; date -u
/usr/bin/time -v gpu/keisan run examples/heat-3d-huge.toml -q --json > "$OUT/huge.json" 2> "$OUT/huge.err"
python3 -c "
import json; s=json.load(open('$OUT/huge.json')); print({k: round(v,3) for k,v in s['timings'].items()}); l=s['layout']; print({k: l.get(k) for k in ['decomposition','pyramid_height','tasks','predicted_s','bound','pin_seconds']})"
grep -E "Maximum resident|Elapsed" "$OUT/huge.err"; date -u
